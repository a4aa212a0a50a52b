/**
 * A RequestRedirect without `hostname` copies the request's Host into Location, so the Host must
 * be a host[:port] and nothing more (docs/routing.md, RequestRedirect): a real `mesh api
 * --routes=FILE` answers a Host with a path, query, user, space or nothing at all with 400 error
 * JSON and no Location, and still redirects a good Host (a name, IPv4, [IPv6], with a port).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { rawHttp, tempDir } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: moved}
spec:
  rules:
    - matches: [{path: {value: /old}}]
      filters:
        - {type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}}
`;

/** A GET of /old/a?b=1 with exactly these Host lines (none: HTTP/1.0 without Host). */
function get(port: number, hostLines: string, version = '1.1'): ReturnType<typeof rawHttp> {
  return rawHttp(port, `GET /old/a?b=1 HTTP/${version}\r\n${hostLines}Connection: close\r\n\r\n`);
}

describe('a redirect never copies a Host that is not host[:port] into Location', () => {
  const dir = tempDir('mesh-open-redirect-');
  let gw: GatewayProcess;

  before(async () => {
    const routes = join(dir.path, 'routes.yaml');
    writeFileSync(routes, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routes}`]);
  });
  after(async () => {
    await gw?.stop();
    dir.cleanup();
  });

  for (const host of ['evil.example/x?', 'a@evil.example', 'evil.example#x', 'evil.example:80/x', 'evil.example:8o', 'evil.example:99999', '[::1', '::1', 'evil example', 'evil.example\\x', '%65vil.example', '']) {
    it(`Host: ${JSON.stringify(host)} → 400 error JSON, no Location`, async () => {
      const res = await get(gw.port, `Host: ${host}\r\n`);
      assert.equal(res.status, 400, res.raw);
      assert.equal(res.headers.location, undefined);
      const body = JSON.parse(res.body) as { id: string; code: number; detail: string };
      assert.equal(body.id, 'go.mesh.api');
      assert.equal(body.code, 400);
      assert.match(body.detail, /^invalid Host ".*": a redirect needs the request's Host to be host\[:port\]/);
    });
  }

  it('a WebSocket upgrade with Host: a@evil.example at the redirect → 400 error JSON, the connection closed', async () => {
    const res = await rawHttp(gw.port, 'GET /old/a HTTP/1.1\r\nHost: a@evil.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
    assert.equal(res.status, 400, res.raw);
    assert.equal(res.headers.location, undefined);
    assert.match(JSON.parse(res.body).detail, /^invalid Host "a@evil\.example": /);
  });

  it('HTTP/1.0 without Host → 400 (no Location made up)', async () => {
    const res = await get(gw.port, '', '1.0');
    assert.equal(res.status, 400, res.raw);
    assert.equal(res.headers.location, undefined);
    assert.match(JSON.parse(res.body).detail, /^invalid Host missing: /);
  });

  for (const [host, location] of [
    ['shop.example', 'http://shop.example/new/a?b=1'],
    ['Shop.Example:8080', 'http://Shop.Example:8080/new/a?b=1'],
    ['127.0.0.1:80', 'http://127.0.0.1/new/a?b=1'],
    ['[::1]:9000', 'http://[::1]:9000/new/a?b=1'],
    ['shop.example.', 'http://shop.example./new/a?b=1'],
  ]) {
    it(`Host: ${host} → 302 to ${location}`, async () => {
      const res = await get(gw.port, `Host: ${host}\r\n`);
      assert.equal(res.status, 302, res.raw);
      assert.equal(res.headers.location, location);
    });
  }
});
