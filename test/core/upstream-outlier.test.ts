import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { DEFAULT_OUTLIER_DETECTION } from '../../src/core/upstream/config.js';
import { Host } from '../../src/core/upstream/host.js';
import { OutlierDetector } from '../../src/core/upstream/outlier.js';
import type { UpstreamLease } from '../../src/core/upstream/types.js';
import { waitFor } from '../helpers.js';
import { node, upstreamFixture } from '../fixtures/upstream.js';

const up = upstreamFixture();
after(() => up.close());
const backend = () => up.backend();

const ERR = { kind: 'response', status: 500 } as const;
const OK = { kind: 'response', status: 200 } as const;

async function send(lease: UpstreamLease): Promise<number> {
  const t0 = Date.now();
  try {
    const res = await lease.target.dispatcher.request({ path: '/', method: 'POST', body: '{}' });
    await res.body.text();
    lease.release({ kind: 'response', status: res.statusCode }, Date.now() - t0);
    return res.statusCode;
  } catch {
    lease.release({ kind: 'reset' }, Date.now() - t0);
    return 0;
  }
}

test('consecutive 5xx: the bad host is ejected, traffic moves to the healthy host, it returns after the ejection time', async () => {
  const good = await backend();
  const bad = await backend();
  bad.status = 503;
  const registry = new MemoryRegistry();
  await registry.register({ name: 'od', version: '', metadata: {}, endpoints: [], nodes: [node('good', good.port), node('bad', bad.port)] });
  const { cm, stats } = up.manager({
    registry,
    lbPolicy: 'round_robin',
    defaults: { outlierDetection: { consecutive5xx: 3, intervalMs: 100, baseEjectionTimeMs: 3_000 } },
  });
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++) statuses.push(await send(await cm.acquire('od')));
  assert.equal(statuses.filter((s) => s === 503).length, 3);
  let snap = cm.clusters()[0]!;
  const badHost = () => cm.clusters()[0]!.hosts.find((h) => h.port === bad.port)!;
  assert.equal(badHost().failedOutlierCheck, true);
  assert.equal(stats.gauge('cluster.od.outlier_detection.ejections_active').value, 1);
  assert.equal(stats.counter('cluster.od.outlier_detection.ejections_total').value, 1);
  assert.equal(stats.counter('cluster.od.outlier_detection.ejections_enforced_consecutive_5xx').value, 1);
  assert.equal(stats.gauge('cluster.od.membership_healthy').value, 1);
  assert.equal(snap.hosts.find((h) => h.port === good.port)!.failedOutlierCheck, false);

  const badHitsAtEjection = bad.hits;
  const ejectedAt = cm.cluster('od')!.host(bad.key)!.ejectedAt;
  for (let i = 0; i < 10; i++) assert.equal(await send(await cm.acquire('od')), 200);
  assert.equal(bad.hits, badHitsAtEjection, 'no traffic to the ejected host');

  bad.status = 200;
  await waitFor(() => !badHost().failedOutlierCheck, 12_000, 10);
  // Not before the base ejection time (a lower bound only: timers never fire early).
  assert.ok(Date.now() - ejectedAt >= 2_900, `returned after ${Date.now() - ejectedAt} ms`);
  assert.equal(stats.gauge('cluster.od.outlier_detection.ejections_active').value, 0);
  for (let i = 0; i < 10; i++) await send(await cm.acquire('od'));
  assert.ok(bad.hits >= badHitsAtEjection + 4, 'traffic returns');
  snap = cm.clusters()[0]!;
  assert.equal(snap.hosts.every((h) => !h.failedOutlierCheck), true);
  await registry.close();
});

