/**
 * One stats store per process: counters and gauges with Envoy-style dotted names
 * (`cluster.<name>.upstream_rq_total`), and fixed-bucket latency histograms (the dashboard's
 * latency; printed by admin /stats only with --stats_histograms, docs/admin.md).
 *
 * Tag extraction turns a dotted name into a Prometheus family plus labels, e.g.
 * `cluster.greeter.upstream_rq_total` -> `cluster.upstream_rq_total{cluster_name="greeter"}`.
 */

export type StatKind = 'counter' | 'gauge';

export class Counter {
  readonly kind = 'counter' as const;
  value = 0;
  /** True once incremented since creation (usedonly). Not cleared by a reset. */
  used = false;
  constructor(readonly name: string) {}
  inc(by = 1): void {
    this.value += by;
    this.used = true;
  }
  reset(): void {
    this.value = 0;
  }
}

export class Gauge {
  readonly kind = 'gauge' as const;
  value = 0;
  used = false;
  constructor(readonly name: string) {}
  set(value: number): void {
    this.value = value;
    this.used = true;
  }
  inc(by = 1): void {
    this.value += by;
    this.used = true;
  }
  dec(by = 1): void {
    this.value -= by;
    this.used = true;
  }
}

/**
 * Quantile q (0..1) of per-bucket counts of Histogram.BOUNDS (the last is the overflow): the upper
 * bound of the bucket holding it, the first non-empty bucket for q = 0; twice the last bound for
 * the overflow bucket; NaN when empty. Also used on the difference of two readings (`mesh stat`).
 */
export function bucketQuantile(counts: readonly number[], q: number): number {
  let count = 0;
  for (const c of counts) count += c;
  if (count === 0) return NaN;
  const rank = q * count;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen > 0 && seen >= rank) return Histogram.BOUNDS[i] ?? Histogram.BOUNDS[Histogram.BOUNDS.length - 1]! * 2;
  }
  return NaN;
}

/**
 * The fine latency buckets a Histogram made with `fine` keeps beside its BOUNDS (those admin
 * /traffic reads: a cluster's upstream_rq_time, a route's rq_time, a caller's latency): bucket 0 holds up to `minMs`,
 * bucket i (1..buckets-1) more than minMs × ratio^(i-1) and at most minMs × ratio^i, the last also
 * everything above. A quantile is read at the geometric middle of its bucket, so it is within
 * (√ratio − 1) ≈ 2 % of the value recorded, from 10 µs to about 10 minutes. What `mesh stat`
 * reads (admin /traffic); the Prometheus buckets and /stats quantiles stay on BOUNDS.
 */
export const FINE_LATENCY = { minMs: 0.01, ratio: 1.04, buckets: 462 } as const;
const LOG_RATIO = Math.log(FINE_LATENCY.ratio);

/** The fine bucket of a latency in milliseconds. */
export function fineIndex(ms: number): number {
  if (!(ms > FINE_LATENCY.minMs)) return 0;
  return Math.min(FINE_LATENCY.buckets - 1, Math.ceil(Math.log(ms / FINE_LATENCY.minMs) / LOG_RATIO - 1e-9));
}

/**
 * Quantile q (0..1) of fine bucket counts given as [index, count] pairs in ascending index order:
 * the geometric middle of the bucket holding it (minMs for bucket 0); NaN when empty.
 */
export function fineQuantile(pairs: ReadonlyArray<readonly [number, number]>, q: number): number {
  let count = 0;
  for (const [, n] of pairs) count += n;
  if (count === 0) return NaN;
  const rank = Math.max(1, Math.ceil(q * count));
  let seen = 0;
  for (const [i, n] of pairs) {
    seen += n;
    if (seen >= rank) return i === 0 ? FINE_LATENCY.minMs : FINE_LATENCY.minMs * FINE_LATENCY.ratio ** (i - 0.5);
  }
  return NaN;
}

/**
 * A small fixed-bucket latency histogram (milliseconds): bounded memory (one count per bucket,
 * and with `keepsFine` FINE_LATENCY's buckets once a value is recorded), nothing kept per sample.
 * Values above the last bound go to an overflow bucket.
 */
