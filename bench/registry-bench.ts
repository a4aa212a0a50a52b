/**
 * Registry lookups and watch latency on the embedded default (local SQLite registry) with
 * 10,000 registered nodes (1,000 services × 10 nodes). Two registry instances on one directory
 * (two SQLite connections, as two mesh processes would have): one writes, the other watches,
 * so the watcher learns of changes the way another process does (PRAGMA data_version polling).
 * Prints one JSON object. Run: node --import tsx bench/registry-bench.ts [services] [nodes] [dir]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalRegistry } from '../src/engines/registry/local/index.js';
import type { Service, WatchEvent } from '../src/engines/registry/registry.js';
import { median, percentile } from './lib/stats.js';

const SERVICES = Number(process.argv[2] ?? 1000);
const NODES = Number(process.argv[3] ?? 10);
const dir = process.argv[4] ?? mkdtempSync(join(tmpdir(), 'mesh-bench-registry-'));
const LOOKUPS = Number(process.env.BENCH_REGISTRY_LOOKUPS ?? 2000);
const CHANGES = Number(process.env.BENCH_REGISTRY_CHANGES ?? 40);

const name = (i: number) => `go.mesh.srv.svc${String(i).padStart(5, '0')}`;
function record(i: number, tag = 'a'): Service {
  const nodes = [];
  for (let n = 0; n < NODES; n++) {
    nodes.push({ id: `${name(i)}-${n}`, address: `10.0.${i % 250}.${n + 1}`, port: 8000 + n, metadata: { protocol: 'mesh', zone: `z${n % 3}`, tag } });
  }
  return { name: name(i), version: 'latest', metadata: {}, endpoints: [{ name: 'Svc.Call', metadata: {} }], nodes };
}
const hr = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const writer = new LocalRegistry(dir);
const reader = new LocalRegistry(dir);

// Register everything.
const regTimes: number[] = [];
const t0 = hr();
for (let i = 0; i < SERVICES; i++) {
  const s = hr();
  await writer.register(record(i));
  regTimes.push(hr() - s);
}
const registerTotalMs = hr() - t0;

// Lookups from the other connection.
const lookTimes: number[] = [];
for (let i = 0; i < LOOKUPS; i++) {
  const k = (i * 7919) % SERVICES;
  const s = hr();
  const got = await reader.getService(name(k));
  lookTimes.push((hr() - s) * 1000);
  if (got[0]?.nodes.length !== NODES) throw new Error(`lookup ${name(k)}: ${got[0]?.nodes.length} nodes`);
}
const listTimes: number[] = [];
let listed = 0;
for (let i = 0; i < 10; i++) {
  const s = hr();
  listed = (await reader.listServices()).length;
  listTimes.push(hr() - s);
}

// Watch latency: all-services watcher and a one-service watcher on the reader connection.
async function watchLatency(filter: boolean): Promise<number[]> {
  const lat: number[] = [];
  let waiting: { service: string; start: number; done: () => void } | undefined;
  const target = (i: number) => (filter ? 17 : (i * 31) % SERVICES);
  const w = reader.watch(
    (e: WatchEvent) => {
      if (waiting && e.service.name === waiting.service) {
        lat.push(hr() - waiting.start);
        const d = waiting.done;
        waiting = undefined;
        d();
      }
    },
    filter ? { service: name(17) } : undefined,
  );
  await sleep(200); // the watcher's first poll
  for (let i = 0; i < CHANGES; i++) {
    const k = target(i);
    const seen = new Promise<void>((resolve) => (waiting = { service: name(k), start: hr(), done: resolve }));
    await writer.register(record(k, `${filter ? 'f' : 'w'}${i}`));
    await Promise.race([seen, sleep(5000)]);
    // Spread the changes over the poll interval.
    await sleep(7 + (i % 5) * 11);
  }
  w.stop();
  return lat;
}
const watchAll = await watchLatency(false);
const watchOne = await watchLatency(true);
const mem = process.memoryUsage();
await writer.close();
await reader.close();
if (!process.argv[4]) rmSync(dir, { recursive: true, force: true });

const summary = (a: number[]) => ({ median: median(a), p99: percentile(a, 99), max: Math.max(...a), n: a.length });
process.stdout.write(
  JSON.stringify({
    services: SERVICES,
    nodes: SERVICES * NODES,
    registerMs: summary(regTimes),
    registerTotalMs,
    lookupUs: summary(lookTimes),
    listMs: summary(listTimes),
    listed,
    watchAllMs: summary(watchAll),
    watchOneMs: summary(watchOne),
    changes: CHANGES,
    rssMiB: mem.rss / 2 ** 20,
  }) + '\n',
);
