/**
 * The Redis rate limit store down and back under load (--rate_limit_failure_mode), with a
 * redis-server of the test's own killed and restarted on the same port: open lets requests
 * through, closed answers the 503 of the error catalogue; one log line per outage (and one when it
 * ends); the limit applies again once Redis is back, without restarting the gateway.
 */
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { http, waitFor } from '../helpers.js';
import { OwnRedis, REDIS_SERVER, skipUnless } from '../fixtures/redis.js';
import { load, startGateway, stat } from '../fixtures/rate-limit-load.js';

/** A loaded machine (CI, shared sandboxes) can hold an answer past the default 100 ms; that is not what these tests are about. */
const SLOW_MACHINE = ['--rate_limit_store_timeout=500ms'];

describe('the Redis store down and back, under load', () => {
  let skip: string | false = 'not checked';
  before(() => {
    skip = skipUnless(REDIS_SERVER !== undefined, 'redis-server (MESH_TEST_REDIS_SERVER, or on PATH)');
  });

  for (const mode of ['open', 'closed'] as const) {
    it(`--rate_limit_failure_mode=${mode}: ${mode === 'open' ? 'requests go through' : 'requests get the 503 of the error catalogue'} while Redis is down, logged once; the limit applies again once it is back`, async (t) => {
      if (skip) return t.skip(skip);
      const redis = await OwnRedis.onLoopback(REDIS_SERVER!);
      await redis.start();
      const path = `/rl-${randomUUID()}`;
      const gw = await startGateway([`--rate_limit_store=redis://${redis.address}`, `--rate_limit_failure_mode=${mode}`, '--rate_limit=20/s', '--rate_limit_burst=20', '--rate_limit_key=route', '--log_level=info', ...SLOW_MACHINE]);
      let stopLoad!: () => void;
      const loading = load([gw.url], path, { loops: 4, connections: 4, gapMs: 5, until: new Promise<void>((r) => (stopLoad = r)) });
      try {
        // Limited while Redis is up.
        await waitFor(async () => (await stat(gw.admin, 'rate_limit.route.limited')) > 50, 30_000);
        await redis.kill();
        await waitFor(async () => (await stat(gw.admin, 'rate_limit.route.store_errors')) > 200, 30_000);
        const down = (await http('GET', `${gw.admin}/rate_limits`)).json() as Record<string, unknown>;
        assert.equal(down.state, 'down');
        assert.equal(down.failure_mode, mode);
        const during = await http('GET', `${gw.url}${path}`);
        if (mode === 'open') {
          assert.notEqual(during.status, 429);
          assert.notEqual(during.status, 503);
        } else {
          assert.equal(during.status, 503);
          assert.equal(during.text, '{"id":"go.mesh.api","code":503,"detail":"rate limit store unavailable (--rate_limit_failure_mode=closed): retry later","status":"Service Unavailable"}');
          assert.equal(during.headers['retry-after'], '1');
        }
        // Back on the same port: the gateway reconnects by itself.
        const limitedBefore = await stat(gw.admin, 'rate_limit.route.limited');
        await redis.start();
        await waitFor(async () => ((await http('GET', `${gw.admin}/rate_limits`)).json() as Record<string, unknown>).state === 'up', 30_000);
        await waitFor(async () => (await stat(gw.admin, 'rate_limit.route.limited')) > limitedBefore + 50, 30_000);
      } finally {
        stopLoad();
        await loading;
      }
      try {
        const out = gw.proc.output();
        const unreachable = out.split('\n').filter((l) => l.includes('rate limit store unreachable'));
        assert.equal(unreachable.length, 1, `logged once per outage:\n${unreachable.join('\n')}`);
        assert.match(unreachable[0]!, new RegExp(`"failure_mode":"${mode}"`));
        assert.equal(out.split('\n').filter((l) => l.includes('rate limit store reachable again')).length, 1);
        assert.equal(await stat(gw.admin, 'rate_limit.store.outages'), 1);
        // Limited again after the restart: a quick burst of 40 gets at most the burst (20) and some refill.
        const statuses: number[] = [];
        for (let i = 0; i < 40; i++) statuses.push((await http('GET', `${gw.url}${path}`)).status);
        assert.ok(statuses.filter((s) => s === 429).length >= 10, statuses.join(','));
      } finally {
        await gw.proc.stop('SIGKILL');
        await redis.kill();
      }
    });
  }
});
