/**
 * The `/stats` dashboard (src/fronts/dashboard): windows from the StatsStore counters, one sampling timer
 * per process, and against a real `mesh api --enable_stats` process: the JSON agrees with admin
 * /stats counters, status classes are what was really sent, the dashboard's own requests and
 * assets are not counted, the page and its assets are served by the process.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Histogram, StatsStore } from '../../src/base/stats/store.js';
import { MAX_LATENCY_CLUSTERS, ProcessSampler, RequestSeries, bucketQuantile, type ProcessSample } from '../../src/fronts/dashboard/series.js';
import { Dashboard, isDashboardPath, type DashboardJson } from '../../src/fronts/dashboard/dashboard.js';
import { ServerState } from '../../src/admin/context.js';
import { http } from '../fixtures/gateway-helpers.js';
import { waitFor } from '../helpers.js';
import { BOOM_PATH, MISSING_PATH, OK_PATH, SERVICE, adminCounters, asTotals, drive, startStatsGateway, type StatsSetup } from '../dashboard-fixture.js';

const PROC: ProcessSample = { rss: 100, heap_used: 50, loop: { p50: 0.1, p99: 1, max: 2 } };

/** What FrontServer does per answered request. */
function answer(store: StatsStore, status: number, ms: number, prefix = 'gateway') {
  store.counter(`http.${prefix}.downstream_rq_total`).inc();
  store.counter(`http.${prefix}.downstream_rq_${Math.floor(status / 100)}xx`).inc();
  store.histogram(`http.${prefix}.downstream_rq_time`).record(ms);
}

