import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import type { ClusterManager, ClusterManagerOptions } from '../../src/core/upstream/cluster-manager.js';
import { waitFor } from '../helpers.js';
import { node, upstreamFixture } from '../fixtures/upstream.js';

const up = upstreamFixture();
after(() => up.close());
const backend = () => up.backend();
const manager = (options: Partial<ClusterManagerOptions>) => up.manager(options);

async function pickMany(cm: ClusterManager, service: string, n: number): Promise<string[]> {
  const keys: string[] = [];
  for (let i = 0; i < n; i++) {
    const lease = await cm.acquire(service);
    keys.push(lease.target.key);
    lease.release({ kind: 'response', status: 200 }, 1);
  }
  return keys;
}

// Short intervals keep the test quick; a generous timeout keeps it steady on a loaded machine.
const fast = { intervalMs: 100, timeoutMs: 1_000, unhealthyThreshold: 2, healthyThreshold: 2 };

test('active HC: a host whose /health answers 500 is failed_active_hc and skipped, and returns when healthy', async () => {
  const good = await backend();
  const bad = await backend();
  bad.healthStatus = 500;
  const registry = new MemoryRegistry();
  await registry.register({ name: 'hc', version: '', metadata: {}, endpoints: [], nodes: [node('good', good.port), node('bad', bad.port)] });
  const { cm, stats } = manager({ registry, defaults: { healthCheck: { path: '/health', ...fast } } });
  // the first acquire waits for the first round of checks (warm-up): bad is already out
  await pickMany(cm, 'hc', 1);
  const flags = () => Object.fromEntries(cm.clusters()[0]!.hosts.map((h) => [h.port, h.failedActiveHc]));
  assert.equal(flags()[bad.port], true);
  // (good passed its first check unless the machine is so loaded that it took over the timeout)
  await waitFor(() => !flags()[good.port], 8000, 10);
  const keys = await pickMany(cm, 'hc', 10);
  assert.deepEqual(new Set(keys), new Set([good.key]));
  assert.deepEqual(flags(), { [good.port]: false, [bad.port]: true });
  assert.equal(stats.gauge('cluster.hc.membership_healthy').value, 1);
  assert.ok(stats.counter('cluster.hc.health_check.attempt').value >= 2);
  assert.ok(stats.counter('cluster.hc.health_check.failure').value >= 1);
  assert.ok(stats.counter('cluster.hc.health_check.success').value >= 1);

  // healthy again: back after 2 consecutive successes
  bad.healthStatus = 200;
  await waitFor(() => !flags()[bad.port], 8000, 10);
  assert.deepEqual(new Set(await pickMany(cm, 'hc', 4)), new Set([good.key, bad.key]));

  // 2 consecutive failures take a healthy host out again
  const before = bad.healthHits;
  bad.healthStatus = 503;
  await waitFor(() => flags()[bad.port], 8000, 10);
  assert.ok(bad.healthHits - before >= 2);
  assert.deepEqual(new Set(await pickMany(cm, 'hc', 6)), new Set([good.key]));
  await registry.close();
});

test('active HC only for nodes whose metadata names health_check_path; a timeout is a failure', async () => {
  const plain = await backend();
  const checked = await backend();
  const registry = new MemoryRegistry();
  await registry.register({
    name: 'meta',
    version: '',
    metadata: {},
    endpoints: [],
    nodes: [node('plain', plain.port), node('checked', checked.port, { health_check_path: '/custom' })],
  });
  const { cm, stats } = manager({ registry, defaults: { healthCheck: fast } });
  await pickMany(cm, 'meta', 2);
  await waitFor(() => checked.healthHits >= 2, 5000, 10);
  assert.equal(plain.healthHits, 0, 'no path, no checks');
  checked.healthHang = true;
  const flagged = () => cm.clusters()[0]!.hosts.find((h) => h.port === checked.port)!.failedActiveHc;
  await waitFor(flagged, 8000, 10);
  assert.ok(stats.counter('cluster.meta.health_check.network_failure').value >= 2);
  assert.deepEqual(new Set(await pickMany(cm, 'meta', 4)), new Set([plain.key]));
  // the path goes away from the metadata: checks stop and the flag is cleared
  await registry.register({ name: 'meta', version: '', metadata: {}, endpoints: [], nodes: [node('checked', checked.port)] });
  await waitFor(() => !flagged(), 8000, 10);
  await registry.close();
});

test('all hosts failing: panic mode balances over all of them', async () => {
  const a = await backend();
  const b = await backend();
  a.healthStatus = 500;
  b.healthStatus = 500;
  const registry = new MemoryRegistry();
  await registry.register({ name: 'panic', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  const { cm, stats } = manager({ registry, defaults: { healthCheck: { path: '/health', ...fast } } });
  assert.deepEqual(new Set(await pickMany(cm, 'panic', 4)), new Set([a.key, b.key]));
  assert.equal(stats.counter('cluster.panic.lb_healthy_panic').value, 4);
  // with panic mode off: 503
  const { cm: strict } = manager({ registry, defaults: { healthCheck: { path: '/health', ...fast }, panicThresholdPercent: 0 } });
  await assert.rejects(strict.acquire('panic'), (err: Error & { code?: number }) => err.code === 503 && /no healthy upstream/.test(err.message));
  await registry.close();
});

test('static cluster with health checking; close stops the checks', async () => {
  const a = await backend();
  const { cm, stats } = manager({ staticClusters: [{ name: 'st', hosts: [a.key], healthCheck: { path: '/health', ...fast } }] });
  const diag = () =>
    `attempt ${stats.counter('cluster.st.health_check.attempt').value} success ${stats.counter('cluster.st.health_check.success').value} ` +
    `failure ${stats.counter('cluster.st.health_check.failure').value} net ${stats.counter('cluster.st.health_check.network_failure').value} hits ${a.healthHits}`;
  await waitFor(() => stats.counter('cluster.st.health_check.success').value >= 2, 8000, 10).catch((e: Error) => assert.fail(`${e.message}: ${diag()}`));
  await waitFor(() => !cm.clusters()[0]!.hosts[0]!.failedActiveHc, 8000, 10).catch((e: Error) => assert.fail(`${e.message}: ${diag()}`));
  await cm.close();
  const hits = a.healthHits;
  // A marker clock: a second manager checking another backend at the same interval. Three of its
  // checks after the close leave time for more than two of the closed one's, slow machine or not.
  const b = await backend();
  const { stats: markerStats } = manager({ staticClusters: [{ name: 'marker', hosts: [b.key], healthCheck: { path: '/health', ...fast } }] });
  await waitFor(() => markerStats.counter('cluster.marker.health_check.attempt').value >= 3, 8000, 10);
  assert.equal(a.healthHits, hits, 'no checks after close');
});
