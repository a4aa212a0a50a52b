/**
 * Who may call whom, with real processes: a framework service started by runService with
 * --authz_rules refuses a denied caller with 403 error JSON and logs the caller once; SIGHUP
 * reloads a good file and keeps the old rules on a bad one; a bad file or --authz_default=deny
 * without rules stops the start with exit 2.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { PROTOS } from '../grpc-fixtures.js';
import { Mesh } from '../../src/framework/mesh.js';
import { MeshError } from '../../src/base/errors.js';
import { http, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');
const GRPC_SERVICE = join(ROOT, 'test/fixtures/grpc-framework-service.ts');
const PRINTED_WHO = /go\.mesh\.srv\.who listening on 127\.0\.0\.1:(\d+) \(node \S+\), admin on 127\.0\.0\.1:(\d+)/;

/** Runs the who service to its exit (a start that fails). */
async function runWho(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', WHO, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = await once(child, 'exit');
  return { code: code as number | null, stderr };
}

async function statValue(admin: string, name: string): Promise<number | undefined> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value;
}

describe('authz rules in a service process', () => {
  const dir = tempDir('mesh-authz-');
  const rules = join(dir.path, 'rules.yaml');
  let who: RunningProcess;
  let base: string;
  let admin: string;

  before(async () => {
    writeFileSync(rules, ['rules:', '  - name: plain callers may not ask who it is', '    caller: unauthenticated', '    endpoint: Who.Am', '    action: deny', ''].join('\n'));
    who = startProcess(['--import', 'tsx', WHO, `--registry_address=${dir.path}`, `--authz_rules=${rules}`, '--log_level=info', '--log_format=json'], {}, '');
    const line = await who.waitForOutput(PRINTED_WHO, 20000);
    const [, port, adminPort] = PRINTED_WHO.exec(line)!;
    base = `http://127.0.0.1:${port}/`;
    admin = `http://127.0.0.1:${adminPort}`;
  });
  after(async () => {
    await who?.stop();
    dir.cleanup();
  });

  const call = (endpoint: string) => http('POST', base, { headers: { 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.who', 'mesh-endpoint': endpoint }, body: '{}' });
  const denials = () => who.output().split('\n').filter((l) => l.includes('"call denied by')).length;

  it('a denied call is 403 error JSON naming the caller, counted, and logged once per caller', async () => {
    for (let i = 0; i < 3; i++) {
      const denied = await call('Who.Am');
      assert.equal(denied.status, 403);
      assert.equal(denied.text, '{"id":"go.mesh.authz","code":403,"detail":"caller unauthenticated may not call go.mesh.srv.who Who.Am (denied by rule 1)","status":"Forbidden"}');
    }
    const allowed = await call('Who.Peer');
    assert.equal(allowed.status, 200);
    assert.equal(allowed.text, '{"peer":null}');
    assert.equal(await statValue(admin, 'authz.denied'), 3);
    assert.equal(await statValue(admin, 'authz.allowed'), 1);
    assert.equal(denials(), 1);
    // Admin /auth_rules shows the rules loaded.
    const shown = (await http('GET', `${admin}/auth_rules`)).json();
    assert.equal(shown.authz_rules, rules);
    assert.equal(shown.default, 'allow');
    assert.equal(shown.last_reload_error, null);
    assert.deepEqual(shown.rules, [{ index: 1, line: 2, name: 'plain callers may not ask who it is', caller: ['unauthenticated'], endpoint: 'Who.Am', action: 'deny' }]);
  });

  it('SIGHUP reloads a good file; a bad file keeps the old rules and logs its error', async () => {
    writeFileSync(rules, '- { caller: unauthenticated, endpoint: Who.Peer, action: deny }\n');
    who.child.kill('SIGHUP');
    await waitFor(async () => (await statValue(admin, 'authz.rules.update_success')) === 1);
    assert.equal((await call('Who.Am')).status, 200);
    const denied = await call('Who.Peer');
    assert.equal(denied.text, '{"id":"go.mesh.authz","code":403,"detail":"caller unauthenticated may not call go.mesh.srv.who Who.Peer (denied by rule 1)","status":"Forbidden"}');
    // The new rules log a denied caller again, once.
    await call('Who.Peer');
    assert.equal(denials(), 2);

    writeFileSync(rules, '- { caller: unauthenticated, endpoint: Who.Peer, action: allow }\n- { caller: "go mesh", action: deny }\n');
    who.child.kill('SIGHUP');
    await waitFor(async () => (await statValue(admin, 'authz.rules.update_failure')) === 1);
    assert.equal((await call('Who.Peer')).status, 403);
    assert.equal((await call('Who.Am')).status, 200);
    const failed = who
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { msg?: string; err?: string })
      .filter((l) => l.msg === 'authorization rules reload failed: the previous rules stay');
    assert.deepEqual(
      failed.map((l) => l.err),
      [`invalid value "${rules}" for flag --authz_rules: line 2: rule 2: caller "go mesh": not a service name glob (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)`],
    );
    assert.equal(who.child.exitCode, null);
  });
});

describe('authz over mutual TLS with the mesh CA: a service process, callers with two identities', () => {
  const dir = tempDir('mesh-authz-e2e-');
  const ca = join(dir.path, 'ca');
  const registryDir = join(dir.path, 'registry');
  const rules = join(dir.path, 'rules.yaml');
  let who: RunningProcess;
  let admin: string;
  const meshes: Mesh[] = [];

  before(async () => {
    writeFileSync(
      rules,
      ['rules:', '  - caller: go.mesh.srv.friend', '    service: go.mesh.srv.who', '    action: allow', '  - caller: "go.mesh.srv.*"', '    service: go.mesh.srv.who', '    endpoint: Who.*', '    action: deny', ''].join('\n'),
    );
    who = startProcess(['--import', 'tsx', WHO, `--registry_address=${registryDir}`, '--mtls=strict', `--ca_dir=${ca}`, `--authz_rules=${rules}`, '--log_level=warning', '--log_format=json'], {}, '');
    const line = await who.waitForOutput(PRINTED_WHO, 20000);
    admin = `http://127.0.0.1:${PRINTED_WHO.exec(line)![2]}`;
  });
  after(async () => {
    for (const m of meshes) await m.close();
    await who?.stop();
    dir.cleanup();
  });

  /** A caller process's Mesh whose calls present the workload certificate of its service `name`. */
  const callerAs = (name: string) => {
    const mesh = new Mesh({ registry: 'local', registryAddress: registryDir, broker: 'memory', mtls: 'strict', caDir: ca, logLevel: 'off', drainDelay: 0 });
    meshes.push(mesh);
    mesh.service({ name });
    return mesh;
  };

  it('the friend is allowed and its handler sees its SPIFFE ID; the stranger gets 403 naming it', async () => {
    assert.deepEqual(await callerAs('go.mesh.srv.friend').call('go.mesh.srv.who', 'Who.Peer', {}), { peer: 'spiffe://mesh.local/svc/go.mesh.srv.friend' });
    await assert.rejects(callerAs('go.mesh.srv.stranger').call('go.mesh.srv.who', 'Who.Peer', {}), (err: unknown) => {
      assert.ok(err instanceof MeshError);
      assert.equal(err.toBody(), '{"id":"go.mesh.authz","code":403,"detail":"caller spiffe://mesh.local/svc/go.mesh.srv.stranger may not call go.mesh.srv.who Who.Peer (denied by rule 2)","status":"Forbidden"}');
      return true;
    });
    assert.equal(await statValue(admin, 'authz.allowed'), 1);
    assert.equal(await statValue(admin, 'authz.denied'), 1);
    assert.equal(who.output().split('\n').filter((l) => l.includes('"caller":"spiffe://mesh.local/svc/go.mesh.srv.stranger"')).length, 1);
  });
});

describe('authz rules in a service serving gRPC (--server_protocol=grpc)', () => {
  const dir = tempDir('mesh-authz-grpc-');
  let svc: RunningProcess;

  before(async () => {
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, '- { caller: unauthenticated, endpoint: "Greeter.Fail", action: deny }\n');
    svc = startProcess(['--import', 'tsx', GRPC_SERVICE, `--registry_address=${dir.path}`, '--server_protocol=grpc', `--proto_path=${PROTOS}`, `--authz_rules=${rules}`, '--log_level=warning'], {}, '');
    await svc.waitForOutput(/go\.mesh\.srv\.fwgreeter listening on/, 20000);
  });
  after(async () => {
    await svc?.stop();
    dir.cleanup();
  });

  it('a denied call ends with PERMISSION_DENIED before the handler runs, naming the caller', async () => {
    const env = { MESH_REGISTRY_ADDRESS: dir.path };
    const denied = await runCli(['call', 'go.mesh.srv.fwgreeter', 'Greeter.Fail', '{"code":500,"details":"the handler ran"}', '--output=json', `--proto_path=${PROTOS}`], env);
    assert.equal(denied.code, 1);
    assert.equal(denied.stderr, '{"id":"helloworld.Greeter","code":403,"detail":"caller unauthenticated may not call go.mesh.srv.fwgreeter Greeter.Fail (denied by rule 1)","status":"Forbidden"}\n');
    const allowed = await runCli(['call', 'go.mesh.srv.fwgreeter', 'Greeter.SayHello', '{"name":"x"}', '--output=json', `--proto_path=${PROTOS}`], env);
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.equal(JSON.parse(allowed.stdout).message, 'Hello x from mesh');
  });
});

describe('a bad authz flag or rules file stops the start: exit 2', () => {
  const dir = tempDir('mesh-authz-bad-');
  after(() => dir.cleanup());

  it('runService: a rules file with an error, naming the file, the line and the rule', async () => {
    const bad = join(dir.path, 'bad.yaml');
    writeFileSync(bad, '- caller: mesh.api\n  service: go.mesh.srv.who\n  action: alow\n');
    const r = await runWho([`--registry_address=${dir.path}`, `--authz_rules=${bad}`]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, `mesh: invalid value "${bad}" for flag --authz_rules: line 3: rule 1: action "alow" is not allow or deny\n`);
  });

  it('mesh dev: --authz_default=deny without --authz_rules; a file that cannot be read', async () => {
    const deny = await runCli(['dev', `--registry_address=${dir.path}`, '--authz_default=deny']);
    assert.equal(deny.code, 2);
    assert.equal(deny.stderr, 'mesh: invalid value "deny" for flag --authz_default: needs --authz_rules (without rules every call would be denied)\n');
    const missing = join(dir.path, 'absent.yaml');
    const absent = await runCli(['dev', `--registry_address=${dir.path}`, `--authz_rules=${missing}`]);
    assert.equal(absent.code, 2);
    assert.equal(absent.stderr, `mesh: invalid value "${missing}" for flag --authz_rules: cannot read: ENOENT\n`);
  });

  it('commands that take no calls refuse the flags', async () => {
    const r = await runCli(['api', '--authz_rules=x.yaml']);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: flag --authz_rules is not used by mesh api (the commands that use it: dev, sidecar, run)\n');
  });
});
