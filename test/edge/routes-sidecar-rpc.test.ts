/**
 * `mesh sidecar --routes` with the rpc handler, as a real process: the app's calls at
 * `/<service>/<method>` and at `/rpc` (matched as `/rpc/<service>/<method>`) go to the version the
 * route names, by header; a route timeout bounds a call at /rpc (504); weight 0 answers 500.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { tempDir } from '../helpers.js';
import { http, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const SERVICE = 'go.mesh.srv.echo';
const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const ROUTES = `${HEAD}metadata: {name: calls}
spec:
  rules:
    - name: slow
      matches: [{path: {type: Exact, value: /rpc/${SERVICE}/Echo.Slow}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
      timeouts: {request: 200ms}
    - name: zero
      matches: [{path: {type: Exact, value: /rpc/${SERVICE}/Echo.Zero}}]
      backendRefs: [{name: ${SERVICE}, weight: 0}]
    - name: tester
      matches:
        - {path: {value: /rpc/${SERVICE}}, headers: [{name: X-Tester, value: ann}]}
        - {path: {value: /echo}, headers: [{name: X-Tester, value: ann}]}
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: rest
      matches: [{path: {value: /rpc/${SERVICE}}}, {path: {value: /echo}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
`;

describe('mesh sidecar --routes: the rpc handler and /rpc', () => {
  const dir = tempDir('mesh-routes-sidecar-');
  let registry: Registry;
  let one: PlainApp;
  let two: PlainApp;
  let sc: SidecarProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    [one, two] = await Promise.all([startPlainApp('one'), startPlainApp('two')]);
    for (const [version, app] of [['v1', one], ['v2', two]] as const) {
      await registry.register({ name: SERVICE, version, metadata: {}, endpoints: [], nodes: [{ id: `echo-${version}`, address: '127.0.0.1', port: app.port, metadata: {} }] });
    }
    const file = join(dir.path, 'routes.yaml');
    writeFileSync(file, ROUTES);
    sc = await startSidecar(dir.path, [`--routes=${file}`]);
    assert.match(sc.proc.output(), /mesh sidecar listening on \S+ \(handler rpc, namespace go\.mesh\.srv, 1 route from \S+routes\.yaml\)/);
  });

  after(async () => {
    await sc?.stop();
    await Promise.all([one?.close(), two?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  const rpc = (method: string, headers: Record<string, string> = {}) =>
    http('POST', `${sc.base}/rpc`, { headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ service: SERVICE, method, request: {} }) });
  const path = (p: string, headers: Record<string, string> = {}) => http('POST', `${sc.base}${p}`, { headers: { 'content-type': 'application/json', ...headers }, body: '{}' });

  it('a call goes to the version its route names, at /rpc and at /<service>/<method>', async () => {
    for (let i = 0; i < 10; i++) {
      const [a, b, c, d] = await Promise.all([rpc('Echo.Hi', { 'x-tester': 'ann' }), rpc('Echo.Hi'), path('/echo/hi', { 'x-tester': 'ann' }), path('/echo/hi')]);
      assert.deepEqual([a, b, c, d].map((r) => [r.status, r.json().app, r.json().endpoint]), [
        [200, 'two', 'Echo.Hi'],
        [200, 'one', 'Echo.Hi'],
        [200, 'two', 'Echo.Hi'],
        [200, 'one', 'Echo.Hi'],
      ]);
    }
  });

  it('a route timeout bounds a call at /rpc (504); a rule whose backends weigh 0 answers 500', async () => {
    const slow = await rpc('Echo.Slow');
    assert.equal(slow.status, 504, slow.text);
    assert.equal(slow.json().id, 'go.mesh.sidecar');
    const zero = await rpc('Echo.Zero');
    assert.equal(zero.text, '{"id":"go.mesh.sidecar","code":500,"detail":"route calls: every backend has weight 0","status":"Internal Server Error"}');
  });
});
