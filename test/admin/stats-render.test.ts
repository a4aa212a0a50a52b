/** Stats formats: tag extraction, text/JSON/Prometheus rendering, promtool, agreement, admin /stats parameters. */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { engine, waitFor } from '../helpers.js';
import { startAdmin, get, STARTED_AT, type Running } from '../admin-fixtures.js';
import { StatsStore, extractTags } from '../../src/base/stats/store.js';
import {
  escapeLabelValue,
  prometheusMetricName,
  prometheusSeries,
  renderJson,
  renderPrometheus,
  renderText,
  sanitizeName,
} from '../../src/base/stats/render.js';
import { updateServerStats, versionNumber } from '../../src/base/stats/server-stats.js';
import { ProcessMetrics } from '../../src/base/stats/process-metrics.js';

/** The standard process families, sorted, as the Prometheus format shows them on Linux. */
const PROCESS_FAMILIES: Array<[string, 'counter' | 'gauge']> = [
  ['nodejs_eventloop_lag_seconds', 'gauge'],
  ['nodejs_heap_size_total_bytes', 'gauge'],
  ['nodejs_heap_size_used_bytes', 'gauge'],
  ['process_cpu_seconds_total', 'counter'],
  ['process_open_fds', 'gauge'],
  ['process_resident_memory_bytes', 'gauge'],
  ['process_start_time_seconds', 'gauge'],
];