export class Histogram {
  static readonly BOUNDS = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000];
  readonly counts = new Array<number>(Histogram.BOUNDS.length + 1).fill(0);
  /** FINE_LATENCY's buckets, with keepsFine; made at the first value. */
  fine: Uint32Array | undefined;
  count = 0;
  sum = 0;
  /** `keepsFine`: also count FINE_LATENCY's buckets (a logarithm per value, 1.8 KB once used). */
  constructor(
    readonly name: string,
    public keepsFine = false,
  ) {}
  record(ms: number): void {
    let i = 0;
    while (i < Histogram.BOUNDS.length && ms > Histogram.BOUNDS[i]!) i++;
    this.counts[i]!++;
    if (this.keepsFine) (this.fine ??= new Uint32Array(FINE_LATENCY.buckets))[fineIndex(ms)]!++;
    this.count++;
    this.sum += ms;
  }
  /** The fine buckets that hold a value, as [index, count] pairs in ascending order. */
  finePairs(): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    const fine = this.fine;
    if (fine) for (let i = 0; i < fine.length; i++) if (fine[i]! > 0) out.push([i, fine[i]!]);
    return out;
  }
  /** True once a value was recorded (usedonly). */
  get used(): boolean {
    return this.count > 0;
  }
  /**
   * Upper bound of the bucket holding quantile q (0..1), the first non-empty bucket for q = 0;
   * twice the last bound for the overflow bucket; NaN when empty.
   */
  quantile(q: number): number {
    return bucketQuantile(this.counts, q);
  }
  reset(): void {
    this.counts.fill(0);
    this.fine = undefined;
    this.count = 0;
    this.sum = 0;
  }
}

export type Stat = Counter | Gauge;

export interface TagRule {
  /** Label name, e.g. cluster_name. */
  name: string;
  /**
   * Matched against the name as left by the rules before it (Envoy's tag-extraction semantics):
   * capture group 1 is the part removed from the name, group 2 (when the regex has one) is the
   * tag value, otherwise group 1 is the value too.
   */
  regex: RegExp;
}

/**
 * Known stat names below `cluster.<name>.`: the cluster name is everything before the first of
 * these, so cluster names with dots (`go.mesh.srv.greeter`) come out whole.
 */
const CLUSTER_STATS =
  'upstream_|membership_|outlier_detection\\.|health_check\\.|circuit_breakers\\.|lb_|update_|assignment_|max_host_weight$|version$|retry_or_shadow_abandoned$|bind_errors$|internal\\.|external\\.|canary\\.|zone\\.|host\\.';

/** Envoy-like default tag extraction rules, applied in order. */
export const DEFAULT_TAG_RULES: TagRule[] = [
  // cluster.<name>.upstream_rq_total -> cluster.upstream_rq_total{cluster_name="<name>"}
  { name: 'cluster_name', regex: new RegExp(`^cluster\\.((.+?)\\.)(?:${CLUSTER_STATS})`, 's') },
  // *.upstream_rq_2xx / downstream_rq_2xx -> *_rq_xx{response_code_class="2"} (only the digit goes)
  { name: 'response_code_class', regex: /_rq_(\d)xx$/ },
  // http.<stat_prefix>.downstream_rq_total -> http.downstream_rq_total{http_conn_manager_prefix="<prefix>"}
  { name: 'http_conn_manager_prefix', regex: /^http\.((.+?)\.)/s },
  // listener.<address>.downstream_cx_total -> listener.downstream_cx_total{listener_address="<address>"}
  { name: 'listener_address', regex: /^listener\.((.+?)\.)(?:downstream_|http\.|ssl\.|no_filter_chain_match)/s },
  // server.worker.<index>.downstream_rq_total -> server.worker.downstream_rq_total{worker_id="<index>"} (--concurrency)
  { name: 'worker_id', regex: /^server\.worker\.((\d+)\.)/ },
  // vhost.<host>.route.<rule>.rq_total -> vhost.route.rq_total{route_name="<rule>",virtual_host_name="<host>"}
  // (a route file's per-route stats: the last `.route.` ends the host, names with dots come out whole)
  { name: 'route_name', regex: /^vhost\..+\.route\.((.+?)\.)(?:rq_total|rq_\dxx|rq_time|retry|retry_overflow|fault\.[a-z_]+|mirror\.[a-z]+)$/s },
  { name: 'virtual_host_name', regex: /^vhost\.((.+)\.)route\.[^]+$/s },
  // service.<service>.endpoint.<Endpoint.Method>.rq_total -> service.endpoint.rq_total{endpoint=,service=}
  // (--stats_endpoints, endpoint-stats.ts: the first `.endpoint.` ends the service, names with dots
  // come out whole); then rq_2xx -> rq_xx{response_code_class="2"}, rq_code_404 -> rq_code{response_code="404"}
  { name: 'endpoint', regex: /^service\..+?\.endpoint\.((.+)\.)rq_(?:total|\dxx|code_\d{3}|time)$/s },
  { name: 'service', regex: /^service\.((.+?)\.)endpoint\.rq_(?:total|\dxx|code_\d{3}|time)$/s },
  { name: 'response_code_class', regex: /^service\.endpoint\.rq_(\d)xx$/ },
  { name: 'response_code', regex: /^service\.endpoint\.rq_code(_(\d{3}))$/ },
  // broker.topic.<topic>.published -> broker.topic.published{broker_topic="<topic>"} (topics have dots:
  // the topic is everything up to the last segment)
  { name: 'broker_topic', regex: /^broker\.topic\.((.+)\.)[^.]+$/s },
];

