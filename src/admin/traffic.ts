/**
 * admin `/traffic` (docs/admin.md): what this process sent to each service it calls, as counters a
 * reader takes the difference of (`mesh stat services`, `mesh edges`: src/cli/stat.ts). Per upstream
 * cluster: the answers by status class, the latency buckets of Histogram.BOUNDS, and how many of its
 * hosts this process calls over mutual TLS. One JSON object; nothing is computed per request.
 */
import { Histogram, type StatsStore } from '../base/stats/store.js';
import type { ClusterManagerView } from '../core/upstream/types.js';

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
}

export interface TrafficReport {
  process: TrafficProcess;
  latency_bounds_ms: readonly number[];
  clusters: ClusterTraffic[];
}

/** The report now, from the stats store and the cluster manager's view. */
export function trafficReport(process: TrafficProcess, stats: StatsStore, clusters: ClusterManagerView): TrafficReport {
  const inClusters = { test: (name: string) => name.startsWith('cluster.') };
  const values = new Map(stats.list({ filter: inClusters }).map((s) => [s.name, s.value] as const));
  const histograms = new Map(stats.listHistograms({ filter: inClusters }).map((h) => [h.name, h] as const));
  const calls = process.mtls !== 'off';
  return {
    process,
    latency_bounds_ms: Histogram.BOUNDS,
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
      };
    }),
  };
}
