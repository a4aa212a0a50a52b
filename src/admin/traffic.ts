/**
 * admin `/traffic` (docs/admin.md): what this process sent to each service it calls, as counters a
 * reader takes the difference of (`mesh stat`, `mesh edges`: src/cli/stat.ts). Per upstream
 * cluster: the answers by status class, the latency buckets of Histogram.BOUNDS, and how many of its
 * hosts this process calls over mutual TLS; per route file rule, the answers by class and (with
 * --stats_endpoints) its latency buckets; per front end and caller identity (who calls it), the
 * answers by class and latency buckets. Each latency also comes in FINE_LATENCY's buckets (as
 * [index, count] pairs of the buckets that hold a value), which `mesh stat`'s percentiles are read
 * from. One JSON object; nothing is computed per request.
 */
import { FINE_LATENCY, Histogram, type StatsStore } from '../base/stats/store.js';
import type { ClusterManagerView } from '../core/upstream/types.js';
import type { CallerCounts } from '../base/http/callers.js';

/** Who sends: the process record's fields (src/engines/registry/processes.ts). */
export interface TrafficProcess {
  id: string;
  kind: string;
  name: string;
  mtls: string;
  /** Epoch ms of the start: the counters are since then. */
  started_ms: number;
}

export interface ClusterTraffic {
  name: string;
  /** Answers by class (`upstream_rq_2xx`...; a timeout counts as a 5xx, as Envoy charges it). */
  rq_2xx: number;
  rq_3xx: number;
  rq_4xx: number;
  rq_5xx: number;
  /** Hosts now, and those called over mutual TLS (the node serves it and this process has --mtls on). */
  hosts: number;
  hosts_mtls: number;
  /** `upstream_rq_time`: one count per bound of latency_bounds_ms, then the overflow. */
  latency_counts: number[];
  /** The same in the fine buckets (`latency_fine`): [index, count] of those that hold a value. */
  latency_fine: Array<[number, number]>;
}

/** A route file's rule (`vhost.<host>.route.<rule>.*`, src/edge/routes/effects.ts). */
export interface RouteTraffic {
  /** The route's hostname that matched (`*`: a route without hostnames). */
  host: string;
  rule: string;
  rq_1xx: number;
  rq_2xx: number;
  rq_3xx: number;
  rq_4xx: number;
  rq_5xx: number;
  /** The rule's latency buckets with --stats_endpoints; null without. */
  latency_counts: number[] | null;
  latency_fine: Array<[number, number]> | null;
}

/** The callers of one front end (src/base/http/callers.ts). */
export interface CallerTraffic {
  /** The front end's stat prefix: gateway, sidecar, sidecar_inbound, a proxy listener's name. */
  front: string;
  /** The caller's SPIFFE ID, `plain` (no client certificate) or `other` (past the bound). */
  identity: string;
  rq_1xx: number;
  rq_2xx: number;
  rq_3xx: number;
  rq_4xx: number;
  rq_5xx: number;
  latency_counts: number[];
  latency_fine: Array<[number, number]>;
}

export interface TrafficReport {
  process: TrafficProcess;
  latency_bounds_ms: readonly number[];
  /** The fine buckets: bucket 0 up to min_ms, bucket i above min_ms × ratio^(i-1) and up to min_ms × ratio^i. */
  latency_fine: { min_ms: number; ratio: number; buckets: number };
  clusters: ClusterTraffic[];
  routes: RouteTraffic[];
  callers: CallerTraffic[];
}

/** `vhost.<host>.route.<rule>.rq_total`: a rule's name has no dot, a host may. */
const ROUTE_TOTAL = /^vhost\.(.+)\.route\.([^.]+)\.rq_total$/;

/** The report now, from the stats store and the cluster manager's view. */
export function trafficReport(process: TrafficProcess, stats: StatsStore, clusters: ClusterManagerView, callers?: CallerCounts): TrafficReport {
  const mine = { test: (name: string) => name.startsWith('cluster.') || name.startsWith('vhost.') };
  const values = new Map(stats.list({ filter: mine }).map((s) => [s.name, s.value] as const));
  const histograms = new Map(stats.listHistograms({ filter: mine }).map((h) => [h.name, h] as const));
  const routes: RouteTraffic[] = [];
  for (const name of values.keys()) {
    const m = ROUTE_TOTAL.exec(name);
    if (!m) continue;
    const scope = name.slice(0, -'rq_total'.length);
    const at = (stat: string) => values.get(scope + stat) ?? 0;
    const h = histograms.get(`${scope}rq_time`);
    routes.push({ host: m[1]!, rule: m[2]!, rq_1xx: at('rq_1xx'), rq_2xx: at('rq_2xx'), rq_3xx: at('rq_3xx'), rq_4xx: at('rq_4xx'), rq_5xx: at('rq_5xx'), latency_counts: h ? [...h.counts] : null, latency_fine: h ? h.finePairs() : null });
  }
  const calls = process.mtls !== 'off';
  return {
    process,
    latency_bounds_ms: Histogram.BOUNDS,
    latency_fine: { min_ms: FINE_LATENCY.minMs, ratio: FINE_LATENCY.ratio, buckets: FINE_LATENCY.buckets },
    clusters: clusters.clusters().map((c) => {
      const at = (stat: string) => values.get(`cluster.${c.name}.${stat}`) ?? 0;
      const h = histograms.get(`cluster.${c.name}.upstream_rq_time`);
      return {
        name: c.name,
        rq_2xx: at('upstream_rq_2xx'),
        rq_3xx: at('upstream_rq_3xx'),
        rq_4xx: at('upstream_rq_4xx'),
        rq_5xx: at('upstream_rq_5xx'),
        hosts: c.hosts.length,
        hosts_mtls: calls ? c.hosts.filter((host) => host.mtls).length : 0,
        latency_counts: h ? [...h.counts] : new Array<number>(Histogram.BOUNDS.length + 1).fill(0),
        latency_fine: h ? h.finePairs() : [],
      };
    }),
    routes,
    callers: (callers?.list() ?? []).map((c) => ({
      front: c.front,
      identity: c.identity,
      rq_1xx: c.classes[0]!,
      rq_2xx: c.classes[1]!,
      rq_3xx: c.classes[2]!,
      rq_4xx: c.classes[3]!,
      rq_5xx: c.classes[4]!,
      latency_counts: [...c.latency.counts],
      latency_fine: c.latency.finePairs(),
    })),
  };
}

