import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  LeastRequestBalancer,
  RandomBalancer,
  RoundRobinBalancer,
  candidates,
  type Balanceable,
} from '../../src/core/upstream/load-balancer.js';
import { hostKey, parseWeight, specFromNode } from '../../src/core/upstream/host.js';
import { tryParseAddress } from '../../src/base/util/address.js';
import { resolveSettings } from '../../src/core/upstream/config.js';

class H implements Balanceable {
  stats = { rq_active: 0 };
  ok = true;
  constructor(
    readonly key: string,
    readonly weight = 1,
  ) {}
  healthy(): boolean {
    return this.ok;
  }
}

function count(keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of keys) out[k] = (out[k] ?? 0) + 1;
  return out;
}

/** A deterministic pseudo-random source (mulberry32). */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

test('round robin: equal weights rotate', () => {
  const hosts = [new H('a'), new H('b'), new H('c')];
  const lb = new RoundRobinBalancer<H>();
  const picks = Array.from({ length: 9 }, () => lb.pick(hosts)!.key);
  assert.deepEqual(count(picks), { a: 3, b: 3, c: 3 });
  assert.notEqual(picks[0], picks[1]);
});

test('round robin: smooth weighted, exact over every window of sum(weights)', () => {
  const hosts = [new H('a', 5), new H('b', 1), new H('c', 1)];
  const lb = new RoundRobinBalancer<H>();
  const first = Array.from({ length: 7 }, () => lb.pick(hosts)!.key);
  assert.deepEqual(count(first), { a: 5, b: 1, c: 1 });
  // smooth: never more than the weight's share in a row (nginx sequence a a b a c a a)
  assert.deepEqual(first, ['a', 'a', 'b', 'a', 'c', 'a', 'a']);
  const hundred = Array.from({ length: 70 }, () => lb.pick(hosts)!.key);
  assert.deepEqual(count(hundred), { a: 50, b: 10, c: 10 });
});

test('random: weighted distribution', () => {
  const hosts = [new H('a', 3), new H('b', 1)];
  const lb = new RandomBalancer<H>(seeded(7));
  const c = count(Array.from({ length: 4000 }, () => lb.pick(hosts)!.key));
  assert.ok(c.a! > 2700 && c.a! < 3300, JSON.stringify(c));
});

test('least request: picks the less loaded of two', () => {
  const a = new H('a');
  const b = new H('b');
  a.stats.rq_active = 5;
  const lb = new LeastRequestBalancer<H>(seeded(1));
  for (let i = 0; i < 50; i++) assert.equal(lb.pick([a, b])!.key, 'b');
  b.stats.rq_active = 9;
  for (let i = 0; i < 50; i++) assert.equal(lb.pick([a, b])!.key, 'a');
  // with more hosts the least loaded wins more often than its share
  const hosts = [new H('x'), new H('y'), new H('z'), new H('w')];
  hosts[0]!.stats.rq_active = 10;
  hosts[1]!.stats.rq_active = 10;
  hosts[2]!.stats.rq_active = 10;
  const c = count(Array.from({ length: 1000 }, () => lb.pick(hosts)!.key));
  assert.ok(c.w! > 400, JSON.stringify(c));
});

test('least request: weights bias the draw', () => {
  const lb = new LeastRequestBalancer<H>(seeded(3));
  const hosts = [new H('a', 1), new H('b', 1), new H('c', 8)];
  const c = count(Array.from({ length: 2000 }, () => lb.pick(hosts)!.key));
  assert.ok(c.c! > c.a! * 2, JSON.stringify(c));
});

