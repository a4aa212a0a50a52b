/**
 * The retry budget (src/core/upstream/retry-budget.ts): its rule, the cluster's circuit breakers
 * applying it to every retry and hedge beside max_retries, and a refused retry not made: the
 * framework client answers with the try before it.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { MeshError } from '../../src/base/errors.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Client } from '../../src/core/client/client.js';
import { RetryBudget, isRetryOverflow } from '../../src/core/upstream/retry-budget.js';
import { resolveSettings, retryBudgetDefaults } from '../../src/core/upstream/config.js';
import type { UpstreamLease } from '../../src/core/upstream/types.js';
import { node, upstreamFixture } from '../fixtures/upstream.js';
import { startEdgeGateway } from '../fixtures/edge-gateway.js';
import { freePort, http } from '../helpers.js';
import { get, startAdmin } from '../admin-fixtures.js';
import { renderClustersText } from '../../src/admin/clusters.js';
import { xdsClustersView } from '../../src/xds/clusters-view.js';
import type { XdsSource } from '../../src/xds/source.js';

const up = upstreamFixture();
after(() => up.close());

const OK = { kind: 'response', status: 200 } as const;

async function refused(p: Promise<unknown>, detail: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof MeshError);
    assert.ok(isRetryOverflow(err), 'a retry overflow');
    assert.equal(err.code, 503);
    assert.equal(err.detail, detail);
    assert.equal(err.responseFlag, 'UO');
    return true;
  });
}

test('the rule: a share of the active requests, never below the minimum; 0 % is no budget', () => {
  const b = new RetryBudget({ percent: 20, minConcurrency: 3 });
  assert.equal(b.limit(0), 3);
  assert.equal(b.limit(15), 3);
  assert.equal(b.limit(19), 3);
  assert.equal(b.limit(20), 4);
  assert.equal(b.limit(1000), 200);
  assert.equal(b.admits(100, 19), true);
  assert.equal(b.admits(100, 20), false);
  assert.equal(b.remaining(100, 5), 15);
  assert.equal(b.remaining(100, 25), 0);
  const none = new RetryBudget({ percent: 0, minConcurrency: 3 });
  assert.equal(none.enabled, false);
  assert.equal(none.admits(1, 1_000_000), true);
  const floorless = new RetryBudget({ percent: 50, minConcurrency: 0 });
  assert.equal(floorless.limit(1), 0);
  assert.equal(floorless.limit(3), 1);
});

test('settings: defaults 20 % and 3 with max_retries 1024 above them; out of range is refused', () => {
  const s = resolveSettings(undefined, undefined, 'round_robin', true);
  assert.deepEqual(s.retryBudgets, { default: { percent: 20, minConcurrency: 3 }, high: { percent: 20, minConcurrency: 3 } });
  assert.equal(s.circuitBreakers.default.maxRetries, 1024);
  const own = resolveSettings({ circuitBreakers: { high: { retryBudget: { percent: 50 } } } }, retryBudgetDefaults(10, 1), 'round_robin', false);
  assert.deepEqual(own.retryBudgets, { default: { percent: 10, minConcurrency: 1 }, high: { percent: 50, minConcurrency: 1 } });
  assert.throws(() => resolveSettings(undefined, retryBudgetDefaults(101, 3), 'round_robin', true), /circuitBreakers\.default\.retryBudget\.percent: must be a number from 0 to 100/);
  assert.throws(() => resolveSettings(undefined, retryBudgetDefaults(20, -1), 'round_robin', true), /retryBudget\.minConcurrency: must be a non-negative integer/);
});

test('a cluster: retries past the budget of its active requests are refused and counted; a finished retry frees its place', async () => {
  const a = await up.backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'rb', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = up.manager({ registry, defaults: retryBudgetDefaults(20, 2) });
  const gauge = (n: string) => stats.gauge(`cluster.rb.circuit_breakers.default.${n}`).value;
  // 10 requests in flight: the budget is max(2, 20 % of 10) = 2.
  const firsts: UpstreamLease[] = [];
  for (let i = 0; i < 10; i++) firsts.push(await cm.acquire('rb'));
  assert.equal(gauge('remaining_retries'), 2);
  const r1 = await cm.acquire('rb', { retry: true });
  const r2 = await cm.acquire('rb', { retry: true });
  assert.equal(gauge('remaining_retries'), 0);
  assert.equal(gauge('rq_retry_open'), 1);
  await refused(cm.acquire('rb', { retry: true }), 'circuit breaker open: retry_budget');
  // A hedge is a retry too.
  await refused(cm.acquire('rb', { retry: true, hedge: true }), 'circuit breaker open: retry_budget');
  assert.equal(stats.counter('cluster.rb.upstream_rq_retry_overflow').value, 2);
  assert.equal(stats.counter('cluster.rb.upstream_rq_retry').value, 2);
  // A retry after a refused connection (nothing was sent) is not counted, as for max_retries.
  const free = await cm.acquire('rb', { retry: true, afterConnectFailure: true });
  free.release({ kind: 'connect_failure' }, 1);
  // 12 in flight now (the firsts, r1 and r2): 20 % of 12 is still 2. A finished retry frees its place.
  r1.release(OK, 1);
  assert.equal(gauge('remaining_retries'), 1);
  const r3 = await cm.acquire('rb', { retry: true });
  // More load, more room: 18 more requests make 30 in flight, 20 % of them 6 retries.
  for (let i = 0; i < 18; i++) firsts.push(await cm.acquire('rb'));
  const more: UpstreamLease[] = [];
  for (let i = 0; i < 4; i++) more.push(await cm.acquire('rb', { retry: true }));
  await refused(cm.acquire('rb', { retry: true }), 'circuit breaker open: retry_budget');
  assert.equal(stats.counter('cluster.rb.upstream_rq_retry_overflow').value, 3);
  // The high priority has its own counts.
  const h = await cm.acquire('rb', { retry: true, priority: 'high' });
  for (const l of [...firsts, ...more, r2, r3, h]) l.release(OK, 1);
  assert.equal(gauge('remaining_retries'), 2);
  assert.equal(gauge('rq_retry_open'), 0);
  assert.equal(stats.gauge('cluster.rb.upstream_rq_active').value, 0);
  await registry.close();
});

test('a caller\'s own budget (a route\'s) replaces the cluster\'s for its retries, under max_retries', async () => {
  const a = await up.backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'own', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = up.manager({ registry, defaults: { circuitBreakers: { default: { maxRetries: 4 } } } });
  const none = new RetryBudget({ percent: 1, minConcurrency: 0 });
  await refused(cm.acquire('own', { retry: true, retryBudget: none }), 'circuit breaker open: retry_budget');
  // The cluster's own budget (20 %, at least 3) lets the same retry through.
  const held = [await cm.acquire('own', { retry: true })];
  const wide = new RetryBudget({ percent: 100, minConcurrency: 100 });
  for (let i = 0; i < 3; i++) held.push(await cm.acquire('own', { retry: true, retryBudget: wide }));
  await refused(cm.acquire('own', { retry: true, retryBudget: wide }), 'circuit breaker open: max_retries');
  assert.equal(stats.counter('cluster.own.upstream_rq_retry_overflow').value, 2);
  for (const l of held) l.release(OK, 1);
  await registry.close();
});

test('max_retries stays a ceiling under a budget that would allow more; 0 % leaves max_retries alone', async () => {
  const a = await up.backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'cap', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  await registry.register({ name: 'nob', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = up.manager({ registry, defaults: { circuitBreakers: { default: { maxRetries: 1, retryBudget: { percent: 100, minConcurrency: 5 } } } } });
  const r = await cm.acquire('cap', { retry: true });
  await refused(cm.acquire('cap', { retry: true }), 'circuit breaker open: max_retries');
  assert.equal(stats.gauge('cluster.cap.circuit_breakers.default.remaining_retries').value, 0);
  r.release(OK, 1);

  const off = up.manager({ registry, defaults: { circuitBreakers: { default: { maxRetries: 50, retryBudget: { percent: 0, minConcurrency: 0 } } } } });
  const held: UpstreamLease[] = [];
  for (let i = 0; i < 50; i++) held.push(await off.cm.acquire('nob', { retry: true }));
  await refused(off.cm.acquire('nob', { retry: true }), 'circuit breaker open: max_retries');
  for (const l of held) l.release(OK, 1);
  await registry.close();
});

test('a retry the budget refuses is not made: the call answers with the try before it, and it is counted', async () => {
  const failing = await up.backend();
  failing.status = 503;
  const registry = new MemoryRegistry();
  await registry.register({ name: 'storm', version: '', metadata: {}, endpoints: [], nodes: [node('a', failing.port)] });
  // 1 % of one request in flight is no retry at all, and no floor.
  const { cm, stats } = up.manager({ registry, defaults: retryBudgetDefaults(1, 0) });
  const client = new Client({ selector: cm, requestTimeoutMs: 2000, retries: 3 });
  await assert.rejects(client.call('storm', 'Any.Thing', new TextEncoder().encode('{}')), (err: unknown) => {
    assert.ok(err instanceof MeshError);
    assert.equal(err.code, 503);
    assert.notEqual(err.detail, 'circuit breaker open: retry_budget', 'the answer of the try that was made');
    return true;
  });
  assert.equal(failing.hits, 1);
  assert.equal(stats.counter('cluster.storm.upstream_rq_retry_overflow').value, 1);
  assert.equal(stats.counter('cluster.storm.upstream_rq_retry').value, 0);
  assert.equal(stats.counter('cluster.storm.upstream_rq_total').value, 1);
  await registry.close();
});

test('the proxy handler: a retry the budget refuses is not made, the client gets the failure of the try before it', async () => {
  // Nothing listens on either port: every connection is refused.
  const ports = [await freePort(), await freePort()];
  const gw = await startEdgeGateway(['--handler=proxy', '--client_retries=1', '--retry_budget_percent=1', '--retry_budget_min=0']);
  up.onClose(() => gw.close());
  const registry = gw.runtime.registry;
  await registry.register({ name: 'go.mesh.api.gone', version: '', metadata: {}, endpoints: [], nodes: ports.map((p, i) => node(`n${i}`, p)) });
  const res = await http('GET', `${gw.url}/gone/x`);
  assert.equal(res.status, 502);
  const body = res.json<{ id: string; code: number; detail: string }>();
  assert.match(body.detail, new RegExp(`^proxy to go\\.mesh\\.api\\.gone on 127\\.0\\.0\\.1:(${ports.join('|')}): `));
  assert.equal(gw.counter('cluster.go.mesh.api.gone.upstream_rq_retry_overflow'), 1);
  assert.equal(gw.counter('cluster.go.mesh.api.gone.upstream_rq_retry'), 0);
  assert.equal(gw.counter('cluster.go.mesh.api.gone.upstream_rq_total'), 1);
});

test('admin /clusters: max_retries is the retries allowed now, the budget\'s ceiling under max_retries (3 on an idle cluster, as Envoy\'s)', async () => {
  const a = await up.backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'shown', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm } = up.manager({ registry, defaults: { circuitBreakers: { high: { maxRetries: 2 } } } });
  const admin = await startAdmin({ clusters: cm });
  up.onClose(() => admin.close());
  const breakerLines = async () =>
    (await get(admin.base, '/clusters')).body
      .split('\n')
      .filter((l) => /^shown::(default|high)_priority::/.test(l))
      .join('\n');
  const expected = (defaultRetries: number, highRetries: number) =>
    'shown::default_priority::max_connections::1024\n' +
    'shown::default_priority::max_pending_requests::1024\n' +
    'shown::default_priority::max_requests::1024\n' +
    `shown::default_priority::max_retries::${defaultRetries}\n` +
    'shown::high_priority::max_connections::1024\n' +
    'shown::high_priority::max_pending_requests::1024\n' +
    'shown::high_priority::max_requests::1024\n' +
    `shown::high_priority::max_retries::${highRetries}`;
  // The cluster is built on first use; nothing in flight: the budget's minimum, 3 (high: its max_retries 2 is lower).
  (await cm.acquire('shown')).release(OK, 1);
  assert.equal(await breakerLines(), expected(3, 2));
  // 25 requests in flight: 20 % of them, 5.
  const leases: UpstreamLease[] = [];
  for (let i = 0; i < 25; i++) leases.push(await cm.acquire('shown'));
  assert.equal(await breakerLines(), expected(5, 2));
  const json = JSON.parse((await get(admin.base, '/clusters?format=json')).body);
  assert.deepEqual(json.cluster_statuses[0].circuit_breakers.thresholds.map((t: { max_retries: number }) => t.max_retries), [5, 2]);
  for (const l of leases) l.release(OK, 1);
  assert.equal(await breakerLines(), expected(3, 2));
  await registry.close();
});

test('mesh xds /clusters: max_retries of a served cluster is an idle cluster\'s, 3 with the default budget; the budget off: max_retries', () => {
  const source = { snapshot: { versions: { cluster: '7' }, messages: { endpoints: new Map([['svc', { endpoints: [] }]]) } } } as unknown as XdsSource;
  const lines = (settings: ReturnType<typeof resolveSettings>) =>
    renderClustersText(xdsClustersView(source, settings))
      .toString()
      .split('\n')
      .filter((l) => l.includes('max_retries'));
  assert.deepEqual(lines(resolveSettings(undefined, undefined, 'round_robin', true)), ['svc::default_priority::max_retries::3', 'svc::high_priority::max_retries::3']);
  assert.deepEqual(lines(resolveSettings(undefined, retryBudgetDefaults(0, 3), 'round_robin', true)), ['svc::default_priority::max_retries::1024', 'svc::high_priority::max_retries::1024']);
});
