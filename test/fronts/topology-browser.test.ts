/**
 * The topology section of the `/stats` page in a real browser: playwright-core drives Debian's
 * chromium (MESH_TEST_CHROMIUM=/usr/bin/chromium; `.ci/run` installs it) against a real
 * `mesh api --enable_stats` and a sidecar calling a backend. The page draws both edges with the
 * right names and figures, a click shows a service's golden metrics, a screenshot goes to the
 * test's temp dir; 100 services draw within 2 s; names with markup from a process record and from
 * a /traffic answer show as text; nothing is fetched from anywhere but the process.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { engine, tempDir, waitFor } from '../helpers.js';
import { drive } from '../dashboard-fixture.js';
import { fakeAdmin, startTopologyMesh, trafficReport, OK_PATH, SERVICE, WEB, type FakeAdmin, type TopologyMesh } from '../topology-fixture.js';

const CHROMIUM = engine('MESH_TEST_CHROMIUM', 'chromium');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'];
const SKIP = CHROMIUM ? false : 'chromium not available: set MESH_TEST_CHROMIUM (e.g. /usr/bin/chromium)';

interface ShownEdge {
  from: string;
  to: string;
  requests: number;
  success: string;
  label: string;
}

const edges = (page: Page): Promise<ShownEdge[]> =>
  page.evaluate(() =>
    [...document.querySelectorAll<SVGGElement>('#topology-graph g.edge')].map((g) => ({
      from: g.dataset.from!,
      to: g.dataset.to!,
      requests: Number(g.dataset.requests),
      success: g.dataset.success!,
      label: g.querySelector('text')?.textContent ?? '',
    })),
  );

describe('the topology section in chromium', { skip: SKIP }, () => {
  let mesh: TopologyMesh;
  let context: BrowserContext;
  let page: Page;
  const profile = tempDir('mesh-chromium-');
  const requested: string[] = [];
  const problems: string[] = [];

  before(async () => {
    mesh = await startTopologyMesh();
    context = await chromium.launchPersistentContext(profile.path, { executablePath: CHROMIUM!, headless: true, args: ARGS, viewport: { width: 1400, height: 1000 } });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('request', (r) => requested.push(r.url()));
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  });

  after(async () => {
    await context?.close();
    await mesh?.close();
    profile.cleanup();
  });

  it('draws caller → service edges with their figures from live traffic; a click shows the service\'s golden metrics', async () => {
    assert.deepEqual(new Set(await drive(mesh.gw.url, OK_PATH, 6)), new Set([200]));
    assert.deepEqual(new Set(await mesh.callFromWeb(4)), new Set([200]));
    await page.goto(`${mesh.gw.url}/stats`);
    await page.waitForSelector(`#topology-graph g.edge[data-from="${WEB}"][data-to="${SERVICE}"]`, { timeout: 15000 });
    const first = await edges(page);
    assert.deepEqual(first.map((e) => [e.from, e.to]).sort(), [['api', SERVICE], [WEB, SERVICE]]);
    // The first reading counts since the processes started: the exact requests, all successful.
    const web = first.find((e) => e.from === WEB)!;
    assert.deepEqual([web.requests, web.success], [4, '1']);
    assert.match(web.label, /^\d+\.\d rps · 100\.0% · p99 \d+(\.\d+)? ms · mTLS 0\.0%$/);
    assert.deepEqual([first.find((e) => e.from === 'api')!.requests], [6]);
    const nodes = await page.$$eval('#topology-graph g.node', (gs) => gs.map((g) => (g as SVGGElement).dataset.name));
    assert.deepEqual(nodes.sort(), ['api', SERVICE, WEB]);

    // Refreshed: new traffic from web shows in a later window.
    const updates = Number(await page.getAttribute('#topology', 'data-updates'));
    assert.deepEqual(new Set(await mesh.callFromWeb(5)), new Set([200]));
    await waitFor(async () => (await edges(page)).some((e) => e.from === WEB && e.requests === 5), 15000, 100);
    assert.ok(Number(await page.getAttribute('#topology', 'data-updates')) > updates);

    // One click: the service's golden metrics and its callers.
    await page.click(`#topology-graph g.node[data-name="${SERVICE}"]`);
    await page.waitForSelector('#topology-detail:not([hidden])');
    assert.equal(await page.textContent('#topology-detail h3'), SERVICE);
    const metrics = await page.$$eval('#topology-detail [data-metric]', (ds) => ds.map((d) => d.querySelector('dt')!.textContent));
    assert.deepEqual(metrics, ['Requests', 'Requests/s', 'Success rate', 'p50 / p95 / p99', 'mTLS']);
    const detail = (await page.textContent('#topology-detail'))!;
    assert.ok(detail.includes('Callers') && detail.includes(WEB), detail);

    const shot = join(profile.path, 'topology.png');
    await page.screenshot({ path: shot, fullPage: true });
    assert.ok(existsSync(shot) && statSync(shot).size > 1000);

    for (const url of requested) assert.ok(url.startsWith(`${mesh.gw.url}/stats`), url);
    assert.deepEqual(problems, []);
  });

  it('100 services: every edge is drawn within 2 s of loading the page', async () => {
    const services = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`go.mesh.srv.svc${String(i).padStart(3, '0')}`, 10 + i]));
    const fake: FakeAdmin = await fakeAdmin(mesh.registry, 'big-1-aaaaaa', 'go.mesh.srv.big', () => trafficReport('big-1-aaaaaa', 'go.mesh.srv.big', services));
    try {
      // The gateway has read the fake admin once (the page's first answer may be a cached reading).
      await waitFor(async () => fake.hits > 0 || (await fetch(`${mesh.gw.url}/stats/topology`).then((r) => r.json() as Promise<{ nodes: string[] }>)).nodes.includes('go.mesh.srv.big'), 10000, 100);
      const started = Date.now();
      await page.goto(`${mesh.gw.url}/stats`);
      await page.waitForFunction(() => document.querySelectorAll('#topology-graph g.edge[data-from="go.mesh.srv.big"]').length === 100, null, { timeout: 10000 });
      const ms = Date.now() - started;
      const renderMs = Number(await page.getAttribute('#topology', 'data-render-ms'));
      console.log(`100 services: drawn ${ms} ms after loading the page (SVG drawing ${renderMs} ms)`);
      assert.ok(ms < 2000, `drawn in ${ms} ms`);
      assert.equal(await page.locator('#topology-graph g.node').count(), 104);
      await page.screenshot({ path: join(profile.path, 'topology-100.png'), fullPage: true });
    } finally {
      await fake.close();
    }
  });

  it('attacker: markup in a process record\'s name and in a /traffic service name shows as text', async () => {
    const evil = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
    const evilService = '<script>window.__pwned=3</script>';
    const fake = await fakeAdmin(mesh.registry, 'evil-1-aaaaaa', evil, () => trafficReport('evil-1-aaaaaa', evil, { [evilService]: 3 }));
    const down = await fakeAdmin(mesh.registry, 'evil-2-bbbbbb', `${evil}down`, () => 'not json');
    try {
      await page.goto(`${mesh.gw.url}/stats`);
      await page.waitForFunction((name) => [...document.querySelectorAll<SVGGElement>('#topology-graph g.edge')].some((g) => g.dataset.to === name), evilService, { timeout: 15000 });
      const shown = await page.evaluate(
        ([from, to]) => ({
          edge: [...document.querySelectorAll<SVGGElement>('#topology-graph g.edge')].filter((g) => g.dataset.from === from && g.dataset.to === to).length,
          nodeTitles: [...document.querySelectorAll('#topology-graph g.node > title')].map((t) => t.textContent),
          down: document.querySelector('#topology-down')?.textContent ?? '',
          injected: document.querySelectorAll('#topology script, #topology img').length,
          pwned: (window as unknown as { __pwned?: number }).__pwned,
        }),
        [evil, evilService],
      );
      assert.equal(shown.edge, 1);
      assert.ok(shown.nodeTitles.includes(evil) && shown.nodeTitles.includes(evilService), JSON.stringify(shown.nodeTitles));
      assert.ok(shown.down.includes(`${evil}down`) && shown.down.includes('/traffic did not answer a traffic report'), shown.down);
      assert.equal(shown.injected, 0);
      assert.equal(shown.pwned, undefined);
      await page.click(`#topology-graph g.node[data-name="${evilService.replace(/"/g, '\\"')}"]`);
      assert.equal(await page.textContent('#topology-detail h3'), evilService);
      assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    } finally {
      await fake.close();
      await down.close();
    }
  });
});
