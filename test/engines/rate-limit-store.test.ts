/**
 * The shared rate limit store (src/base/http/rate-limit-store.ts) on a backend of the test's own (a
 * RateLimiter behind a promise, which the test can make fail or hang): the local allowance (one
 * grant serves `allowance` takes at once), the grants of one key asked once at a time, an empty
 * bucket not asked again before its tokens are due, both failure modes, a hung store answered by
 * the timeout, an outage (three failures in a row) logged once and its end once, the stats per key
 * kind; and RateLimiter.grant itself.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RateLimiter, ratePolicy, type BucketGrant, type RateDecision, type RatePolicy } from '../../src/base/http/rate-limit.js';
import { allowanceOf, SharedRateLimitStore, type BucketBackend, type RateLimitFailureMode } from '../../src/base/http/rate-limit-store.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { waitFor } from '../helpers.js';

class TestBackend implements BucketBackend {
  readonly kind = 'test';
  readonly address = 'test';
  readonly buckets = new RateLimiter({ policy: ratePolicy('1/s')! });
  calls = 0;
  mode: 'ok' | 'fail' | 'hang' | 'held' = 'ok';
  /** mode 'held': the grants wait here until the test answers them. */
  readonly held: Array<(grant: BucketGrant) => void> = [];
  async grant(key: string, policy: RatePolicy, want: number): Promise<BucketGrant> {
    this.calls++;
    if (this.mode === 'fail') throw new Error('connection refused');
    if (this.mode === 'hang') return new Promise<never>(() => undefined);
    if (this.mode === 'held') return new Promise<BucketGrant>((resolve) => this.held.push(resolve));
    return this.buckets.grant(key, policy, want);
  }
  close(): void {}
}

function logger() {
  const lines: Array<{ level: string; obj: Record<string, unknown>; msg: string }> = [];
  const at = (level: string) => (obj: Record<string, unknown>, msg: string) => lines.push({ level, obj, msg });
  return { lines, log: { error: at('error'), info: at('info'), warn: at('warn') } as never };
}

function store(failureMode: RateLimitFailureMode, timeoutMs = 50, now?: () => number) {
  const backend = new TestBackend();
  const stats = new StatsStore();
  const { lines, log } = logger();
  const s = new SharedRateLimitStore({ backend, failureMode, stats, log, maxKeys: 100, timeoutMs, ...(now ? { now } : {}) });
  return { backend, stats, lines, store: s };
}

const settle = async (d: RateDecision | Promise<RateDecision>) => d;

describe('RateLimiter.grant', () => {
  it('hands out up to `want` whole tokens; nothing left: the time until `want` are there', () => {
    let t = 0;
    const limiter = new RateLimiter({ policy: ratePolicy('10/s', 25)!, now: () => t });
    const policy = limiter.policy;
    assert.deepEqual(limiter.grant('k', policy, 10), { granted: 10, tokens: 15, retryMs: 0 });
    assert.deepEqual(limiter.grant('k', policy, 10), { granted: 10, tokens: 5, retryMs: 0 });
    assert.deepEqual(limiter.grant('k', policy, 10), { granted: 5, tokens: 0, retryMs: 0 });
    assert.deepEqual(limiter.grant('k', policy, 10), { granted: 0, tokens: 0, retryMs: 1000 });
    t += 300;
    assert.deepEqual(limiter.grant('k', policy, 10), { granted: 3, tokens: 0, retryMs: 0 });
  });

  it('the allowance: a tenth of the burst, from 1 to 100', () => {
    assert.equal(allowanceOf(ratePolicy('100/s')!), 10);
    assert.equal(allowanceOf(ratePolicy('100/s', 5)!), 1);
    assert.equal(allowanceOf(ratePolicy('100000/s')!), 100);
  });
});

