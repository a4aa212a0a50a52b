/**
 * What the `/stats` dashboard samples: one ring of 1-second windows per front end, read from the
 * process's StatsStore (the `http.<prefix>.downstream_rq_*` counters and the `downstream_rq_time`
 * histogram that FrontServer keeps from the status really sent), plus process memory and
 * event-loop delay.
 *
 * Cost: one unref'd timer per process, whatever the number of front ends (the gateway and the
 * sidecar of `mesh dev` share it), and an event-loop delay monitor while any dashboard runs.
 * Each tick reads a handful of counters and copies one 17-bucket histogram per front end; nothing
 * is added to the request path.
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { Histogram, type Counter, type Gauge, type StatsStore } from '../../base/stats/store.js';
import { HTTP_DOWNSTREAM_STATS, httpRqClassStat, httpStatPrefix } from '../../base/http/stats.js';

export const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;
export type StatusClass = (typeof STATUS_CLASSES)[number];
export type StatusCounts = Record<StatusClass, number>;

/** Window length (ms) and how many windows each front end keeps (two minutes). */
export const WINDOW_MS = 1_000;
export const WINDOWS_KEPT = 120;
/** With --stats_histograms: at most this many clusters (the first by name) get latency series. */
export const MAX_LATENCY_CLUSTERS = 10;
/** The per-attempt latency histogram of a cluster (src/core/upstream/cluster.ts); group 1 is the cluster name. */
const CLUSTER_RQ_TIME = /^cluster\.(.+)\.upstream_rq_time$/s;

export interface Quantiles {
  p50: number | null;
  p99: number | null;
}

export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}

/** Process-wide numbers taken once per tick and shared by every front end's window. */
export interface ProcessSample {
  rss: number;
  heap_used: number;
  /** Event-loop delay over the window (ms), null when the monitor had no sample yet. */
  loop: LoopDelay | null;
}

/** One closed window. */
export interface StatsWindow {
  /** Epoch seconds (millisecond precision) at the end of the window. */
  timestamp: number;
  /** Real length of the window (ms): rates are counts / duration. */
  duration_ms: number;
  /** Requests completed in the window (the sum of the status classes). */
  requests: number;
  status_codes: StatusCounts;
  /** 5xx answers (including responses that never started, counted as 5xx by the front server). */
  errors: number;
  /** Upper bounds of the histogram buckets holding p50/p99 of this window's requests; null without requests. */
  latency_ms: Quantiles;
  /**
   * Only with --stats_histograms: per cluster (the first MAX_LATENCY_CLUSTERS by name that have
   * recorded an upstream attempt), p50/p99 of this window's attempts from the cluster's
   * `upstream_rq_time` histogram; null values for a cluster without attempts in the window.
   */
  clusters_latency_ms?: Record<string, Quantiles>;
  /** Bytes at the end of the window. */
  memory: { rss: number; heap_used: number };
  event_loop_delay_ms: LoopDelay | null;
}

const zero = (): StatusCounts => ({ '1xx': 0, '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 });

/** Counter delta that survives admin /reset_counters (a counter that went down restarted at 0). */
const delta = (now: number, before: number) => (now >= before ? now - before : now);

/** Same rule as Histogram.quantile, over a bucket-count array (one window's delta). */
export function bucketQuantile(counts: readonly number[], q: number): number | null {
  let total = 0;
  for (const c of counts) total += c;
  if (total === 0) return null;
  const rank = q * total;
  let seen = 0;
  const bounds = Histogram.BOUNDS;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen > 0 && seen >= rank) return bounds[i] ?? bounds[bounds.length - 1]! * 2;
  }
  return null;
}

/** One front end's windows, read from the counters FrontServer keeps under `http.<prefix>.`. */
export class RequestSeries {
  readonly statPrefix: string;
  private readonly total: Counter;
  private readonly classes: Counter[];
  private readonly active: Gauge;
  private readonly cxTotal: Counter;
  private readonly cxActive: Gauge;
  private readonly time: Histogram;
  private lastClasses: number[];
  private lastBuckets: number[];
  private lastCount: number;
  private lastAt: number;
  private readonly ring: StatsWindow[] = [];
  /** Per cluster histogram name: its bucket counts and count at the previous window (with clusterLatency). */
  private readonly clusterLast = new Map<string, { counts: number[]; count: number }>();

  constructor(
    private readonly stats: StatsStore,
    prefix: string,
    readonly keep = WINDOWS_KEPT,
    now = Date.now(),
    /** --stats_histograms: windows carry `clusters_latency_ms`. */
    readonly clusterLatency = false,
  ) {
    const scope = stats.scope((this.statPrefix = httpStatPrefix(prefix)));
    const { counters, gauges, histograms } = HTTP_DOWNSTREAM_STATS;
    // The same objects FrontServer increments (the store hands out one per name).
    this.total = scope.counter(counters.rqTotal);
    this.classes = STATUS_CLASSES.map((_, i) => scope.counter(httpRqClassStat(i + 1)));
    this.active = scope.gauge(gauges.rqActive);
    this.cxTotal = scope.counter(counters.cxTotal);
    this.cxActive = scope.gauge(gauges.cxActive);
    this.time = scope.histogram(histograms.rqTime);
    this.lastClasses = this.classes.map((c) => c.value);
    this.lastBuckets = this.time.counts.slice();
    this.lastCount = this.time.count;
    this.lastAt = now;
    if (clusterLatency) this.clusterWindow();
  }