test('under concurrent load a backend turning 503 is ejected and, with one retry elsewhere, no call fails', async () => {
  const hosts = [await backend(), await backend(), await backend()];
  const registry = new MemoryRegistry();
  await registry.register({ name: 'load', version: '', metadata: {}, endpoints: [], nodes: hosts.map((b, i) => node(`n${i}`, b.port)) });
  const { cm } = up.manager({
    registry,
    lbPolicy: 'least_request',
    // 8 workers may all retry at once: neither max_retries nor the retry budget (at least 3 at
    // once) may refuse a retry here: the test is about ejection.
    defaults: {
      outlierDetection: { consecutive5xx: 5, intervalMs: 200, baseEjectionTimeMs: 30_000 },
      circuitBreakers: { default: { maxRetries: 8, retryBudget: { percent: 0 } } },
    },
  });
  let failed = 0;
  let calls = 0;
  let stop = false;
  const worker = async () => {
    while (!stop) {
      calls++;
      const first = await cm.acquire('load');
      let status = await send(first);
      if (status >= 500 || status === 0) {
        const retry = await cm.acquire('load', { retry: true, exclude: new Set([first.target.key]) });
        status = await send(retry);
      }
      if (status !== 200) failed++;
    }
  };
  const running = Array.from({ length: 8 }, () => worker());
  await waitFor(() => hosts.every((h) => h.hits > 0), 8000, 5); // the load reaches every host
  hosts[0]!.status = 503;
  await waitFor(() => cm.clusters()[0]!.hosts.find((h) => h.port === hosts[0]!.port)!.failedOutlierCheck, 8000, 5);
  const hitsAtEjection = hosts[0]!.hits;
  const callsAtEjection = calls;
  await waitFor(() => calls >= callsAtEjection + 100, 10_000, 10);
  stop = true;
  await Promise.all(running);
  assert.equal(failed, 0);
  // in-flight requests at ejection time may still land; nothing new afterwards
  assert.ok(hosts[0]!.hits - hitsAtEjection <= 8, `hits after ejection: ${hosts[0]!.hits - hitsAtEjection}`);
  await registry.close();
});

test('success rate: -1 with too little data, at cluster and host level', async () => {
  const a = await backend();
  const b = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'sr', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  const { cm } = up.manager({
    registry,
    lbPolicy: 'round_robin',
    defaults: { outlierDetection: { intervalMs: 100, successRateRequestVolume: 5 } },
  });
  // a gets enough volume for a success rate, b does not; 2 hosts are under the minimum of 5
  const burst = async () => {
    for (let i = 0; i < 10; i++) await send(await cm.acquire('sr', { address: a.key }));
    await send(await cm.acquire('sr', { address: b.key }));
  };
  await burst();
  const rate = (port: number) => cm.clusters()[0]!.hosts.find((h) => h.port === port)!.successRate;
  await waitFor(async () => {
    if (rate(a.port) === 100) return true;
    await burst(); // the interval may have ended mid-burst on a slow machine
    return false;
  }, 8000, 50);
  assert.equal(rate(b.port), -1);
  assert.deepEqual(cm.clusters()[0]!.outlier, { successRateAverage: -1, successRateEjectionThreshold: -1 });
  await registry.close();
});

function fakeHosts(n: number): Host[] {
  const out: Host[] = [];
  for (let i = 0; i < n; i++) {
    const h = new Host(
      { address: '127.0.0.1', port: 40000 + i, nodeId: `n${i}`, hostname: `n${i}`, metadata: {}, weight: 1, zone: '', region: '', canary: false },
      { connections: 1, connectTimeoutMs: 1000, keepAliveTimeoutMs: 1000 },
    );
    up.onClose(() => h.close());
    out.push(h);
  }
  return out;
}

