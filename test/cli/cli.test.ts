/**
 * The Foundation's "must show": service processes and the CLI in another process share the
 * embedded `local` registry; TTL expiry of a killed node; deregistration on SIGTERM; bad input.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { http, startProcess, runCli, tempDir, waitFor, ROOT, type RunningProcess } from '../helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');

function startWho(dir: string, extra: string[] = []): RunningProcess {
  return startProcess(['--import', 'tsx', WHO, `--registry_address=${dir}`, '--register_ttl=1s', '--register_interval=300ms', '--log_level=warning', ...extra], {}, '');
}

describe('two service processes and the CLI share the local registry', () => {
  const home = tempDir();
  let a: RunningProcess;
  let b: RunningProcess;
  const env = { MESH_REGISTRY_ADDRESS: home.path };

  before(async () => {
    a = startWho(home.path);
    b = startWho(home.path);
    await Promise.all([a.waitForOutput(/listening on/), b.waitForOutput(/listening on/)]);
  });
  after(async () => {
    await a.stop('SIGKILL');
    await b.stop('SIGKILL');
    home.cleanup();
  });

  it('list services shows them', async () => {
    const r = await runCli(['list', 'services'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'go.mesh.srv.who\n');
  });

  it('get service shows both nodes (text and json)', async () => {
    const r = await runCli(['get', 'service', 'go.mesh.srv.who', '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    const svc = JSON.parse(r.stdout) as { name: string; nodes: Array<{ id: string; port: number }> };
    assert.equal(svc.name, 'go.mesh.srv.who');
    assert.equal(svc.nodes.length, 2);
    const t = await runCli(['get', 'service', 'go.mesh.srv.who'], env);
    assert.match(t.stdout, /^service  go\.mesh\.srv\.who\n/);
    assert.match(t.stdout, /Endpoint: Who\.Am/);
  });

  it('call reaches both nodes', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 12 && seen.size < 2; i++) {
      const r = await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', '--output=json'], env);
      assert.equal(r.code, 0, r.stderr);
      seen.add((JSON.parse(r.stdout) as { node: string }).node);
    }
    assert.equal(seen.size, 2, 'calls from separate CLI processes spread over both nodes');
  });

  it('a SIGTERM-ed node deregisters at once; a killed node expires with its TTL', async () => {
    // Read the shared registry directly: a CLI process per poll is too slow to time a 1s TTL.
    const registry = new LocalRegistry(home.path);
    const nodes = async () => (await registry.getService('go.mesh.srv.who')).reduce((n, s) => n + s.nodes.length, 0);
    try {
      const code = await a.stop('SIGTERM');
      assert.equal(code, 0);
      assert.equal(await nodes(), 1, 'deregistered before exit');
      await b.stop('SIGKILL');
      const started = Date.now();
      await waitFor(async () => (await nodes()) === 0, 10_000, 50);
      const elapsed = Date.now() - started;
      assert.ok(elapsed < 5000, `expired after ${elapsed}ms with a 1s TTL`);
    } finally {
      await registry.close();
    }
    const r = await runCli(['call', 'go.mesh.srv.who', 'Who.Am'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /service go\.mesh\.srv\.who: not found \(404 Not Found\)/);
  });
});

describe('CLI bad input', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path };
  after(() => home.cleanup());

  it('a bad duration flag exits 2 naming the flag', async () => {
    const r = await runCli(['list', 'services', '--client_request_timeout=soon'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--client_request_timeout/);
    assert.equal(r.stdout, '');
  });

  it('an unknown command exits 2', async () => {
    const r = await runCli(['frobnicate'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown command/);
  });

  it('malformed JSON for call and register exits 2 with a message', async () => {
    let r = await runCli(['call', 'x', 'A.B', '{"a":'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /not valid JSON/);
    r = await runCli(['register', 'service', '{"Name":"x","Nodes":[{"Id":"1","Address":"a","Port":99999}]}'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /Nodes\[0\]\.Port/);
  });

  it('register refuses what breaks the registry rules: exit 2, the field on stderr, nothing written', async () => {
    const bad: Array<[string, RegExp]> = [
      ['{"Name":"go.mesh.srv.greeter","Nodes":[{"Id":"x","Address":"127.0.0.1 x","Port":1}]}', /^mesh: register service: Nodes\[0\]\.Address: "127\.0\.0\.1 x" is not an IPv4 address/],
      ['{"Name":"forged\\nline","Nodes":[{"Id":"x","Address":"127.0.0.1","Port":1}]}', /^mesh: register service: Name: "forged\\nline" is not a valid service name/],
      ['{"Name":"x","Nodes":[{"Id":"x","Address":"http://h/","Port":1}]}', /^mesh: register service: Nodes\[0\]\.Address: /],
      ['{"Name":"x","Nodes":[{"Id":"x","Address":"h","Port":1,"Metadata":{"k":"a\\u0000"}}]}', /^mesh: register service: Nodes\[0\]\.Metadata\.k: has a control character/],
    ];
    for (const [json, re] of bad) {
      const r = await runCli(['register', 'service', json], env);
      assert.equal(r.code, 2, `${json}: ${r.stderr}`);
      assert.match(r.stderr, re);
      assert.equal(r.stderr.split('\n').length, 2, 'one line on stderr, no forged line');
      assert.equal(r.stdout, '');
    }
    assert.equal((await runCli(['list', 'services'], env)).stdout, '');
  });

  it('register: a node with 16 KiB of metadata is accepted, one byte more is refused (exit 2, nothing written)', async () => {
    // Keys k0..k3 (2 bytes) and values of 4,094 characters: 4 × 4,096 = 16,384 bytes.
    const record = (extra: number) =>
      JSON.stringify({ Name: 'go.mesh.srv.heavy', Nodes: [{ Id: 'h1', Address: '127.0.0.1', Port: 1, Metadata: Object.fromEntries([0, 1, 2, 3].map((i) => [`k${i}`, 'x'.repeat(i === 3 ? 4094 + extra : 4094)])) }] });
    const over = await runCli(['register', 'service', record(1)], env);
    assert.equal(over.code, 2);
    assert.equal(over.stderr, 'mesh: register service: Nodes[0].Metadata: 16385 bytes of keys and values, more than the limit of 16384\n');
    assert.equal((await runCli(['list', 'services'], env)).stdout, '');
    const at = await runCli(['register', 'service', record(0)], env);
    assert.equal(at.code, 0, at.stderr);
    assert.equal((await runCli(['deregister', 'service', record(0)], env)).code, 0);
  });

  it('unknown service is a 404 on stderr, exit 1; --output=json prints the error JSON', async () => {
    const r = await runCli(['call', 'go.mesh.srv.none', 'A.B', '--output=json'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, '{"id":"go.mesh.client","code":404,"detail":"service go.mesh.srv.none: not found","status":"Not Found"}\n');
  });

  it('register, get and deregister a service from the CLI', async () => {
    const svc = '{"Name":"plain.app","Nodes":[{"Id":"plain-1","Address":"127.0.0.1","Port":9999}]}';
    assert.equal((await runCli(['register', 'service', svc], env)).stdout, 'ok\n');
    const g = await runCli(['get', 'service', 'plain.app', '--output=json'], env);
    assert.deepEqual((JSON.parse(g.stdout) as { nodes: unknown[] }).nodes, [{ id: 'plain-1', address: '127.0.0.1', port: 9999, metadata: {} }]);
    assert.equal((await runCli(['deregister', 'service', svc], env)).stdout, 'ok\n');
    assert.equal((await runCli(['list', 'services'], env)).stdout, '');
  });

  it('get service: two versions of one service, each listed with its own nodes (exact text)', async () => {
    const v2 = '{"Name":"go.mesh.srv.canary","Version":"v2","Endpoints":[{"Name":"Say.Hello"}],"Nodes":[{"Id":"canary-2","Address":"127.0.0.1","Port":9002}]}';
    const v1 = '{"Name":"go.mesh.srv.canary","Version":"v1","Endpoints":[{"Name":"Say.Hello"}],"Nodes":[{"Id":"canary-1a","Address":"127.0.0.1","Port":9001},{"Id":"canary-1b","Address":"127.0.0.1","Port":9003}]}';
    for (const svc of [v2, v1]) assert.equal((await runCli(['register', 'service', svc], env)).stdout, 'ok\n');
    try {
      const t = await runCli(['get', 'service', 'go.mesh.srv.canary'], env);
      assert.equal(t.code, 0, t.stderr);
      assert.equal(
        t.stdout,
        'service  go.mesh.srv.canary\n\n' +
          'version v1\n\nID\tAddress\tPort\tMetadata\ncanary-1a\t127.0.0.1\t9001\t\ncanary-1b\t127.0.0.1\t9003\t\n\n' +
          'version v2\n\nID\tAddress\tPort\tMetadata\ncanary-2\t127.0.0.1\t9002\t\n\n' +
          'Endpoint: Say.Hello\n',
      );
      // --output=json keeps its one-record shape: the nodes of every version.
      const j = JSON.parse((await runCli(['get', 'service', 'go.mesh.srv.canary', '--output=json'], env)).stdout) as { nodes: Array<{ id: string }> };
      assert.deepEqual(j.nodes.map((n) => n.id), ['canary-1a', 'canary-1b', 'canary-2']);
      // Through a sidecar (--proxy_address): the same text, from its /registry?service=NAME&versions=true.
      const sc = await startSidecar(home.path);
      try {
        const through = await runCli(['get', 'service', 'go.mesh.srv.canary', `--proxy_address=127.0.0.1:${sc.port}`]);
        assert.equal(through.stdout, t.stdout, through.stderr);
        const perVersion = await http('GET', `${sc.base}/registry?service=go.mesh.srv.canary&versions=true`);
        assert.deepEqual((perVersion.json() as Array<{ version: string; nodes: unknown[] }>).map((v) => [v.version, v.nodes.length]), [['v1', 2], ['v2', 1]]);
        const bad = await http('GET', `${sc.base}/registry?service=go.mesh.srv.canary&versions=maybe`);
        assert.equal(bad.status, 400);
        assert.equal(bad.text, '{"id":"go.mesh.sidecar","code":400,"detail":"versions: \\"maybe\\" is not true or false","status":"Bad Request"}');
      } finally {
        await sc.stop();
      }
    } finally {
      for (const svc of [v1, v2]) await runCli(['deregister', 'service', svc], env);
    }
  });

  it('a registry directory that cannot be written is a clear error', async () => {
    const file = join(home.path, 'a-file');
    writeFileSync(file, 'x');
    const r = await runCli(['list', 'services', `--registry_address=${join(file, 'sub')}`], {});
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`registry directory ${join(file, 'sub').replace(/[/.]/g, '\\$&')}`));
  });

  it('the built CLI is executable, so the package bin (npx mesh) runs', async () => {
    const { statSync } = await import('node:fs');
    const { CLI } = await import('../helpers.js');
    assert.ok((statSync(CLI).mode & 0o111) !== 0, `${CLI} is not executable`);
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(CLI, ['--version'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^mesh \d+\.\d+\.\d+\n$/);
  });

  it('--hot-restart-version prints the same string as admin /hot_restart_version', async () => {
    const r = await runCli(['--hot-restart-version'], env);
    assert.equal(r.code, 0);
    assert.ok(r.stdout.length > 0 && !r.stdout.endsWith('\n'));
  });
});