describe('dashboard series', () => {
  it('closes windows with the status classes, latency and the process sample', () => {
    const store = new StatsStore();
    const series = new RequestSeries(store, 'gateway', 120, 1_000_000);
    for (let i = 0; i < 8; i++) answer(store, 200, 1);
    answer(store, 404, 3);
    answer(store, 503, 400);
    const w = series.sample(1_001_000, PROC);
    assert.deepEqual(w, {
      timestamp: 1001,
      duration_ms: 1000,
      requests: 10,
      status_codes: { '1xx': 0, '2xx': 8, '3xx': 0, '4xx': 1, '5xx': 1 },
      errors: 1,
      latency_ms: { p50: 1, p99: 500 },
      memory: { rss: 100, heap_used: 50 },
      event_loop_delay_ms: { p50: 0.1, p99: 1, max: 2 },
    });
    // An empty window: zeros and null latencies, not the totals again.
    const empty = series.sample(1_002_500, { ...PROC, loop: null });
    assert.equal(empty.requests, 0);
    assert.equal(empty.duration_ms, 1500);
    assert.deepEqual(empty.latency_ms, { p50: null, p99: null });
    assert.equal(empty.event_loop_delay_ms, null);
    assert.deepEqual(series.totals(), { total: 10, '1xx': 0, '2xx': 8, '3xx': 0, '4xx': 1, '5xx': 1, active: 0, cx_total: 0, cx_active: 0 });
    assert.equal(series.latency().p50, 1);
    assert.equal(series.latency().p99, 500);
  });

  it('with --stats_histograms: per-cluster p50/p99 of each window from upstream_rq_time; without: no such field', () => {
    const store = new StatsStore();
    const rqTime = (cluster: string) => store.histogram(`cluster.${cluster}.upstream_rq_time`);
    rqTime('go.mesh.srv.a').record(400); // before the series: not in any window
    store.histogram('cluster.go.mesh.srv.idle.upstream_rq_time'); // never recorded: no series
    const off = new RequestSeries(store, 'gateway', 120, 0);
    const series = new RequestSeries(store, 'gateway', 120, 0, true);
    assert.equal(series.clusterLatency, true);
    for (let i = 0; i < 99; i++) rqTime('go.mesh.srv.a').record(3);
    rqTime('go.mesh.srv.a').record(40);
    rqTime('go.mesh.srv.b').record(0.7); // a cluster created after the series started: all of it counts
    const w = series.sample(1000, PROC);
    assert.deepEqual(w.clusters_latency_ms, { 'go.mesh.srv.a': { p50: 5, p99: 5 }, 'go.mesh.srv.b': { p50: 1, p99: 1 } });
    assert.equal('clusters_latency_ms' in off.sample(1000, PROC), false);
    // Only this window's attempts; a cluster without attempts has nulls (its series keeps its place).
    rqTime('go.mesh.srv.a').record(200);
    const w2 = series.sample(2000, PROC);
    assert.deepEqual(w2.clusters_latency_ms, { 'go.mesh.srv.a': { p50: 250, p99: 250 }, 'go.mesh.srv.b': { p50: null, p99: null } });
    // A removed cluster goes away; one re-created starts from zero.
    store.removePrefix('cluster.go.mesh.srv.b.');
    assert.deepEqual(series.sample(3000, PROC).clusters_latency_ms, { 'go.mesh.srv.a': { p50: null, p99: null } });
    rqTime('go.mesh.srv.b').record(8);
    assert.deepEqual(series.sample(4000, PROC).clusters_latency_ms!['go.mesh.srv.b'], { p50: 10, p99: 10 });
    // At most MAX_LATENCY_CLUSTERS clusters, the first by name; the others keep a baseline, so a
    // cluster that moves into the first ones later does not bring its whole history.
    for (let i = 0; i < MAX_LATENCY_CLUSTERS + 5; i++) rqTime(`go.mesh.srv.c${String(i).padStart(2, '0')}`).record(1);
    const many = series.sample(5000, PROC).clusters_latency_ms!;
    assert.equal(Object.keys(many).length, MAX_LATENCY_CLUSTERS);
    assert.deepEqual(Object.keys(many), ['go.mesh.srv.a', 'go.mesh.srv.b', ...Array.from({ length: MAX_LATENCY_CLUSTERS - 2 }, (_, i) => `go.mesh.srv.c${String(i).padStart(2, '0')}`)]);
    store.removePrefix('cluster.go.mesh.srv.a.');
    store.removePrefix('cluster.go.mesh.srv.b.');
    const moved = series.sample(6000, PROC).clusters_latency_ms!;
    assert.deepEqual(moved['go.mesh.srv.c09'], { p50: null, p99: null }, 'its earlier attempts are not in this window');
  });

  it('keeps a bounded ring, oldest first', () => {
    const store = new StatsStore();
    const series = new RequestSeries(store, 'sidecar', 5, 0);
    for (let t = 1; t <= 12; t++) {
      answer(store, 200, 1, 'sidecar');
      series.sample(t * 1000, PROC);
    }
    assert.deepEqual(
      series.windows().map((w) => w.timestamp),
      [8, 9, 10, 11, 12],
    );
    assert.ok(series.windows().every((w) => w.status_codes['2xx'] === 1));
  });

  it('survives admin /reset_counters: a counter that went down restarted at 0', () => {
    const store = new StatsStore();
    const series = new RequestSeries(store, 'gateway', 10, 0);
    for (let i = 0; i < 5; i++) answer(store, 200, 1);
    series.sample(1000, PROC);
    store.resetCounters();
    answer(store, 200, 1);
    answer(store, 500, 1);
    const w = series.sample(2000, PROC);
    assert.equal(w.status_codes['2xx'], 1);
    assert.equal(w.status_codes['5xx'], 1);
    assert.equal(w.requests, 2);
  });

  it('bucketQuantile matches Histogram.quantile', () => {
    const store = new StatsStore();
    const h = store.histogram('x');
    for (const ms of [0.2, 0.7, 3, 3, 40, 40, 40, 90, 2000, 70000]) h.record(ms);
    for (const q of [0, 0.1, 0.5, 0.9, 0.99, 1]) assert.equal(bucketQuantile(h.counts, q), h.quantile(q), String(q));
    assert.equal(bucketQuantile([0, 0, 0], 0.5), null);
  });

  it('one timer per process: shared by every series, unref\'d, gone with the last one', () => {
    const sampler = new ProcessSampler(60_000);
    const store = new StatsStore();
    const a = new RequestSeries(store, 'gateway');
    const b = new RequestSeries(store, 'sidecar');
    const timers: NodeJS.Timeout[] = [];
    const real = globalThis.setInterval;
    globalThis.setInterval = ((fn: () => void, ms: number) => {
      const t = real(fn, ms);
      timers.push(t);
      return t;
    }) as typeof setInterval;
    try {
      sampler.add(a);
      sampler.add(b);
    } finally {
      globalThis.setInterval = real;
    }
    assert.equal(sampler.running, true);
    assert.equal(timers.length, 1, 'one timer for two front ends');
    assert.equal(timers[0]!.hasRef(), false, 'the timer does not keep the process alive');
    answer(store, 200, 1, 'gateway');
    answer(store, 500, 1, 'sidecar');
    sampler.tick();
    assert.equal(a.windows().length, 1);
    assert.equal(b.windows().length, 1);
    assert.equal(a.windows()[0]!.status_codes['2xx'], 1);
    assert.equal(b.windows()[0]!.status_codes['5xx'], 1);
    assert.equal(a.windows()[0]!.memory.rss, b.windows()[0]!.memory.rss, 'one process sample per tick');
    sampler.remove(a);
    assert.equal(sampler.running, true);
    sampler.remove(b);
    assert.equal(sampler.running, false);
  });

  it('dashboard paths', () => {
    for (const p of ['/stats', '/stats/assets/dashboard.js', '/stats/assets/uPlot.iife.min.js']) assert.equal(isDashboardPath(p), true, p);
    for (const p of ['/stats/', '/statsx', '/stats/x', '/', '/stat']) assert.equal(isDashboardPath(p), false, p);
  });

  it('snapshot: totals from the store, server state, clusters capped, extra numbers', () => {
    const store = new StatsStore();
    const server = new ServerState({ version: '9.8.7', startedAt: 1_700_000_000_000, now: () => 1_700_000_042_500 });
    const host = (port: number, failedActiveHc = false, successRate = -1, ok = 0, err = 0) => ({
      address: '10.0.0.1',
      port,
      hostname: '',
      stats: { cx_active: 0, cx_connect_fail: 0, cx_total: 0, rq_active: 0, rq_error: err, rq_success: ok, rq_timeout: 0, rq_total: ok + err },
      failedActiveHc,
      failedOutlierCheck: false,
      weight: 1,
      region: '',
      zone: '',
      canary: false,
      successRate,
      // The second host's node serves mutual TLS.
      mtls: port === 2,
    });
    const breakers = { maxConnections: 1, maxPendingRequests: 1, maxRequests: 1, maxRetries: 1 };
    const clusters = Array.from({ length: 130 }, (_, i) => ({
      name: `c${String(i).padStart(3, '0')}`,
      addedViaApi: false,
      circuitBreakers: { default: breakers, high: breakers },
      hosts: i === 0 ? [host(1, false, -1, 3, 1), host(2, true, 87.5), host(3)] : [host(1)],
    }));
    const sampler = new ProcessSampler(1000);
    const d = new Dashboard({
      stats: store,
      server,
      clusters: { versionInfo: () => '1', clusters: () => clusters },
      prefix: 'gateway',
      name: 'mesh api',
      errorId: 'go.mesh.api',
      sampler,
      extra: { subscribers: () => 7 },
    });
    answer(store, 200, 2);
    const s = d.snapshot();
    assert.equal(s.name, 'mesh api');
    assert.equal(s.version, '9.8.7');
    assert.equal(s.state, 'live');
    assert.equal(s.started, 1_700_000_000);
    assert.equal(s.uptime, 42);
    assert.equal(s.interval, 1);
    assert.equal(s.windows_kept, 120);
    assert.equal(s.stat_prefix, 'http.gateway.');
    assert.equal(s.totals.total, 1);
    assert.equal(s.totals['2xx'], 1);
    assert.deepEqual(s.extra, { subscribers: 7 });
    assert.equal(s.clusters_total, 130);
    assert.equal(s.clusters.length, 100);
    const c0 = s.clusters[0]!;
    assert.equal(c0.hosts_total, 3);
    assert.equal(c0.hosts_healthy, 2);
    // The mTLS coverage of each cluster: hosts whose node serves mutual TLS (the page shows "1/3 mTLS").
    assert.equal(c0.hosts_mtls, 1);
    assert.equal(s.clusters[1]!.hosts_mtls, 0);
    assert.deepEqual(
      c0.hosts.map((h) => [h.address, h.health, h.healthy, h.success_rate, h.success_rate_source]),
      [
        ['10.0.0.1:1', 'healthy', true, 75, 'since_start'],
        ['10.0.0.1:2', '/failed_active_hc', false, 87.5, 'outlier_interval'],
        ['10.0.0.1:3', 'healthy', true, null, null],
      ],
    );
    void server.fail();
    assert.equal(d.snapshot().state, 'draining');
    assert.equal(sampler.running, false, 'no timer before start()');
    d.start();
    assert.equal(sampler.running, true);
    d.stop();
    assert.equal(sampler.running, false);
  });
});

