/**
 * The three admin /stats formats over one StatsStore: plain text (`name: value`), JSON
 * (`{"stats":[...]}`) and the Prometheus text exposition format 0.0.4. Counters and gauges, plus
 * the histograms when the caller passes them (--stats_histograms; none by default). Every function
 * takes the already selected, name-sorted lists (StatsStore.list, StatsStore.listHistograms), so
 * `usedonly` and `filter` apply identically to every format.
 *
 * Prometheus naming (docs/admin.md):
 * - `mesh_` + the tag-extracted family with every `[^a-zA-Z0-9_]` turned into `_`; a camelCase
 *   boundary gets a `_` and the name is lower-cased (promtool lints camelCase);
 * - counters end in `_total` (appended unless already there);
 * - gauges never end in `_total`, `_count`, `_sum` or `_bucket` (promtool reserves these): the
 *   suffix is dropped (`cluster.membership_total` -> `mesh_cluster_membership`);
 * - labels come from tag extraction, in extraction order; values escaped (`\\`, `\"`, `\n`);
 *   a sample without labels is printed without `{}`;
 * - `# HELP` then `# TYPE` once per family, samples of a family together, families sorted by
 *   name, samples sorted by label text; when two stats map to the same family and labels, or to
 *   one family with two types, the first in name order wins and the other is left out.
 */
import { Histogram, type PrometheusSeries, type Stat, type StatKind, type StatsStore } from './store.js';
import type { ProcessFamily } from './process-metrics.js';

export const PROMETHEUS_PREFIX = 'mesh_';
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=UTF-8';

// ---------------------------------------------------------------- output

/**
 * Builds a large body as UTF-8 Buffer chunks of about 16 KiB. One string grown by `+=` to
 * megabytes (a deep rope) is several times slower to build and to encode than short strings
 * encoded as they fill up (bench/admin-render.ts).
 */
export class ChunkedText {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private current = '';

  add(text: string): void {
    this.current += text;
    if (this.current.length >= 16_384) this.flush();
  }

  private flush(): void {
    if (!this.current) return;
    const chunk = Buffer.from(this.current, 'utf8');
    this.chunks.push(chunk);
    this.size += chunk.length;
    this.current = '';
  }

  toBuffer(): Buffer {
    this.flush();
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
  }
}

// ---------------------------------------------------------------- text and JSON

/** A number as the text and Prometheus formats print it. */
function formatNumber(value: number): string {
  if (Number.isFinite(value)) return String(value);
  if (Number.isNaN(value)) return 'NaN';
  return value > 0 ? '+Inf' : '-Inf';
}

/** Envoy's quantiles of /stats, in percent. */
export const SUPPORTED_QUANTILES = [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100] as const;

/**
 * `name: value\n` per stat, in the given (sorted) order; then per histogram Envoy's quantile line
 * `name: P0(v,v) P25(v,v) ... P100(v,v)` (interval and cumulative: mesh keeps no interval, both
 * are the cumulative value), or `name: No recorded values` when nothing was recorded.
 */
export function renderText(stats: readonly Stat[], histograms: readonly Histogram[] = []): Buffer {
  const out = new ChunkedText();
  for (const s of stats) out.add(`${s.name}: ${formatNumber(s.value)}\n`);
  for (const h of histograms) {
    if (!h.used) {
      out.add(`${h.name}: No recorded values\n`);
      continue;
    }
    let line = `${h.name}:`;
    for (const q of SUPPORTED_QUANTILES) {
      const v = String(h.quantile(q / 100));
      line += ` P${q}(${v},${v})`;
    }
    out.add(line + '\n');
  }
  return out.toBuffer();
}