test('candidates: healthy only, panic under 50%, exclude', () => {
  const a = new H('a');
  const b = new H('b');
  const c = new H('c');
  const d = new H('d');
  b.ok = false;
  let set = candidates([a, b, c, d], 50);
  assert.deepEqual(set.hosts.map((h) => h.key), ['a', 'c', 'd']);
  assert.equal(set.panic, false);
  c.ok = false; // 2 of 4 healthy: 50% is not under 50%
  set = candidates([a, b, c, d], 50);
  assert.deepEqual(set.hosts.map((h) => h.key), ['a', 'd']);
  a.ok = false; // 25%: panic, all hosts
  set = candidates([a, b, c, d], 50);
  assert.equal(set.panic, true);
  assert.equal(set.hosts.length, 4);
  // panic disabled: only the healthy
  set = candidates([a, b, c, d], 0);
  assert.deepEqual(set.hosts.map((h) => h.key), ['d']);
  d.ok = false;
  assert.equal(candidates([a, b, c, d], 0).hosts.length, 0);
  // exclude avoided when another host exists
  a.ok = b.ok = c.ok = d.ok = true;
  set = candidates([a, b], 50, new Set(['a']));
  assert.deepEqual(set.hosts.map((h) => h.key), ['b']);
  set = candidates([a, b], 50, new Set(['a', 'b']));
  assert.equal(set.hosts.length, 2);
  set = candidates([a], 50, new Set(['a']));
  assert.deepEqual(set.hosts.map((h) => h.key), ['a']);
});

test('host keys, host:port parsing and weights', () => {
  assert.equal(hostKey('10.0.0.1', 80), '10.0.0.1:80');
  assert.equal(hostKey('::1', 80), '[::1]:80');
  assert.deepEqual(tryParseAddress('127.0.0.1:8080', { target: true }), { host: '127.0.0.1', port: 8080 });
  assert.deepEqual(tryParseAddress('[::1]:80', { target: true }), { host: '::1', port: 80 });
  assert.deepEqual(tryParseAddress('example.com:443', { target: true }), { host: 'example.com', port: 443 });
  assert.equal(tryParseAddress('127.0.0.1', { target: true }), undefined);
  assert.equal(tryParseAddress('127.0.0.1:0', { target: true }), undefined);
  assert.equal(tryParseAddress('127.0.0.1:70000', { target: true }), undefined);
  const warnings: string[] = [];
  const warn = (m: string) => warnings.push(m);
  assert.equal(parseWeight(undefined, warn), 1);
  assert.equal(parseWeight('7', warn), 7);
  assert.equal(warnings.length, 0);
  assert.equal(parseWeight('0', warn), 1);
  assert.equal(parseWeight('500', warn), 100);
  assert.equal(parseWeight('abc', warn), 1);
  assert.equal(warnings.length, 3);
  const spec = specFromNode({
    id: 'n1',
    address: '10.0.0.2',
    port: 9000,
    metadata: { weight: '20', zone: 'z1', region: 'r1', canary: 'true' },
  });
  assert.deepEqual(
    { w: spec.weight, z: spec.zone, r: spec.region, c: spec.canary, h: spec.hostname },
    { w: 20, z: 'z1', r: 'r1', c: true, h: 'n1' },
  );
});

test('settings: defaults and validation', () => {
  const reg = resolveSettings(undefined, undefined, 'round_robin', true);
  assert.deepEqual(reg.circuitBreakers.default, { maxConnections: 1024, maxPendingRequests: 1024, maxRequests: 1024, maxRetries: 1024 });
  assert.deepEqual(reg.circuitBreakers.high, reg.circuitBreakers.default);
  assert.equal(reg.outlierDetection?.consecutive5xx, 5);
  assert.equal(reg.outlierDetection?.intervalMs, 10_000);
  assert.equal(reg.healthCheckConfigured, false);
  assert.equal(reg.panicThresholdPercent, 50);
  const stat = resolveSettings({ circuitBreakers: { high: { maxRetries: 9 } } }, { outlierDetection: { intervalMs: 100 } }, 'random', false);
  assert.equal(stat.outlierDetection, undefined, 'static clusters: outlier detection only when asked');
  assert.equal(stat.circuitBreakers.high.maxRetries, 9);
  assert.equal(stat.lbPolicy, 'random');
  const off = resolveSettings(undefined, { outlierDetection: false, healthCheck: { path: '/health' } }, 'round_robin', true);
  assert.equal(off.outlierDetection, undefined);
  assert.equal(off.healthCheckConfigured, true);
  assert.throws(() => resolveSettings({ lbPolicy: 'nope' as never }, undefined, 'round_robin', true), /lb_policy/);
  assert.throws(() => resolveSettings({ outlierDetection: { intervalMs: -1 } }, undefined, 'round_robin', true), /intervalMs/);
});