describe('dashboard on a real mesh api process', () => {
  let setup: StatsSetup;
  let base: string;
  let admin: string;
  const json = async (path = '/stats', headers: Record<string, string> = { accept: 'application/json' }) => {
    const res = await http('GET', `${base}${path}`, { headers });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['content-type'], 'application/json');
    return res.json<DashboardJson>();
  };

  before(async () => {
    setup = await startStatsGateway();
    base = setup.gw.url;
    admin = setup.gw.admin;
  });
  after(async () => {
    await setup?.close();
  });

  it('status classes as really sent; JSON totals equal admin /stats counters; own requests not counted', async () => {
    const zero = await json();
    assert.deepEqual(zero.totals, { total: 0, '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0, active: 0, cx_total: zero.totals.cx_total, cx_active: zero.totals.cx_active });

    assert.deepEqual(new Set(await drive(base, OK_PATH, 6)), new Set([200]));
    assert.deepEqual(new Set(await drive(base, BOOM_PATH, 3)), new Set([500]));
    assert.deepEqual(new Set(await drive(base, MISSING_PATH, 2)), new Set([404]));
    // The dashboard's own requests, of every kind: none is counted.
    await json();
    await json('/stats?format=json', {});
    await json('/stats', { 'content-type': 'application/json' });
    assert.equal((await http('GET', `${base}/stats`)).status, 200);
    assert.equal((await http('HEAD', `${base}/stats`)).status, 200);
    assert.equal((await http('GET', `${base}/stats/assets/uPlot.iife.min.js`)).status, 200);
    assert.equal((await http('GET', `${base}/stats/assets/nope.js`)).status, 404);
    assert.equal((await http('POST', `${base}/stats`, { body: '{}' })).status, 405);

    const s = await json();
    const counters = await adminCounters(admin);
    const expected = { total: 11, '1xx': 0, '2xx': 6, '3xx': 0, '4xx': 2, '5xx': 3, active: 0 };
    assert.deepEqual(asTotals(counters), expected, 'admin /stats');
    const { cx_total, cx_active, ...rq } = s.totals;
    assert.deepEqual(rq, expected, 'JSON totals');
    assert.equal(cx_total, counters['http.gateway.downstream_cx_total']);
    assert.ok(cx_active >= 0);
    assert.ok(s.latency_ms.p50 !== null && s.latency_ms.p99 !== null);

    // Once a window has closed after the traffic, the windows add up to the same counters.
    const windowsSum = async () => {
      const sum = { '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 };
      let requests = 0;
      let errors = 0;
      for (const w of (await json()).counters) {
        for (const k of Object.keys(sum) as Array<keyof typeof sum>) sum[k] += w.status_codes[k];
        requests += w.requests;
        errors += w.errors;
      }
      return { sum, requests, errors };
    };
    const { sum, requests, errors } = await waitFor(async () => {
      const w = await windowsSum();
      return w.requests >= 11 ? w : undefined;
    }, 5000, 100);
    assert.deepEqual(sum, { '1xx': 0, '2xx': 6, '3xx': 0, '4xx': 2, '5xx': 3 });
    assert.equal(requests, 11);
    assert.equal(errors, 3);
    assert.deepEqual(asTotals(await adminCounters(admin)), expected, 'still nothing counted for /stats');
  });

  it('JSON shape: started, uptime, memory, windows, latency, clusters with health and success rate', async () => {
    await waitFor(async () => (await json()).counters.length >= 2, 5000, 100);
    const s = await json();
    assert.equal(s.name, 'mesh api');
    assert.match(s.version, /^\d+\.\d+\.\d+/);
    assert.equal(s.state, 'live');
    assert.ok(s.started > 1_600_000_000 && s.started <= Date.now() / 1000);
    assert.ok(s.uptime >= 0);
    assert.equal(s.interval, 1);
    assert.equal(s.windows_kept, 120);
    for (const k of ['rss', 'heap_used', 'heap_total', 'external'] as const) assert.ok(s.memory[k] > 0, k);
    const w = s.counters.at(-1)!;
    assert.ok(w.duration_ms > 500 && w.duration_ms < 5000, String(w.duration_ms));
    assert.ok(w.memory.rss > 0);
    assert.ok(w.event_loop_delay_ms === null || w.event_loop_delay_ms.p99 >= 0);
    for (let i = 1; i < s.counters.length; i++) assert.ok(s.counters[i]!.timestamp > s.counters[i - 1]!.timestamp, 'oldest first');
    // Without --stats_histograms: no per-cluster latency (the page draws no upstream chart).
    assert.equal(s.histograms, false);
    assert.ok(s.counters.every((x) => !('clusters_latency_ms' in x)));
    const cluster = s.clusters.find((c) => c.name === SERVICE);
    assert.ok(cluster, JSON.stringify(s.clusters));
    assert.equal(cluster.hosts_total, 1);
    assert.equal(cluster.hosts_healthy, 1);
    const host = cluster.hosts[0]!;
    assert.equal(host.address, `127.0.0.1:${setup.backend.port}`);
    assert.equal(host.health, 'healthy');
    assert.equal(host.rq_total, 9);
    assert.equal(host.rq_success, 6);
    assert.equal(host.rq_error, 3);
    assert.equal(host.success_rate, 66.67);
    assert.equal(host.success_rate_source, 'since_start');
  });

  it('the page and its assets come from the process, with a CSP that allows nothing else', async () => {
    const page = await http('GET', `${base}/stats`, { headers: { accept: 'text/html,application/xhtml+xml' } });
    assert.equal(page.status, 200);
    assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(page.headers['cache-control'], 'no-store');
    assert.match(String(page.headers['content-security-policy']), /default-src 'none'; script-src 'self'/);
    assert.doesNotMatch(page.text, /https?:\/\//, 'no absolute URL: nothing from a CDN');
    const refs = [...page.text.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!).filter((r) => !r.startsWith('data:'));
    assert.deepEqual(refs.sort(), ['stats/assets/dashboard.css', 'stats/assets/dashboard.js', 'stats/assets/topology.js', 'stats/assets/uPlot.iife.min.js', 'stats/assets/uPlot.min.css']);
    for (const ref of refs) {
      const res = await http('GET', `${base}/${ref}`);
      assert.equal(res.status, 200, ref);
      assert.match(String(res.headers['content-type']), ref.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
      assert.ok(res.text.length > 100, ref);
      const etag = String(res.headers.etag);
      const again = await http('GET', `${base}/${ref}`, { headers: { 'if-none-match': etag } });
      assert.equal(again.status, 304, ref);
    }
    // An encoded "/" never reaches the dashboard (400 at the front server); a decoded `..` stays out of the assets.
    const bad = await http('GET', `${base}/stats/assets/..%2fpackage.json`);
    assert.equal(bad.status, 400);
    assert.equal(bad.json().id, 'go.mesh.api');
    const dotted = await http('GET', `${base}/stats/assets/%2e%2e/%2e%2e/package.json`);
    assert.equal(dotted.status, 404);
    assert.equal(dotted.json().id, 'go.mesh.api');
    const post = await http('POST', `${base}/stats`);
    assert.equal(post.headers.allow, 'GET, HEAD');
  });

  it('draining shows in the JSON', async () => {
    const fail = await http('POST', `${admin}/healthcheck/fail`);
    assert.equal(fail.status, 200);
    try {
      assert.equal((await json()).state, 'draining');
    } finally {
      await http('POST', `${admin}/healthcheck/ok`);
    }
    assert.equal((await json()).state, 'live');
  });
});

describe('dashboard on a real mesh api --stats_histograms process', () => {
  let setup: StatsSetup;
  before(async () => {
    setup = await startStatsGateway(['--stats_histograms']);
  });
  after(async () => {
    await setup?.close();
  });

  it('the windows carry p50/p99 of the cluster, from the histogram admin /stats prints', async () => {
    const get = async () => (await http('GET', `${setup.gw.url}/stats?format=json`)).json<DashboardJson>();
    assert.equal((await get()).histograms, true);
    assert.deepEqual(new Set(await drive(setup.gw.url, OK_PATH, 20)), new Set([200]));
    const windows = await waitFor(async () => {
      const s = await get();
      const withTraffic = s.counters.filter((w) => w.clusters_latency_ms?.[SERVICE]?.p99 != null);
      const attempts = withTraffic.reduce((n, w) => n + w.requests, 0);
      return attempts >= 20 ? withTraffic : undefined;
    }, 10_000, 100);
    // Admin /stats JSON has the same histogram (Envoy's computed_quantiles, cumulative).
    const admin = (await http('GET', `${setup.gw.admin}/stats?format=json&filter=${encodeURIComponent(`^cluster\\.${SERVICE}\\.upstream_rq_time$`)}`)).json<{ stats: any[] }>();
    const h = admin.stats.at(-1).histograms;
    assert.equal(h.computed_quantiles[0].name, `cluster.${SERVICE}.upstream_rq_time`);
    const p100 = h.computed_quantiles[0].values[h.supported_quantiles.indexOf(100)].cumulative as number;
    for (const w of windows) {
      const q = w.clusters_latency_ms![SERVICE]!;
      assert.ok(Histogram.BOUNDS.includes(q.p50!) && Histogram.BOUNDS.includes(q.p99!), JSON.stringify(q));
      assert.ok(q.p50! <= q.p99! && q.p99! <= p100, `${JSON.stringify(q)} <= P100 ${p100}`);
    }
  });
});
