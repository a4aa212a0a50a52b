/**
 * The standard process metrics of Prometheus clients (`process_*`, `nodejs_*`), shown by the
 * Prometheus format only, under their standard names (no mesh_ prefix). One instance per
 * process (the runtime's, or the admin's own); it owns an event-loop delay monitor, so it must be
 * closed. Names and meanings are in docs/admin.md ("Process metrics").
 */
import { readdirSync } from 'node:fs';
import { monitorEventLoopDelay, performance, type IntervalHistogram } from 'node:perf_hooks';
import type { NameFilter, StatKind } from './store.js';

/** One family of one sample without labels. */
export interface ProcessFamily {
  metric: string;
  kind: StatKind;
  help: string;
  value: number;
}

/** Timer interval of the event-loop delay monitor, in milliseconds. */
export const EVENT_LOOP_RESOLUTION_MS = 10;

export class ProcessMetrics {
  private readonly loop: IntervalHistogram;
  private closed = false;
  /** Samples and their sum (ns) of the monitor at the previous read. */
  private lastCount = 0;
  private lastSum = 0;

  constructor() {
    this.loop = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS });
    this.loop.enable();
  }

  /**
   * Mean event-loop lag in seconds since the previous call (or since the start): the monitor's
   * timer fires every EVENT_LOOP_RESOLUTION_MS; the lag is how much later than that it fired, on
   * average. 0 when the timer has not fired since. The monitor is never reset (a reset would
   * drop the interval in progress, a block right after a scrape included): the mean of the
   * interval comes from the running count and sum.
   */
  private eventLoopLagSeconds(): number {
    const h = this.loop;
    const count = h.count;
    const sum = count > 0 ? h.mean * count : 0;
    const samples = count - this.lastCount;
    const total = sum - this.lastSum;
    this.lastCount = count;
    this.lastSum = sum;
    if (samples <= 0 || !Number.isFinite(total)) return 0;
    return Math.max(0, total / samples / 1e9 - EVENT_LOOP_RESOLUTION_MS / 1000);
  }

  /**
   * The families now, those whose name `filter` matches (all without a filter). Reading
   * nodejs_eventloop_lag_seconds starts a new lag interval.
   */
  families(filter?: NameFilter): ProcessFamily[] {
    const cpu = process.cpuUsage();
    const memory = process.memoryUsage();
    const out: ProcessFamily[] = [
      { metric: 'process_cpu_seconds_total', kind: 'counter', help: 'Total user and system CPU time spent in seconds', value: (cpu.user + cpu.system) / 1e6 },
      { metric: 'process_resident_memory_bytes', kind: 'gauge', help: 'Resident memory size in bytes', value: memory.rss },
      { metric: 'process_start_time_seconds', kind: 'gauge', help: 'Start time of the process since unix epoch in seconds', value: performance.timeOrigin / 1000 },
      { metric: 'nodejs_heap_size_used_bytes', kind: 'gauge', help: 'Process heap size used from Node.js in bytes', value: memory.heapUsed },
      { metric: 'nodejs_heap_size_total_bytes', kind: 'gauge', help: 'Process heap size from Node.js in bytes', value: memory.heapTotal },
    ];
    const fds = openFds();
    if (fds !== undefined) out.push({ metric: 'process_open_fds', kind: 'gauge', help: 'Number of open file descriptors', value: fds });
    const lagWanted = !filter || filter.test('nodejs_eventloop_lag_seconds');
    if (lagWanted && !this.closed) {
      out.push({
        metric: 'nodejs_eventloop_lag_seconds',
        kind: 'gauge',
        help: 'Mean event loop lag in seconds since the previous scrape',
        value: this.eventLoopLagSeconds(),
      });
    }
    return filter ? out.filter((f) => filter.test(f.metric)) : out;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.loop.disable();
  }
}

/** Entries of /proc/self/fd (less the one reading it), or undefined where there is no /proc. */
function openFds(): number | undefined {
  try {
    return Math.max(0, readdirSync('/proc/self/fd').length - 1);
  } catch {
    return undefined;
  }
}
