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
