/**
 * deploy/grafana/mesh.json against a real Prometheus server: a real `mesh api --stats_histograms --stats_endpoints`
 * in front of a backend with two services (two clusters; one answers 500 five times in a row, so
 * outlier detection ejects its host), a real `prometheus` process (Debian's; MESH_TEST_PROMETHEUS or
 * `command -v prometheus`) scraping the admin's /stats/prometheus every second, and then every
 * panel target of the dashboard, with its template variables substituted, asked of Prometheus's
 * HTTP API: each must return at least one series with a number. The p99 latency per cluster must
 * come back as one series per cluster, labelled by cluster_name.
 *
 * Without prometheus the live part is skipped loudly; with MESH_TEST_REQUIRE_ENGINES=1 it fails.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { once } from 'node:events';
import { ROOT, freePort, http, tempDir, waitFor } from '../helpers.js';
import { BOOM_PATH, OK_PATH, SERVICE, drive, startStatsGateway, type StatsSetup } from '../dashboard-fixture.js';
import { registerPlain } from '../fixtures/gateway-helpers.js';

const DASHBOARD = join(ROOT, 'deploy/grafana/mesh.json');
const PROMETHEUS_CONFIG = join(ROOT, 'deploy/prometheus/prometheus.yml');
const OTHER = 'go.mesh.api.other';
const OTHER_PATH = '/other/echo/ok';
/** What `$__rate_interval` becomes in the test: long enough to span the whole traffic. */
const RATE_INTERVAL = '30s';

interface Target {
  refId: string;
  expr: string;
  legendFormat?: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
}

const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: Array<{ name: string; type: string; query: unknown; allValue?: string }> };
};
const targets = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p, target: t })));

/** A binary from the environment variable, else from PATH; undefined (loudly) when absent. */
function binary(envVar: string, name: string): string | undefined {
  const fromEnv = process.env[envVar];
  if (fromEnv) return fromEnv;
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim();
  if (found) return found;
  const reason = `${name} not available: set ${envVar} or install Debian's prometheus package (CI's .ci/run does)`;
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
  console.warn(`SKIP: ${reason}`);
  return undefined;
}

/** The expression as Grafana would send it with job, instance and cluster set (cluster: All). */
function substitute(expr: string, vars: { job: string; instance: string }): string {
  const out = expr
    .replaceAll('$__rate_interval', RATE_INTERVAL)
    .replaceAll('$job', vars.job)
    .replaceAll('$instance', vars.instance)
    .replaceAll('$cluster', '.*');
  assert.doesNotMatch(out, /\$/, `a template variable the test does not know is left in: ${out}`);
  return out;
}

