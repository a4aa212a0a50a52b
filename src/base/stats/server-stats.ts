/**
 * The `server.*` gauges (Envoy's server statistics), brought up to date on demand: admin /stats
 * calls updateServerStats before every render, and anything else that shows stats may too.
 */
import type { StatsStore } from './store.js';

/** What the gauges are computed from (the admin ServerState satisfies it). */
export interface ServerStatsSource {
  readonly state: 'live' | 'draining';
  /** Epoch milliseconds when this process (this hot-restart epoch) started. */
  readonly startedAt: number;
  readonly version: string;
  readonly epoch: number;
  now(): number;
}

export interface ServerStatsExtra {
  /**
   * Sets server.seconds_until_first_cert_expiring when given. (Envoy's gauge counts days;
   * promtool rejects a `days` unit in a metric name, so mesh counts seconds.)
   */
  secondsUntilFirstCertExpiring?: number;
}

/**
 * Numeric form of a version: major*1,000,000 + minor*1,000 + patch (`1.12.3` -> 1012003,
 * `0.1.0` -> 1000); a pre-release suffix is ignored; anything unparsable is 0.
 */
export function versionNumber(version: string): number {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(version.trim());
  if (!m) return 0;
  return Number(m[1]) * 1_000_000 + Number(m[2] ?? 0) * 1_000 + Number(m[3] ?? 0);
}

/**
 * Sets server.uptime (whole seconds since startedAt), server.live (1 live, 0 draining),
 * server.memory_allocated (heap bytes in use), server.memory_heap_size (heap bytes reserved),
 * server.version (versionNumber) and server.hot_restart_epoch.
 */
export function updateServerStats(store: StatsStore, source: ServerStatsSource, extra: ServerStatsExtra = {}): void {
  const memory = process.memoryUsage();
  store.gauge('server.uptime').set(Math.max(0, Math.floor((source.now() - source.startedAt) / 1000)));
  store.gauge('server.live').set(source.state === 'live' ? 1 : 0);
  store.gauge('server.memory_allocated').set(memory.heapUsed);
  store.gauge('server.memory_heap_size').set(memory.heapTotal);
  store.gauge('server.version').set(versionNumber(source.version));
  store.gauge('server.hot_restart_epoch').set(source.epoch);
  if (extra.secondsUntilFirstCertExpiring !== undefined) {
    store.gauge('server.seconds_until_first_cert_expiring').set(extra.secondsUntilFirstCertExpiring);
  }
}
