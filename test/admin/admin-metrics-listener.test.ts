/** --metrics_address: the read-only listener for scrapers and probes, on an in-process runtime. */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { engine, http } from '../helpers.js';
import { Runtime } from '../../src/process/runtime.js';
import { FlagError, parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';

function runtime(...flags: string[]): Runtime {
  return new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0s', ...flags]).config), { role: 'test' });
}

describe('--metrics_address', () => {
  let rt: Runtime;
  let base: string;
  let adminBase: string;
  before(async () => {
    rt = runtime('--metrics_address=127.0.0.1:0');
    const admin = await rt.startAdmin('127.0.0.1:0');
    adminBase = `http://127.0.0.1:${admin!.port}`;
    base = `http://127.0.0.1:${rt.metricsAddress!.port}`;
    rt.stats.counter('cluster.greeter.upstream_rq_total').inc(3);
  });
  after(async () => {
    await rt.shutdown();
  });

  it('GET /ready: 200 LIVE, 503 DRAINING while draining', async () => {
    let res = await http('GET', base + '/ready');
    assert.equal(res.status, 200);
    assert.equal(res.text, 'LIVE\n');
    assert.equal(res.headers['content-type'], 'text/plain; charset=UTF-8');
    await rt.state.fail();
    try {
      res = await http('GET', base + '/ready');
      assert.equal(res.status, 503);
      assert.equal(res.text, 'DRAINING\n');
    } finally {
      await rt.state.ok();
    }
    assert.equal((await http('GET', base + '/ready')).text, 'LIVE\n');
    const head = await http('HEAD', base + '/ready');
    assert.equal(head.status, 200);
    assert.equal(head.text, '');
    assert.equal(head.headers['content-length'], '5');
  });

  it('GET /metrics: the Prometheus text with the stats and the process metrics, no Host check', async () => {
    const res = await http('GET', base + '/metrics', { headers: { host: 'prometheus.monitoring.svc:9100' } });
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'text/plain; version=0.0.4; charset=UTF-8');
    assert.match(res.text, /^mesh_cluster_upstream_rq_total\{cluster_name="greeter"\} 3$/m);
    assert.match(res.text, /^mesh_server_live 1$/m);
    for (const m of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'process_open_fds', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes', 'nodejs_heap_size_total_bytes']) {
      assert.match(res.text, new RegExp(`^# TYPE ${m} (counter|gauge)\\n${m} \\S+$`, 'm'), m);
    }
    // the admin's /stats/prometheus shows the same families
    const admin = await http('GET', adminBase + '/stats/prometheus');
    const families = (body: string) => [...body.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
    assert.deepEqual(families(res.text), families(admin.text));
    const promtool = engine('MESH_TEST_PROMTOOL', 'promtool');
    if (promtool) {
      const check = spawnSync(promtool, ['check', 'metrics'], { input: res.text, encoding: 'utf8' });
      assert.equal(check.status, 0, `promtool exit ${check.status}\n${check.stdout}${check.stderr}`);
      assert.equal((check.stdout + check.stderr).trim(), '');
    }
  });

  it('nothing else: admin paths are 404, other methods 405', async () => {
    for (const path of ['/quitquitquit', '/healthcheck/fail', '/stats', '/', '/metrics/', '/readyz']) {
      for (const method of ['GET', 'POST']) {
        const res = await http(method, base + path);
        assert.equal(res.status, 404, `${method} ${path}`);
        assert.equal(res.text, 'Not Found\n');
      }
    }
    for (const path of ['/metrics', '/ready']) {
      for (const method of ['POST', 'PUT', 'DELETE']) {
        const res = await http(method, base + path, { body: 'x' });
        assert.equal(res.status, 405, `${method} ${path}`);
        assert.equal(res.text, 'Method Not Allowed\n');
        assert.equal(res.headers.allow, 'GET, HEAD');
      }
    }
    assert.equal(rt.state.state, 'live', 'nothing there drains the process');
  });

  it('is one of the runtime\'s own addresses', () => {
    assert.equal(rt.selfAddresses.lookup('127.0.0.1', rt.metricsAddress!.port), 'metrics');
  });
});

describe('--metrics_address lifecycle and values', () => {
  it('default off; started even with the admin off; closed on shutdown', async () => {
    const off = runtime('--admin_address=off');
    await off.startAdmin('off');
    assert.equal(off.metricsAddress, undefined);
    await off.shutdown();

    const rt = runtime('--admin_address=off', '--metrics_address=127.0.0.1:0');
    assert.equal(await rt.startAdmin('off'), undefined);
    const url = `http://127.0.0.1:${rt.metricsAddress!.port}/ready`;
    assert.equal((await http('GET', url)).text, 'LIVE\n');
    await rt.shutdown();
    await assert.rejects(http('GET', url), /ECONNREFUSED/);
  });

  it('a bad value is a flag error', () => {
    assert.throws(
      () => parseArgs(['--metrics_address=9100']),
      (err: unknown) => err instanceof FlagError && err.message === 'invalid value "9100" for flag --metrics_address: invalid metrics address "9100": use host:port (or :port for every interface)',
    );
    assert.equal(parseArgs([]).config.metrics_address, 'off');
  });
});

describe('--stats_histograms', () => {
  it('off by default; on: the admin /stats and the metrics listener print the histograms', async () => {
    assert.equal(parseArgs(['--registry=memory']).config.stats_histograms, false);
    assert.equal(optionsFromFlags(parseArgs(['--registry=memory', '--stats_histograms']).config).statsHistograms, true);
    assert.throws(() => parseArgs(['--registry=memory', '--stats_histograms=maybe']), FlagError);
    const rt = runtime('--metrics_address=127.0.0.1:0', '--stats_histograms');
    try {
      const admin = await rt.startAdmin('127.0.0.1:0');
      rt.stats.histogram('cluster.greeter.upstream_rq_time').record(7);
      const metrics = await http('GET', `http://127.0.0.1:${rt.metricsAddress!.port}/metrics`);
      assert.match(metrics.text, /^# TYPE mesh_cluster_upstream_rq_time histogram\nmesh_cluster_upstream_rq_time_bucket\{cluster_name="greeter",le="0\.5"\} 0$/m);
      assert.match(metrics.text, /^mesh_cluster_upstream_rq_time_bucket\{cluster_name="greeter",le="10"\} 1$/m);
      assert.match(metrics.text, /^mesh_cluster_upstream_rq_time_count\{cluster_name="greeter"\} 1$/m);
      const text = await http('GET', `http://127.0.0.1:${admin!.port}/stats?filter=upstream_rq_time$`);
      assert.equal(text.text, 'cluster.greeter.upstream_rq_time: P0(10,10) P25(10,10) P50(10,10) P75(10,10) P90(10,10) P95(10,10) P99(10,10) P99.5(10,10) P99.9(10,10) P100(10,10)\n');
      const promtool = engine('MESH_TEST_PROMTOOL', 'promtool');
      if (promtool) {
        const check = spawnSync(promtool, ['check', 'metrics'], { input: metrics.text, encoding: 'utf8' });
        assert.equal(check.status, 0, `promtool exit ${check.status}\n${check.stdout}${check.stderr}`);
        assert.equal((check.stdout + check.stderr).trim(), '');
      }
    } finally {
      await rt.shutdown();
    }
  });
});
