/**
 * A gateway whose shared rate limit store (`--rate_limit_store=redis://`) does not answer: a TCP
 * black hole on loopback that accepts connections and never answers. The requests the failure mode
 * decides are counted in `http.gateway.ratelimit.error`, never in `ratelimit.over_limit` (the 429s,
 * response flag RL; the store-down 503s are RLSE): closed refuses them with the catalogue's 503,
 * open lets them through (also counted in `ratelimit.ok`).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { http } from './helpers.js';
import { startEdgeGateway } from './fixtures/edge-gateway.js';

describe('rate limit stats with the shared store down', () => {
  let hole: Server;
  const held = new Set<Socket>();
  let address = '';
  before(async () => {
    hole = createServer((socket) => {
      held.add(socket);
      socket.on('close', () => held.delete(socket));
      socket.resume(); // read and never answer
    });
    hole.listen(0, '127.0.0.1');
    await once(hole, 'listening');
    address = `127.0.0.1:${(hole.address() as { port: number }).port}`;
  });
  after(async () => {
    for (const s of held) s.destroy();
    await new Promise<void>((r) => hole.close(() => r()));
  });

  const flags = (mode: string) => [`--rate_limit_store=redis://${address}`, `--rate_limit_failure_mode=${mode}`, '--rate_limit=100/s', '--rate_limit_store_timeout=20ms'];

  it('--rate_limit_failure_mode=closed: 503 error JSON, counted in ratelimit.error, not over_limit', async () => {
    const gw = await startEdgeGateway(flags('closed'));
    try {
      for (let i = 0; i < 3; i++) {
        const res = await http('GET', `${gw.url}/`);
        assert.equal(res.status, 503);
        assert.equal(res.text, '{"id":"go.mesh.api","code":503,"detail":"rate limit store unavailable (--rate_limit_failure_mode=closed): retry later","status":"Service Unavailable"}');
        assert.equal(res.headers['retry-after'], '1');
      }
      assert.equal(gw.counter('http.gateway.ratelimit.error'), 3);
      assert.equal(gw.counter('http.gateway.ratelimit.over_limit'), 0);
      assert.equal(gw.counter('http.gateway.ratelimit.ok'), 0);
      assert.equal(gw.counter('http.gateway.downstream_rq_5xx'), 3);
    } finally {
      await gw.close();
    }
  });

  it('--rate_limit_failure_mode=open: the requests go on, counted in ratelimit.error and ratelimit.ok', async () => {
    const gw = await startEdgeGateway(flags('open'));
    try {
      for (let i = 0; i < 3; i++) assert.notEqual((await http('GET', `${gw.url}/`)).status, 503);
      assert.equal(gw.counter('http.gateway.ratelimit.error'), 3);
      assert.equal(gw.counter('http.gateway.ratelimit.ok'), 3);
      assert.equal(gw.counter('http.gateway.ratelimit.over_limit'), 0);
    } finally {
      await gw.close();
    }
  });
});
