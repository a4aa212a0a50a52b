/**
 * A gateway whose registry does not answer a lookup (etcd cut off): a call to a service it has
 * never called waits for the registry no longer than its budget (--client_request_timeout) and
 * answers its 504 error JSON then, with the rpc (/rpc) and the proxy handler alike
 * (docs/upstream.md). A real in-process gateway on loopback whose registry's lookups hang.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Service } from '../../src/engines/registry/registry.js';
import { http, rawHttp, waitFor } from '../helpers.js';
import { startEdgeGateway, type EdgeGateway } from '../fixtures/edge-gateway.js';

/** Makes every registry lookup of the gateway wait forever; returns how many are waiting. */
function hangLookups(gw: EdgeGateway): () => number {
  let waiting = 0;
  gw.runtime.registry.getService = () => {
    waiting++;
    return new Promise<Service[]>(() => undefined);
  };
  return () => waiting;
}

/** The answer, or 'no answer' when the gateway held it past a generous bound (a hang). */
async function answerOf(request: Promise<{ status: number; text: string }>): Promise<{ status: number; text: string } | 'no answer'> {
  let answer: { status: number; text: string } | undefined;
  void request.then((a) => (answer = a));
  await waitFor(() => answer !== undefined, 10_000).catch(() => undefined);
  return answer ?? 'no answer';
}

describe('a gateway whose registry lookups hang', () => {
  const gateways: EdgeGateway[] = [];
  after(async () => {
    for (const gw of gateways) await gw.close();
  });

  it('POST /rpc to a service never called: 504 at the call\'s budget, while the lookup still waits', async () => {
    const gw = await startEdgeGateway(['--client_request_timeout=300ms', '--client_retries=0']);
    gateways.push(gw);
    const waiting = hangLookups(gw);
    const res = await answerOf(http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json' }, body: '{"service":"go.mesh.srv.hung","endpoint":"Say.Hello","request":{}}' }));
    assert.notEqual(res, 'no answer');
    assert.equal(waiting(), 1);
    assert.equal((res as { status: number }).status, 504);
    assert.equal((res as { text: string }).text, '{"id":"go.mesh.api","code":504,"detail":"call go.mesh.srv.hung.Say.Hello: timeout after 300ms","status":"Gateway Timeout"}');
  });

  it('--handler=proxy, a service never called: 504 at the try\'s timeout, while the lookup still waits', async () => {
    const gw = await startEdgeGateway(['--handler=proxy', '--client_request_timeout=300ms', '--client_retries=0']);
    gateways.push(gw);
    const waiting = hangLookups(gw);
    const res = await answerOf(http('GET', `${gw.url}/hung/x`));
    assert.notEqual(res, 'no answer');
    assert.equal(waiting(), 1);
    assert.equal((res as { status: number }).status, 504);
    assert.equal((res as { text: string }).text, '{"id":"go.mesh.api","code":504,"detail":"proxy to go.mesh.api.hung: timeout after 300ms","status":"Gateway Timeout"}');
  });

  it('--handler=proxy, an upgrade (WebSocket) to a service never called: 504 at --client_request_timeout, the connection closed', async () => {
    const gw = await startEdgeGateway(['--handler=proxy', '--client_request_timeout=300ms']);
    gateways.push(gw);
    const waiting = hangLookups(gw);
    // rawHttp gives up (throws) after 10 s: a gateway that waits for the lookup.
    const res = await rawHttp(gw.port, 'GET /hung/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
    assert.equal(waiting(), 1);
    assert.equal(res.status, 504);
    assert.equal(res.body, '{"id":"go.mesh.api","code":504,"detail":"proxy to go.mesh.api.hung: timeout after 300ms","status":"Gateway Timeout"}');
  });
});