/** `{"stats":[{"name":"a","value":1},...]}`, compact, no trailing newline (Envoy ≈1.7+). */
export function renderJson(stats: readonly Stat[], histograms: readonly Histogram[] = []): Buffer {
  const out = new ChunkedText();
  out.add('{"stats":[');
  for (let i = 0; i < stats.length; i++) {
    const s = stats[i]!;
    const v = Number.isFinite(s.value) ? String(s.value) : 'null';
    out.add(`${i > 0 ? ',' : ''}{"name":${JSON.stringify(s.name)},"value":${v}}`);
  }
  if (histograms.length > 0) {
    // Envoy: one last element {"histograms":{...}}, only when a histogram is shown; null for NaN.
    out.add(`${stats.length > 0 ? ',' : ''}{"histograms":{"supported_quantiles":[${SUPPORTED_QUANTILES.join(',')}],"computed_quantiles":[`);
    for (let i = 0; i < histograms.length; i++) {
      const h = histograms[i]!;
      let values = '';
      for (const q of SUPPORTED_QUANTILES) {
        const x = h.quantile(q / 100);
        const v = Number.isFinite(x) ? String(x) : 'null';
        values += `${values ? ',' : ''}{"interval":${v},"cumulative":${v}}`;
      }
      out.add(`${i > 0 ? ',' : ''}{"name":${JSON.stringify(h.name)},"values":[${values}]}`);
    }
    out.add(']}}');
  }
  out.add(']}');
  return out.toBuffer();
}

// ---------------------------------------------------------------- Prometheus naming

