/**
 * A route file's backends that cannot be resolved, as the Gateway API answers them: a backendRef of
 * another group or kind, a rule with no backendRefs and a backend service the registry does not
 * know each keep the file (the other rules serve) and answer 500 naming why; a path that names no
 * service (no route matched) stays a 404. In process, real HTTP on loopback, on the gateway (both
 * the proxy and the rpc handler) and on a sidecar.
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
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { http, tempDir } from '../helpers.js';

const SERVICE = 'go.mesh.srv.web';

const ROUTES = (handler: string) => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  handler: ${handler}
  rules:
    - name: bucket
      matches: [{path: {type: PathPrefix, value: /bucket}}]
      backendRefs: [{group: storage.example, kind: Bucket, name: photos}]
    - name: empty
      matches: [{path: {type: PathPrefix, value: /empty}}]
    - name: nowhere
      matches: [{path: {type: PathPrefix, value: /nowhere}}]
      backendRefs: [{name: go.mesh.srv.nowhere}]
    - name: ok
      matches: [{path: {type: PathPrefix, value: /web}}]
      backendRefs: [{name: ${SERVICE}}]
`;

const error = (id: string, code: number, detail: string) =>
  JSON.stringify({ id, code, detail, status: code === 500 ? 'Internal Server Error' : 'Not Found' });

describe('route file backends that cannot be resolved', () => {
  const dir = tempDir('mesh-unresolved-');
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

  async function runtime(role: string): Promise<Runtime> {
    const registry = new MemoryRegistry();
    await registerPlain(registry, SERVICE, app.port);
    const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--client_retries=0'];
    const r = new Runtime(optionsFromFlags(parseArgs(flags, {}).config, { registry }), { role });
    running.push(r);
    return r;
  }

  function file(handler: string): string {
    const path = join(dir.path, `routes-${handler}-${running.length}.yaml`);
    writeFileSync(path, ROUTES(handler));
    return path;
  }

  it('the file is read: the other-kind backend is kept with why, the empty rule has no backends', () => {
    const routes = parseRouteFile(ROUTES('proxy'), 'routes.yaml');
    const rules = routes.routes[0]!.rules;
    assert.equal(rules[0]!.backendRefs[0]!.unresolved, 'backend "photos" is a "Bucket" of group "storage.example", not a mesh service');
    assert.deepEqual(rules[1]!.backendRefs, []);
  });

  for (const handler of ['proxy', 'rpc']) {
    it(`mesh api, the ${handler} handler: 500 for each, naming why; the other rule serves; no route: 404`, async () => {
      const gw = new Gateway(await runtime('api'), { address: '127.0.0.1:0', routesFile: file(handler) });
      const url = `http://127.0.0.1:${(await gw.start()).port}`;
      const ask = (path: string) => http('POST', `${url}${path}`, { headers: { 'content-type': 'application/json' }, body: '{}' });
      const id = 'go.mesh.api';
      assert.deepEqual([(await ask('/bucket/x')).status, (await ask('/bucket/x')).text], [500, error(id, 500, 'route web: backend "photos" is a "Bucket" of group "storage.example", not a mesh service')]);
      assert.deepEqual([(await ask('/empty')).status, (await ask('/empty')).text], [500, error(id, 500, 'route web: the rule has no backendRefs')]);
      const nowhere = await ask('/nowhere/say/hello');
      assert.deepEqual([nowhere.status, nowhere.text], [500, error(id, 500, 'service go.mesh.srv.nowhere: not found')]);
      const ok = await ask('/web/say/hello');
      assert.equal(ok.status, 200, ok.text);
      assert.equal(ok.json<{ app: string }>().app, 'web');
      const none = await ask('/other/say/hello');
      assert.equal(none.status, 404, none.text);
    });
  }

  it('mesh sidecar --routes: the same 500s', async () => {
    const sidecar = new Sidecar(await runtime('sidecar'), { handler: 'proxy', routesFile: file('proxy') });
    const url = `http://127.0.0.1:${(await sidecar.start('127.0.0.1:0')).port}`;
    const id = 'go.mesh.sidecar';
    const bucket = await http('GET', `${url}/bucket/x`);
    assert.deepEqual([bucket.status, bucket.text], [500, error(id, 500, 'route web: backend "photos" is a "Bucket" of group "storage.example", not a mesh service')]);
    const empty = await http('GET', `${url}/empty`);
    assert.deepEqual([empty.status, empty.text], [500, error(id, 500, 'route web: the rule has no backendRefs')]);
    const nowhere = await http('GET', `${url}/nowhere`);
    assert.deepEqual([nowhere.status, nowhere.text], [500, error(id, 500, 'service go.mesh.srv.nowhere: not found')]);
    const ok = await http('GET', `${url}/web`);
    assert.equal(ok.status, 200, ok.text);
  });
});
