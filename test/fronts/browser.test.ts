/**
 * The `/stats` dashboard seen in a real browser: playwright-core drives Debian's chromium
 * (MESH_TEST_CHROMIUM=/usr/bin/chromium; `.ci/run` installs it; `npx playwright install` is never
 * used) against a real `mesh api --enable_stats` process. The page draws its charts, the counters
 * and the chart series change with 2xx and 5xx traffic, the page agrees with admin /stats, nothing
 * is fetched from anywhere but the process, and a screenshot goes to test-artifacts/dashboard.png.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { ROOT, engine, tempDir, waitFor } from '../helpers.js';
import { BOOM_PATH, OK_PATH, SERVICE, adminCounters, asTotals, drive, startStatsGateway, type StatsSetup } from '../dashboard-fixture.js';

const CHROMIUM = engine('MESH_TEST_CHROMIUM', 'chromium');
const ARTIFACTS = join(ROOT, 'test-artifacts');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'];

/** What the page shows, read from the DOM (text and the data attributes the page exposes for this). */
interface Shown {
  updates: number;
  state: string;
  totals: Record<string, number>;
  charts: Record<string, { points: number; series: string[]; sums: Record<string, number>; legend: string; canvas: boolean }>;
  clusters: Array<{ cluster: string; host: string; health: string; successRate: string }>;
  uptime: string;
  version: string;
}

function shown(page: Page): Promise<Shown> {
  return page.evaluate(() => {
    const totals: Record<string, number> = {};
    for (const el of document.querySelectorAll<HTMLElement>('[data-total]')) totals[el.dataset.total!] = Number(el.textContent);
    const charts: Shown['charts'] = {};
    for (const f of document.querySelectorAll<HTMLElement>('figure[data-chart]')) {
      charts[f.dataset.chart!] = {
        points: Number(f.dataset.points),
        series: (f.dataset.series ?? '').split(','),
        sums: JSON.parse(f.dataset.sums ?? '{}') as Record<string, number>,
        legend: f.querySelector('.u-legend')?.textContent ?? '',
        canvas: !!f.querySelector('canvas'),
      };
    }
    const clusters = [...document.querySelectorAll<HTMLElement>('#clusters tbody tr[data-host]')].map((tr) => ({
      cluster: tr.dataset.cluster!,
      host: tr.dataset.host!,
      health: tr.querySelector('.health')?.textContent ?? '',
      successRate: tr.querySelector<HTMLElement>('[data-success-rate]')?.dataset.successRate ?? '',
    }));
    return {
      updates: Number(document.body.dataset.updates),
      state: document.body.dataset.state ?? '',
      totals,
      charts,
      clusters,
      uptime: document.querySelector('[data-field="uptime"]')?.textContent ?? '',
      version: document.querySelector('[data-field="version"]')?.textContent ?? '',
    };
  });
}

