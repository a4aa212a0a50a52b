/** `mesh stat`, `mesh edges` and `mesh top` without processes: a /traffic answer checked, two readings' difference, a row's rates and buckets, top's counts. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatEdges } from '../../src/cli/stat.js';
import { callerFlowsOf, flowsOf, parseTraffic, rowOf } from '../../src/admin/traffic-flows.js';
import { TopTable } from '../../src/cli/top.js';
import { mergeTrafficReports, type TrafficReport } from '../../src/admin/traffic.js';
import { FINE_LATENCY, fineIndex, fineQuantile, Histogram, StatsStore } from '../../src/base/stats/store.js';

const buckets = (at: Record<number, number>) => Array.from({ length: Histogram.BOUNDS.length + 1 }, (_, i) => at[i] ?? 0);

function report(id: string, lat: { ok: number; fail: number; counts: number[] }, mtls = { hosts: 2, hosts_mtls: 1 }): TrafficReport {
  return {
    process: { id, kind: 'sidecar', name: 'go.mesh.srv.web', mtls: 'strict', started_ms: 1 },
    latency_bounds_ms: Histogram.BOUNDS,
    clusters: [{ name: 'go.mesh.srv.orders', rq_2xx: lat.ok, rq_3xx: 0, rq_4xx: 0, rq_5xx: lat.fail, ...mtls, latency_counts: lat.counts }],
    callers: [{ front: 'sidecar_inbound', identity: 'spiffe://mesh.local/svc/web', rq_1xx: 0, rq_2xx: lat.ok, rq_3xx: 0, rq_4xx: 0, rq_5xx: lat.fail, latency_counts: lat.counts }],
    routes: [{ host: 'shop.example', rule: 'checkout', rq_1xx: 0, rq_2xx: lat.ok, rq_3xx: 0, rq_4xx: 0, rq_5xx: lat.fail, latency_counts: null }],
  };
}

describe('mesh stat', () => {
  it('takes the difference of two readings of one process; a counter that went down leaves the service out', () => {
    const before = report('p1', { ok: 10, fail: 0, counts: buckets({ 2: 10 }) });
    const after = report('p1', { ok: 28, fail: 2, counts: buckets({ 2: 20, 8: 10 }) });
    assert.deepEqual(flowsOf(before, after), [{ from: 'go.mesh.srv.web', to: 'go.mesh.srv.orders', answered: 20, failed: 2, mtls: 10, latency: buckets({ 2: 10, 8: 10 }) }]);
    assert.deepEqual(flowsOf(after, before), []);
    // Another process at the same admin address: its counters are since its start.
    assert.equal(flowsOf(before, report('p2', { ok: 3, fail: 0, counts: buckets({ 0: 3 }) }))[0]!.answered, 3);
  });

  it('callers: per identity, every answer of one with an identity counted as mutual TLS, plain ones not', () => {
    const before = report('p1', { ok: 1, fail: 0, counts: buckets({ 2: 1 }) });
    const after = report('p1', { ok: 4, fail: 1, counts: buckets({ 2: 5 }) });
    after.callers.push({ front: 'sidecar', identity: 'plain', rq_1xx: 0, rq_2xx: 2, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, latency_counts: buckets({ 1: 2 }) });
    assert.deepEqual(callerFlowsOf(before, after), [
      { from: 'spiffe://mesh.local/svc/web', to: 'go.mesh.srv.web', answered: 4, failed: 1, mtls: 4, latency: buckets({ 2: 4 }) },
      { from: 'plain', to: 'go.mesh.srv.web', answered: 2, failed: 0, mtls: 0, latency: buckets({ 1: 2 }) },
    ]);
  });

  it('a row: requests a second, success, the buckets holding p50/p95/p99, the mutual TLS share', () => {
    const flows = flowsOf(undefined, report('p1', { ok: 95, fail: 5, counts: buckets({ 2: 90, 8: 9, 16: 1 }) }));
    assert.deepEqual(rowOf(flows, 10), { answered: 100, rps: 10, success: 0.95, p50: 2, p95: 250, p99: 250, mtls: 0.5 });
    const none = rowOf([], 10);
    assert.deepEqual([none.answered, none.rps, Number.isNaN(none.success), Number.isNaN(none.p99), Number.isNaN(none.mtls)], [0, 0, true, true, true]);
    assert.equal(
      formatEdges([['go.mesh.srv.web', 'go.mesh.srv.orders', rowOf(flows, 10)], ['api', 'x\u001b[2J', none]]),
      'FROM             TO                  REQUESTS  RPS   SUCCESS  P99    MTLS\n' +
        'go.mesh.srv.web  go.mesh.srv.orders  100       10.0  95.0%    250ms  50.0%\n' +
        'api              x\\x1b[2J            0         0.0   -        -      -\n',
    );
  });

  it('a /traffic answer that is not a report is refused, field by field', () => {
    const good = report('p1', { ok: 1, fail: 0, counts: buckets({ 0: 1 }) });
    assert.deepEqual(parseTraffic(JSON.stringify(good)), good);
    const broken = (mutate: (r: any) => void) => {
      const r = JSON.parse(JSON.stringify(good));
      mutate(r);
      return parseTraffic(JSON.stringify(r));
    };
    assert.equal(parseTraffic('not json'), undefined);
    assert.equal(parseTraffic('null'), undefined);
    assert.equal(broken((r) => (r.latency_bounds_ms = [1, 2])), undefined);
    assert.equal(broken((r) => (r.clusters[0].rq_5xx = -1)), undefined);
    assert.equal(broken((r) => (r.clusters[0].rq_2xx = '7')), undefined);
    assert.equal(broken((r) => r.clusters[0].latency_counts.pop()), undefined);
    assert.equal(broken((r) => (r.process.kind = 7)), undefined);
    assert.equal(broken((r) => (r.clusters = {})), undefined);
    assert.equal(broken((r) => delete r.callers), undefined);
    assert.equal(broken((r) => (r.callers[0].identity = null)), undefined);
  });
});

describe('fine latency buckets (what mesh stat reads its percentiles from)', () => {
  it('only the histograms made to keep them do (those /traffic reads), and one found again can start to', () => {
    const store = new StatsStore();
    store.histogram('http.gateway.downstream_rq_time').record(5);
    assert.deepEqual(store.histogram('http.gateway.downstream_rq_time').finePairs(), []);
    const early = store.histogram('cluster.a.upstream_rq_time');
    const rqTime = store.scope('cluster.a.').histogram('upstream_rq_time', { fine: true });
    assert.equal(rqTime, early);
    rqTime.record(5);
    assert.deepEqual(rqTime.finePairs(), [[fineIndex(5), 1]]);
  });

  it('a quantile is within 2 % of the value recorded, from 10 µs to minutes', () => {
    for (const ms of [0.011, 0.05, 0.999, 1, 1.5, 7.3, 42, 150, 151.9, 999.99, 2999, 60_000, 600_000]) {
      const h = new Histogram('x', true);
      h.record(ms);
      const got = fineQuantile(h.finePairs(), 0.99);
      assert.ok(Math.abs(got - ms) / ms <= 0.0199, `${ms} ms read as ${got}`);
    }
    assert.equal(fineIndex(0), 0);
    assert.equal(fineIndex(-1), 0);
    assert.equal(fineIndex(Number.NaN), 0);
    assert.equal(fineIndex(1e12), FINE_LATENCY.buckets - 1);
    assert.ok(Number.isNaN(fineQuantile([], 0.5)));
  });

  it('p50, p95 and p99 of known latencies: the rank, as a caller counts it', () => {
    const h = new Histogram('x', true);
    for (let i = 0; i < 90; i++) h.record(10);
    for (let i = 0; i < 9; i++) h.record(100);
    h.record(1000);
    const near = (got: number[], want: number[]) => assert.ok(got.every((g, i) => Math.abs(g - want[i]!) / want[i]! <= 0.02), `${got} for ${want}`);
    const q = (x: number) => fineQuantile(h.finePairs(), x);
    near([q(0.5), q(0.9), q(0.91), q(0.99), q(1)], [10, 10, 100, 100, 1000]);
    // Two readings' difference, then a row: the row's percentiles come from the fine buckets.
    const scale = { min_ms: FINE_LATENCY.minMs, ratio: FINE_LATENCY.ratio, buckets: FINE_LATENCY.buckets };
    const before = { ...report('p1', { ok: 10, fail: 0, counts: buckets({ 5: 10 }) }), latency_fine: scale };
    before.clusters[0]!.latency_fine = [[fineIndex(10), 10]];
    const after = { ...report('p1', { ok: 110, fail: 0, counts: buckets({ 5: 100, 7: 9, 10: 1 }) }), latency_fine: scale };
    after.clusters[0]!.latency_fine = h.finePairs().map(([i, n]) => [i, i === fineIndex(10) ? n + 10 : n]);
    const row = rowOf(flowsOf(before, after), 1);
    near([row.p50, row.p95, row.p99], [10, 100, 100]);
    // A reading whose fine buckets went down (reset): the coarse bucket bounds.
    assert.equal(rowOf(flowsOf(after, { ...after, clusters: [{ ...after.clusters[0]!, rq_2xx: 200, latency_counts: buckets({ 5: 190, 7: 9, 10: 1 }), latency_fine: [[fineIndex(10), 1]] }] }), 1).p50, 25);
  });

  it('attacker: a /traffic answer with fine buckets out of order, out of range, negative, or another scale is refused', () => {
    const good = { ...report('p1', { ok: 1, fail: 0, counts: buckets({ 0: 1 }) }), latency_fine: { min_ms: 0.01, ratio: 1.04, buckets: 462 } };
    good.clusters[0]!.latency_fine = [[3, 1], [7, 2]];
    assert.ok(parseTraffic(JSON.stringify(good)));
    const broken = (mutate: (r: any) => void) => {
      const r = JSON.parse(JSON.stringify(good));
      mutate(r);
      return parseTraffic(JSON.stringify(r));
    };
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[7, 2], [3, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[3, 1], [3, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[462, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[-1, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[1.5, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[1, -1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = [[1, 1, 1]])), undefined);
    assert.equal(broken((r) => (r.clusters[0].latency_fine = Array.from({ length: 463 }, (_, i) => [i, 1]))), undefined);
    assert.equal(broken((r) => (r.callers[0].latency_fine = 'x')), undefined);
    assert.equal(broken((r) => (r.latency_fine.ratio = 2)), undefined);
    assert.equal(broken((r) => (r.latency_fine = null)), undefined);
  });
});

describe('mesh top', () => {
  it('counts per service, method and path; failures are no answer, a 5xx or a gRPC status; past the bound one (other) row', () => {
    const top = new TopTable(2);
    const event = (path: string, status: number, ms: number, extra: Record<string, unknown> = {}) => ({ method: 'GET', path, status, duration_ms: ms, cluster: 'go.mesh.srv.a', grpc_status: null, ...extra });
    assert.equal(top.add(event('/a', 200, 3)), true);
    top.add(event('/a', 503, 9));
    top.add(event('/a', 200, 1));
    top.add(event('/b', 200, 2, { grpc_status: 14 }));
    top.add(event('/c', 0, 5));
    top.add(event('/d', 200, 7));
    assert.equal(top.add({ method: 'GET', path: '/x', status: '200', duration_ms: 1 }), false);
    assert.equal(
      top.render(10),
      'SERVICE        METHOD  PATH     COUNT  SUCCESS  BEST  WORST  LAST\n' +
        'go.mesh.srv.a  GET     /a       3      66.6%    1ms   9ms    1ms\n' +
        '-              -       (other)  2      50.0%    5ms   7ms    7ms\n' +
        'go.mesh.srv.a  GET     /b       1      0.0%     2ms   2ms    2ms\n',
    );
    assert.equal(top.total, 6);
    assert.equal(top.render(1).split('\n').length, 3);
  });
});

describe('/traffic of a --concurrency primary (mergeTrafficReports)', () => {
  it('sums the workers by cluster, route and caller, fine buckets by index; hosts are the most any worker has', () => {
    const a = report('w0', { ok: 3, fail: 1, counts: buckets({ 2: 4 }) });
    a.clusters[0]!.latency_fine = [[5, 1], [9, 3]];
    a.callers[0]!.latency_fine = [[5, 4]];
    a.routes[0]!.latency_fine = null;
    const b = report('w1', { ok: 2, fail: 0, counts: buckets({ 1: 2 }) }, { hosts: 3, hosts_mtls: 1 });
    b.clusters[0]!.latency_fine = [[2, 1], [9, 1]];
    b.callers[0]!.latency_fine = [[2, 2]];
    b.routes[0]!.latency_fine = null;
    b.clusters.push({ name: 'go.mesh.srv.audit', rq_2xx: 1, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, hosts: 1, hosts_mtls: 0, latency_counts: buckets({ 0: 1 }), latency_fine: [[0, 1]] });
    const primary = { id: 'primary', kind: 'sidecar', name: 'go.mesh.srv.web', mtls: 'strict', started_ms: 0 };
    const merged = mergeTrafficReports(primary, [a, b]);
    assert.deepEqual(merged.process, primary);
    assert.deepEqual(merged.clusters, [
      { name: 'go.mesh.srv.audit', rq_2xx: 1, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, hosts: 1, hosts_mtls: 0, latency_counts: buckets({ 0: 1 }), latency_fine: [[0, 1]] },
      { name: 'go.mesh.srv.orders', rq_2xx: 5, rq_3xx: 0, rq_4xx: 0, rq_5xx: 1, hosts: 3, hosts_mtls: 1, latency_counts: buckets({ 1: 2, 2: 4 }), latency_fine: [[2, 1], [5, 1], [9, 4]] },
    ]);
    assert.deepEqual(merged.routes, [{ host: 'shop.example', rule: 'checkout', rq_1xx: 0, rq_2xx: 5, rq_3xx: 0, rq_4xx: 0, rq_5xx: 1, latency_counts: null, latency_fine: null }]);
    assert.deepEqual(merged.callers, [{ front: 'sidecar_inbound', identity: 'spiffe://mesh.local/svc/web', rq_1xx: 0, rq_2xx: 5, rq_3xx: 0, rq_4xx: 0, rq_5xx: 1, latency_counts: buckets({ 1: 2, 2: 4 }), latency_fine: [[2, 2], [5, 4]] }]);
    assert.deepEqual(mergeTrafficReports(primary, []).clusters, []);
  });
});