/** One stat as the Prometheus format prints it (prometheusSeries in render.ts); the store caches them by stat name. */
export interface PrometheusSeries {
  /** Metric family name, e.g. mesh_cluster_upstream_rq_total. */
  metric: string;
  /** Label text without braces, e.g. `cluster_name="greeter"`; "" when there are no labels. */
  labels: string;
  kind: StatKind | 'histogram';
  /** The tag-extracted dotted family the metric came from, e.g. cluster.upstream_rq_total. */
  family: string;
}

export interface TaggedName {
  /** The name with tag values taken out (dots kept), e.g. cluster.upstream_rq_total. */
  family: string;
  tags: Array<[string, string]>;
}

/** Each rule's regex recompiled once with the `d` flag (match indices), without `g`/`y`. */
const withIndices = new WeakMap<RegExp, RegExp>();
function indexed(re: RegExp): RegExp {
  if (re.hasIndices && !re.global && !re.sticky) return re;
  let out = withIndices.get(re);
  if (!out) {
    out = new RegExp(re.source, re.flags.replace(/[gyd]/g, '') + 'd');
    withIndices.set(re, out);
  }
  return out;
}

export function extractTags(name: string, rules: TagRule[] = DEFAULT_TAG_RULES): TaggedName {
  let family = name;
  const tags: Array<[string, string]> = [];
  for (const rule of rules) {
    const m = indexed(rule.regex).exec(family);
    const span = m?.indices?.[1];
    if (!m || !span || m[1] === undefined) continue;
    const value = m[2] ?? m[1];
    family = family.slice(0, span[0]) + family.slice(span[1]);
    tags.push([rule.name, value]);
  }
  return { family, tags };
}

/**
 * Selects stats by name: the admin's `filter=` (a linear-time regex, src/base/util/regex.ts
 * compileSearchRegex) or a RegExp of our own.
 */
export interface NameFilter {
  test(name: string): boolean;
}

/**
 * A view of the store below a name prefix, as Envoy's Stats::Scope: `store.scope('cluster.a.')`
 * then `.counter('upstream_rq_total')` is the store's `cluster.a.upstream_rq_total`. Scopes nest
 * (`scope('cluster.a.').scope('outlier_detection.')`); a scope holds no stats of its own.
 */
export interface StatsScope {
  /** The full prefix of this scope's names (ends with a dot unless empty). */
  readonly prefix: string;
  counter(name: string): Counter;
  gauge(name: string): Gauge;
  /** `fine`: the histogram also keeps FINE_LATENCY's buckets (from now on, when it exists already). */
  histogram(name: string, options?: { fine?: boolean }): Histogram;
  scope(prefix: string): StatsScope;
}

/**
 * A stat family's names, declared once next to the code that owns the family: the key is the
 * field the code uses, the value the name below the family's scope.
 */
export interface StatNames {
  readonly counters?: Readonly<Record<string, string>>;
  readonly gauges?: Readonly<Record<string, string>>;
  readonly histograms?: Readonly<Record<string, string>>;
}

type Bound<T, V> = T extends Readonly<Record<string, string>> ? { readonly [K in keyof T]: V } : unknown;

/** The stats of a family, one field per declared name. */
export type FamilyStats<F extends StatNames> = Bound<F['counters'], Counter> & Bound<F['gauges'], Gauge> & Bound<F['histograms'], Histogram>;