describe('the /stats dashboard in chromium', { skip: CHROMIUM ? false : 'chromium not available: set MESH_TEST_CHROMIUM (e.g. /usr/bin/chromium)' }, () => {
  let setup: StatsSetup;
  let context: BrowserContext;
  let page: Page;
  const profile = tempDir('mesh-chromium-');
  const requested: string[] = [];
  const problems: string[] = [];

  before(async () => {
    setup = await startStatsGateway();
    context = await chromium.launchPersistentContext(profile.path, {
      executablePath: CHROMIUM!,
      headless: true,
      args: ARGS,
      viewport: { width: 1280, height: 1000 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('request', (r) => requested.push(r.url()));
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  });

  after(async () => {
    await context?.close();
    await setup?.close();
    profile.cleanup();
  });

  it('shows live charts and counters that follow 2xx and 5xx traffic, in agreement with admin /stats', async () => {
    const base = setup.gw.url;
    await page.goto(`${base}/stats`);
    await page.waitForFunction(() => Number(document.body.dataset.updates) >= 2, null, { timeout: 15000 });
    const first = await shown(page);
    assert.equal(first.state, 'live');
    assert.match(first.version, /^\d+\.\d+\.\d+/);
    assert.equal(await page.title(), 'mesh api stats');
    // Without --stats_histograms there is no upstream latency chart.
    assert.deepEqual(Object.keys(first.charts).sort(), ['errors', 'latency', 'loop', 'memory', 'requests']);
    assert.deepEqual(first.charts.requests!.series, ['2xx', '3xx', '4xx', '5xx']);
    assert.deepEqual(first.charts.latency!.series, ['p50', 'p99']);
    for (const [name, c] of Object.entries(first.charts)) assert.ok(c.canvas, `${name}: uPlot drew a canvas`);
    for (const label of ['2xx', '3xx', '4xx', '5xx']) assert.ok(first.charts.requests!.legend.includes(label), first.charts.requests!.legend);
    assert.equal(first.totals.total, 0, 'the page polling itself is not counted');
    assert.equal(first.charts.requests!.sums['2xx'], 0);

    // 2xx traffic: the counters and the 2xx series move, nothing else does.
    assert.deepEqual(new Set(await drive(base, OK_PATH, 25)), new Set([200]));
    await waitFor(async () => {
      const s = await shown(page);
      return s.totals['2xx'] === 25 && s.charts.requests!.sums['2xx'] === 25;
    }, 10000, 100);
    const mid = await shown(page);
    assert.equal(mid.totals['5xx'], 0);
    assert.equal(mid.charts.requests!.sums['5xx'], 0);
    assert.ok(mid.charts.requests!.points > first.charts.requests!.points, 'new windows drawn');
    assert.ok(mid.charts.latency!.sums.p50! > 0, 'latency series has values');
    assert.ok(mid.charts.memory!.sums.rss! > 0, 'memory series has values');

    // 5xx traffic from the backend: the 5xx tile, the 5xx series and the error chart move.
    assert.deepEqual(new Set(await drive(base, BOOM_PATH, 10)), new Set([500]));
    await waitFor(async () => {
      const s = await shown(page);
      return s.totals['5xx'] === 10 && s.charts.requests!.sums['5xx'] === 10 && s.charts.errors!.sums['5xx %'] === 10;
    }, 10000, 100);
    // The cluster table: the backend's host, 25 of 35 answers successful, and ejected by outlier
    // detection after 5 consecutive 5xx (the default consecutive_5xx).
    await waitFor(async () => (await shown(page)).clusters.some((c) => c.successRate === '71.43'), 5000, 100);
    const after = await shown(page);
    assert.deepEqual(after.clusters, [{ cluster: SERVICE, host: `127.0.0.1:${setup.backend.port}`, health: '/failed_outlier_check', successRate: '71.43' }]);

    // The page agrees with admin /stats: its tiles and the sums of its chart series.
    const admin = asTotals(await adminCounters(setup.gw.admin));
    assert.deepEqual(admin, { total: 35, '1xx': 0, '2xx': 25, '3xx': 0, '4xx': 0, '5xx': 10, active: 0 }, 'no request of the page was counted');
    for (const k of ['total', '2xx', '3xx', '4xx', '5xx'] as const) assert.equal(after.totals[k], admin[k], k);
    for (const k of ['2xx', '3xx', '4xx', '5xx'] as const) assert.equal(after.charts.requests!.sums[k], admin[k], `chart ${k}`);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });

    // Nothing came from anywhere but the process; no console error (CSP violation, missing asset).
    assert.ok(requested.length > 0);
    for (const url of requested) assert.ok(url.startsWith(`${base}/stats`), url);
    assert.deepEqual(problems, []);
  });

  it('draining turns the state badge', async () => {
    // fetch() sends Sec-Fetch-Mode like a browser: a mutating admin request then needs X-Mesh-Admin.
    await fetch(`${setup.gw.admin}/healthcheck/fail`, { method: 'POST', headers: { 'x-mesh-admin': '1' } });
    try {
      await page.waitForFunction(() => document.body.dataset.state === 'draining', null, { timeout: 5000 });
      assert.equal(await page.locator('#state').textContent(), 'draining');
    } finally {
      await fetch(`${setup.gw.admin}/healthcheck/ok`, { method: 'POST', headers: { 'x-mesh-admin': '1' } });
    }
    await page.waitForFunction(() => document.body.dataset.state === 'live', null, { timeout: 5000 });
  });
});

describe('the /stats dashboard in chromium with --stats_histograms', { skip: CHROMIUM ? false : 'chromium not available: set MESH_TEST_CHROMIUM (e.g. /usr/bin/chromium)' }, () => {
  let setup: StatsSetup;
  let context: BrowserContext;
  let page: Page;
  const profile = tempDir('mesh-chromium-');
  const problems: string[] = [];

  before(async () => {
    setup = await startStatsGateway(['--stats_histograms']);
    context = await chromium.launchPersistentContext(profile.path, { executablePath: CHROMIUM!, headless: true, args: ARGS, viewport: { width: 1280, height: 1000 } });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  });

  after(async () => {
    await context?.close();
    await setup?.close();
    profile.cleanup();
  });

  it('draws the upstream latency chart: p50 and p99 of each cluster', async () => {
    const base = setup.gw.url;
    await page.goto(`${base}/stats`);
    await page.waitForFunction(() => Number(document.body.dataset.updates) >= 1, null, { timeout: 15000 });
    const first = await shown(page);
    assert.deepEqual(Object.keys(first.charts).sort(), ['errors', 'latency', 'loop', 'memory', 'requests', 'upstream']);
    assert.deepEqual(first.charts.upstream!.series, [''], 'no cluster yet: no series');

    assert.deepEqual(new Set(await drive(base, OK_PATH, 20)), new Set([200]));
    const drawn = await waitFor(async () => {
      const s = await shown(page);
      const up = s.charts.upstream!;
      return up.series.length === 2 && (up.sums[`${SERVICE} p99`] ?? 0) > 0 ? s : undefined;
    }, 10000, 100);
    const up = drawn.charts.upstream!;
    assert.deepEqual(up.series, [`${SERVICE} p50`, `${SERVICE} p99`]);
    assert.ok(up.canvas, 'uPlot drew a canvas');
    assert.ok(up.points > 0);
    assert.ok(up.sums[`${SERVICE} p50`]! > 0 && up.sums[`${SERVICE} p50`]! <= up.sums[`${SERVICE} p99`]!, JSON.stringify(up.sums));
    for (const label of ['p50', 'p99']) assert.ok(up.legend.includes(`${SERVICE} ${label}`), up.legend);
    // placed right after the front end's latency chart
    const order = await page.evaluate(() => [...document.querySelectorAll<HTMLElement>('figure[data-chart]')].map((f) => f.dataset.chart));
    assert.deepEqual(order, ['requests', 'latency', 'upstream', 'errors', 'memory', 'loop']);

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-histograms.png'), fullPage: true });
    assert.deepEqual(problems, []);
  });
});