/** Adds fine bucket pairs into a map of index → count. */
function addFine(into: Map<number, number>, pairs: ReadonlyArray<readonly [number, number]>): void {
  for (const [i, n] of pairs) into.set(i, (into.get(i) ?? 0) + n);
}

const finePairsOf = (m: Map<number, number>): Array<[number, number]> => [...m].sort((a, b) => a[0] - b[0]);
const addCounts = (into: number[], counts: readonly number[]) => counts.forEach((n, i) => (into[i] = (into[i] ?? 0) + n));

/**
 * The reports of the workers of one --concurrency process as one, named `process` (the primary's
 * record): clusters by name, routes by host and rule, callers by front end and identity, their
 * answers and latency buckets summed; a cluster's `hosts` and `hosts_mtls` are the most any
 * worker has (every worker watches the same registry).
 */
export function mergeTrafficReports(process: TrafficProcess, reports: readonly TrafficReport[]): TrafficReport {
  const clusters = new Map<string, { row: ClusterTraffic; fine: Map<number, number> }>();
  const routes = new Map<string, { row: RouteTraffic; fine: Map<number, number> | null }>();
  const callers = new Map<string, { row: CallerTraffic; fine: Map<number, number> }>();
  for (const r of reports) {
    for (const c of r.clusters) {
      let e = clusters.get(c.name);
      if (!e) clusters.set(c.name, (e = { row: { ...c, rq_2xx: 0, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, latency_counts: [], latency_fine: [] }, fine: new Map() }));
      e.row.rq_2xx += c.rq_2xx;
      e.row.rq_3xx += c.rq_3xx;
      e.row.rq_4xx += c.rq_4xx;
      e.row.rq_5xx += c.rq_5xx;
      e.row.hosts = Math.max(e.row.hosts, c.hosts);
      e.row.hosts_mtls = Math.max(e.row.hosts_mtls, c.hosts_mtls);
      addCounts(e.row.latency_counts, c.latency_counts);
      addFine(e.fine, c.latency_fine);
    }
    for (const t of r.routes) {
      const key = `${t.host}\u0000${t.rule}`;
      let e = routes.get(key);
      if (!e) routes.set(key, (e = { row: { ...t, rq_1xx: 0, rq_2xx: 0, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, latency_counts: t.latency_counts ? [] : null, latency_fine: null }, fine: t.latency_fine ? new Map() : null }));
      for (const k of ['rq_1xx', 'rq_2xx', 'rq_3xx', 'rq_4xx', 'rq_5xx'] as const) e.row[k] += t[k];
      if (t.latency_counts) addCounts((e.row.latency_counts ??= []), t.latency_counts);
      if (t.latency_fine) addFine((e.fine ??= new Map()), t.latency_fine);
    }
    for (const c of r.callers) {
      const key = `${c.front}\u0000${c.identity}`;
      let e = callers.get(key);
      if (!e) callers.set(key, (e = { row: { ...c, rq_1xx: 0, rq_2xx: 0, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, latency_counts: [], latency_fine: [] }, fine: new Map() }));
      for (const k of ['rq_1xx', 'rq_2xx', 'rq_3xx', 'rq_4xx', 'rq_5xx'] as const) e.row[k] += c[k];
      addCounts(e.row.latency_counts, c.latency_counts);
      addFine(e.fine, c.latency_fine);
    }
  }
  const byKey = <T>(m: Map<string, T>): T[] => [...m.keys()].sort().map((k) => m.get(k)!);
  return {
    process,
    latency_bounds_ms: Histogram.BOUNDS,
    latency_fine: { min_ms: FINE_LATENCY.minMs, ratio: FINE_LATENCY.ratio, buckets: FINE_LATENCY.buckets },
    clusters: byKey(clusters).map((e) => ({ ...e.row, latency_counts: fill(e.row.latency_counts), latency_fine: finePairsOf(e.fine) })),
    routes: byKey(routes).map((e) => ({ ...e.row, latency_fine: e.fine ? finePairsOf(e.fine) : null })),
    callers: byKey(callers).map((e) => ({ ...e.row, latency_fine: finePairsOf(e.fine) })),
  };
}

/** Latency counts of every bucket (a worker with no requests yet has as many as the others). */
function fill(counts: number[]): number[] {
  const out = new Array<number>(Histogram.BOUNDS.length + 1).fill(0);
  counts.forEach((n, i) => (out[i] = n));
  return out;
}
