import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { MeshError } from '../../src/base/errors.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import type { Node, Registry, Service, WatchEvent } from '../../src/engines/registry/registry.js';
import { HOST_APPLY_CHUNK, type ClusterManager, type ClusterManagerOptions } from '../../src/core/upstream/cluster-manager.js';
import type { AttemptOutcome, UpstreamLease } from '../../src/core/upstream/types.js';
import { freePort, waitFor } from '../helpers.js';
import { node, upstreamFixture } from '../fixtures/upstream.js';

// ---- fixtures -----------------------------------------------------------------------------

const up = upstreamFixture();
after(() => up.close());
const backend = () => up.backend();
const manager = (options: Partial<ClusterManagerOptions> = {}) => up.manager(options);

function classify(err: unknown): AttemptOutcome {
  const code = (err as { code?: string }).code ?? '';
  if ((err as Error).name === 'TimeoutError') return { kind: 'timeout' };
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return { kind: 'timeout' };
  if (code === 'ECONNREFUSED' || code === 'UND_ERR_CONNECT_TIMEOUT') return { kind: 'connect_failure' };
  return { kind: 'reset' };
}

/** One attempt as the transport makes it: POST / through the lease's dispatcher, then release. */
async function send(lease: UpstreamLease, timeoutMs?: number): Promise<number | string> {
  const t0 = Date.now();
  try {
    const res = await lease.target.dispatcher.request({
      path: '/',
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json' },
      signal: timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined,
    });
    await res.body.text();
    lease.release({ kind: 'response', status: res.statusCode }, Date.now() - t0);
    return res.statusCode;
  } catch (err) {
    const outcome = classify(err);
    lease.release(outcome, Date.now() - t0);
    return outcome.kind;
  }
}

async function call(cm: ClusterManager, service: string, timeoutMs?: number): Promise<{ key: string; result: number | string }> {
  const lease = await cm.acquire(service);
  return { key: lease.target.key, result: await send(lease, timeoutMs) };
}

function count(keys: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of keys) out[k] = (out[k] ?? 0) + 1;
  return out;
}