test('success rate: hosts under mean - 1.9 stdev are ejected once enough hosts have volume', () => {
  const hosts = fakeHosts(5);
  const stats = new StatsStore();
  let now = 1_000;
  const od = new OutlierDetector({
    config: { ...DEFAULT_OUTLIER_DETECTION, successRateRequestVolume: 10, consecutive5xx: 0 },
    stats: stats.scope('cluster.x.'),
    cluster: 'x',
    hosts: () => hosts,
    onChange: () => {},
    now: () => now,
  });
  // 4 hosts too few: rates are set, cluster values stay -1
  const feed = (list: Host[], failing: Host | undefined) => {
    for (const h of list) for (let i = 0; i < 20; i++) od.record(h, h === failing && i % 2 === 0 ? ERR : OK);
  };
  feed(hosts.slice(0, 4), hosts[3]);
  od.tick();
  assert.equal(od.successRateAverage, -1);
  assert.equal(od.successRateEjectionThreshold, -1);
  assert.deepEqual(hosts.map((h) => h.successRate), [100, 100, 100, 50, -1]);
  // 5 hosts: mean 90, stdev 20, threshold 90 - 1.9 * 20 = 52; the 50% host goes
  feed(hosts, hosts[4]);
  od.tick();
  assert.equal(od.successRateAverage, 90);
  assert.ok(Math.abs(od.successRateEjectionThreshold - 52) < 1e-9);
  assert.equal(hosts[4]!.failedOutlierCheck, true);
  assert.equal(stats.counter('cluster.x.outlier_detection.ejections_enforced_success_rate').value, 1);
  assert.equal(stats.gauge('cluster.x.outlier_detection.ejections_active').value, 1);
  // back after base ejection time (30s default), checked at a tick
  now += 29_000;
  od.tick();
  assert.equal(hosts[4]!.failedOutlierCheck, true);
  now += 1_000;
  od.tick();
  assert.equal(hosts[4]!.failedOutlierCheck, false);
  assert.equal(od.ejectionsActive(), 0);
});

test('max ejection percent allows at least one host; ejection time grows with each ejection', () => {
  const hosts = fakeHosts(2);
  const stats = new StatsStore();
  let now = 0;
  const od = new OutlierDetector({
    config: { ...DEFAULT_OUTLIER_DETECTION, consecutive5xx: 2, baseEjectionTimeMs: 1_000 },
    stats: stats.scope('cluster.y.'),
    cluster: 'y',
    hosts: () => hosts,
    onChange: () => {},
    now: () => now,
  });
  assert.equal(od.maxEjections(2), 1);
  assert.equal(od.maxEjections(25), 2);
  for (let i = 0; i < 2; i++) for (const h of hosts) od.record(h, ERR);
  assert.deepEqual(hosts.map((h) => h.failedOutlierCheck), [true, false]);
  assert.equal(stats.counter('cluster.y.outlier_detection.ejections_overflow').value, 1);
  // a success in between resets the consecutive count
  od.record(hosts[1]!, ERR);
  od.record(hosts[1]!, OK);
  od.record(hosts[1]!, ERR);
  assert.equal(hosts[1]!.consecutive5xx, 1);
  now = 1_000;
  od.tick();
  assert.equal(hosts[0]!.failedOutlierCheck, false);
  // second ejection of the same host: 2 × base
  od.record(hosts[0]!, ERR);
  od.record(hosts[0]!, ERR);
  assert.equal(hosts[0]!.failedOutlierCheck, true);
  assert.equal(hosts[0]!.ejectionEndAt - now, 2_000);
  now += 1_999;
  od.tick();
  assert.equal(hosts[0]!.failedOutlierCheck, true);
  now += 1;
  od.tick();
  assert.equal(hosts[0]!.failedOutlierCheck, false);
  assert.equal(stats.counter('cluster.y.outlier_detection.ejections_total').value, 2);
});

