/**
 * One rate limit budget across instances (--rate_limit_store=redis://, src/engines/ratelimit/redis.ts),
 * with real processes on loopback and the Redis of MESH_TEST_REDIS_ADDRESS: three instances of four
 * workers each hold a 100/s limit within 10 % over 10 seconds (and the Redis round trips per 1,000
 * requests are printed); a flood on one key leaves another key's p99 within 3× (or +20 ms) of its
 * p99 alone, both measured in the same run. Each test limits by route on a path of its own
 * (`--rate_limit_key=route`), or by an address no other test floods from, so runs never share a bucket.
 */
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { waitFor } from '../helpers.js';
import { REDIS_ADDRESS, redisAnswers, skipUnless } from '../fixtures/redis.js';
import { allowedOf, bucketAlone, load, startFlood, startGateway, stat, timer, type Load } from '../fixtures/rate-limit-load.js';

// --rate_limit_store_timeout=500ms: a loaded machine (CI, shared sandboxes) can hold an answer past the default 100 ms.
describe('one budget across instances (Redis)', () => {
  let skip: string | false = 'not checked';
  before(async () => {
    skip = skipUnless(await redisAnswers(REDIS_ADDRESS), `Redis at ${REDIS_ADDRESS} (MESH_TEST_REDIS_ADDRESS)`);
  });

  it('three instances of four workers hold --rate_limit=100/s within 10 % over 10 seconds', async (t) => {
    if (skip) return t.skip(skip);
    const path = `/rl-${randomUUID()}`;
    const flags = [`--rate_limit_store=redis://${REDIS_ADDRESS}`, '--rate_limit=100/s', '--rate_limit_burst=20', '--rate_limit_key=route', '--log_level=warning', '--rate_limit_store_timeout=500ms'];
    const gws = await Promise.all([0, 1, 2].map(() => startGateway(flags, 4)));
    try {
      // About 400 requests a second offered, from 8 connections per instance.
      const l = await load(
        gws.map((g) => g.url),
        path,
        { loops: 8, connections: 8, gapMs: 20, until: timer(10_000) },
      );
      const allowed = allowedOf(l);
      // The yardstick: one bucket alone, for the requests as they were sent (a stall of the machine
      // longer than the bucket's 200 ms to fill loses tokens there too); and at most the steady rate.
      const expected = bucketAlone(l.sentAt, 100, 20);
      const steady = 20 + (100 * l.elapsedMs) / 1000;
      const total = Object.values(l.counts).reduce((a, b) => a + b, 0);
      const roundTrips = (await Promise.all(gws.map((g) => stat(g.admin, 'rate_limit.store.round_trips')))).reduce((a, b) => a + b, 0);
      console.log(`3 instances × 4 workers, 100/s (burst 20) for ${Math.round(l.elapsedMs)} ms: ${allowed} allowed of ${total} (${JSON.stringify(l.counts)}); bucket alone: ${expected} (${Math.round(steady)} at a steady load); ${Math.round((roundTrips * 1000) / total)} Redis round trips per 1,000 requests`);
      assert.ok(total > 2.5 * steady, `the load exceeded the limit: ${total}`);
      assert.ok(allowed <= steady * 1.1, `at most 10 % over the steady rate: ${allowed} vs ${Math.round(steady)}`);
      assert.ok(allowed <= expected * 1.1, `at most 10 % over: ${allowed} vs ${expected}`);
      assert.ok(allowed >= expected * 0.9, `at most 10 % under: ${allowed} vs ${expected}`);
      const per = await Promise.all(gws.map((g) => stat(g.admin, 'rate_limit.route.allowed')));
      assert.ok(per.every((n) => n > 0), `every instance let some through: ${per.join(', ')}`);
      assert.equal(per.reduce((a, b) => a + b, 0), allowed);
    } finally {
      await Promise.all(gws.map((g) => g.proc.stop('SIGKILL')));
    }
  });

  it('a flood on one key leaves another key its p99 (within 3×, or +20 ms, of its p99 alone)', async (t) => {
    if (skip) return t.skip(skip);
    // Keyed by address: the flood comes from 127.0.0.2, the measured client from 127.0.0.1 (under its own limit).
    const gw = await startGateway([`--rate_limit_store=redis://${REDIS_ADDRESS}`, '--rate_limit=400/s', '--log_level=warning', '--rate_limit_store_timeout=500ms']);
    try {
      const p99 = (l: Load) => [...l.latencies].sort((a, b) => a - b)[Math.floor(l.latencies.length * 0.99)]!;
      const sequential = () => load([gw.url], '/', { loops: 1, connections: 1, gapMs: 3, requests: 300 });
      // Alone before and after the flood, so that a machine busy with something else shows in both.
      const before = await sequential();
      const flood = startFlood(gw.url, '127.0.0.2');
      let during: Load;
      let counts: Record<string, number>;
      try {
        await waitFor(async () => (await stat(gw.admin, 'rate_limit.address.limited')) > 500, 30_000);
        during = await sequential();
      } finally {
        counts = await flood.stop();
      }
      const after = await sequential();
      const alone = Math.max(p99(before), p99(after));
      console.log(`p99 of 127.0.0.1 alone ${p99(before).toFixed(1)} and ${p99(after).toFixed(1)} ms, under a flood from 127.0.0.2 ${p99(during).toFixed(1)} ms (flood: ${JSON.stringify(counts)})`);
      for (const l of [before, during, after]) assert.deepEqual(Object.keys(l.counts), ['200'], 'the measured client is never limited');
      assert.ok((counts['429'] ?? 0) > 500, 'the flood was limited');
      assert.ok(p99(during) <= Math.max(3 * alone, alone + 20), `p99 ${p99(during).toFixed(1)} ms under the flood vs ${alone.toFixed(1)} ms alone`);
    } finally {
      await gw.proc.stop('SIGKILL');
    }
  });
});