/** Creates (or finds) every stat a family declares, in `scope`. */
export function declareStats<F extends StatNames>(scope: StatsScope, names: F): FamilyStats<F> {
  const out: Record<string, Counter | Gauge | Histogram> = {};
  for (const [key, name] of Object.entries(names.counters ?? {})) out[key] = scope.counter(name);
  for (const [key, name] of Object.entries(names.gauges ?? {})) out[key] = scope.gauge(name);
  for (const [key, name] of Object.entries(names.histograms ?? {})) out[key] = scope.histogram(name);
  return out as FamilyStats<F>;
}

class Scope implements StatsScope {
  constructor(
    private readonly store: StatsStore,
    readonly prefix: string,
  ) {}
  counter(name: string): Counter {
    return this.store.counter(this.prefix + name);
  }
  gauge(name: string): Gauge {
    return this.store.gauge(this.prefix + name);
  }
  histogram(name: string, options?: { fine?: boolean }): Histogram {
    return this.store.histogram(this.prefix + name, options);
  }
  scope(prefix: string): StatsScope {
    return new Scope(this.store, this.prefix + prefix);
  }
}

export class StatsStore implements StatsScope {
  readonly prefix = '';
  private readonly stats = new Map<string, Stat>();
  private readonly histograms = new Map<string, Histogram>();
  private readonly taggedCache = new Map<string, TaggedName>();
  /** Per stat name, its series in the Prometheus format (prometheusSeries in render.ts), worked out once. */
  readonly prometheusCache = new Map<string, PrometheusSeries>();

  constructor(readonly tagRules: TagRule[] = DEFAULT_TAG_RULES) {}

  counter(name: string): Counter {
    const found = this.stats.get(name);
    if (found) {
      if (found.kind !== 'counter') throw new Error(`stat ${name} is a ${found.kind}, not a counter`);
      return found;
    }
    const c = new Counter(name);
    this.stats.set(name, c);
    return c;
  }

  gauge(name: string): Gauge {
    const found = this.stats.get(name);
    if (found) {
      if (found.kind !== 'gauge') throw new Error(`stat ${name} is a ${found.kind}, not a gauge`);
      return found;
    }
    const g = new Gauge(name);
    this.stats.set(name, g);
    return g;
  }

  histogram(name: string, options?: { fine?: boolean }): Histogram {
    let h = this.histograms.get(name);
    if (!h) {
      h = new Histogram(name, options?.fine === true);
      this.histograms.set(name, h);
    } else if (options?.fine) h.keepsFine = true;
    return h;
  }

  /** The stats whose names start with `prefix` (see StatsScope). */
  scope(prefix: string): StatsScope {
    return new Scope(this, prefix);
  }

  /** Counters and gauges sorted by name (byte order), optionally filtered. */
  list(options: { usedOnly?: boolean; filter?: NameFilter } = {}): Stat[] {
    const out: Stat[] = [];
    for (const stat of this.stats.values()) {
      if (options.usedOnly && !stat.used) continue;
      if (options.filter && !options.filter.test(stat.name)) continue;
      out.push(stat);
    }
    out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return out;
  }

  /** Histograms sorted by name (byte order), optionally filtered; usedOnly: recorded at least once. */
  listHistograms(options: { usedOnly?: boolean; filter?: NameFilter } = {}): Histogram[] {
    const out: Histogram[] = [];
    for (const h of this.histograms.values()) {
      if (options.usedOnly && !h.used) continue;
      if (options.filter && !options.filter.test(h.name)) continue;
      out.push(h);
    }
    out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return out;
  }

  tagged(name: string): TaggedName {
    let t = this.taggedCache.get(name);
    if (!t) {
      t = extractTags(name, this.tagRules);
      this.taggedCache.set(name, t);
    }
    return t;
  }

  /** Removes every stat whose name starts with prefix (a cluster that went away). */
  removePrefix(prefix: string): void {
    for (const name of [...this.stats.keys()]) if (name.startsWith(prefix)) this.stats.delete(name);
    for (const name of [...this.histograms.keys()]) if (name.startsWith(prefix)) this.histograms.delete(name);
  }

  /** All counters become zero; gauges and histograms are untouched (SPEC 3.2). */
  resetCounters(): void {
    for (const stat of this.stats.values()) if (stat.kind === 'counter') stat.reset();
  }
}
