/**
 * JSON request bodies nested deeper than MAX_JSON_DEPTH (64) get a 400 error JSON from the front
 * end, never a 500 or a stack overflow: a real `mesh api` (/rpc and an rpc route) and a real
 * `mesh sidecar` (/rpc, /<service>/<method>, /registry), with 10,000 and 100,000 nested arrays.
 * The backend never receives such a body.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRegistry } from '../../src/engines/registry/create.js';
import { MAX_JSON_DEPTH } from '../../src/base/codec/json.js';
import { tempDir } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, waitForRoutes, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const JSON_HEADERS = { 'content-type': 'application/json' };
const nested = (n: number, inner = '1') => '['.repeat(n) + inner + ']'.repeat(n);
const TOO_DEEP = 'JSON nesting deeper than 64 levels of arrays and objects';

function errorJson(id: string, detail: string): string {
  return JSON.stringify({ id, code: 400, detail, status: 'Bad Request' });
}

describe('JSON nesting depth', () => {
  const dir = tempDir('mesh-json-depth-');
  let plain: PlainApp;
  let gw: GatewayProcess;
  let sc: SidecarProcess;

  before(async () => {
    const registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port, [{ name: 'Plain.Call', metadata: { handler: 'rpc', method: 'POST', path: '/deep' } }]);
    await registerPlain(registry, 'go.mesh.srv.plain', plain.port);
    [gw, sc] = await Promise.all([startGatewayProcess(dir.path), startSidecar(dir.path)]);
    await waitForRoutes(gw.admin, (t) => t.some((r) => r.path === '/deep'));
  });
  after(async () => {
    await Promise.all([gw?.stop(), sc?.stop('SIGKILL')]);
    await plain?.close();
    dir.cleanup();
  });

  it('MAX_JSON_DEPTH is 64', () => assert.equal(MAX_JSON_DEPTH, 64));

  for (const depth of [10_000, 100_000]) {
    it(`gateway: ${depth} nested arrays get 400 on /rpc (body and request string) and on an rpc route`, async () => {
      const before = plain.received.length;
      const cases: Array<[string, string, string]> = [
        ['/rpc', nested(depth), `body: ${TOO_DEEP}`],
        ['/rpc', `{"service":"go.mesh.api.plain","method":"Plain.Call","request":{"a":${nested(depth)}}}`, `body: ${TOO_DEEP}`],
        ['/rpc', JSON.stringify({ service: 'go.mesh.api.plain', method: 'Plain.Call', request: `{"a":${nested(depth)}}` }), `request: ${TOO_DEEP}`],
        ['/deep', `{"a":${nested(depth)}}`, `body: ${TOO_DEEP}`],
      ];
      for (const [path, body, detail] of cases) {
        const res = await http('POST', `${gw.url}${path}`, { headers: JSON_HEADERS, body });
        assert.equal(res.status, 400, `${path}: ${res.text.slice(0, 200)}`);
        assert.equal(res.text, errorJson('go.mesh.api', detail), path);
      }
      assert.equal(plain.received.length, before, 'the backend received none of them');
    });

    it(`sidecar: ${depth} nested arrays get 400 on /rpc, /<service>/<method> and /registry`, async () => {
      const before = plain.received.length;
      const cases: Array<[string, string, string]> = [
        ['/rpc', `{"service":"go.mesh.srv.plain","method":"Plain.Call","request":${nested(depth, '{}')}}`, `body: ${TOO_DEEP}`],
        ['/rpc', JSON.stringify({ service: 'go.mesh.srv.plain', method: 'Plain.Call', request: nested(depth) }), `request: ${TOO_DEEP}`],
        ['/plain/call', nested(depth), `body: ${TOO_DEEP}`],
        ['/registry', `{"Name":"go.mesh.srv.x","Metadata":${nested(depth)}}`, `body: not valid JSON: ${TOO_DEEP}`],
      ];
      for (const [path, body, detail] of cases) {
        const res = await http('POST', `${sc.base}${path}`, { headers: JSON_HEADERS, body });
        assert.equal(res.status, 400, `${path}: ${res.text.slice(0, 200)}`);
        assert.equal(res.text, errorJson('go.mesh.sidecar', detail), path);
      }
      assert.equal(plain.received.length, before, 'the backend received none of them');
    });
  }

  it('64 levels pass through; 65 do not', async () => {
    // /rpc: the body is one level, `request` 63 more.
    const ok = await http('POST', `${gw.url}/rpc`, {
      headers: JSON_HEADERS,
      body: `{"service":"go.mesh.api.plain","method":"Plain.Call","request":{"a":${nested(62)}}}`,
    });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json().body, { a: JSON.parse(nested(62)) });
    const route = await http('POST', `${gw.url}/deep`, { headers: JSON_HEADERS, body: nested(64) });
    assert.equal(route.status, 200, route.text);
    assert.deepEqual(route.json().body, JSON.parse(nested(64)));
    const over = await http('POST', `${gw.url}/deep`, { headers: JSON_HEADERS, body: nested(65) });
    assert.equal(over.text, errorJson('go.mesh.api', `body: ${TOO_DEEP}`));
    // Brackets inside strings do not count.
    const inString = await http('POST', `${sc.base}/plain/call`, { headers: JSON_HEADERS, body: JSON.stringify({ s: '['.repeat(1000) + '\\"[[' }) });
    assert.equal(inString.status, 200, inString.text);
  });
});