  /**
   * The clusters' latency since the previous call, and the new baseline. A histogram not seen
   * before was created since (a cluster starts at zero), so all of it is in the window; one that
   * went away (cluster removed) is forgotten. Every cluster keeps a baseline, so one that enters
   * the first MAX_LATENCY_CLUSTERS later does not bring its whole history into one window.
   */
  private clusterWindow(): Record<string, Quantiles> {
    const out: Record<string, Quantiles> = {};
    const present = new Set<string>();
    for (const h of this.stats.listHistograms({ usedOnly: true, filter: CLUSTER_RQ_TIME })) {
      present.add(h.name);
      const last = this.clusterLast.get(h.name);
      const counts = h.counts;
      if (Object.keys(out).length < MAX_LATENCY_CLUSTERS) {
        const reset = !last || h.count < last.count;
        const buckets = counts.map((c, i) => (reset ? c : delta(c, last.counts[i]!)));
        out[CLUSTER_RQ_TIME.exec(h.name)![1]!] = { p50: bucketQuantile(buckets, 0.5), p99: bucketQuantile(buckets, 0.99) };
      }
      if (last) {
        for (let i = 0; i < counts.length; i++) last.counts[i] = counts[i]!;
        last.count = h.count;
      } else this.clusterLast.set(h.name, { counts: counts.slice(), count: h.count });
    }
    for (const name of this.clusterLast.keys()) if (!present.has(name)) this.clusterLast.delete(name);
    return out;
  }

  /** Closes the current window at `now`. */
  sample(now: number, proc: ProcessSample): StatsWindow {
    const status = zero();
    let requests = 0;
    const values = this.classes.map((c) => c.value);
    STATUS_CLASSES.forEach((cls, i) => {
      const d = delta(values[i]!, this.lastClasses[i]!);
      status[cls] = d;
      requests += d;
    });
    const counts = this.time.counts;
    const reset = this.time.count < this.lastCount;
    const buckets = counts.map((c, i) => (reset ? c : delta(c, this.lastBuckets[i]!)));
    const window: StatsWindow = {
      timestamp: now / 1000,
      duration_ms: Math.max(1, now - this.lastAt),
      requests,
      status_codes: status,
      errors: status['5xx'],
      latency_ms: { p50: bucketQuantile(buckets, 0.5), p99: bucketQuantile(buckets, 0.99) },
      ...(this.clusterLatency ? { clusters_latency_ms: this.clusterWindow() } : {}),
      memory: { rss: proc.rss, heap_used: proc.heap_used },
      event_loop_delay_ms: proc.loop,
    };
    this.lastClasses = values;
    this.lastBuckets = counts.slice();
    this.lastCount = this.time.count;
    this.lastAt = now;
    this.ring.push(window);
    if (this.ring.length > this.keep) this.ring.splice(0, this.ring.length - this.keep);
    return window;
  }

  /** Closed windows, oldest first. */
  windows(): readonly StatsWindow[] {
    return this.ring;
  }

  /** The counters as they are now: exactly what admin /stats prints under `http.<prefix>.`. */
  totals(): { total: number; active: number; cx_total: number; cx_active: number } & StatusCounts {
    const out = { total: this.total.value, ...zero(), active: this.active.value, cx_total: this.cxTotal.value, cx_active: this.cxActive.value };
    STATUS_CLASSES.forEach((cls, i) => (out[cls] = this.classes[i]!.value));
    return out;
  }

  /** Since start (bucket upper bounds); null before the first request. */
  latency(): { p50: number | null; p90: number | null; p99: number | null; mean: number | null } {
    const q = (x: number) => bucketQuantile(this.time.counts, x);
    return { p50: q(0.5), p90: q(0.9), p99: q(0.99), mean: this.time.count ? Math.round((this.time.sum / this.time.count) * 1000) / 1000 : null };
  }
}

/** Resolution of the event-loop delay monitor (ms). */
const LOOP_RESOLUTION_MS = 20;
/**
 * The monitor records the time between two firings of its `resolution` timer: the delay is that
 * minus the resolution. Nanoseconds in, milliseconds out (3 decimals).
 */
const loopMs = (v: number) => Math.max(0, Math.round(v / 1e3 - LOOP_RESOLUTION_MS * 1e3) / 1e3);

/** The process's one sampling timer, shared by every front end's series. */
export class ProcessSampler {
  private timer?: NodeJS.Timeout;
  private loop?: IntervalHistogram;
  private readonly series = new Set<RequestSeries>();
  /** The newest sample (undefined before the first tick). */
  last?: ProcessSample;

  constructor(readonly intervalMs = WINDOW_MS) {}

  get running(): boolean {
    return this.timer !== undefined;
  }

  add(series: RequestSeries): void {
    this.series.add(series);
    if (this.timer) return;
    this.loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
    this.loop.enable();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  remove(series: RequestSeries): void {
    this.series.delete(series);
    if (this.series.size > 0 || !this.timer) return;
    clearInterval(this.timer);
    this.timer = undefined;
    this.loop?.disable();
    this.loop = undefined;
  }

  /** Takes the process sample and closes one window of every series. */
  tick(now = Date.now()): void {
    const sample = this.read();
    for (const s of this.series) s.sample(now, sample);
  }

  /** Memory now and the event-loop delay since the previous read (which it resets). */
  read(): ProcessSample {
    const mem = process.memoryUsage();
    let loop: LoopDelay | null = null;
    if (this.loop && this.loop.count > 0) {
      loop = { p50: loopMs(this.loop.percentile(50)), p99: loopMs(this.loop.percentile(99)), max: loopMs(this.loop.max) };
      this.loop.reset();
    }
    this.last = { rss: mem.rss, heap_used: mem.heapUsed, loop };
    return this.last;
  }
}

/** The process-wide sampler. */
export const processSampler = new ProcessSampler();