test('consecutive gateway failure and local-origin failure: which results count, and under which name a host is ejected', () => {
  const hosts = fakeHosts(3);
  const stats = new StatsStore();
  const make = (prefix: string, config: Partial<typeof DEFAULT_OUTLIER_DETECTION>) =>
    new OutlierDetector({
      config: { ...DEFAULT_OUTLIER_DETECTION, maxEjectionPercent: 100, ...config },
      stats: stats.scope(`cluster.${prefix}.`),
      cluster: prefix,
      hosts: () => hosts,
      onChange: () => {},
    });
  const count = (prefix: string, name: string) => stats.counter(`cluster.${prefix}.outlier_detection.${name}`).value;
  const TIMEOUT = { kind: 'timeout', perTry: true } as const;

  // Default (no split): 502/503/504 answers and local-origin errors are gateway failures; the
  // gateway detector is checked first, so the ejection is reported under its name.
  const a = make('a', {});
  const [h0, h1, h2] = hosts as [Host, Host, Host];
  for (const r of [{ kind: 'connect_failure' }, { kind: 'response', status: 502 }, TIMEOUT, { kind: 'reset' }] as const) a.record(h0, r);
  assert.equal(h0.failedOutlierCheck, false);
  a.record(h0, { kind: 'response', status: 504 });
  assert.equal(h0.failedOutlierCheck, true);
  assert.equal(count('a', 'ejections_detected_consecutive_gateway_failure'), 1);
  assert.equal(count('a', 'ejections_enforced_consecutive_gateway_failure'), 1);
  assert.equal(count('a', 'ejections_enforced_consecutive_5xx'), 0);
  // 500 is a 5xx but not a gateway failure: it breaks a run of gateway failures, and 5 of them
  // eject under consecutive_5xx.
  for (let i = 0; i < 4; i++) a.record(h1, TIMEOUT);
  a.record(h1, { kind: 'response', status: 500 });
  assert.equal(h1.consecutiveGatewayFailure, 0);
  assert.equal(h1.failedOutlierCheck, true, '5 consecutive 5xx (4 timeouts as 504, one 500)');
  assert.equal(count('a', 'ejections_enforced_consecutive_5xx'), 1);
  assert.equal(count('a', 'ejections_detected_consecutive_gateway_failure'), 1);
  // A 4xx answer resets both runs.
  for (let i = 0; i < 4; i++) a.record(h2, { kind: 'response', status: 503 });
  a.record(h2, { kind: 'response', status: 404 });
  assert.equal(h2.consecutive5xx + h2.consecutiveGatewayFailure, 0);

  // Split: local-origin errors count only as local-origin failures, reset by any answer (even a 5xx).
  for (const h of hosts) h.failedOutlierCheck = false;
  h0.intervalTotal = 0;
  const b = make('b', { splitExternalLocalOriginErrors: true });
  for (let i = 0; i < 4; i++) b.record(h0, TIMEOUT);
  b.record(h0, { kind: 'response', status: 503 });
  assert.equal(h0.consecutiveLocalOriginFailure, 0);
  assert.equal(h0.consecutiveGatewayFailure, 1, 'local-origin errors are not gateway failures when split');
  for (const r of [{ kind: 'connect_failure' }, { kind: 'reset' }, TIMEOUT, { kind: 'timeout' }] as const) b.record(h0, r);
  assert.equal(h0.failedOutlierCheck, false);
  b.record(h0, { kind: 'connect_failure' });
  assert.equal(h0.failedOutlierCheck, true);
  assert.equal(count('b', 'ejections_detected_consecutive_local_origin_failure'), 1);
  assert.equal(count('b', 'ejections_enforced_consecutive_local_origin_failure'), 1);
  assert.equal(count('b', 'ejections_detected_consecutive_gateway_failure'), 0);
  assert.equal(h0.intervalTotal, 1, 'only answers count towards the success rate when split');

  // Enforcement 0: detected, counted, not ejected; 0 as a threshold disables the detector.
  const c = make('c', { enforcingConsecutiveGatewayFailure: 0, consecutive5xx: 0 });
  for (let i = 0; i < 5; i++) c.record(h2, { kind: 'response', status: 503 });
  assert.equal(h2.failedOutlierCheck, false);
  assert.equal(count('c', 'ejections_detected_consecutive_gateway_failure'), 1);
  assert.equal(count('c', 'ejections_enforced_consecutive_gateway_failure'), 0);
  const d = make('d', { consecutiveGatewayFailure: 0, consecutive5xx: 0 });
  for (let i = 0; i < 20; i++) d.record(h2, TIMEOUT);
  assert.equal(h2.failedOutlierCheck, false);
});