describe('deploy/grafana/mesh.json', () => {
  it('is an importable dashboard: schema 39, stable unique ids, non-overlapping grid, datasource variable everywhere', () => {
    assert.equal(dashboard.schemaVersion, 39);
    assert.equal(dashboard.uid, 'mesh-overview');
    const ids = dashboard.panels.map((p) => p.id);
    assert.deepEqual(ids, ids.map((_, i) => i + 1), 'panel ids are 1..n in order');
    const vars = dashboard.templating.list.map((v) => `${v.name}:${v.type}`);
    assert.deepEqual(vars, ['datasource:datasource', 'job:query', 'instance:query', 'cluster:query']);
    for (const v of dashboard.templating.list.slice(1)) assert.ok(v.allValue, `${v.name} has an All value`);
    // No two panels overlap on the 24-column grid.
    const cells = new Map<string, number>();
    for (const p of dashboard.panels) {
      const g = p.gridPos;
      assert.ok(g.x >= 0 && g.x + g.w <= 24 && g.h > 0, `panel ${p.id} fits the grid`);
      for (let y = g.y; y < g.y + g.h; y++)
        for (let x = g.x; x < g.x + g.w; x++) {
          const at = `${x},${y}`;
          assert.equal(cells.get(at), undefined, `panels ${cells.get(at)} and ${p.id} overlap at ${at}`);
          cells.set(at, p.id);
        }
    }
    assert.ok(targets.length >= 15, `${targets.length} targets`);
    for (const p of dashboard.panels) {
      if (p.type === 'row') continue;
      assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${datasource}' }, `panel ${p.id}`);
      assert.ok(p.targets?.length, `panel ${p.id} has targets`);
      const refIds = p.targets!.map((t) => t.refId);
      assert.equal(new Set(refIds).size, refIds.length, `panel ${p.id}: unique refIds`);
      for (const t of p.targets!) {
        assert.deepEqual(t.datasource, p.datasource, `panel ${p.id} ${t.refId}`);
        // every mesh series is selected by job and instance, so one dashboard serves many processes
        assert.match(t.expr, /job=~"\$job",instance=~"\$instance"/, `panel ${p.id} ${t.refId}`);
        if (/\b(rate|increase)\(/.test(t.expr)) assert.match(t.expr, /\[\$__rate_interval\]/, `panel ${p.id} ${t.refId}`);
      }
    }
  });

  it('the example Prometheus configuration passes promtool check config', (t) => {
    const prometheus = binary('MESH_TEST_PROMETHEUS', 'prometheus');
    const promtool = process.env.MESH_TEST_PROMTOOL || (prometheus && join(dirname(prometheus), 'promtool'));
    if (!promtool || !existsSync(promtool)) return t.skip('promtool not available');
    const check = spawnSync(promtool, ['check', 'config', PROMETHEUS_CONFIG], { encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
  });
});

describe('the dashboard on a real Prometheus scraping a real mesh api --stats_histograms', () => {
  const PROMETHEUS = binary('MESH_TEST_PROMETHEUS', 'prometheus');
  let setup: StatsSetup;
  let prom: ChildProcess | undefined;
  let promLog = '';
  let promUrl = '';
  let instance = '';
  const dir = tempDir('mesh-prometheus-');

  /** Prometheus's instant query, as Grafana's "Instant"/last point would ask it. */
  async function query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> {
    const res = await http('GET', `${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
    assert.equal(res.status, 200, `${expr}: ${res.text}\n--- prometheus ---\n${promLog}`);
    const body = res.json<{ status: string; data: { resultType: string; result: Array<{ metric: Record<string, string>; value: [number, string] }> } }>();
    assert.equal(body.status, 'success');
    assert.equal(body.data.resultType, 'vector', expr);
    return body.data.result;
  }
  const numbers = (result: Awaited<ReturnType<typeof query>>) => result.filter((r) => !Number.isNaN(Number(r.value[1])));

  before(async () => {
    if (!PROMETHEUS) return;
    setup = await startStatsGateway(['--stats_histograms', '--stats_endpoints']);
    await registerPlain(setup.registry, OTHER, setup.backend.port);
    // Both clusters exist before the first scrape that counts (a cluster appears on its first call).
    await waitFor(async () => (await drive(setup.gw.url, OTHER_PATH, 1))[0] === 200, 10_000, 100);
    assert.deepEqual(await drive(setup.gw.url, OK_PATH, 2), [200, 200]);
    instance = setup.gw.admin.replace('http://', '');
    // Prometheus cannot listen on port 0 and report it: a port that was free a moment ago.
    const port = await freePort();
    promUrl = `http://127.0.0.1:${port}`;
    const config = join(dir.path, 'prometheus.yml');
    writeFileSync(
      config,
      [
        'global:',
        '  scrape_interval: 1s',
        '  scrape_timeout: 1s',
        '  evaluation_interval: 1s',
        'scrape_configs:',
        '  - job_name: mesh',
        '    metrics_path: /stats/prometheus',
        '    static_configs:',
        `      - targets: ['${instance}']`,
        '',
      ].join('\n'),
    );
    prom = spawn(PROMETHEUS, [`--config.file=${config}`, `--storage.tsdb.path=${join(dir.path, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    prom.stdout!.on('data', (d: Buffer) => (promLog += d.toString()));
    prom.stderr!.on('data', (d: Buffer) => (promLog += d.toString()));
    await waitFor(
      async () => {
        if (prom!.exitCode !== null) throw new Error(`prometheus exited ${prom!.exitCode}:\n${promLog}`);
        return (await http('GET', `${promUrl}/-/ready`)).status === 200;
      },
      20_000,
      100,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n--- prometheus ---\n${promLog}`);
    });
    // Scraped with both clusters' series in it: the baseline that the traffic below is a rate over.
    await waitFor(async () => (await query(`mesh_cluster_upstream_rq_total{job="mesh"}`)).length === 2, 15_000, 200);
    // The traffic: 2xx to both clusters, and 5xx to one, five in a row (an outlier ejection).
    assert.deepEqual(await drive(setup.gw.url, OK_PATH, 10), Array(10).fill(200));
    assert.deepEqual(await drive(setup.gw.url, OTHER_PATH, 10), Array(10).fill(200));
    assert.deepEqual(await drive(setup.gw.url, BOOM_PATH, 6), Array(6).fill(500));
    // Until Prometheus has scraped the final counts.
    const total = (await http('GET', `${setup.gw.admin}/stats?filter=^http\\.gateway\\.downstream_rq_total$`)).text;
    const expected = Number(/: (\d+)/.exec(total)![1]);
    await waitFor(async () => Number((await query(`mesh_http_downstream_rq_total{job="mesh"}`))[0]?.value[1]) === expected, 15_000, 200);
  });

  after(async () => {
    if (prom && prom.exitCode === null) {
      prom.kill('SIGTERM');
      await once(prom, 'exit');
    }
    await setup?.close();
    dir.cleanup();
  });

  it('every panel target returns data', { skip: !PROMETHEUS }, async () => {
    const empty: string[] = [];
    for (const { panel, target } of targets) {
      const expr = substitute(target.expr, { job: 'mesh', instance });
      const result = await query(expr);
      if (numbers(result).length === 0) empty.push(`panel ${panel.id} "${panel.title}" ${target.refId}: ${expr} -> ${JSON.stringify(result)}`);
    }
    assert.deepEqual(empty, [], 'targets without a number');
  });

  it('with histograms on, Prometheus gets p99 latency per cluster: one series per cluster with a cluster_name label', { skip: !PROMETHEUS }, async () => {
    const panel = dashboard.panels.find((p) => p.title === 'Upstream latency p50 / p99 by cluster')!;
    const p99 = panel.targets!.find((t) => t.legendFormat === '{{cluster_name}} p99')!;
    assert.match(p99.expr, /^histogram_quantile\(0\.99, sum by \(cluster_name, le\) \(rate\(mesh_cluster_upstream_rq_time_bucket\{/);
    const result = numbers(await query(substitute(p99.expr, { job: 'mesh', instance })));
    assert.deepEqual(result.map((r) => r.metric).sort((a, b) => a.cluster_name!.localeCompare(b.cluster_name!)), [{ cluster_name: OTHER }, { cluster_name: SERVICE }]);
    for (const r of result) {
      const ms = Number(r.value[1]);
      assert.ok(ms > 0 && ms <= 60_000, `p99 of ${r.metric.cluster_name}: ${ms} ms`);
    }
    // and per front end, from the downstream histogram
    const down = dashboard.panels.find((p) => p.title === 'Downstream latency p50 / p99 by front end')!;
    const d99 = numbers(await query(substitute(down.targets![1]!.expr, { job: 'mesh', instance })));
    assert.deepEqual(d99.map((r) => r.metric), [{ http_conn_manager_prefix: 'gateway' }]);
  });

  it('the error, ejection and request panels show the traffic that was sent', { skip: !PROMETHEUS }, async () => {
    const byTitle = (title: string) => dashboard.panels.find((p) => p.title === title)!.targets!;
    const value = async (expr: string, label: string, name: string) => {
      const r = numbers(await query(substitute(expr, { job: 'mesh', instance }))).find((x) => x.metric[label] === name);
      assert.ok(r, `${name} in ${expr}`);
      return Number(r.value[1]);
    };
    // 6 of the gateway's answers in the range were 5xx, all of them from SERVICE
    assert.ok((await value(byTitle('Error rate (5xx share) by front end')[0]!.expr, 'http_conn_manager_prefix', 'gateway')) > 0);
    assert.ok((await value(byTitle('Upstream error rate (5xx share) by cluster')[0]!.expr, 'cluster_name', SERVICE)) > 0);
    assert.equal(await value(byTitle('Upstream error rate (5xx share) by cluster')[0]!.expr, 'cluster_name', OTHER), 0);
    // five 5xx in a row ejected SERVICE's host
    assert.ok((await value(byTitle('Outlier ejections by cluster')[0]!.expr, 'cluster_name', SERVICE)) > 0);
    assert.equal(await value(byTitle('Outlier ejections by cluster')[0]!.expr, 'cluster_name', OTHER), 0);
    assert.ok((await value(byTitle('Upstream request rate by cluster')[0]!.expr, 'cluster_name', OTHER)) > 0);
  });
});