/** metric -> value of the samples without labels of a Prometheus text body. */
function unlabelled(body: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of body.matchAll(/^([a-z_]+) (\S+)$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

/** A store like a busy process's: clusters with dotted names, an odd name, http prefixes, topics. */
function populate(store: StatsStore): void {
  for (const cluster of ['go.mesh.srv.greeter', 'static_backend', 'we"ird\\cluster\nname']) {
    store.counter(`cluster.${cluster}.upstream_rq_total`).inc(11);
    store.counter(`cluster.${cluster}.upstream_rq_2xx`).inc(9);
    store.counter(`cluster.${cluster}.upstream_rq_5xx`).inc(2);
    store.counter(`cluster.${cluster}.upstream_rq_timeout`);
    store.counter(`cluster.${cluster}.upstream_rq_retry`).inc(1);
    store.counter(`cluster.${cluster}.upstream_cx_total`).inc(3);
    store.counter(`cluster.${cluster}.upstream_cx_connect_fail`);
    store.counter(`cluster.${cluster}.upstream_rq_pending_overflow`);
    store.counter(`cluster.${cluster}.outlier_detection.ejections_total`).inc(1);
    store.counter(`cluster.${cluster}.health_check.attempt`).inc(4);
    store.counter(`cluster.${cluster}.health_check.success`).inc(3);
    store.counter(`cluster.${cluster}.health_check.failure`).inc(1);
    store.gauge(`cluster.${cluster}.upstream_cx_active`).set(1);
    store.gauge(`cluster.${cluster}.membership_total`).set(2);
    store.gauge(`cluster.${cluster}.membership_healthy`).set(1);
    store.gauge(`cluster.${cluster}.outlier_detection.ejections_active`).set(1);
  }
  for (const prefix of ['ingress', 'admin']) {
    store.counter(`http.${prefix}.downstream_rq_total`).inc(5);
    for (const cls of ['2', '3', '4', '5']) store.counter(`http.${prefix}.downstream_rq_${cls}xx`).inc(Number(cls));
    store.gauge(`http.${prefix}.downstream_cx_active`).set(1);
  }
  store.counter('broker.topic.go.mesh.topic.orders.published').inc(2);
  store.counter('registry.watch.events').inc(3);
  store.gauge('sidecar.healthCheck.appStatus').set(1);
  store.gauge('server.total_connections').set(-2.5);
  store.histogram('http.ingress.downstream_rq_time').record(12); // never printed
}

describe('tag extraction', () => {
  const cases: Array<[string, string, Array<[string, string]>]> = [
    ['cluster.go.mesh.srv.greeter.upstream_rq_total', 'cluster.upstream_rq_total', [['cluster_name', 'go.mesh.srv.greeter']]],
    ['cluster.x.upstream_rq_2xx', 'cluster.upstream_rq_xx', [['cluster_name', 'x'], ['response_code_class', '2']]],
    ['cluster.a.b.outlier_detection.ejections_active', 'cluster.outlier_detection.ejections_active', [['cluster_name', 'a.b']]],
    ['cluster.a.b.health_check.attempt', 'cluster.health_check.attempt', [['cluster_name', 'a.b']]],
    ['cluster.a.versioned.version', 'cluster.version', [['cluster_name', 'a.versioned']]],
    ['cluster.x.membership_total', 'cluster.membership_total', [['cluster_name', 'x']]],
    ['http.ingress.downstream_rq_5xx', 'http.downstream_rq_xx', [['response_code_class', '5'], ['http_conn_manager_prefix', 'ingress']]],
    ['http.admin.downstream_cx_active', 'http.downstream_cx_active', [['http_conn_manager_prefix', 'admin']]],
    ['listener.127.0.0.1_8080.downstream_cx_total', 'listener.downstream_cx_total', [['listener_address', '127.0.0.1_8080']]],
    ['broker.topic.go.mesh.topic.orders.published', 'broker.topic.published', [['broker_topic', 'go.mesh.topic.orders']]],
    ['server.uptime', 'server.uptime', []],
    ['cluster.unknown_stat_kind', 'cluster.unknown_stat_kind', []],
  ];
  for (const [name, family, tags] of cases) {
    test(name, () => assert.deepEqual(extractTags(name), { family, tags }));
  }
  test('custom rules (with a g flag) work and the store caches', () => {
    const store = new StatsStore([{ name: 'shard', regex: /\.(shard(\d+))\./g }]);
    assert.deepEqual(store.tagged('db.shard12.reads'), { family: 'db..reads', tags: [['shard', '12']] });
    assert.equal(store.tagged('db.shard12.reads'), store.tagged('db.shard12.reads'));
  });
});

describe('prometheus naming', () => {
  test('sanitizing and suffixes', () => {
    assert.equal(sanitizeName('3.artists.play-violin@019street'), '3_artists_play_violin_019street');
    assert.equal(sanitizeName('sidecar.healthCheck.appStatus'), 'sidecar_health_check_app_status');
    assert.equal(prometheusMetricName('cluster.upstream_rq_total', 'counter'), 'mesh_cluster_upstream_rq_total');
    assert.equal(prometheusMetricName('cluster.upstream_rq_retry', 'counter'), 'mesh_cluster_upstream_rq_retry_total');
    assert.equal(prometheusMetricName('vulture.eats-liver', 'gauge'), 'mesh_vulture_eats_liver');
    assert.equal(prometheusMetricName('cluster.membership_total', 'gauge'), 'mesh_cluster_membership');
    assert.equal(prometheusMetricName('a.b_count', 'gauge'), 'mesh_a_b');
    assert.equal(prometheusMetricName('a.b_count', 'counter'), 'mesh_a_b_count_total');
  });
  test('label values are escaped', () => {
    assert.equal(escapeLabelValue('plain'), 'plain');
    assert.equal(escapeLabelValue('a"b\\c\nd'), 'a\\"b\\\\c\\nd');
  });
  test('exact output: HELP and TYPE once, families sorted, samples grouped, no {} without labels', () => {
    const store = new StatsStore();
    store.counter('cluster.b.upstream_rq_total').inc(2);
    store.gauge('server.uptime').set(7);
    store.counter('cluster.a.upstream_rq_total').inc(1);
    store.counter('cluster.a.upstream_rq_4xx').inc(1);
    store.counter('cluster.b.upstream_rq_2xx').inc(1);
    store.counter('cluster.a.upstream_rq_2xx').inc(3);
    store.gauge('cluster.a.membership_total').set(3);
    assert.equal(
      renderPrometheus(store, store.list()).toString(),
      '# HELP mesh_cluster_membership Hosts in the cluster\n' +
        '# TYPE mesh_cluster_membership gauge\n' +
        'mesh_cluster_membership{cluster_name="a"} 3\n' +
        '# HELP mesh_cluster_upstream_rq_total Total upstream requests\n' +
        '# TYPE mesh_cluster_upstream_rq_total counter\n' +
        'mesh_cluster_upstream_rq_total{cluster_name="a"} 1\n' +
        'mesh_cluster_upstream_rq_total{cluster_name="b"} 2\n' +
        '# HELP mesh_cluster_upstream_rq_xx_total Upstream responses by response code class\n' +
        '# TYPE mesh_cluster_upstream_rq_xx_total counter\n' +
        'mesh_cluster_upstream_rq_xx_total{cluster_name="a",response_code_class="2"} 3\n' +
        'mesh_cluster_upstream_rq_xx_total{cluster_name="a",response_code_class="4"} 1\n' +
        'mesh_cluster_upstream_rq_xx_total{cluster_name="b",response_code_class="2"} 1\n' +
        '# HELP mesh_server_uptime Seconds since the server started\n' +
        '# TYPE mesh_server_uptime gauge\n' +
        'mesh_server_uptime 7\n',
    );
  });
  test('collisions: one type per family, one sample per label set', () => {
    const store = new StatsStore();
    store.counter('a.b').inc(1); // mesh_a_b_total counter
    store.counter('a.b_total').inc(2); // same family and labels: left out
    store.gauge('a.b_total_x').set(1);
    store.gauge('c.d_total').set(5); // mesh_c_d gauge
    store.counter('c.d').inc(9); // mesh_c_d_total: a different family, fine
    store.gauge('c-d').set(6); // mesh_c_d gauge again, same labels: left out
    const out = renderPrometheus(store, store.list()).toString();
    assert.equal((out.match(/^# TYPE mesh_a_b_total /gm) ?? []).length, 1);
    assert.match(out, /^mesh_a_b_total 1$/m);
    assert.doesNotMatch(out, /^mesh_a_b_total 2$/m);
    assert.match(out, /^mesh_c_d_total 9$/m);
    assert.equal((out.match(/^mesh_c_d /gm) ?? []).length, 1);
  });
});

describe('text and JSON', () => {
  test('text is name: value, sorted by byte order; JSON compact; histograms never shown', () => {
    const store = new StatsStore();
    store.counter('b.z').inc(2);
    store.gauge('B.a').set(1);
    store.counter('a.y');
    store.histogram('a.h').record(3);
    assert.equal(renderText(store.list()).toString(), 'B.a: 1\na.y: 0\nb.z: 2\n');
    assert.equal(renderJson(store.list()).toString(), '{"stats":[{"name":"B.a","value":1},{"name":"a.y","value":0},{"name":"b.z","value":2}]}');
    assert.equal(renderJson([]).toString(), '{"stats":[]}');
  });
});

describe('server stats', () => {
  test('versionNumber', () => {
    assert.equal(versionNumber('0.1.0'), 1000);
    assert.equal(versionNumber('1.12.3-dev'), 1012003);
    assert.equal(versionNumber('v2'), 2000000);
    assert.equal(versionNumber('junk'), 0);
  });
  test('updateServerStats sets the server gauges', () => {
    const store = new StatsStore();
    let state: 'live' | 'draining' = 'live';
    const src = { get state() { return state; }, startedAt: 1000, version: '1.2.3', epoch: 0, now: () => 62_999 };
    updateServerStats(store, src);
    assert.equal(store.gauge('server.uptime').value, 61);
    assert.equal(store.gauge('server.live').value, 1);
    assert.equal(store.gauge('server.version').value, 1002003);
    assert.ok(store.gauge('server.memory_allocated').value > 0);
    state = 'draining';
    updateServerStats(store, src);
    assert.equal(store.gauge('server.live').value, 0);
  });
});

describe('process metrics', () => {
  test('event-loop lag: the mean delay since the previous read, measured on a blocked loop', async () => {
    const metrics = new ProcessMetrics();
    try {
      const lag = () => metrics.families(/^nodejs_eventloop_lag_seconds$/)[0]?.value ?? -1;
      // the monitor records the time between two fires of its timer: wait until it has recorded one
      await waitFor(() => lag() > 0);
      const until = Date.now() + 150;
      while (Date.now() < until); // block the loop for 150 ms
      // 0 until the monitor's timer has fired again; then the late fire weighs in the mean
      const measured = await waitFor(() => lag());
      assert.ok(measured > 0.01, `lag after a 150 ms block: ${measured} s`);
      assert.ok(measured < 5, `lag after a 150 ms block: ${measured} s`);
    } finally {
      metrics.close();
    }
  });
  test('close stops the monitor: the lag family is left out, the rest stays', () => {
    const metrics = new ProcessMetrics();
    assert.deepEqual(metrics.families().map((f) => f.metric).sort(), PROCESS_FAMILIES.map(([m]) => m));
    metrics.close();
    metrics.close();
    assert.deepEqual(metrics.families().map((f) => f.metric).sort(), PROCESS_FAMILIES.map(([m]) => m).filter((m) => m !== 'nodejs_eventloop_lag_seconds'));
  });
  test('renderPrometheus sorts extra families in among the stats', () => {
    const store = new StatsStore();
    store.gauge('server.uptime').set(7);
    const extra = [
      { metric: 'process_open_fds', kind: 'gauge' as const, help: 'Number of open file descriptors', value: 12 },
      { metric: 'nodejs_heap_size_used_bytes', kind: 'gauge' as const, help: 'Heap', value: 1.5 },
    ];
    assert.equal(
      renderPrometheus(store, store.list(), extra).toString(),
      '# HELP mesh_server_uptime Seconds since the server started\n# TYPE mesh_server_uptime gauge\nmesh_server_uptime 7\n' +
        '# HELP nodejs_heap_size_used_bytes Heap\n# TYPE nodejs_heap_size_used_bytes gauge\nnodejs_heap_size_used_bytes 1.5\n' +
        '# HELP process_open_fds Number of open file descriptors\n# TYPE process_open_fds gauge\nprocess_open_fds 12\n',
    );
  });
});

describe('admin /stats', () => {
  let r: Running;
  before(async () => {
    r = await startAdmin({
      certs: () => [
        { path: '/etc/mesh/tls/a.crt', serialNumber: '01', subjectAltNames: [], validFrom: new Date(0), expiration: new Date(STARTED_AT + 86_400_000) },
      ],
    });
    populate(r.ctx.stats);
  });
  after(async () => {
    await r.close();
  });

  test('counters and gauges agree across text, json and prometheus', async () => {
    // memory gauges and the process metrics move between two requests: leave them out (RE2 has no
    // lookahead: every name but those starting server.m, pr or no)
    const stable = '&filter=' + encodeURIComponent('^(?:[^psn]|p[^r]|n[^o]|s[^e]|server\\.[^m])');
    const text = (await get(r.base, '/stats?format=text' + stable)).body;
    const json = JSON.parse((await get(r.base, '/stats?format=json' + stable)).body) as { stats: Array<{ name: string; value: number }> };
    const prom = (await get(r.base, '/stats?format=prometheus' + stable)).body;
    assert.equal((await get(r.base, '/stats/prometheus?' + stable)).body, prom);

    const stats = r.ctx.stats.list({ filter: /^(?!server\.memory_)/ });
    assert.ok(stats.length > 50);
    const textLines = text.split('\n').filter(Boolean);
    // names with a newline take two text lines; everything else is one line per stat
    const expectedText = stats.map((s) => `${s.name}: ${s.value}`).join('\n').split('\n');
    assert.deepEqual(textLines, expectedText);
    assert.deepEqual(
      json.stats,
      stats.map((s) => ({ name: s.name, value: s.value })),
    );
    const promSamples = new Map<string, string>();
    for (const line of prom.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const i = line.lastIndexOf(' ');
      promSamples.set(line.slice(0, i), line.slice(i + 1));
    }
    assert.equal(promSamples.size, stats.length, 'one sample per stat');
    for (const s of stats) {
      const series = prometheusSeries(r.ctx.stats, s.name, s.kind);
      const key = series.labels ? `${series.metric}{${series.labels}}` : series.metric;
      assert.equal(promSamples.get(key), String(s.value), `${s.name} -> ${key}`);
      const fromJson = json.stats.find((j) => j.name === s.name);
      assert.equal(fromJson?.value, s.value);
    }
    assert.ok(text.includes('server.uptime: 3\n'));
    assert.ok(text.includes('server.seconds_until_first_cert_expiring: 86396\n'));
    assert.ok(!text.includes('downstream_rq_time'), 'histograms are not shown');
    assert.match(prom, /^mesh_cluster_upstream_rq_total\{cluster_name="we\\"ird\\\\cluster\\nname"\} 11$/m);
    assert.match(prom, /^mesh_http_downstream_rq_xx_total\{response_code_class="4",http_conn_manager_prefix="admin"\} 4$/m);
    assert.match(prom, /^mesh_server_total_connections -2\.5$/m);
  });

  test('promtool check metrics passes with no warning', async (t) => {
    const promtool = engine('MESH_TEST_PROMTOOL', 'promtool');
    if (!promtool) {
      t.skip('promtool not available: set MESH_TEST_PROMTOOL to its path (Debian package prometheus)');
      return;
    }
    const paths = ['/stats?format=prometheus', '/stats/prometheus?usedonly', '/stats?format=prometheus&filter=cluster', '/stats/prometheus?filter=^(process|nodejs)_'];
    for (const path of paths) {
      const body = (await get(r.base, path)).body;
      const res: { status: number | null; stdout: string; stderr: string } = spawnSync(promtool, ['check', 'metrics'], { input: body, encoding: 'utf8' });
      assert.equal(res.status, 0, `${path}: promtool exit ${res.status}\n${res.stdout}${res.stderr}`);
      assert.equal((res.stdout + res.stderr).trim(), '', `${path}: promtool said something`);
    }
  });

  test('process metrics: standard names with HELP and TYPE, in the Prometheus format only', async () => {
    const body = (await get(r.base, '/stats/prometheus')).body;
    for (const [metric, kind] of PROCESS_FAMILIES) {
      assert.match(body, new RegExp(`^# HELP ${metric} \\S.*\n# TYPE ${metric} ${kind}\n${metric} \\S+\n`, 'm'), metric);
    }
    // sorted in among the mesh_ families
    const order = [...body.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]!);
    assert.deepEqual(order, [...order].sort());
    const v = unlabelled(body);
    assert.ok(v.get('process_cpu_seconds_total')! > 0);
    const cpu = process.cpuUsage();
    assert.ok(v.get('process_cpu_seconds_total')! <= (cpu.user + cpu.system) / 1e6);
    assert.ok(v.get('process_resident_memory_bytes')! > 10_000_000);
    const started = Date.now() / 1000 - process.uptime();
    assert.ok(Math.abs(v.get('process_start_time_seconds')! - started) < 5, 'start time within 5 s of now - uptime');
    assert.ok(v.get('process_open_fds')! >= 3, 'stdin, stdout, stderr at least');
    assert.ok(v.get('nodejs_heap_size_used_bytes')! > 0);
    assert.ok(v.get('nodejs_heap_size_used_bytes')! <= v.get('nodejs_heap_size_total_bytes')!);
    assert.ok(v.get('nodejs_eventloop_lag_seconds')! >= 0);
    // the filter selects them by their Prometheus name; usedonly keeps them
    const only = (await get(r.base, '/stats?format=prometheus&usedonly&filter=^process_(cpu|open)')).body;
    assert.deepEqual([...only.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => `${m[1]} ${m[2]}`), ['process_cpu_seconds_total counter', 'process_open_fds gauge']);
    assert.equal(only.split('\n').length, 7);
    // never in text or JSON
    for (const path of ['/stats', '/stats?format=json']) {
      const other = (await get(r.base, path)).body;
      assert.doesNotMatch(other, /process_|nodejs_/, path);
    }
  });

  test('usedonly and filter work with every format', async () => {
    const used = (await get(r.base, '/stats?usedonly')).body;
    assert.ok(!used.includes('upstream_rq_timeout'), 'unused counter left out');
    assert.ok(used.includes('cluster.static_backend.upstream_rq_total: 11\n'));
    const filtered = (await get(r.base, '/stats?filter=static_backend\\.upstream_rq_(total|timeout)$')).body;
    assert.equal(filtered, 'cluster.static_backend.upstream_rq_timeout: 0\ncluster.static_backend.upstream_rq_total: 11\n');
    const both = (await get(r.base, '/stats?usedonly&filter=static_backend\\.upstream_rq_(total|timeout)$')).body;
    assert.equal(both, 'cluster.static_backend.upstream_rq_total: 11\n');
    assert.equal(
      (await get(r.base, '/stats?format=json&usedonly&filter=static_backend\\.upstream_rq_(total|timeout)$')).body,
      '{"stats":[{"name":"cluster.static_backend.upstream_rq_total","value":11}]}',
    );
    assert.equal(
      (await get(r.base, '/stats?format=json&filter=^server\\.version$')).body,
      '{"stats":[{"name":"server.version","value":1002003}]}',
    );
    assert.equal((await get(r.base, '/stats?format=json&filter=nothing-matches')).body, '{"stats":[]}');
    assert.equal(
      (await get(r.base, '/stats?format=prometheus&usedonly&filter=static_backend\\.upstream_rq_(total|timeout)$')).body,
      '# HELP mesh_cluster_upstream_rq_total Total upstream requests\n' +
        '# TYPE mesh_cluster_upstream_rq_total counter\n' +
        'mesh_cluster_upstream_rq_total{cluster_name="static_backend"} 11\n',
    );
    // percent-encoded filter; first duplicate wins
    assert.equal((await get(r.base, '/stats?filter=%5Eserver%5C.live%24&filter=.')).body, 'server.live: 1\n');
  });

  test('bad filter and unknown format are 400 with a message', async () => {
    let res = await get(r.base, '/stats?filter=(unclosed');
    assert.equal(res.status, 400);
    assert.equal(res.body, 'Invalid filter: invalid regex "(unclosed": missing closing ): `(unclosed`\n');
    res = await get(r.base, '/stats?format=prometheus&filter=[');
    assert.equal(res.status, 400);
    res = await get(r.base, '/stats?format=xml');
    assert.equal(res.status, 400);
    assert.equal(res.body, 'usage: /stats?format=(json|prometheus|text)\n\n');
    assert.equal((await get(r.base, '/stats?format=text&filter=^server\\.live$')).body, 'server.live: 1\n');
  });
});

describe('admin /stats with --stats_histograms', () => {
  let r: Running;
  /** The 17 `_bucket` lines then `_sum` and `_count` of one series, from its cumulative counts. */
  const buckets = (metric: string, labels: string, cumulative: number[], sum: string): string => {
    const le = ['0.5', '1', '2', '5', '10', '25', '50', '100', '250', '500', '1000', '2500', '5000', '10000', '30000', '60000', '+Inf'];
    const pre = labels ? labels + ',' : '';
    let out = '';
    for (let i = 0; i < le.length; i++) out += `${metric}_bucket{${pre}le="${le[i]}"} ${cumulative[i]}\n`;
    const l = labels ? `{${labels}}` : '';
    return out + `${metric}_sum${l} ${sum}\n${metric}_count${l} ${cumulative[cumulative.length - 1]}\n`;
  };
  const q = (...v: string[]) => ['0', '25', '50', '75', '90', '95', '99', '99.5', '99.9', '100'].map((p, i) => `P${p}(${v[i]},${v[i]})`).join(' ');
  before(async () => {
    r = await startAdmin({ histograms: true });
    populate(r.ctx.stats);
    const greeter = r.ctx.stats.histogram('cluster.go.mesh.srv.greeter.upstream_rq_time');
    for (const ms of [0.25, 3, 3, 40, 70000]) greeter.record(ms);
    r.ctx.stats.histogram('cluster.static_backend.upstream_rq_time'); // never recorded
  });
  after(async () => {
    await r.close();
  });

  test('text: the quantile line per histogram after the counters and gauges, "No recorded values" when empty', async () => {
    const body = (await get(r.base, '/stats?filter=' + encodeURIComponent('(rq_time|^http\\.ingress\\.downstream_rq_total)$'))).body;
    assert.equal(
      body,
      'http.ingress.downstream_rq_total: 5\n' +
        `cluster.go.mesh.srv.greeter.upstream_rq_time: ${q('0.5', '5', '5', '50', '120000', '120000', '120000', '120000', '120000', '120000')}\n` +
        'cluster.static_backend.upstream_rq_time: No recorded values\n' +
        `http.ingress.downstream_rq_time: ${q('25', '25', '25', '25', '25', '25', '25', '25', '25', '25')}\n`,
    );
    // usedonly leaves the empty histogram out
    const used = (await get(r.base, '/stats?usedonly&filter=rq_time$')).body;
    assert.equal(used.split('\n').map((l) => l.split(':')[0]).join(' '), 'cluster.go.mesh.srv.greeter.upstream_rq_time http.ingress.downstream_rq_time ');
    // a filter matching no histogram shows none
    assert.equal((await get(r.base, '/stats?filter=^server\\.live$')).body, 'server.live: 1\n');
  });

  test('json: the histograms section as the last element of stats, null when empty', async () => {
    const nulls = Array(10).fill('{"interval":null,"cumulative":null}').join(',');
    const v25 = Array(10).fill('{"interval":25,"cumulative":25}').join(',');
    let body = (await get(r.base, '/stats?format=json&filter=' + encodeURIComponent('^(http\\.ingress\\.downstream_rq_(total|time)|cluster\\.static_backend\\.upstream_rq_time)$'))).body;
    assert.equal(
      body,
      '{"stats":[{"name":"http.ingress.downstream_rq_total","value":5},{"histograms":{"supported_quantiles":[0,25,50,75,90,95,99,99.5,99.9,100],"computed_quantiles":[' +
        `{"name":"cluster.static_backend.upstream_rq_time","values":[${nulls}]},{"name":"http.ingress.downstream_rq_time","values":[${v25}]}]}}]}`,
    );
    body = (await get(r.base, '/stats?format=json&usedonly&filter=^http\\.ingress\\.downstream_rq_time$')).body;
    assert.equal(body, `{"stats":[{"histograms":{"supported_quantiles":[0,25,50,75,90,95,99,99.5,99.9,100],"computed_quantiles":[{"name":"http.ingress.downstream_rq_time","values":[${v25}]}]}}]}`);
    assert.equal((await get(r.base, '/stats?format=json&filter=^server\\.live$')).body, '{"stats":[{"name":"server.live","value":1}]}');
  });

  test('prometheus: cumulative buckets in ms, +Inf, _sum, _count, labelled like the counters', async () => {
    const body = (await get(r.base, '/stats?format=prometheus&filter=rq_time$')).body;
    assert.equal(
      body,
      '# HELP mesh_cluster_upstream_rq_time Upstream request time in milliseconds\n# TYPE mesh_cluster_upstream_rq_time histogram\n' +
        buckets('mesh_cluster_upstream_rq_time', 'cluster_name="go.mesh.srv.greeter"', [1, 1, 1, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5], '70046.25') +
        buckets('mesh_cluster_upstream_rq_time', 'cluster_name="static_backend"', Array(17).fill(0), '0') +
        '# HELP mesh_http_downstream_rq_time Downstream request time in milliseconds\n# TYPE mesh_http_downstream_rq_time histogram\n' +
        buckets('mesh_http_downstream_rq_time', 'http_conn_manager_prefix="ingress"', [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], '12'),
    );
    assert.equal((await get(r.base, '/stats/prometheus?filter=rq_time$')).body, body);
    const used = (await get(r.base, '/stats/prometheus?usedonly&filter=rq_time$')).body;
    assert.ok(!used.includes('static_backend'));
    assert.ok(used.includes('cluster_name="go.mesh.srv.greeter"'));
  });

  test('promtool check metrics passes with histograms', async (t) => {
    const promtool = engine('MESH_TEST_PROMTOOL', 'promtool');
    if (!promtool) {
      t.skip('promtool not available: set MESH_TEST_PROMTOOL to its path (Debian package prometheus)');
      return;
    }
    for (const path of ['/stats?format=prometheus', '/stats/prometheus?usedonly', '/stats?format=prometheus&filter=rq_time']) {
      const body = (await get(r.base, path)).body;
      assert.match(body, /^# TYPE mesh_cluster_upstream_rq_time histogram$/m);
      const res: { status: number | null; stdout: string; stderr: string } = spawnSync(promtool, ['check', 'metrics'], { input: body, encoding: 'utf8' });
      assert.equal(res.status, 0, `${path}: promtool exit ${res.status}\n${res.stdout}${res.stderr}`);
      assert.equal((res.stdout + res.stderr).trim(), '', `${path}: promtool said something`);
    }
  });

  test('off by default: no histogram in any format', async () => {
    const off = await startAdmin();
    try {
      off.ctx.stats.histogram('http.ingress.downstream_rq_time').record(12);
      off.ctx.stats.counter('http.ingress.downstream_rq_total').inc();
      assert.equal((await get(off.base, '/stats?filter=^http')).body, 'http.ingress.downstream_rq_total: 1\n');
      assert.equal((await get(off.base, '/stats?format=json&filter=^http')).body, '{"stats":[{"name":"http.ingress.downstream_rq_total","value":1}]}');
      assert.ok(!(await get(off.base, '/stats/prometheus')).body.includes('rq_time'));
    } finally {
      await off.close();
    }
  });
});
