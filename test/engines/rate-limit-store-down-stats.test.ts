/**
 * A gateway whose shared rate limit store (`--rate_limit_store=redis://`) does not answer: a TCP
 * black hole on loopback that accepts connections and never answers. The requests the failure mode
 * decides are counted in `http.gateway.ratelimit.error`, never in `ratelimit.over_limit` (the 429s,
 * response flag RL; the store-down 503s are RLSE): closed refuses them with the catalogue's 503,
 * open lets them through (also counted in `ratelimit.ok`). The same for an auth rule's limit, whose
 * buckets are in the same store.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { http, tempDir } from '../helpers.js';
import { startEdgeGateway } from '../fixtures/edge-gateway.js';
import { parseArgs } from '../../src/cli/flags.js';
import { frontEdgeFromFlags, optionsFromFlags } from '../../src/cli/options.js';
import { checkAuthFlags, startAuth } from '../../src/cli/auth-flags.js';
import { Runtime } from '../../src/process/runtime.js';
import { Gateway } from '../../src/fronts/gateway/server.js';

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

  it('an auth rule\'s rate limit in the shared store, closed: 503, counted in ratelimit.error, not over_limit', async () => {
    const dir = tempDir('mesh-rl-rule-');
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, 'rules:\n  - path: /\n    access: public\n    rate_limit: 100/s\n');
    // As mesh api builds its gateway: --auth_rules with a rate limit, the buckets in the (dead) Redis store.
    const config = parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', `--auth_rules=${rules}`, `--rate_limit_store=redis://${address}`, '--rate_limit_failure_mode=closed', '--rate_limit_store_timeout=20ms'], {}).config;
    const runtime = new Runtime(optionsFromFlags(config), { role: 'test' });
    try {
      const gateway = new Gateway(runtime, { address: '127.0.0.1:0', ...frontEdgeFromFlags(config, runtime, { role: 'api', namespace: 'go.mesh.api' }), auth: await startAuth(runtime, checkAuthFlags(config)) });
      const bound = await gateway.start();
      for (let i = 0; i < 2; i++) {
        const res = await http('GET', `http://127.0.0.1:${bound.port}/x`);
        assert.equal(res.status, 503);
        assert.equal(res.text, '{"id":"go.mesh.api","code":503,"detail":"rate limit store unavailable (--rate_limit_failure_mode=closed): retry later","status":"Service Unavailable"}');
      }
      const counter = (name: string) => runtime.stats.counter(name).value;
      assert.equal(counter('http.gateway.ratelimit.error'), 2);
      assert.equal(counter('http.gateway.ratelimit.over_limit'), 0);
    } finally {
      await runtime.shutdown();
      dir.cleanup();
    }
  });
});
