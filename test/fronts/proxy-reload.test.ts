/**
 * `mesh proxy -c FILE` reloads its file (a real process): a change of the file swaps the routes and
 * the static clusters while requests flow (none fails), SIGHUP with a bad file or a listener that
 * moves keeps the running configuration (logged, counted in proxy.config.update_failure).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { http, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';

function writeAtomically(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

async function statValue(admin: string, name: string): Promise<number> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value ?? 0;
}

describe('mesh proxy: reload of the configuration file', () => {
  const dir = tempDir('mesh-proxy-reload-');
  const file = join(dir.path, 'proxy.yaml');
  let one: PlainApp;
  let two: PlainApp;
  let proc: RunningProcess;
  let admin: string;
  let pool: Pool;

  const config = (cluster: string, clusters: string, address = '127.0.0.1:0') => `listeners:
  - name: ingress
    address: ${address}
    routes:
      - {match: {prefix: /}, cluster: ${cluster}}
clusters:
${clusters}`;
  const clustersOf = (entries: Array<[string, number]>) => entries.map(([name, port]) => `  - {name: ${name}, hosts: ["127.0.0.1:${port}"]}\n`).join('');

  before(async () => {
    [one, two] = await Promise.all([startPlainApp('one'), startPlainApp('two')]);
    writeFileSync(file, config('a', clustersOf([['a', one.port]])));
    proc = startProcess(['proxy', '-c', file, '--admin_address=127.0.0.1:0', '--log_level=error']);
    admin = (await proc.waitForOutput(/mesh proxy admin on \S+/, 15000)).replace('mesh proxy admin on ', '');
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    pool = new Pool(/mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!, { connections: 4 });
  });

  after(async () => {
    await pool?.close();
    await proc?.stop();
    await Promise.all([one?.close(), two?.close()]);
    dir.cleanup();
  });

  const app = async () => {
    const res = await pool.request({ method: 'GET', path: '/x' });
    const body = (await res.body.json()) as { app?: string };
    return { status: res.statusCode, app: body.app };
  };

  it('a change of the file swaps routes and clusters while requests flow; none fails', async () => {
    assert.deepEqual(await app(), { status: 200, app: 'one' });
    const failures: unknown[] = [];
    let sawTwo = 0;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        const got = await app();
        if (got.status !== 200) failures.push(got);
        if (got.app === 'two') sawTwo++;
      }
    };
    const workers = Array.from({ length: 4 }, worker);
    // A new cluster b, and the route moves to it; cluster a changes its host too.
    writeAtomically(file, config('b', clustersOf([['a', two.port], ['b', two.port]])));
    await waitFor(() => sawTwo >= 200, 15000);
    stop = true;
    await Promise.all(workers);
    assert.deepEqual(failures, []);
    assert.ok((await statValue(admin, 'proxy.config.update_success')) >= 1);
    const clusters = (await http('GET', `${admin}/clusters`)).text;
    assert.match(clusters, new RegExp(`^b::127\\.0\\.0\\.1:${two.port}::`, 'm'));
    assert.match(clusters, new RegExp(`^a::127\\.0\\.0\\.1:${two.port}::`, 'm'));
  });

  it('SIGHUP with a bad file, or a listener that moves, keeps the running configuration, counted', async () => {
    writeAtomically(file, config('b', clustersOf([['b', two.port]])).replace('routes:', 'routez:'));
    proc.child.kill('SIGHUP');
    await waitFor(async () => (await statValue(admin, 'proxy.config.update_failure')) >= 1, 10000);
    assert.deepEqual(await app(), { status: 200, app: 'two' });
    writeAtomically(file, config('b', clustersOf([['b', one.port]]), '127.0.0.1:1'));
    proc.child.kill('SIGHUP');
    await waitFor(async () => (await statValue(admin, 'proxy.config.update_failure')) >= 2, 10000);
    assert.deepEqual(await app(), { status: 200, app: 'two' });
    assert.match(proc.output(), /listener ingress moves from 127\.0\.0\.1:0 to 127\.0\.0\.1:1: changing a listener's address needs a restart/);
  });
});

describe('mesh proxy: a route_file it cannot serve', () => {
  it('a route whose handler is not proxy is refused at start, naming the file and the route (exit 1)', async () => {
    const dir = tempDir('mesh-proxy-route-file-');
    try {
      writeFileSync(join(dir.path, 'bad.yaml'), 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  handler: rpc\n  rules:\n    - backendRefs: [{name: backend}]\n');
      const file = join(dir.path, 'proxy.yaml');
      writeFileSync(file, 'listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    route_file: bad.yaml\nclusters:\n  - {name: backend, hosts: ["127.0.0.1:9"]}\n');
      const res = await runCli(['proxy', '-c', file, '--admin_address=off', `--registry_address=${dir.path}`]);
      assert.equal(res.code, 1);
      assert.equal(res.stderr.trim().split('\n').pop(), `mesh: ${join(dir.path, 'bad.yaml')} line 1: HTTPRoute r spec.handler: mesh proxy forwards HTTP only: use proxy (or leave it out), not rpc`);
    } finally {
      dir.cleanup();
    }
  });

  it('a GRPCRoute on a listener without http2 is refused at start: native gRPC calls are HTTP/2', async () => {
    const dir = tempDir('mesh-proxy-route-file-');
    try {
      writeFileSync(join(dir.path, 'grpc.yaml'), 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: greeter}\nspec:\n  rules:\n    - backendRefs: [{name: backend}]\n');
      const file = join(dir.path, 'proxy.yaml');
      writeFileSync(file, 'listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    route_file: grpc.yaml\nclusters:\n  - {name: backend, hosts: ["127.0.0.1:9"]}\n');
      const res = await runCli(['proxy', '-c', file, '--admin_address=off', `--registry_address=${dir.path}`]);
      assert.equal(res.code, 1);
      assert.equal(res.stderr.trim().split('\n').pop(), `mesh: ${join(dir.path, 'grpc.yaml')} line 1: GRPCRoute greeter: native gRPC calls reach listener ingress only with http2: true (GRPCRoute serves HTTP/2 calls)`);
    } finally {
      dir.cleanup();
    }
  });
});
