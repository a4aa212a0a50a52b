/**
 * The front ends' own paths and a route file: on the gateway a route's explicit match wins over
 * `/`, `/rpc` and `/stats`; nothing under `/_mesh/` is ever routed (`/_mesh/health`,
 * `/_mesh/version`); with a route file, a `/` no route matches is not the gateway's (404 from the
 * handler, as any unmatched path); without one, `/` answers the version as before. On the sidecar
 * `/` is the routes' too, while `/registry`, `/broker` and `/rpc` stay the app's API to the mesh.
 * In process, real HTTP on loopback.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { Sidecar } from '../../src/fronts/sidecar/server.js';
import { VERSION_PATH } from '../../src/edge/front-server.js';
import { packageVersion } from '../../src/admin/build-info.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { http, tempDir } from '../helpers.js';

const SERVICE = 'go.mesh.srv.web';

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: site}
spec:
  handler: proxy
  rules:
    - name: everything
      matches: [{path: {type: PathPrefix, value: /}}]
      backendRefs: [{name: ${SERVICE}}]
`;

const EXACT = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact}
spec:
  handler: proxy
  rules:
    - matches: [{path: {type: Exact, value: /only}}]
      backendRefs: [{name: ${SERVICE}}]
`;

describe('the front ends\' own paths beside a route file', () => {
  const dir = tempDir('mesh-own-paths-');
  let app: PlainApp;
  const running: Runtime[] = [];
  before(async () => {
    app = await startPlainApp('web');
  });
  after(async () => {
    await Promise.all(running.map((r) => r.shutdown()));
    await app.close();
    dir.cleanup();
  });

  async function gateway(routes: string | undefined, flags: string[] = []): Promise<string> {
    const registry = new MemoryRegistry();
    await registerPlain(registry, SERVICE, app.port);
    let file: string | undefined;
    if (routes !== undefined) {
      file = join(dir.path, `routes-${running.length}.yaml`);
      writeFileSync(file, routes);
    }
    const all = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', ...flags];
    const runtime = new Runtime(optionsFromFlags(parseArgs(all, {}).config, { registry }), { role: 'api' });
    running.push(runtime);
    const gw = new Gateway(runtime, { address: '127.0.0.1:0', routesFile: file, enableStats: flags.includes('--enable_stats') });
    const bound = await gw.start();
    return `http://127.0.0.1:${bound.port}`;
  }

  it('a route matching every path serves `/`, `/rpc` and `/stats`; `/_mesh/health` and `/_mesh/version` stay the gateway\'s', async () => {
    const url = await gateway(ROUTES, ['--enable_stats']);
    for (const [method, path] of [['GET', '/'], ['POST', '/'], ['POST', '/rpc'], ['GET', '/stats']] as const) {
      const res = await http(method, `${url}${path}`, method === 'POST' ? { body: '{}' } : {});
      assert.equal(res.status, 200, `${method} ${path}`);
      assert.deepEqual([res.json<{ app: string }>().app, res.json<{ url: string }>().url], ['web', path], `${method} ${path} reached the route's backend`);
    }
    const health = await http('GET', `${url}/_mesh/health`);
    assert.deepEqual([health.status, health.text], [200, '{"status":"ok"}']);
    const version = await http('GET', `${url}${VERSION_PATH}`);
    assert.deepEqual([version.status, version.text], [200, JSON.stringify({ version: packageVersion() })]);
    // Other spellings of the own prefix are taken in their normal form first: none reaches the route's backend as /_mesh/.
    for (const path of ['/%5Fmesh/version', '/%5fmesh/health', '/x/../_mesh/version', '/_mesh/./version', '/_mesh/%76ersion']) {
      const res = await http('GET', `${url}${path}`);
      assert.notEqual(res.json<{ app?: string }>().app, 'web', `${path} was routed`);
    }
    assert.equal(app.received.filter((r) => /^\/(_|%5f)mesh\//i.test(r.url)).length, 0, 'nothing under /_mesh/ reached the backend');
  });

  it('with a route file, a `/` no route matches is answered as any unmatched path (404), not with the version', async () => {
    const url = await gateway(EXACT);
    const root = await http('GET', `${url}/`);
    assert.equal(root.status, 404);
    assert.equal(root.json<{ id: string }>().id, 'go.mesh.api');
    const only = await http('GET', `${url}/only`);
    assert.deepEqual([only.status, only.json<{ app: string }>().app], [200, 'web']);
    const version = await http('GET', `${url}${VERSION_PATH}`);
    assert.deepEqual([version.status, version.text], [200, JSON.stringify({ version: packageVersion() })]);
  });

  it('the sidecar with a route file: `/` is the routes\'; `/registry` and `/_mesh/version` stay the sidecar\'s', async () => {
    const registry = new MemoryRegistry();
    await registerPlain(registry, SERVICE, app.port);
    const file = join(dir.path, 'sidecar-routes.yaml');
    writeFileSync(file, ROUTES);
    const all = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off'];
    const runtime = new Runtime(optionsFromFlags(parseArgs(all, {}).config, { registry }), { role: 'sidecar' });
    running.push(runtime);
    const sidecar = new Sidecar(runtime, { handler: 'proxy', routesFile: file });
    const url = `http://127.0.0.1:${(await sidecar.start('127.0.0.1:0')).port}`;
    const root = await http('GET', `${url}/`);
    assert.deepEqual([root.status, root.json<{ app: string }>().app], [200, 'web']);
    const version = await http('GET', `${url}${VERSION_PATH}`);
    assert.deepEqual([version.status, version.json<{ version: string; handler: string }>()], [200, { version: packageVersion(), handler: 'proxy', namespace: 'go.mesh.srv' }]);
    const lookup = await http('GET', `${url}/registry?service=${SERVICE}`);
    assert.equal(lookup.status, 200);
    assert.equal(lookup.json<{ name: string }>().name, SERVICE);
  });

  it('without a route file, `/` answers the version (GET and HEAD; other methods 405), as `/_mesh/version` does', async () => {
    const url = await gateway(undefined);
    const expected = JSON.stringify({ version: packageVersion() });
    for (const path of ['/', VERSION_PATH]) {
      const res = await http('GET', `${url}${path}`);
      assert.deepEqual([res.status, res.text], [200, expected], path);
      const post = await http('POST', `${url}${path}`, { body: '{}' });
      assert.equal(post.status, 405, path);
      assert.equal(post.text, `{"id":"go.mesh.api","code":405,"detail":"method POST not allowed on ${path}: use GET","status":"Method Not Allowed"}`);
      assert.equal(post.headers.allow, 'GET, HEAD');
    }
  });
});
