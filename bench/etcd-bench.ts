/**
 * etcd with 10,000 nodes (100 services × 100 nodes, no TTL) under a key prefix of its own, and a
 * cluster manager holding all of them: how long registering takes, the memory of the cluster
 * manager (and its registry cache) holding 10,000 hosts, and the watch latency: the time from one
 * register (a new node of one service) to (a) the registry's watch event in another client and (b)
 * the cluster manager's cluster having the new host. Two registry clients in one process (two
 * etcd connections, as two processes would have); the key prefix is deleted at the end.
 * Prints one JSON object. Run with --expose-gc:
 *   node --expose-gc --import tsx bench/etcd-bench.ts ADDRESS [services] [nodes] [samples]
 */
import { EtcdRegistry } from '../src/engines/registry/etcd/index.js';
import type { Service } from '../src/engines/registry/registry.js';
import { StatsStore } from '../src/base/stats/store.js';
import { Logging } from '../src/base/util/log.js';
import { ClusterManager } from '../src/core/upstream/cluster-manager.js';
import { median, percentile } from './lib/stats.js';

const address = process.argv[2]!;
const SERVICES = Number(process.argv[3] ?? 100);
const NODES = Number(process.argv[4] ?? 100);
const SAMPLES = Number(process.argv[5] ?? 50);
const prefix = `/mesh-bench-${process.pid}-${Date.now()}/`;
const hr = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const gc = () => (globalThis as { gc?: () => void }).gc?.();
const mem = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heapMiB: m.heapUsed / 2 ** 20, rssMiB: m.rss / 2 ** 20 };
};

const name = (i: number) => `go.mesh.srv.etcd${String(i).padStart(4, '0')}`;
const record = (i: number, from: number, count: number): Service => {
  const nodes = [];
  for (let n = from; n < from + count; n++) nodes.push({ id: `${name(i)}-${n}`, address: `10.${(i >> 8) & 255}.${i & 255}.${(n % 250) + 1}`, port: 8000 + Math.floor(n / 250), metadata: { protocol: 'mesh' } });
  return { name: name(i), version: 'v1', metadata: {}, endpoints: [{ name: 'Svc.Call', metadata: {} }], nodes };
};

const writer = new EtcdRegistry(address, { prefix });
const reader = new EtcdRegistry(address, { prefix });
let cm: ClusterManager | undefined;
try {
  const t0 = hr();
  for (let i = 0; i < SERVICES; i++) await writer.register(record(i, 0, NODES));
  const registerTotalMs = hr() - t0;

  const before = mem();
  cm = new ClusterManager({ registry: reader, stats: new StatsStore(), logging: new Logging('off'), lbPolicy: 'round_robin' });
  const l0 = hr();
  for (let i = 0; i < SERVICES; i++) {
    const lease = await cm.acquire(name(i));
    lease.release({ kind: 'response', status: 200 }, 1);
  }
  const loadMs = hr() - l0;
  // Hosts arrive in chunks: wait until every cluster has all of its nodes.
  const full = () => Array.from({ length: SERVICES }, (_, i) => cm!.cluster(name(i))?.hosts().length ?? 0).every((n) => n === NODES);
  for (let k = 0; k < 500 && !full(); k++) await sleep(20);
  if (!full()) throw new Error('the cluster manager did not get every node');
  const after = mem();

  // Watch latency: one new node at a time.
  const seen = new Map<string, number>();
  const watcher = reader.watch((ev) => {
    for (const n of ev.service.nodes ?? []) if (n.id.includes('-x') && !seen.has(n.id)) seen.set(n.id, hr());
  });
  await sleep(200);
  const watchMs: number[] = [];
  const cmMs: number[] = [];
  for (let k = 0; k < SAMPLES; k++) {
    const i = (k * 37) % SERVICES;
    const svc = record(i, 0, 0);
    const id = `${name(i)}-x${k}`;
    svc.nodes = [{ id, address: `10.200.${k % 250}.1`, port: 9000 + k, metadata: { protocol: 'mesh' } }];
    const want = (cm.cluster(name(i))?.hosts().length ?? 0) + 1;
    const s = hr();
    await writer.register(svc);
    const deadline = s + 10_000;
    while ((cm.cluster(name(i))?.hosts().length ?? 0) < want && hr() < deadline) await sleep(1);
    const c = hr();
    if (c >= deadline) throw new Error(`the cluster manager did not see ${id} within 10 s`);
    cmMs.push(c - s);
    while (!seen.has(id) && hr() < deadline) await sleep(1);
    watchMs.push((seen.get(id) ?? NaN) - s);
    await sleep(20);
  }
  watcher.stop();
  const s = (v: number[]) => ({ median: median(v), p99: percentile(v, 99), max: Math.max(...v), n: v.length });
  process.stdout.write(
    JSON.stringify({
      services: SERVICES,
      nodes: SERVICES * NODES,
      registerTotalMs,
      clusterLoadMs: loadMs,
      heapBeforeMiB: before.heapMiB,
      heapAfterMiB: after.heapMiB,
      rssBeforeMiB: before.rssMiB,
      rssAfterMiB: after.rssMiB,
      watchMs: s(watchMs),
      clusterMs: s(cmMs),
    }) + '\n',
  );
} finally {
  await cm?.close();
  await writer.client.delete().prefix(prefix).catch(() => undefined);
  await writer.close();
  await reader.close();
}
process.exit(0);
