/**
 * The dashboard topology's reading (src/fronts/dashboard/topology.ts) without processes: a fake
 * registry of process records and a fake /traffic reader. The first reading covers the time since
 * the processes started, the next one the difference; at most `concurrency` admins are read at
 * once; one reading answers every caller while it is fresh; an admin that fails is listed, and an
 * admin seen for the first time has its edges with no figures.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Topology, type TrafficReader } from '../../src/fronts/dashboard/topology.js';
import { processService, type ProcessRecord } from '../../src/engines/registry/processes.js';
import type { Service } from '../../src/engines/registry/registry.js';
import type { TrafficReport } from '../../src/admin/traffic.js';
import { Histogram } from '../../src/base/stats/store.js';

const record = (i: number, name = `go.mesh.srv.s${i}`): ProcessRecord => ({
  id: `vm-${i}-abcdef`,
  kind: 'sidecar',
  name,
  pid: 100 + i,
  host: 'vm',
  admin: { address: '127.0.0.1', port: 20000 + i },
  startedMs: 0,
  mtls: 'strict',
  listeners: [],
  version: '0.1.0',
});

function registryOf(records: () => ProcessRecord[]) {
  return {
    getService: async (): Promise<Service[]> => {
      const nodes = records().flatMap((r) => processService(r).nodes);
      return [{ ...processService(records()[0] ?? record(0)), nodes }];
    },
  };
}

/** A report of `name` calling `to` with `ok` 2xx and `fail` 5xx answers, all in the 10..25 ms bucket. */
function report(r: ProcessRecord, calls: Record<string, { ok: number; fail: number }>): TrafficReport {
  return {
    process: { id: r.id, kind: r.kind, name: r.name, mtls: r.mtls, started_ms: r.startedMs },
    latency_bounds_ms: Histogram.BOUNDS,
    clusters: Object.entries(calls).map(([to, c]) => ({
      name: to,
      rq_2xx: c.ok,
      rq_3xx: 0,
      rq_4xx: 0,
      rq_5xx: c.fail,
      hosts: 2,
      hosts_mtls: 1,
      latency_counts: Histogram.BOUNDS.map((_, i) => (i === 5 ? c.ok + c.fail : 0)).concat([0]),
    })),
    routes: [],
    callers: [],
  };
}

describe('dashboard topology reading', () => {
  it('edges and services: since start first, then the difference over the window; a new admin has no figures yet', async () => {
    let now = 10_000;
    const a = record(1, 'go.mesh.srv.web');
    const b = record(2, 'go.mesh.srv.orders');
    let records = [a];
    const counts = { web: { ok: 90, fail: 10 }, orders: { ok: 5, fail: 0 } };
    const read: TrafficReader = async (admin) =>
      admin.endsWith(':20001') ? report(a, { 'go.mesh.srv.orders': counts.web }) : report(b, { 'go.mesh.srv.db': counts.orders });
    const t = new Topology({ registry: registryOf(() => records), read, now: () => now, cacheMs: 1000 });
    const first = await t.snapshot();
    assert.equal(first.since_start, true);
    assert.equal(first.window_s, 10);
    assert.deepEqual(first.nodes, ['go.mesh.srv.orders', 'go.mesh.srv.web']);
    assert.deepEqual(first.edges, [{ from: 'go.mesh.srv.web', to: 'go.mesh.srv.orders', requests: 100, rps: 10, success: 0.9, p50_ms: 25, p95_ms: 25, p99_ms: 25, mtls: 0.5 }]);
    assert.deepEqual(first.services.map((s) => [s.name, s.requests]), [['go.mesh.srv.orders', 100]]);

    // 2 s later: 20 more answers from web, and a second process appears.
    now += 2000;
    counts.web = { ok: 110, fail: 10 };
    records = [a, b];
    const second = await t.snapshot();
    assert.equal(second.since_start, false);
    assert.equal(second.window_s, 2);
    assert.deepEqual(second.edges.map((e) => [e.from, e.to, e.requests, e.rps, e.success]), [
      ['go.mesh.srv.orders', 'go.mesh.srv.db', 0, 0, null],
      ['go.mesh.srv.web', 'go.mesh.srv.orders', 20, 10, 1],
    ]);
    assert.deepEqual(second.nodes, ['go.mesh.srv.db', 'go.mesh.srv.orders', 'go.mesh.srv.web']);
    assert.deepEqual(second.processes.map((p) => p.status), ['ok', 'ok']);
  });

  it('one reading answers every caller while fresh; concurrent callers share one', async () => {
    let now = 0;
    let reads = 0;
    const a = record(1);
    const read: TrafficReader = async () => {
      reads++;
      await new Promise((r) => setImmediate(r));
      return report(a, {});
    };
    const t = new Topology({ registry: registryOf(() => [a]), read, now: () => now, cacheMs: 1500 });
    const all = await Promise.all(Array.from({ length: 20 }, () => t.snapshot()));
    assert.equal(reads, 1);
    assert.ok(all.every((j) => j === all[0]));
    now = 1499;
    await t.snapshot();
    assert.equal(reads, 1, 'still fresh');
    now = 1500;
    await t.snapshot();
    assert.equal(reads, 2, 'stale: read again');
  });

  it('reads at most `concurrency` admins at once, each one', async () => {
    const records = Array.from({ length: 30 }, (_, i) => record(i));
    let inFlight = 0;
    let most = 0;
    const seen = new Set<string>();
    const read: TrafficReader = async (admin) => {
      seen.add(admin);
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setImmediate(r));
      inFlight--;
      return report(records[Number(admin.split(':')[1]) - 20000]!, { 'go.mesh.srv.db': { ok: 1, fail: 0 } });
    };
    const t = new Topology({ registry: registryOf(() => records), read, concurrency: 4 });
    const json = await t.snapshot();
    assert.equal(most, 4);
    assert.equal(seen.size, 30);
    assert.equal(json.edges.length, 30);
    assert.equal(json.nodes.length, 31);
  });

  it('an admin that fails is listed with why, its edges left out; a record that does not parse is skipped', async () => {
    const a = record(1, 'go.mesh.srv.web');
    const b = record(2, 'go.mesh.srv.down');
    const read: TrafficReader = async (admin) => (admin.endsWith(':20002') ? { error: 'cannot read /traffic (no answer within 1000 ms)' } : report(a, { 'go.mesh.srv.db': { ok: 1, fail: 0 } }));
    const badNode = { ...processService(record(3)).nodes[0]!, metadata: { kind: 'Not A Kind' } };
    const registry = {
      getService: async (): Promise<Service[]> => [{ ...processService(a), nodes: [...processService(a).nodes, ...processService(b).nodes, badNode] }],
    };
    const json = await new Topology({ registry, read }).snapshot();
    assert.deepEqual(json.processes.map((p) => [p.name, p.status]), [
      ['go.mesh.srv.down', 'cannot read /traffic (no answer within 1000 ms)'],
      ['go.mesh.srv.web', 'ok'],
    ]);
    assert.deepEqual(json.edges.map((e) => [e.from, e.to]), [['go.mesh.srv.web', 'go.mesh.srv.db']]);
    assert.deepEqual(json.nodes, ['go.mesh.srv.db', 'go.mesh.srv.down', 'go.mesh.srv.web']);
  });
});