const INVALID_NAME_CHARS = /[^a-zA-Z0-9_]/g;
const CAMEL_BOUNDARY = /([a-z0-9])([A-Z])/g;
const UPPER = /[A-Z]/;
const GAUGE_RESERVED_SUFFIX = /_(?:total|count|sum|bucket)$/;
const LABEL_ESCAPES = /[\\"\n]/;

/** `[^a-zA-Z0-9_]` -> `_`; camelCase -> snake_case (lower-cased). */
export function sanitizeName(name: string): string {
  let n = name.replace(INVALID_NAME_CHARS, '_');
  if (UPPER.test(n)) n = n.replace(CAMEL_BOUNDARY, '$1_$2').toLowerCase();
  return n;
}

/** Prometheus metric family name for a tag-extracted family of a given kind. */
export function prometheusMetricName(family: string, kind: StatKind | 'histogram'): string {
  let n = PROMETHEUS_PREFIX + sanitizeName(family);
  if (kind === 'counter') {
    if (!n.endsWith('_total')) n += '_total';
  } else {
    while (GAUGE_RESERVED_SUFFIX.test(n)) n = n.replace(GAUGE_RESERVED_SUFFIX, '');
  }
  return n;
}

/** Escapes a label value for the text exposition format. */
export function escapeLabelValue(value: string): string {
  if (!LABEL_ESCAPES.test(value)) return value;
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** The metric and labels one stat gets in the Prometheus format. */
export function prometheusSeries(store: StatsStore, name: string, kind: StatKind | 'histogram'): PrometheusSeries {
  // Tag extraction and naming run once per name: the store keeps the result.
  const byName = store.prometheusCache;
  const cached = byName.get(name);
  if (cached && cached.kind === kind) return cached;
  const tagged = store.tagged(name);
  let labels = '';
  for (const [tag, value] of tagged.tags) {
    if (labels) labels += ',';
    labels += `${sanitizeName(tag)}="${escapeLabelValue(value)}"`;
  }
  const series: PrometheusSeries = { metric: prometheusMetricName(tagged.family, kind), labels, kind, family: tagged.family };
  byName.set(name, series);
  return series;
}

// ---------------------------------------------------------------- HELP texts

/** Descriptions of the families this project emits; others get a generic text. */
const HELP: Record<string, string> = {
  'cluster.upstream_rq_total': 'Total upstream requests',
  'cluster.upstream_rq_xx': 'Upstream responses by response code class',
  'cluster.upstream_rq_timeout': 'Upstream requests that timed out',
  'cluster.upstream_rq_retry': 'Upstream request retries',
  'cluster.upstream_rq_pending_overflow': 'Upstream requests refused by a circuit breaker',
  'cluster.upstream_rq_active': 'Active upstream requests',
  'cluster.upstream_rq_pending_active': 'Pending upstream requests',
  'cluster.upstream_cx_total': 'Total upstream connections',
  'cluster.upstream_cx_active': 'Active upstream connections',
  'cluster.upstream_cx_connect_fail': 'Upstream connection failures',
  'cluster.membership_total': 'Hosts in the cluster',
  'cluster.membership_healthy': 'Healthy hosts in the cluster',
  'cluster.membership_mtls': 'Hosts in the cluster whose node serves mutual TLS (mtls=true)',
  'cluster.outlier_detection.ejections_active': 'Hosts currently ejected by outlier detection',
  'cluster.outlier_detection.ejections_total': 'Ejections by outlier detection',
  'cluster.health_check.attempt': 'Active health check attempts',
  'cluster.health_check.success': 'Successful active health checks',
  'cluster.health_check.failure': 'Failed active health checks',
  'cluster.upstream_rq_completed': 'Upstream requests that completed',
  'cluster.upstream_rq_retry_overflow': 'Retries refused by the max_retries circuit breaker or the retry budget (not made)',
  'cluster.upstream_rq_rx_reset': 'Upstream requests reset by the upstream',
  'cluster.upstream_cx_destroy': 'Upstream connections closed',
  'cluster.upstream_cx_none_healthy': 'Requests that found no healthy host',
  'cluster.membership_change': 'Changes of the cluster membership',
  'cluster.lb_healthy_panic': 'Load balancing decisions made in panic mode',
  'cluster.health_check.network_failure': 'Active health checks that failed on the network',
  'cluster.health_check.healthy': 'Hosts passing active health checks',
  'cluster.outlier_detection.ejections_enforced_total': 'Ejections enforced by outlier detection',
  'cluster.outlier_detection.ejections_overflow': 'Ejections skipped because of max_ejection_percent',
  'cluster.circuit_breakers.default.cx_open': 'Whether the default-priority connection circuit breaker is open',
  'cluster.circuit_breakers.default.rq_open': 'Whether the default-priority request circuit breaker is open',
  'cluster.circuit_breakers.default.rq_pending_open': 'Whether the default-priority pending-request circuit breaker is open',
  'cluster.circuit_breakers.default.rq_retry_open': 'Whether the default-priority retry circuit breaker is open',
  'cluster.circuit_breakers.default.remaining_retries': 'Default-priority retries that may start now (retry budget and max_retries)',
  'cluster.circuit_breakers.high.cx_open': 'Whether the high-priority connection circuit breaker is open',
  'cluster.circuit_breakers.high.rq_open': 'Whether the high-priority request circuit breaker is open',
  'cluster.circuit_breakers.high.rq_pending_open': 'Whether the high-priority pending-request circuit breaker is open',
  'cluster.circuit_breakers.high.rq_retry_open': 'Whether the high-priority retry circuit breaker is open',
  'cluster.circuit_breakers.high.remaining_retries': 'High-priority retries that may start now (retry budget and max_retries)',
  'cluster_manager.active_clusters': 'Clusters in the cluster manager',
  'cluster_manager.warming_clusters': 'Clusters not yet ready',
  'cluster_manager.cluster_added': 'Clusters added',
  'cluster_manager.cluster_removed': 'Clusters removed',
  'http.downstream_rq_total': 'Total downstream requests',
  'http.downstream_rq_active': 'Active downstream requests',
  'http.downstream_cx_total': 'Total downstream connections',
  'http.downstream_rq_xx': 'Downstream responses by response code class',
  'http.downstream_cx_active': 'Active downstream connections',
  'cluster.upstream_rq_time': 'Upstream request time in milliseconds',
  'http.downstream_rq_time': 'Downstream request time in milliseconds',
  'server.uptime': 'Seconds since the server started',
  'server.live': '1 while the server is live, 0 while it is draining',
  'server.memory_allocated': 'Bytes of JavaScript heap in use',
  'server.memory_heap_size': 'Bytes of JavaScript heap reserved',
  'server.version': 'Numeric form of the server version (major*1000000 + minor*1000 + patch)',
  'server.hot_restart_epoch': 'Hot restart epoch',
  'server.seconds_until_first_cert_expiring': 'Seconds until the first loaded certificate expires',
  'mtls.cert_renewed': 'Workload certificate renewals that succeeded',
  'mtls.cert_renewal_failed': 'Workload certificate renewals that failed (each attempt)',
};

function helpFor(family: string, kind: StatKind | 'histogram'): string {
  return HELP[family] ?? `${kind === 'counter' ? 'Counter' : kind === 'gauge' ? 'Gauge' : 'Histogram'} ${family}`;
}

// ---------------------------------------------------------------- Prometheus rendering

interface Family {
  metric: string;
  kind: StatKind | 'histogram';
  help: string;
  /** Flat pairs: labels, value text (histograms: labels, the series' lines as one text). */
  samples: string[];
}

/** Bucket bounds as `le` prints them (milliseconds, no exponent), worked out once. */
const LE = Histogram.BOUNDS.map((b) => String(b));

/** One histogram series: cumulative `_bucket` lines (then `+Inf`), `_sum`, `_count`. */
function histogramLines(metric: string, labels: string, h: Histogram): string {
  const pre = labels ? `${labels},` : '';
  let text = '';
  let cumulative = 0;
  for (let i = 0; i < LE.length; i++) {
    cumulative += h.counts[i]!;
    text += `${metric}_bucket{${pre}le="${LE[i]}"} ${cumulative}\n`;
  }
  text += `${metric}_bucket{${pre}le="+Inf"} ${h.count}\n`;
  text += sample(`${metric}_sum`, labels, formatNumber(h.sum));
  text += sample(`${metric}_count`, labels, String(h.count));
  return text;
}

/**
 * Counters and gauges in the text exposition format 0.0.4, with `extra` families (the standard
 * process metrics, src/base/stats/process-metrics.ts) sorted in among them under their own names.
 */
export function renderPrometheus(
  store: StatsStore,
  stats: readonly Stat[],
  extra: readonly ProcessFamily[] = [],
  histograms: readonly Histogram[] = [],
): Buffer {
  const families = new Map<string, Family>();
  for (const f of extra) families.set(f.metric, { metric: f.metric, kind: f.kind, help: f.help, samples: ['', formatNumber(f.value)] });
  for (const stat of stats) {
    const series = prometheusSeries(store, stat.name, stat.kind);
    let family = families.get(series.metric);
    if (!family) {
      family = { metric: series.metric, kind: stat.kind, help: helpFor(series.family, stat.kind), samples: [] };
      families.set(series.metric, family);
    } else if (family.kind !== stat.kind) {
      continue; // one family cannot hold two types: the first (in name order) wins
    }
    family.samples.push(series.labels, formatNumber(stat.value));
  }
  for (const h of histograms) {
    const series = prometheusSeries(store, h.name, 'histogram');
    let family = families.get(series.metric);
    if (!family) {
      family = { metric: series.metric, kind: 'histogram', help: helpFor(series.family, 'histogram'), samples: [] };
      families.set(series.metric, family);
    } else if (family.kind !== 'histogram') {
      continue;
    }
    family.samples.push(series.labels, histogramLines(series.metric, series.labels, h));
  }
  const names = [...families.keys()].sort(byteOrder);
  const out = new ChunkedText();
  for (const name of names) {
    const f = families.get(name)!;
    out.add(`# HELP ${name} ${escapeHelp(f.help)}\n# TYPE ${name} ${f.kind}\n`);
    const s = f.samples;
    const emit = f.kind === 'histogram' ? (_labels: string, lines: string) => lines : (labels: string, value: string) => sample(name, labels, value);
    if (s.length === 2) {
      out.add(emit(s[0]!, s[1]!));
      continue;
    }
    const order: number[] = [];
    for (let i = 0; i < s.length; i += 2) order.push(i);
    order.sort((a, b) => byteOrder(s[a]!, s[b]!));
    let previous: string | undefined;
    for (const i of order) {
      const labels = s[i]!;
      if (labels === previous) continue; // same series twice: keep the first
      previous = labels;
      out.add(emit(labels, s[i + 1]!));
    }
  }
  return out.toBuffer();
}

function sample(metric: string, labels: string, value: string): string {
  return labels ? `${metric}{${labels}} ${value}\n` : `${metric} ${value}\n`;
}

function byteOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