async function rejects(p: Promise<unknown>, code: number, detail: string | RegExp): Promise<MeshError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof MeshError, `expected MeshError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.equal(err.id, 'go.mesh.client');
    if (typeof detail === 'string') assert.equal(err.detail, detail);
    else assert.match(err.detail, detail);
    return err;
  }
  assert.fail('expected a rejection');
}

// ---- tests --------------------------------------------------------------------------------

test('unknown service: 404 and no cluster is created', async () => {
  const registry = new MemoryRegistry();
  const { cm, stats } = manager({ registry });
  await rejects(cm.acquire('nope'), 404, 'service nope: not found');
  assert.deepEqual(cm.clusters(), []);
  assert.equal(stats.list({ filter: /^cluster\.nope\./ }).length, 0);
  // without a registry too
  const { cm: bare } = manager();
  await rejects(bare.acquire('nope'), 404, 'service nope: not found');
  assert.equal(bare.versionInfo(), 'static');
  await registry.close();
});

test('round robin honours weights over 100 acquires; real requests reach both backends', async () => {
  const a = await backend();
  const b = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'rr', version: '1', metadata: {}, endpoints: [], nodes: [node('a', a.port, { weight: '3' }), node('b', b.port)] });
  const { cm, stats } = manager({ registry });
  const keys: string[] = [];
  for (let i = 0; i < 100; i++) {
    const lease = await cm.acquire('rr');
    keys.push(lease.target.key);
    lease.release({ kind: 'response', status: 200 }, 1);
  }
  assert.deepEqual(count(keys), { [a.key]: 75, [b.key]: 25 });
  for (let i = 0; i < 8; i++) assert.equal((await call(cm, 'rr')).result, 200);
  assert.equal(a.hits, 6);
  assert.equal(b.hits, 2);
  assert.equal(stats.counter('cluster.rr.upstream_rq_total').value, 108);
  assert.equal(stats.counter('cluster.rr.upstream_rq_2xx').value, 108);
  // the request time is Envoy's cluster.<name>.upstream_rq_time, in the store (admin /stats --stats_histograms)
  assert.deepEqual(stats.listHistograms({ filter: /^cluster\.rr\./ }).map((h) => [h.name, h.count]), [['cluster.rr.upstream_rq_time', 108]]);
  const snap = cm.clusters()[0]!;
  assert.equal(snap.name, 'rr');
  assert.equal(snap.addedViaApi, true);
  assert.deepEqual(snap.hosts.map((h) => [h.port, h.weight, h.hostname]), [
    [a.port, 3, 'a'],
    [b.port, 1, 'b'],
  ]);
  assert.deepEqual(snap.outlier, { successRateAverage: -1, successRateEjectionThreshold: -1 });
  assert.deepEqual(snap.circuitBreakers.default, { maxConnections: 1024, maxPendingRequests: 1024, maxRequests: 1024, maxRetries: 3 });
  assert.equal(cm.versionInfo(), registry.revision());
  await registry.close();
});

test('random and least_request policies', async () => {
  const a = await backend();
  const b = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'rnd', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port, { weight: '4' }), node('b', b.port)] });
  await registry.register({ name: 'lr', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  const { cm } = manager({ registry, lbPolicy: 'random' });
  const keys: string[] = [];
  for (let i = 0; i < 500; i++) {
    const lease = await cm.acquire('rnd');
    keys.push(lease.target.key);
    lease.release({ kind: 'response', status: 200 }, 1);
  }
  const c = count(keys);
  assert.ok(c[a.key]! > 330 && c[a.key]! < 470, JSON.stringify(c));

  const { cm: lr } = manager({ registry, lbPolicy: 'least_request' });
  // hold leases: each new acquire goes to the host with fewer active requests
  const held: UpstreamLease[] = [];
  for (let i = 0; i < 6; i++) held.push(await lr.acquire('lr'));
  assert.deepEqual(count(held.map((l) => l.target.key)), { [a.key]: 3, [b.key]: 3 });
  for (const l of held.filter((l) => l.target.key === a.key)) l.release({ kind: 'response', status: 200 }, 1);
  for (let i = 0; i < 3; i++) {
    const l = await lr.acquire('lr');
    assert.equal(l.target.key, a.key);
    held.push(l);
  }
  for (const l of held) l.release({ kind: 'response', status: 200 }, 1); // double release of some: ignored
  const snap = lr.clusters().find((s) => s.name === 'lr')!;
  assert.deepEqual(snap.hosts.map((h) => h.stats.rq_active), [0, 0]);
  await registry.close();
});

test('registry watch: hosts added, updated in place and removed; stats survive; cluster dropped when empty', async () => {
  const a = await backend();
  const b = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'w', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = manager({ registry });
  for (let i = 0; i < 3; i++) await call(cm, 'w');
  assert.equal(cm.clusters()[0]!.hosts.length, 1);

  // a second version adds a node: all versions' nodes are hosts
  await registry.register({ name: 'w', version: 'v2', metadata: {}, endpoints: [], nodes: [node('b', b.port, { zone: 'z2', canary: 'true' })] });
  await waitFor(() => cm.clusters()[0]!.hosts.length === 2);
  let snap = cm.clusters()[0]!;
  const ha = snap.hosts.find((h) => h.port === a.port)!;
  const hb = snap.hosts.find((h) => h.port === b.port)!;
  assert.equal(ha.stats.rq_total, 3, 'kept host keeps its stats');
  // keep-alive (undici may open a second connection when a request follows at once)
  assert.ok(ha.stats.cx_total >= 1 && ha.stats.cx_total <= 2, `cx_total ${ha.stats.cx_total}`);
  assert.equal(ha.stats.cx_active, ha.stats.cx_total);
  assert.equal(hb.zone, 'z2');
  assert.equal(hb.canary, true);
  assert.equal(cm.versionInfo(), registry.revision());
  assert.equal(stats.gauge('cluster.w.membership_total').value, 2);
  assert.equal(stats.gauge('cluster.w.membership_healthy').value, 2);

  // metadata update in place: weight changes, stats stay
  await registry.register({ name: 'w', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', a.port, { weight: '250' })] });
  await waitFor(() => cm.clusters()[0]!.hosts.find((h) => h.port === a.port)!.weight === 100);
  assert.equal(cm.clusters()[0]!.hosts.find((h) => h.port === a.port)!.stats.rq_total, 3);

  // remove a's version: host goes, its pool is closed
  const hostA = cm.cluster('w')!.host(a.key)!;
  await registry.deregister({ name: 'w', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  await waitFor(() => cm.clusters()[0]!.hosts.length === 1);
  snap = cm.clusters()[0]!;
  assert.equal(snap.hosts[0]!.port, b.port);
  await waitFor(() => hostA.dispatcher.closed);
  await waitFor(() => stats.gauge('cluster.w.upstream_cx_active').value === 0);
  assert.equal(cm.versionInfo(), registry.revision());

  // last node goes: the cluster and its stats are dropped
  await registry.deregister({ name: 'w', version: 'v2', metadata: {}, endpoints: [], nodes: [node('b', b.port)] });
  await waitFor(() => cm.clusters().length === 0);
  assert.equal(stats.list({ filter: /^cluster\.w\./ }).length, 0);
  assert.equal(stats.counter('cluster_manager.cluster_removed').value, 1);
  await rejects(cm.acquire('w'), 404, 'service w: not found');
  await registry.close();
});

test('per-host stats from real requests: success, 5xx, timeout, connect failure', async () => {
  const ok = await backend();
  const bad = await backend();
  bad.status = 503;
  const slow = await backend();
  slow.delayMs = 5_000;
  const deadPort = await freePort();
  const registry = new MemoryRegistry();
  const nodes = [node('ok', ok.port), node('bad', bad.port), node('slow', slow.port), node('dead', deadPort)];
  await registry.register({ name: 'ph', version: '', metadata: {}, endpoints: [], nodes });
  const { cm, stats } = manager({ registry, defaults: { outlierDetection: false } });
  const results: Record<string, Array<number | string>> = {};
  for (let i = 0; i < 8; i++) {
    const lease = await cm.acquire('ph');
    // only the slow host gets a deadline, so a loaded machine cannot time out the others
    const r = await send(lease, lease.target.key === slow.key ? 300 : undefined);
    (results[lease.target.key] ??= []).push(r);
  }
  assert.deepEqual(results[ok.key], [200, 200]);
  assert.deepEqual(results[bad.key], [503, 503]);
  assert.deepEqual(results[slow.key], ['timeout', 'timeout']);
  assert.deepEqual(results[`127.0.0.1:${deadPort}`], ['connect_failure', 'connect_failure']);
  const hosts = Object.fromEntries(cm.clusters()[0]!.hosts.map((h) => [`${h.address}:${h.port}`, h.stats]));
  const { cx_total: okCx, cx_active: okActive, ...okRq } = hosts[ok.key]!;
  assert.deepEqual(okRq, { cx_connect_fail: 0, rq_active: 0, rq_error: 0, rq_success: 2, rq_timeout: 0, rq_total: 2 });
  assert.equal(okCx, 1, 'two requests far apart: one keep-alive connection');
  assert.equal(okActive, 1);
  const { cx_total: badCx, cx_active: _badActive, ...badRq } = hosts[bad.key]!;
  assert.deepEqual(badRq, { cx_connect_fail: 0, rq_active: 0, rq_error: 2, rq_success: 0, rq_timeout: 0, rq_total: 2 });
  assert.equal(badCx, 1);
  assert.equal(hosts[slow.key]!.rq_timeout, 2);
  assert.equal(hosts[slow.key]!.rq_error, 2);
  assert.equal(hosts[slow.key]!.rq_success, 0);
  assert.equal(hosts[`127.0.0.1:${deadPort}`]!.cx_connect_fail, 2);
  assert.equal(hosts[`127.0.0.1:${deadPort}`]!.cx_total, 0);
  assert.equal(hosts[`127.0.0.1:${deadPort}`]!.rq_error, 2);
  const v = (n: string) => stats.list({ filter: new RegExp(`^cluster\\.ph\\.${n}$`) })[0]?.value;
  assert.equal(v('upstream_rq_total'), 8);
  assert.equal(v('upstream_rq_2xx'), 2);
  assert.equal(v('upstream_rq_5xx'), 6);
  assert.equal(v('upstream_rq_timeout'), 2);
  assert.equal(v('upstream_cx_connect_fail'), 2);
  assert.ok((v('upstream_cx_total') ?? 0) >= 3);
  assert.equal(v('upstream_rq_active'), 0);
  assert.equal(cm.cluster('ph')!.rqTime.count, 8);
  await registry.close();
});

test('circuit breakers: max_requests and max_retries fail fast with 503 and count overflows', async () => {
  const a = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'cb', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = manager({
    registry,
    defaults: { circuitBreakers: { default: { maxRequests: 2, maxRetries: 1 }, high: { maxRequests: 1 } } },
  });
  const l1 = await cm.acquire('cb');
  const l2 = await cm.acquire('cb');
  await rejects(cm.acquire('cb'), 503, 'circuit breaker open: max_requests');
  assert.equal(stats.counter('cluster.cb.upstream_rq_pending_overflow').value, 1);
  assert.equal(stats.gauge('cluster.cb.circuit_breakers.default.rq_open').value, 1);
  // the high priority has its own budget
  const h1 = await cm.acquire('cb', { priority: 'high' });
  await rejects(cm.acquire('cb', { priority: 'high' }), 503, 'circuit breaker open: max_requests');
  h1.release({ kind: 'response', status: 200 }, 1);
  l1.release({ kind: 'response', status: 200 }, 1);
  assert.equal(stats.gauge('cluster.cb.circuit_breakers.default.rq_open').value, 0);
  const r1 = await cm.acquire('cb', { retry: true });
  l2.release({ kind: 'response', status: 200 }, 1);
  await rejects(cm.acquire('cb', { retry: true }), 503, 'circuit breaker open: max_retries');
  assert.equal(stats.counter('cluster.cb.upstream_rq_retry_overflow').value, 1);
  assert.equal(stats.counter('cluster.cb.upstream_rq_retry').value, 1);
  assert.equal(await send(r1), 200);
  assert.equal(stats.counter('cluster.cb.upstream_rq_pending_overflow').value, 2);
  const snap = cm.clusters()[0]!;
  assert.equal(snap.circuitBreakers.default.maxRequests, 2);
  assert.equal(snap.circuitBreakers.high.maxRequests, 1);
  assert.equal(snap.circuitBreakers.high.maxRetries, 3); // the retry budget's minimum, the retries allowed now (max_retries 1024 above it)
  await registry.close();
});

test('circuit breakers: max_connections sizes the pool, max_pending_requests bounds the waiting', async () => {
  const a = await backend();
  a.delayMs = 150;
  const registry = new MemoryRegistry();
  await registry.register({ name: 'pend', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm, stats } = manager({
    registry,
    defaults: { circuitBreakers: { default: { maxConnections: 1, maxPendingRequests: 1 } } },
  });
  const l1 = await cm.acquire('pend');
  const l2 = await cm.acquire('pend'); // waits for the one connection
  await rejects(cm.acquire('pend'), 503, 'circuit breaker open: max_pending_requests');
  assert.equal(stats.counter('cluster.pend.upstream_rq_pending_overflow').value, 1);
  assert.deepEqual(await Promise.all([send(l1), send(l2)]), [200, 200]);
  assert.equal(cm.clusters()[0]!.hosts[0]!.stats.cx_total, 1, 'one connection carried both');
  assert.equal(stats.gauge('cluster.pend.upstream_rq_pending_active').value, 0);
  await registry.close();
});

test('static clusters: added_via_api false, version_info static, hosts from host:port', async () => {
  const a = await backend();
  const b = await backend();
  const { cm, stats } = manager({
    staticClusters: [
      { name: 'zeta', hosts: [a.key] },
      { name: 'alpha', hosts: [{ address: '127.0.0.1', port: b.port, weight: 5, zone: 'z', region: 'r', canary: true }, a.key], outlierDetection: {} },
    ],
  });
  assert.equal(cm.versionInfo(), 'static');
  const snaps = cm.clusters();
  assert.deepEqual(snaps.map((s) => s.name), ['alpha', 'zeta']);
  assert.equal(snaps[0]!.addedViaApi, false);
  assert.ok(snaps[0]!.outlier, 'outlier detection when configured');
  assert.equal(snaps[1]!.outlier, undefined, 'static clusters: no outlier detection by default');
  assert.deepEqual(
    { w: snaps[0]!.hosts[0]!.weight, z: snaps[0]!.hosts[0]!.zone, r: snaps[0]!.hosts[0]!.region, c: snaps[0]!.hosts[0]!.canary },
    { w: 5, z: 'z', r: 'r', c: true },
  );
  assert.equal((await call(cm, 'zeta')).result, 200);
  assert.equal(stats.counter('cluster.zeta.upstream_rq_2xx').value, 1);
  assert.throws(() => manager({ staticClusters: [{ name: 'x', hosts: ['nope'] }] }), /not host:port/);
});

test('address option: exact host; other addresses, unknown service and bad address refused', async () => {
  const a = await backend();
  const b = await backend();
  const c = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'addr', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  const { cm, stats } = manager({ registry });
  for (let i = 0; i < 4; i++) {
    const lease = await cm.acquire('addr', { address: b.key });
    assert.equal(lease.target.key, b.key);
    assert.equal(await send(lease), 200);
  }
  assert.equal(b.hits, 4);
  // an address that is not a node of the service is refused: no way to reach arbitrary hosts
  await rejects(cm.acquire('addr', { address: c.key }), 404, /no node at/);
  await rejects(cm.acquire('not.registered', { address: c.key }), 404, /not found/);
  assert.equal(c.hits, 0);
  assert.equal(stats.counter('cluster.addr.upstream_rq_total').value, 4);
  await rejects(cm.acquire('addr', { address: 'nonsense' }), 400, /address nonsense/);
  await registry.close();
});

test('exclude: a retry avoids the hosts already tried', async () => {
  const a = await backend();
  const b = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'ex', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  const { cm } = manager({ registry });
  for (let i = 0; i < 6; i++) {
    const l = await cm.acquire('ex', { exclude: new Set([a.key]) });
    assert.equal(l.target.key, b.key);
    l.release({ kind: 'response', status: 200 }, 1);
  }
  const l = await cm.acquire('ex', { exclude: new Set([a.key, b.key]) });
  l.release({ kind: 'response', status: 200 }, 1);
  await registry.close();
});

test('prefer: a session\'s host is taken when it is a candidate (the version, not excluded), never a host of another cluster', async () => {
  const a = await backend();
  const b = await backend();
  const c = await backend();
  const other = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'sp', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', a.port), node('b', b.port)] });
  await registry.register({ name: 'sp', version: 'v2', metadata: {}, endpoints: [], nodes: [node('c', c.port)] });
  await registry.register({ name: 'sp.other', version: 'v1', metadata: {}, endpoints: [], nodes: [node('o', other.port)] });
  const { cm } = manager({ registry });
  const keys = async (n: number, options: Parameters<ClusterManager['acquire']>[1]) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const l = await cm.acquire('sp', options);
      out.push(l.target.key);
      l.release({ kind: 'response', status: 200 }, 1);
    }
    return count(out);
  };
  assert.deepEqual(await keys(6, { version: 'v1', prefer: { key: b.key, nodeId: 'b' } }), { [b.key]: 6 });
  // Not the node the session names (another node id at that address), another version, another cluster's host, excluded: balanced.
  assert.deepEqual(await keys(6, { version: 'v1', prefer: { key: b.key, nodeId: 'b-restarted' } }), { [a.key]: 3, [b.key]: 3 });
  assert.deepEqual(await keys(6, { version: 'v1', prefer: { key: c.key, nodeId: 'c' } }), { [a.key]: 3, [b.key]: 3 });
  assert.deepEqual(await keys(6, { version: 'v1', prefer: { key: other.key, nodeId: 'o' } }), { [a.key]: 3, [b.key]: 3 });
  assert.deepEqual(await keys(4, { version: 'v1', prefer: { key: b.key, nodeId: 'b' }, exclude: new Set([b.key]) }), { [a.key]: 4 });
  assert.equal(other.hits, 0);
  await registry.close();
});

test('cluster bound and nested names: junk names create nothing, old idle clusters go, stats of a.b survive a', async () => {
  const a = await backend();
  const registry = new MemoryRegistry();
  for (const name of ['a', 'a.b', 'c']) await registry.register({ name, version: '', metadata: {}, endpoints: [], nodes: [node(name, a.port)] });
  const { cm, stats } = manager({ registry, maxClusters: 2 });
  await call(cm, 'a');
  await call(cm, 'a.b');
  for (let i = 0; i < 50; i++) await rejects(cm.acquire(`junk-${i}`), 404, `service junk-${i}: not found`);
  assert.deepEqual(cm.clusters().map((c) => c.name), ['a', 'a.b']);
  // a third cluster drops the least recently used idle one ('a'), keeping cluster.a.b.* intact
  await call(cm, 'c');
  assert.deepEqual(cm.clusters().map((c) => c.name), ['a.b', 'c']);
  assert.equal(stats.counter('cluster.a.b.upstream_rq_total').value, 1);
  assert.equal(stats.list({ filter: /^cluster\.a\.upstream_/ }).length, 0);
  // a held lease keeps its cluster: with both busy, a new name cannot get a cluster
  const h1 = await cm.acquire('a.b');
  const h2 = await cm.acquire('c');
  await rejects(cm.acquire('a'), 503, /too many clusters/);
  h1.release({ kind: 'response', status: 200 }, 1);
  h2.release({ kind: 'response', status: 200 }, 1);
  await registry.close();
});

test('close: pools closed, acquire refused', async () => {
  const a = await backend();
  const registry = new MemoryRegistry();
  await registry.register({ name: 'cl', version: '', metadata: {}, endpoints: [], nodes: [node('a', a.port)] });
  const { cm } = manager({ registry });
  await call(cm, 'cl');
  const host = cm.cluster('cl')!.host(a.key)!;
  await cm.close();
  assert.ok(host.dispatcher.closed);
  await rejects(cm.acquire('cl'), 503, /closed/);
  await registry.close();
});

/** A registry that says what the test tells it: events go straight to the cluster manager's watch. */
function scriptedRegistry(initial: Service) {
  let current = initial;
  let emit: ((e: WatchEvent) => void) | undefined;
  const registry: Registry = {
    name: 'scripted',
    register: async () => undefined,
    deregister: async () => undefined,
    getService: async (name) => (name === current.name ? [current] : []),
    listServices: async () => [current],
    watch: (fn) => {
      emit = fn;
      return { stop: () => (emit = undefined) };
    },
    revision: () => '1',
    close: async () => undefined,
  };
  return {
    registry,
    change(service: Service, revision: string) {
      current = service;
      emit!({ action: 'update', service, revision });
    },
  };
}

const manyNodes = (from: number, count: number): Node[] =>
  Array.from({ length: count }, (_, i) => ({ id: `n${from + i}`, address: '127.0.0.2', port: 1 + from + i, metadata: { zone: 'a' } }));

test('a change of 10,000 nodes is applied in chunks, a turn of the event loop between them; idle hosts hold no pool', async () => {
  const a = await backend();
  const one = { name: 'big', version: '1', metadata: {}, endpoints: [], nodes: [node('live', a.port)] };
  const script = scriptedRegistry(one);
  const { cm } = manager({ registry: script.registry });
  assert.equal((await call(cm, 'big')).key, a.key);
  // The event: each turn of the event loop, the number of hosts in place. Applied at once (which
  // held the loop 2-3 s) there would be no size between the first and the last.
  const sizes: number[] = [];
  let sampling = true;
  const sample = () => {
    sizes.push(cm.cluster('big')!.hosts().length);
    if (sampling) setImmediate(sample);
  };
  setImmediate(sample);
  const heapBefore = process.memoryUsage().heapUsed;
  script.change({ ...one, nodes: [node('live', a.port), ...manyNodes(0, 10_000)] }, '2');
  await waitFor(() => cm.cluster('big')!.hosts().length === 10_001 || undefined, 60_000);
  sampling = false;
  const between = [...new Set(sizes)].filter((n) => n > 1 && n < 10_001);
  assert.ok(between.length >= 5, `sizes seen between turns: ${between.join(' ')}`);
  for (let i = 1; i < sizes.length; i++) assert.ok(sizes[i]! - sizes[i - 1]! <= HOST_APPLY_CHUNK, `a turn added ${sizes[i]! - sizes[i - 1]!} hosts (chunk ${HOST_APPLY_CHUNK})`);
  // Still serving through the host it had.
  const lease = cm.acquireNow('big', { address: a.key })!;
  assert.equal(await send(lease), 200);
  // Hosts make their connection pool on first use: 10,000 idle hosts are not 10,000 pools (~200 MB).
  const heapMb = (process.memoryUsage().heapUsed - heapBefore) / 1e6;
  assert.ok(heapMb < 120, `heap grew ${heapMb.toFixed(0)} MB`);
  // One node more: applied at once (below the chunk).
  script.change({ ...one, nodes: [...cm.cluster('big')!.hosts().map((h) => ({ id: h.nodeId, address: h.address, port: h.port, metadata: h.metadata })), { id: 'extra', address: '127.0.0.3', port: 9, metadata: {} }] }, '3');
  await waitFor(() => cm.cluster('big')!.hosts().length === 10_002 || undefined, 10_000);
});

test('a node whose address no URL can hold is skipped; its neighbours serve and the watch goes on', async () => {
  const a = await backend();
  const b = await backend();
  const start = { name: 'odd', version: '1', metadata: {}, endpoints: [], nodes: [node('a', a.port)] };
  const script = scriptedRegistry(start);
  const { cm } = manager({ registry: script.registry });
  assert.equal((await call(cm, 'odd')).key, a.key);
  // A registry that let it through (a custom one): the cluster must not throw out of the watch.
  script.change({ ...start, nodes: [node('a', a.port), { id: 'bad', address: '127.0.0.1 x', port: 1, metadata: {} }] }, '2');
  assert.deepEqual(cm.cluster('odd')!.hosts().map((h) => h.key), [a.key]);
  for (let i = 0; i < 3; i++) assert.equal((await call(cm, 'odd')).key, a.key);
  script.change({ ...start, nodes: [node('a', a.port), { id: 'bad', address: '127.0.0.1 x', port: 1, metadata: {} }, node('b', b.port)] }, '3');
  assert.deepEqual(cm.cluster('odd')!.hosts().map((h) => h.key), [a.key, b.key]);
});
