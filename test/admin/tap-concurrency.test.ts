/**
 * admin /tap and /traffic of a `mesh api --concurrency=2` (src/cli/concurrency.ts): the primary's
 * tap is relayed to each worker, so every request either worker serves is one event (both
 * workers served some); the filter and sample are the workers', the rate cap holds for the sum
 * (every request is an event or counted in a `{"dropped":N}` line); a worker killed and started
 * again while a tap is attached is tapped again; bodies only when the process allows them; and
 * /traffic sums the workers' reports under the primary's record, as `mesh stat` reads it.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { helloRoutes, openTap, statValue, type Tap } from '../fixtures/tap-client.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const ROUTES = helloRoutes();

/** The worker pids /server_info lists, by index. */
async function workerPids(admin: string): Promise<number[]> {
  const m = / workers=([\d:,]*)\n$/.exec((await http('GET', `${admin}/server_info`)).text);
  return m ? m[1]!.split(',').map((w) => Number(w.split(':')[1])) : [];
}

/** Sends `n` GETs, each on a connection of its own (so that both workers get some); every answer must be 200. */
async function send(url: string, n: number, path: (i: number) => string): Promise<void> {
  for (let i = 0; i < n; i++) assert.equal((await http('GET', `${url}${path(i)}`)).status, 200);
}

const droppedOf = (tap: Tap) => tap.lines().reduce((sum, l) => sum + (typeof l.dropped === 'number' && Object.keys(l).length === 1 ? l.dropped : 0), 0);

describe('admin /tap and /traffic with --concurrency=2', () => {
  const dir = tempDir();
  let registry: Registry;
  let plain: PlainApp;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    const routes = join(dir.path, 'routes.yaml');
    writeFileSync(routes, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routes}`, '--concurrency=2', '--tap_bodies_max_bytes=1KiB']);
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('one event per request either worker serves, filtered as asked, with its bodies when asked', async () => {
    const before = await Promise.all([0, 1].map((i) => statValue(gw.admin, `server.worker.${i}.downstream_rq_total`)));
    const tap = await openTap(gw.admin, '?path_prefix=/hello/tapped&bodies=true');
    try {
      assert.equal(tap.res.statusCode, 200);
      assert.equal(tap.res.headers['content-type'], 'application/x-ndjson');
      await send(gw.url, 30, (i) => (i % 3 === 0 ? `/hello/other/${i}` : `/hello/tapped/${i}`));
      const events = await waitFor(() => (tap.events().length >= 20 ? tap.events() : undefined));
      assert.deepEqual(events.map((e) => e.path).sort(), Array.from({ length: 30 }, (_, i) => i).filter((i) => i % 3 !== 0).map((i) => `/hello/tapped/${i}`).sort());
      for (const e of events) {
        assert.equal(e.front, 'gateway');
        assert.equal(e.route, 'hello');
        assert.equal(e.cluster, 'go.mesh.api.plain');
        assert.equal(e.status, 200);
        assert.ok(e.response_body && typeof e.response_body.data === 'string', JSON.stringify(e.response_body));
      }
      const after = await Promise.all([0, 1].map((i) => statValue(gw.admin, `server.worker.${i}.downstream_rq_total`)));
      assert.ok(after[0]! > before[0]! && after[1]! > before[1]!, `both workers served some: ${before.join(',')} → ${after.join(',')}`);
      assert.equal(await statValue(gw.admin, 'admin.tap.active'), 1);
    } finally {
      tap.close();
    }
    await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 0);
  });

  it('the rate cap holds for the workers together: every request is an event or counted as dropped', async () => {
    const tap = await openTap(gw.admin, '?path_prefix=/hello/capped&rate=3');
    try {
      await send(gw.url, 40, (i) => `/hello/capped/${i}`);
      await waitFor(() => tap.events().length + droppedOf(tap) === 40, 10_000);
      assert.ok(tap.events().length <= 3 + 2, `at most about 3 a second: ${tap.events().length}`);
      assert.ok(droppedOf(tap) >= 40 - 5);
    } finally {
      tap.close();
    }
  });

  it('a worker killed while a tap is attached is tapped again once it serves', async () => {
    const tap = await openTap(gw.admin, '?path_prefix=/hello/again');
    try {
      const pids = await workerPids(gw.admin);
      assert.equal(pids.length, 2);
      process.kill(pids[1]!, 'SIGKILL');
      await waitFor(async () => {
        const now = await workerPids(gw.admin);
        return now.length === 2 && now[1] !== pids[1];
      }, 20_000);
      const before = await statValue(gw.admin, 'server.worker.1.downstream_rq_total');
      await send(gw.url, 30, (i) => `/hello/again/${i}`);
      assert.ok((await statValue(gw.admin, 'server.worker.1.downstream_rq_total')) > before, 'the new worker served some');
      const events = await waitFor(() => (tap.events().length >= 30 ? tap.events() : undefined));
      assert.equal(new Set(events.map((e) => e.path)).size, 30);
    } finally {
      tap.close();
    }
  });

  it('/traffic: the workers summed under the primary, with fine buckets mesh stat reads', async () => {
    const read = async () => (await http('GET', `${gw.admin}/traffic`)).json<any>();
    const first = await read();
    const cluster = (r: any) => r.clusters.find((c: any) => c.name === 'go.mesh.api.plain');
    const was = cluster(first)?.rq_2xx ?? 0;
    await send(gw.url, 20, (i) => `/hello/traffic/${i}`);
    const now = await read();
    assert.equal(now.process.kind, 'api');
    assert.equal(now.process.id, first.process.id);
    const c = cluster(now);
    assert.equal(c.rq_2xx - was, 20);
    assert.equal(c.hosts, 1);
    assert.equal(c.latency_counts.length, now.latency_bounds_ms.length + 1);
    const total = (pairs: Array<[number, number]>) => pairs.reduce((n, [, k]) => n + k, 0);
    assert.equal(total(c.latency_fine), c.latency_counts.reduce((a: number, b: number) => a + b, 0));
    assert.deepEqual(c.latency_fine.map(([i]: [number, number]) => i), [...c.latency_fine.map(([i]: [number, number]) => i)].sort((a, b) => a - b));
    const callers = now.callers.filter((x: any) => x.front === 'gateway');
    assert.deepEqual(callers.map((x: any) => x.identity), ['plain']);
    // mesh stat reads the primary as one process.
    const r = await runCli(['stat', 'services', `--admin=127.0.0.1:${new URL(gw.admin).port}`, '--window=0', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const rows = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
    assert.deepEqual(rows.map((x) => [x.service, x.requests]), [['go.mesh.api.plain', c.rq_2xx]]);
  });
});
