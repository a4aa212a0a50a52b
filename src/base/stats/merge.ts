/**
 * Several processes' stats as one (`--concurrency`, docs/architecture.md "Concurrency"): each
 * process takes a serialisable snapshot of its store, and the admin process merges the snapshots
 * into a fresh StatsStore that the ordinary renderers print.
 *
 * Merge rules (Envoy's, as for a hot restart): counters are summed; histograms are merged bucket
 * by bucket (counts, sample count and sum added); gauges are summed, except the gauges that
 * describe state every process holds a copy of (NOT_SUMMED_GAUGE: uptime, liveness, versions,
 * cluster membership, health, ejections, open breakers...), which take the largest value.
 * Process metrics follow the same idea (mergeProcessFamilies).
 */
import { StatsStore } from './store.js';
import type { ProcessFamily } from './process-metrics.js';

/** One stat: name, `c` (counter) or `g` (gauge), value, used. */
export type StatEntry = [name: string, kind: 'c' | 'g', value: number, used: boolean];
/** One histogram: name, per-bucket counts, sample count, sum. */
export type HistogramEntry = [name: string, counts: number[], count: number, sum: number];

/** A store's contents as plain JSON-serialisable data (sent over IPC). */
export interface StoreSnapshot {
  stats: StatEntry[];
  histograms: HistogramEntry[];
}

/**
 * Gauges that are not summed but take the largest value of any process: each process holds the
 * same fact (the server's uptime, state and version; the clusters and their membership, health
 * and ejections as each process sees them; whether a breaker is open; the registry's state).
 */
export const NOT_SUMMED_GAUGE =
  /^(?:server\.(?:uptime|live|version|hot_restart_epoch|concurrency|seconds_until_first_cert_expiring)|cluster_manager\.(?:active|warming)_clusters|registry\.(?:store_failing|stale_seconds)|sidecar\.app\.registered)$|^cluster\..+\.(?:membership_[a-z_]+|max_host_weight|version|health_check\.healthy|outlier_detection\.ejections_active|circuit_breakers\.[a-z]+\.[a-z_]+_open)$/s;

export function snapshotStore(store: StatsStore): StoreSnapshot {
  return {
    stats: store.list().map((s): StatEntry => [s.name, s.kind === 'counter' ? 'c' : 'g', s.value, s.used]),
    histograms: store.listHistograms().map((h): HistogramEntry => [h.name, [...h.counts], h.count, h.sum]),
  };
}

/**
 * A fresh store holding the merged snapshots (rules above). A name that is a counter in one
 * snapshot and a gauge in another keeps the kind it was first seen with; the others are skipped.
 */
export function mergeSnapshots(snapshots: readonly StoreSnapshot[], into: StatsStore = new StatsStore()): StatsStore {
  const seen = new Set<string>();
  for (const snap of snapshots) {
    for (const [name, kind, value, used] of snap.stats) {
      const first = !seen.has(name);
      seen.add(name);
      try {
        if (kind === 'c') {
          const c = into.counter(name);
          c.value += value;
          c.used ||= used;
        } else {
          const g = into.gauge(name);
          if (first) g.value = value;
          else g.value = NOT_SUMMED_GAUGE.test(name) ? Math.max(g.value, value) : g.value + value;
          g.used ||= used;
        }
      } catch {
        // the same name with another kind elsewhere: keep the first
      }
    }
    for (const [name, counts, count, sum] of snap.histograms) {
      const h = into.histogram(name);
      for (let i = 0; i < h.counts.length && i < counts.length; i++) h.counts[i]! += counts[i] ?? 0;
      h.count += count;
      h.sum += sum;
    }
  }
  return into;
}

/**
 * Process metrics of several processes as one set: counters and sizes are summed (CPU seconds,
 * resident memory, heap, open descriptors), `process_start_time_seconds` is the earliest start
 * and `nodejs_eventloop_lag_seconds` the largest lag. Families in the order first seen.
 */
export function mergeProcessFamilies(sets: readonly ProcessFamily[][]): ProcessFamily[] {
  const out = new Map<string, ProcessFamily>();
  for (const set of sets) {
    for (const f of set) {
      const have = out.get(f.metric);
      if (!have) out.set(f.metric, { ...f });
      else if (f.metric === 'process_start_time_seconds') have.value = Math.min(have.value, f.value);
      else if (f.metric === 'nodejs_eventloop_lag_seconds') have.value = Math.max(have.value, f.value);
      else have.value += f.value;
    }
  }
  return [...out.values()];
}