describe('the shared store', () => {
  it('one grant serves `allowance` takes; the takes of a key wait for the grant in flight; an empty bucket is not asked again at once', async () => {
    const { backend, stats, store: s } = store('open');
    const policy = ratePolicy('1/h', 30)!; // allowance 3
    // Five takes at once: one call, then a second when the first three tokens are spent.
    const first = await Promise.all(Array.from({ length: 5 }, () => settle(s.take('a', policy, 'address'))));
    assert.deepEqual(first.map((d) => d.allowed), [true, true, true, true, true]);
    assert.equal(backend.calls, 2);
    // The sixth is served from the allowance left, without a call.
    const sixth = s.take('a', policy, 'address');
    assert.ok(!(sixth instanceof Promise));
    assert.equal(sixth.allowed, true);
    assert.equal(backend.calls, 2);
    // Another key has buckets of its own.
    assert.equal((await settle(s.take('b', policy, 'address'))).allowed, true);
    assert.equal(backend.calls, 3);
    // Spend the rest of a's bucket: 30 in all.
    let allowed = 6;
    for (let i = 0; i < 40; i++) if ((await settle(s.take('a', policy, 'address'))).allowed) allowed++;
    assert.equal(allowed, 30);
    const calls = backend.calls;
    // Empty, and its next tokens are due in an hour: refused locally, no call, Retry-After from the store's answer.
    const refused = s.take('a', policy, 'address');
    assert.ok(!(refused instanceof Promise));
    assert.equal(refused.allowed, false);
    assert.equal(refused.retryAfterSec, 3 * 3600);
    assert.equal(backend.calls, calls);
    assert.equal(stats.counter('rate_limit.address.allowed').value, 31);
    assert.equal(stats.counter('rate_limit.address.limited').value, 17);
    assert.equal(stats.counter('rate_limit.store.round_trips').value, calls);
    assert.equal(stats.histogram('rate_limit.address.store_latency').count, calls);
  });

  for (const mode of ['open', 'closed'] as const) {
    it(`failure mode ${mode}: a store that fails decides by the mode, an outage is logged once, its end once; stats count it`, async () => {
      const { backend, stats, lines, store: s } = store(mode);
      const policy = ratePolicy('1/h', 1)!; // allowance 1: every take asks
      backend.mode = 'fail';
      const during: RateDecision[] = [];
      for (let i = 0; i < 10; i++) during.push(await settle(s.take(`k${i}`, policy, 'route')));
      assert.ok(during.every((d) => d.storeDown === true && d.allowed === (mode === 'open')));
      // Three failures make the outage: later takes go straight to the failure mode.
      assert.equal(backend.calls, 3);
      assert.equal(s.status().state, 'down');
      assert.equal(stats.counter('rate_limit.route.store_errors').value, 10);
      assert.equal(stats.counter('rate_limit.store.outages').value, 1);
      assert.deepEqual(
        lines.map((l) => [l.level, l.msg, l.obj.failure_mode]),
        [['error', mode === 'open' ? 'rate limit store unreachable: requests are allowed until it is back' : 'rate limit store unreachable: requests are refused until it is back', mode]],
      );
      // Back: the first probe (after the backoff) ends the outage.
      backend.mode = 'ok';
      await waitForProbe(s, policy);
      assert.equal(s.status().state, 'up');
      assert.deepEqual(lines.map((l) => l.msg), [lines[0]!.msg, 'rate limit store reachable again']);
      assert.equal((await settle(s.take('fresh', policy, 'route'))).allowed, true);
      assert.equal((await settle(s.take('fresh', policy, 'route'))).allowed, false);
    });
  }

  it('a store that does not answer: the take is decided by the failure mode after the timeout, never hangs', async () => {
    const { backend, stats, store: s } = store('closed', 20);
    backend.mode = 'hang';
    const d = await settle(s.take('k', ratePolicy('1/h', 1)!, 'subject'));
    assert.equal(d.allowed, false);
    assert.equal(d.storeDown, true);
    assert.equal(stats.counter('rate_limit.subject.store_errors').value, 1);
    // One late answer is not an outage.
    assert.equal(s.status().state, 'up');
  });
});

describe('the shared store: bounded calls and waits', () => {
  it('down, once the backoff has passed: one probe goes out, the takes meanwhile keep to the failure mode', async () => {
    let clock = 0;
    const { backend, store: s } = store('open', 50, () => clock);
    const policy = ratePolicy('1/h', 1)!; // allowance 1: every take asks
    backend.mode = 'fail';
    for (let i = 0; i < 3; i++) await settle(s.take(`k${i}`, policy, 'route'));
    assert.equal(s.status().state, 'down');
    assert.equal(backend.calls, 3);
    clock += 10_000; // past any backoff
    backend.mode = 'hang';
    const takes = Array.from({ length: 50 }, (_, i) => s.take(`p${i}`, policy, 'route'));
    assert.equal(backend.calls, 4);
    // All but the probe are decided at once.
    assert.equal(takes.filter((d) => d instanceof Promise).length, 1);
    assert.ok(takes.every((d) => d instanceof Promise || d.storeDown === true));
    await Promise.all(takes.map(settle));
  });

  it('a take waits for the store until its deadline in all: past it, waiting on the grants of others, it is decided by the failure mode without asking again', async () => {
    let clock = 0;
    const { backend, store: s } = store('closed', 5000, () => clock);
    const policy = ratePolicy('1/h', 5)!; // allowance 1
    backend.mode = 'held';
    const [a, b, c] = [s.take('k', policy, 'route'), s.take('k', policy, 'route'), s.take('k', policy, 'route')];
    assert.equal(backend.calls, 1);
    backend.held.shift()!({ granted: 1, tokens: 4, retryMs: 0 });
    assert.equal((await settle(a)).allowed, true);
    // b asks next; c waits for it.
    await waitFor(() => backend.held.length === 1);
    clock = 6000; // past the deadline of b and c
    backend.held.shift()!({ granted: 1, tokens: 3, retryMs: 0 });
    assert.equal((await settle(b)).allowed, true);
    const late = await settle(c);
    assert.equal(late.allowed, false);
    assert.equal(late.storeDown, true);
    assert.equal(backend.calls, 2);
  });
});

/** Takes until one reaches the store again (the first after the backoff of 100 ms ends the outage). */
async function waitForProbe(s: SharedRateLimitStore, policy: RatePolicy): Promise<void> {
  let i = 0;
  await waitFor(async () => {
    await settle(s.take(`probe${i++}`, policy, 'route'));
    return s.status().state === 'up';
  }, 5000);
}
