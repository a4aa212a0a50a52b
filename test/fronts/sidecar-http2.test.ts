/**
 * The sidecar over HTTP/2 (`mesh sidecar --enable_http2`): one request set over HTTP/1.1 and over
 * h2c gets the same answers (status, content type, error JSON bytes): its own paths, the Host check
 * on `:authority`, a path that names no service, a bad `/rpc` body, the underscore policy. WebSocket
 * subscriptions stay on HTTP/1.1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { ClientHttp2Session } from 'node:http2';
import { createRegistry } from '../../src/engines/registry/create.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';
import { overHttp1, overHttp2, session, view, type Case } from '../fixtures/h2-client.js';
import { http, tempDir } from '../helpers.js';

const CASES: Case[] = [
  { name: 'the health path', method: 'GET', path: '/_mesh/health' },
  { name: 'the version', method: 'GET', path: '/_mesh/version' },
  { name: 'the registry API', method: 'GET', path: '/registry?service=go.mesh.srv.known' },
  { name: 'a foreign Host (:authority)', method: 'GET', path: '/registry', headers: { host: 'evil.example' } },
  { name: 'a path that names no service', method: 'GET', path: '/nope' },
  { name: 'a bad /rpc body', method: 'POST', path: '/rpc', headers: { 'content-type': 'application/json' }, body: '{"service":' },
  { name: 'a header with _ (reject)', method: 'GET', path: '/_mesh/version', headers: { x_forwarded_for: '10.0.0.1' } },
];

describe('mesh sidecar over HTTP/2 (--enable_http2)', () => {
  const dir = tempDir('mesh-sidecar-h2-');
  let sc: SidecarProcess;
  let h2: ClientHttp2Session;

  before(async () => {
    const registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.known', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'k', address: '127.0.0.1', port: 1, metadata: {} }] });
    await registry.close();
    sc = await startSidecar(join(dir.path, 'registry'), ['--enable_http2', '--headers_with_underscores=reject']);
    h2 = await session(sc.base);
  });

  after(async () => {
    h2?.close();
    await sc?.stop();
    dir.cleanup();
  });

  for (const c of CASES) {
    it(`${c.name}: the same answer over HTTP/1.1 and h2c`, async () => {
      const one = await overHttp1(sc.base, c);
      const two = await overHttp2(h2, c);
      assert.deepEqual(view(c, two), view(c, one));
    });
  }

  it('counts the HTTP/2 connection under Envoy\'s name', async () => {
    assert.match((await http('GET', `${sc.admin}/stats?filter=downstream_cx_http2_total`)).text, /http\.sidecar\.downstream_cx_http2_total: [1-9]/);
  });
});
