/**
 * One admin interface over several processes (`--concurrency`, docs/architecture.md
 * "Concurrency"): what the admin asks of the process that owns the workers, and how the workers'
 * /clusters views merge into one.
 */
import type { StatsStore } from '../base/stats/store.js';
import type { ProcessFamily } from '../base/stats/process-metrics.js';
import type { ClusterManagerView, ClusterSnapshot, HostSnapshot } from '../core/upstream/types.js';
import type { CertificateInfo } from '../tls/certificate.js';
import type { RouteTableDump } from './route-table.js';
import type { TapEvent } from '../base/http/tap.js';
import type { TapFilter } from './tap.js';
import type { TrafficReport } from './traffic.js';

/** The merged stats of every process. */
export interface MergedStats {
  /** A fresh store: every process's counters, gauges and histograms merged (src/base/stats/merge.ts). */
  store: StatsStore;
  /** The process metrics of every process, merged. */
  processFamilies: ProcessFamily[];
}

/** A cluster manager's view as plain data (sent over IPC). */
export interface ClusterViewSnapshot {
  versionInfo: string;
  clusters: ClusterSnapshot[];
}

/**
 * Set in the admin context of the process that owns the workers: /stats, /stats/prometheus,
 * /clusters, /certs and /routes read the workers through it, /reset_counters and /logging reach
 * every worker, and /server_info names the workers.
 */
export interface AdminAggregate {
  /** Number of worker processes (--concurrency). */
  readonly concurrency: number;
  stats(): Promise<MergedStats>;
  clusters(): Promise<ClusterManagerView>;
  /** One worker's certificates (every worker loads the same files). */
  certs(): Promise<CertificateInfo[]>;
  /** One worker's route tables (every worker builds the same). */
  routes(): Promise<RouteTableDump[]>;
  resetCounters(): Promise<void>;
  /** A /logging change the admin made to its own process, repeated in every worker. */
  logging(name: string, level: string): Promise<void>;
  /**
   * Attaches a tap to every worker (and to each worker started later) until the returned detach:
   * the events the workers took for it, and how many they dropped.
   */
  tap(filter: TapFilter, sink: { deliver(event: TapEvent): void; dropped(n: number): void }): () => void;
  /** Every worker's /traffic, merged (mergeTrafficReports). */
  traffic(): Promise<TrafficReport>;
  /** The worker processes now: index and pid, by index. */
  workers(): Array<{ index: number; pid: number }>;
}

/** A snapshot view as a ClusterManagerView. */
export function clusterView(snapshot: ClusterViewSnapshot): ClusterManagerView {
  return { versionInfo: () => snapshot.versionInfo, clusters: () => snapshot.clusters };
}

/**
 * Several processes' clusters as one view: clusters by name (sorted), hosts by address
 * (in the order first seen); host counters and gauges summed; a host's health flag is set when
 * any process has it set; success rates are the mean of the processes that have one (-1 when
 * none has); thresholds, weight and locality are the first process's (they come from the same
 * configuration and registry). `version_info` is the first snapshot's.
 */
export function mergeClusterViews(snapshots: readonly ClusterViewSnapshot[]): ClusterViewSnapshot {
  const clusters = new Map<string, { cluster: ClusterSnapshot; hosts: Map<string, HostSnapshot>; rates: Map<string, number[]>; outlier: number[] }>();
  for (const snap of snapshots) {
    for (const c of snap.clusters) {
      let entry = clusters.get(c.name);
      if (!entry) {
        entry = { cluster: { ...c, hosts: [] }, hosts: new Map(), rates: new Map(), outlier: [] };
        clusters.set(c.name, entry);
      }
      if (c.outlier && Number.isFinite(c.outlier.successRateAverage) && c.outlier.successRateAverage >= 0) entry.outlier.push(c.outlier.successRateAverage);
      for (const h of c.hosts) {
        const key = `${h.address}\0${h.port}`;
        const have = entry.hosts.get(key);
        if (!have) entry.hosts.set(key, { ...h, stats: { ...h.stats } });
        else {
          for (const k of Object.keys(have.stats) as Array<keyof HostSnapshot['stats']>) have.stats[k] += h.stats[k];
          have.failedActiveHc ||= h.failedActiveHc;
          have.failedOutlierCheck ||= h.failedOutlierCheck;
        }
        if (Number.isFinite(h.successRate) && h.successRate >= 0) {
          const rates = entry.rates.get(key) ?? [];
          rates.push(h.successRate);
          entry.rates.set(key, rates);
        }
      }
    }
  }
  const mean = (xs: number[] | undefined) => (xs && xs.length > 0 ? xs.reduce((a, b) => a + b, 0) / xs.length : -1);
  const out: ClusterSnapshot[] = [];
  for (const { cluster, hosts, rates, outlier } of clusters.values()) {
    for (const [key, h] of hosts) cluster.hosts.push({ ...h, successRate: mean(rates.get(key)) });
    if (cluster.outlier) cluster.outlier = { ...cluster.outlier, successRateAverage: mean(outlier) };
    out.push(cluster);
  }
  out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { versionInfo: snapshots[0]?.versionInfo ?? 'static', clusters: out };
}
