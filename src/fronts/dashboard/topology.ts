/**
 * The topology of the gateway dashboard (`GET /stats/topology`, docs/dashboard.md "Topology"):
 * the processes the registry records (src/engines/registry/processes.ts), each one's admin
 * `/traffic` read server side, and the caller → service edges and per-service golden metrics of
 * the difference between this reading and the one before (src/admin/traffic-flows.ts, as
 * `mesh edges` and `mesh stat services` compute them).
 *
 * One reading serves every browser for `cacheMs` (readings never overlap: a request during one
 * waits for it); each admin is read with its own timeout, at most `concurrency` at once. An admin
 * that cannot be read is listed with why, and its edges are left out. Every string is outside
 * input: the page sets it as text.
 */
import type { Registry } from '../../engines/registry/registry.js';
import { PROCESS_SERVICE } from '../../engines/registry/validate.js';
import { processOfNode } from '../../engines/registry/processes.js';
import type { TrafficReport } from '../../admin/traffic.js';
import { fetchTraffic, flowsOf, grouped, isFailure, rowOf, type Flow, type Row, type TrafficFailure } from '../../admin/traffic-flows.js';
import { formatAddress } from '../../base/util/address.js';
import { printable } from '../../base/util/text.js';

/** At most this many admins are read in one reading (the first by kind, name, id). */
export const MAX_PROCESSES = 500;

/** Reads an admin's /traffic: fetchTraffic, or a test's stand-in. */
export type TrafficReader = (admin: string) => Promise<TrafficReport | TrafficFailure>;

export interface TopologyOptions {
  registry: Pick<Registry, 'getService'>;
  /** Sent to the admins (the gateway's own --admin_token: a mesh shares one). */
  adminToken?: string;
  /** Per admin, the whole exchange (default 1000 ms). */
  timeoutMs?: number;
  /** Admins read at once (default 8). */
  concurrency?: number;
  /** How long one reading answers every request (default 1500 ms). */
  cacheMs?: number;
  now?: () => number;
  read?: TrafficReader;
}

export interface ProcessJson {
  id: string;
  kind: string;
  name: string;
  /** `host:port` of its admin. */
  admin: string;
  /** `ok`, or why its /traffic was not read. */
  status: string;
}

/** One edge's or one service's figures over the window; null where there was no answer. */
export interface FiguresJson {
  requests: number;
  rps: number | null;
  success: number | null;
  p50_ms: number | null;
  p95_ms: number | null;
  p99_ms: number | null;
  mtls: number | null;
}

export interface TopologyJson {
  /** Epoch seconds (millisecond precision) of the reading. */
  timestamp: number;
  /** Seconds the figures cover: since the reading before, or since the processes started (the first reading). */
  window_s: number;
  since_start: boolean;
  processes: ProcessJson[];
  /** Processes recorded but not read (over MAX_PROCESSES). */
  processes_skipped: number;
  /** Every process (its name, else its kind) and every service called, sorted. */
  nodes: string[];
  edges: Array<{ from: string; to: string } & FiguresJson>;
  /** Per service called: its golden metrics, over every caller. */
  services: Array<{ name: string } & FiguresJson>;
}

const num = (x: number) => (Number.isNaN(x) ? null : Math.round(x * 1000) / 1000);
const figures = (r: Row): FiguresJson => ({ requests: r.answered, rps: num(r.rps), success: num(r.success), p50_ms: num(r.p50), p95_ms: num(r.p95), p99_ms: num(r.p99), mtls: num(r.mtls) });

/** Runs `fn` over `items`, at most `limit` at once; the results in order. */
async function pooled<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

export class Topology {
  private readonly read: TrafficReader;
  private readonly now: () => number;
  private readonly cacheMs: number;
  private readonly concurrency: number;
  /** The last reading of each admin, and when that reading was. */
  private previous = new Map<string, TrafficReport>();
  private previousAt: number | undefined;
  private cached: { at: number; json: TopologyJson } | undefined;
  private reading: Promise<TopologyJson> | undefined;

  constructor(private readonly options: TopologyOptions) {
    const timeoutMs = options.timeoutMs ?? 1000;
    this.read = options.read ?? ((admin) => fetchTraffic(admin, { token: options.adminToken, timeoutMs }));
    this.now = options.now ?? Date.now;
    this.cacheMs = options.cacheMs ?? 1500;
    this.concurrency = Math.max(1, options.concurrency ?? 8);
  }

  /** The topology now: the cached reading when it is fresh, else a new one (shared by concurrent callers). */
  snapshot(): Promise<TopologyJson> {
    if (this.cached && this.now() - this.cached.at < this.cacheMs) return Promise.resolve(this.cached.json);
    this.reading ??= this.take().finally(() => (this.reading = undefined));
    return this.reading;
  }

  private async take(): Promise<TopologyJson> {
    const records = [];
    for (const service of await this.options.registry.getService(PROCESS_SERVICE)) {
      for (const node of service.nodes) {
        const p = processOfNode(node);
        if (!('skipped' in p)) records.push(p);
      }
    }
    const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
    records.sort((a, b) => cmp(a.kind, b.kind) || cmp(a.name, b.name) || cmp(a.id, b.id));
    const byAdmin = new Map<string, (typeof records)[number]>();
    for (const r of records) {
      const admin = formatAddress(r.admin.address, r.admin.port);
      if (!byAdmin.has(admin)) byAdmin.set(admin, r);
    }
    const admins = [...byAdmin.keys()].slice(0, MAX_PROCESSES);
    const reports = await pooled(admins, this.concurrency, (admin) => this.read(admin));
    const now = this.now();
    const first = this.previousAt === undefined;
    const flows: Flow[] = [];
    const processes: ProcessJson[] = [];
    const next = new Map<string, TrafficReport>();
    let seconds = first ? 0 : (now - this.previousAt!) / 1000;
    admins.forEach((admin, i) => {
      const record = byAdmin.get(admin)!;
      const report = reports[i]!;
      const status = isFailure(report) ? report.error : 'ok';
      processes.push({ id: printable(record.id), kind: record.kind, name: record.name, admin, status });
      if (isFailure(report)) return;
      next.set(admin, report);
      if (first) {
        // The first reading: the counters since each process started.
        flows.push(...flowsOf(undefined, report));
        seconds = Math.max(seconds, (now - report.process.started_ms) / 1000);
      } else {
        // An admin not read the time before: its edges, with no figures until the next reading.
        flows.push(...flowsOf(this.previous.get(admin) ?? report, report));
      }
    });
    this.previous = next;
    this.previousAt = now;
    const edges = grouped(flows, (f) => JSON.stringify([f.from, f.to])).map(([key, fs]) => {
      const [from, to] = JSON.parse(key) as [string, string];
      return { from, to, ...figures(rowOf(fs, seconds)) };
    });
    const services = grouped(flows, (f) => f.to).map(([name, fs]) => ({ name, ...figures(rowOf(fs, seconds)) }));
    // Every process read or not (a service nobody calls yet, an admin down), and every service called.
    const nodes = [...new Set([...processes.map((p) => p.name || p.kind), ...edges.flatMap((e) => [e.from, e.to])])].sort(cmp);
    const json: TopologyJson = {
      timestamp: now / 1000,
      window_s: Math.round(seconds * 1000) / 1000,
      since_start: first,
      processes,
      processes_skipped: byAdmin.size - admins.length,
      nodes,
      edges,
      services,
    };
    this.cached = { at: now, json };
    return json;
  }
}
