/**
 * `mesh dev` (npm start) runs the demo with --mtls=strict and a mesh CA made on first start, and
 * says so in its banner; the README's commands (mesh call, mesh health, curl through the gateway)
 * keep working as written, since `mesh call` and `mesh health` default to --mtls=permissive; a
 * plain client of a greeter service's own port is refused; the gateway of the one dev process
 * calls as mesh.api.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { http, runCli, startProcess, tempDir, type RunningProcess } from '../helpers.js';

const GREETER = 'go.mesh.srv.greeter';
const DEV_FLAGS = ['dev', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--sidecar_address=127.0.0.1:0', '--log_level=warning'];

function curl(args: string[]): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve) => {
    execFile('curl', ['-s', ...args], { timeout: 20_000 }, (err, stdout) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout }));
  });
}

interface Dev {
  proc: RunningProcess;
  gateway: number;
  admin: number;
  env: Record<string, string>;
}

async function startDev(home: string, extra: string[] = []): Promise<Dev> {
  const env = { MESH_HOME: home };
  const proc = startProcess([...DEV_FLAGS, ...extra], env);
  await proc.waitForOutput(/Ctrl-C stops everything/, 20_000);
  const gateway = await proc.waitForPort(/gateway: +\S+ \(listening on \S+:(\d+)\)/);
  const admin = await proc.waitForPort(/admin: +http:\/\/\S+:(\d+)\/help/);
  return { proc, gateway, admin, env };
}

async function greeterPort(env: Record<string, string>): Promise<number> {
  const got = await runCli(['get', 'service', GREETER, '--output=json'], env);
  assert.equal(got.code, 0, got.stderr);
  const service = JSON.parse(got.stdout) as { nodes: Array<{ port: number; metadata: Record<string, string> }> };
  assert.equal(service.nodes.length, 1);
  assert.equal(service.nodes[0]!.metadata.mtls, 'true');
  return service.nodes[0]!.port;
}

describe('mesh dev: strict mutual TLS by default', () => {
  const dir = tempDir('mesh-dev-mtls-');
  let dev: Dev;
  before(async () => {
    dev = await startDev(dir.path);
  });
  after(async () => {
    await dev?.proc.stop();
    dir.cleanup();
  });

  it('says so in its banner, with the CA it made on first start in $MESH_HOME/ca', () => {
    const ca = join(dir.path, 'ca');
    assert.ok(dev.proc.output().includes(`\n  mTLS:     strict, certificates from the mesh CA in ${ca} (--mtls=off turns it off)\n`), dev.proc.output());
    assert.ok(existsSync(join(ca, 'signer.key')));
  });

  it("the README's commands work as written: mesh call, mesh health, mesh list, curl through the gateway", async () => {
    const call = await runCli(['call', GREETER, 'Say.Hello', '{"name":"John"}'], dev.env);
    assert.equal(call.code, 0, call.stderr);
    assert.equal(call.stdout, '{\n  "msg": "Hello John"\n}\n');
    const health = await runCli(['health', GREETER], dev.env);
    assert.equal(health.code, 0, health.stderr);
    assert.match(health.stdout, /^node\taddress\tstatus\ngo\.mesh\.srv\.greeter-\S+\t127\.0\.0\.1:\d+\tok\n$/);
    const list = await runCli(['list', 'services'], dev.env);
    assert.equal(list.stdout, 'go.mesh.api.greeter\ngo.mesh.srv.greeter\n');
    // mesh check calls the strict demo's nodes with a mesh certificate: no node or service is reported.
    const check = await runCli(['check'], dev.env);
    assert.doesNotMatch(check.stdout, /^(error|warning): (nodes|services):/m, check.stdout);
    const hello = await curl([`127.0.0.1:${dev.gateway}/greeter/say/hello?name=John`]);
    assert.equal(hello.stdout, '{"message":"Hello John"}');
    const rpc = await curl(['-XPOST', `127.0.0.1:${dev.gateway}/rpc`, '-H', 'content-type: application/json', '-d', '{"service":"go.mesh.srv.greeter","method":"Say.Hello","request":{"name":"John"}}']);
    assert.equal(rpc.stdout, '{"msg":"Hello John"}');
    // Both went over mutual TLS: the gateway's calls, and the CLI's.
    const stats = await http('GET', `http://127.0.0.1:${dev.admin}/stats?filter=^http\\.rpc\\.ssl\\.handshake$`);
    assert.match(stats.text, /^http\.rpc\.ssl\.handshake: [1-9]\d*\n$/);
  });

  it('mesh subscribe (permissive by default) gets what the strict demo publishes through its sidecar, and what mesh publish sends', async () => {
    const sidecar = await dev.proc.waitForPort(/sidecar: +http:\/\/\S+:(\d+) /);
    const topic = 'go.mesh.topic.devmtls';
    const sub = startProcess(['subscribe', topic], dev.env);
    try {
      await sub.waitForOutput(/subscribed to go\.mesh\.topic\.devmtls/, 20_000);
      const published = await curl(['-XPOST', `127.0.0.1:${sidecar}/broker?topic=${topic}`, '-H', 'content-type: application/json', '-d', '{"from":"sidecar"}']);
      assert.equal(published.stdout, '{}');
      await sub.waitForOutput(/^\{"from":"sidecar"\}$/m, 20_000);
      const cli = await runCli(['publish', topic, '{"from":"cli"}'], dev.env);
      assert.equal(cli.code, 0, cli.stderr);
      await sub.waitForOutput(/^\{"from":"cli"\}$/m, 20_000);
    } finally {
      await sub.stop();
    }
  });

  it('admin /certs lists the workload certificate of each identity with its days left; mesh ca status finds the root valid', async () => {
    const certs = await http('GET', `http://127.0.0.1:${dev.admin}/certs`);
    const entries = certs.json<{ certificates: Array<{ ca_cert: Array<{ days_until_expiration: string }>; cert_chain: Array<{ path: string; subject_alt_names: Array<{ uri?: string }>; days_until_expiration: string }> }> }>().certificates;
    const workloads = entries.flatMap((e) => e.cert_chain).filter((c) => c.path.startsWith('workload:'));
    assert.deepEqual(workloads.map((c) => c.path).sort(), ['go.mesh.api.greeter', 'go.mesh.srv.greeter', 'mesh.api'].map((n) => `workload:spiffe://mesh.local/svc/${n}`));
    for (const c of workloads) {
      assert.deepEqual(c.subject_alt_names, [{ uri: c.path.slice('workload:'.length) }]);
      // --mtls_cert_ttl=24h: less than one whole day left.
      assert.equal(c.days_until_expiration, '0');
    }
    // The root (listed with each workload certificate): ten years.
    const roots = entries.flatMap((e) => e.ca_cert).map((c) => c.days_until_expiration);
    assert.ok(roots.length > 0 && roots.every((d) => d === '3649'), roots.join());
    const status = await runCli(['ca', 'status'], dev.env);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /\tyes\nok: every root is valid for 30 days or more\n$/);
  });

  it("a plain curl to a greeter service's own port is refused; mesh call --mtls=off too", async () => {
    const port = await greeterPort(dev.env);
    const body = JSON.stringify({ id: GREETER, code: 400, detail: `service ${GREETER} accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate`, status: 'Bad Request' });
    const plain = await curl(['-i', '-XPOST', `127.0.0.1:${port}/`, '-H', 'Mesh-Endpoint: Say.Hello', '-d', '{"name":"John"}']);
    assert.equal(plain.stdout, `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    const off = await runCli(['call', '--mtls=off', GREETER, 'Say.Hello', '{"name":"John"}'], dev.env);
    assert.equal(off.code, 1);
    assert.equal(off.stderr, `mesh: service ${GREETER} accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate (400 Bad Request)\n`);
  });
});

describe('mesh dev: who its calls are', () => {
  const dir = tempDir('mesh-dev-authz-');
  let dev: Dev;
  before(async () => {
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(
      rules,
      [
        'rules:',
        '  - caller: mesh.api',
        '    action: allow',
        '  - caller: mesh.cli',
        '    endpoint: Debug.Health',
        '    action: allow',
        `  - service: '*'`,
        '    action: deny',
        '',
      ].join('\n'),
    );
    dev = await startDev(dir.path, [`--authz_rules=${rules}`]);
  });
  after(async () => {
    await dev?.proc.stop();
    dir.cleanup();
  });

  it('the gateway presents mesh.api (allowed); mesh call presents mesh.cli (denied, 403 naming it); mesh health is allowed', async () => {
    const rpc = await curl(['-XPOST', `127.0.0.1:${dev.gateway}/rpc`, '-H', 'content-type: application/json', '-d', '{"service":"go.mesh.srv.greeter","method":"Say.Hello","request":{"name":"John"}}']);
    assert.equal(rpc.stdout, '{"msg":"Hello John"}');
    const hello = await curl([`127.0.0.1:${dev.gateway}/greeter/say/hello?name=John`]);
    assert.equal(hello.stdout, '{"message":"Hello John"}');
    const call = await runCli(['call', GREETER, 'Say.Hello', '{"name":"John"}'], dev.env);
    assert.equal(call.code, 1);
    assert.equal(call.stderr, `mesh: caller spiffe://mesh.local/svc/mesh.cli may not call ${GREETER} Say.Hello (denied by rule 3) (403 Forbidden)\n`);
    const health = await runCli(['health', GREETER], dev.env);
    assert.equal(health.code, 0, health.stdout + health.stderr);
  });
});

describe('mesh dev --mtls=off', () => {
  const dir = tempDir('mesh-dev-off-');
  let dev: Dev;
  before(async () => {
    dev = await startDev(dir.path, ['--mtls=off']);
  });
  after(async () => {
    await dev?.proc.stop();
    dir.cleanup();
  });

  it('says so; mesh call (permissive by default) calls the plain nodes plainly and makes no mesh CA', async () => {
    assert.ok(dev.proc.output().includes('\n  mTLS:     off (--mtls=strict: the services accept only callers with a mesh certificate)\n'), dev.proc.output());
    const call = await runCli(['call', GREETER, 'Say.Hello', '{"name":"John"}'], dev.env);
    assert.equal(call.code, 0, call.stderr);
    assert.equal(call.stdout, '{\n  "msg": "Hello John"\n}\n');
    const health = await runCli(['health', GREETER], dev.env);
    assert.equal(health.code, 0, health.stderr);
    assert.equal(existsSync(join(dir.path, 'ca')), false);
  });
});

it('mesh dev: a CA it cannot use stops the start, saying how to run the demo without mutual TLS; not when --mtls was given', async () => {
  const dir = tempDir('mesh-dev-badca-');
  try {
    const file = join(dir.path, 'not-a-dir');
    writeFileSync(file, 'x');
    const flags = [...DEV_FLAGS, '--registry=memory', `--ca_dir=${file}`];
    const byDefault = await runCli(flags, { MESH_HOME: dir.path });
    assert.equal(byDefault.code, 1);
    assert.equal(byDefault.stderr.split('\n').filter((l) => l.startsWith('mesh: ')).join('\n'), `mesh: --ca_dir ${file} is not a directory (mesh dev runs with --mtls=strict unless told otherwise; --mtls=off runs the demo without mutual TLS)`);
    const given = await runCli([...flags, '--mtls=strict'], { MESH_HOME: dir.path });
    assert.equal(given.code, 1);
    assert.equal(given.stderr.split('\n').filter((l) => l.startsWith('mesh: ')).join('\n'), `mesh: --ca_dir ${file} is not a directory`);
  } finally {
    dir.cleanup();
  }
});
