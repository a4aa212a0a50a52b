/**
 * One stats store per process: counters and gauges with Envoy-style dotted names
 * (`cluster.<name>.upstream_rq_total`). Histograms are kept for internal use (the dashboard's
 * latency) but never printed by admin /stats (SPEC 2.5).
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

/** A small fixed-bucket latency histogram (milliseconds), for percentiles in the dashboard. */
export class Histogram {
  static readonly BOUNDS = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000];
  readonly counts = new Array<number>(Histogram.BOUNDS.length + 1).fill(0);
  count = 0;
  sum = 0;
  constructor(readonly name: string) {}
  record(ms: number): void {
    let i = 0;
    while (i < Histogram.BOUNDS.length && ms > Histogram.BOUNDS[i]!) i++;
    this.counts[i]!++;
    this.count++;
    this.sum += ms;
  }
  /** Upper bound of the bucket holding quantile q (0..1); NaN when empty. */
  quantile(q: number): number {
    if (this.count === 0) return NaN;
    const rank = q * this.count;
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) return Histogram.BOUNDS[i] ?? Histogram.BOUNDS[Histogram.BOUNDS.length - 1]! * 2;
    }
    return NaN;
  }
  reset(): void {
    this.counts.fill(0);
    this.count = 0;
    this.sum = 0;
  }
}

export type Stat = Counter | Gauge;

export interface TagRule {
  /** Label name, e.g. cluster_name. */
  name: string;
  /** Matched against the full dotted name; group 1 is the part removed from the name, group 2 the value. */
  regex: RegExp;
}

/** Envoy-like default tag extraction rules, applied in order. */
export const DEFAULT_TAG_RULES: TagRule[] = [
  // cluster.<name>.outlier_detection.x, cluster.<name>.upstream_rq_total ...
  { name: 'cluster_name', regex: /^cluster\.((.+?)\.)(?:upstream_|membership_|outlier_detection\.|health_check\.|circuit_breakers\.|lb_|update_|max_host_weight|version)/ },
  // http.<prefix>.downstream_rq_2xx -> response_code_class
  { name: 'response_code_class', regex: /^http\.[^.]+\.downstream_rq_((\d)xx)$/ },
  { name: 'response_code_class', regex: /^cluster\.[^.]+\.upstream_rq_((\d)xx)$/ },
  { name: 'http_conn_manager_prefix', regex: /^http\.((.+?)\.)/ },
  { name: 'broker_topic', regex: /^broker\.topic\.((.+?)\.)/ },
];

export interface TaggedName {
  /** The name with tag values taken out (dots kept), e.g. cluster.upstream_rq_total. */
  family: string;
  tags: Array<[string, string]>;
}

export function extractTags(name: string, rules: TagRule[] = DEFAULT_TAG_RULES): TaggedName {
  let family = name;
  const tags: Array<[string, string]> = [];
  for (const rule of rules) {
    const m = rule.regex.exec(family);
    if (!m || m[1] === undefined || m[2] === undefined) continue;
    const start = m.index + m[0].indexOf(m[1]);
    let removed = m[1];
    // `xx` classes keep the "xx" in the name: downstream_rq_2xx -> downstream_rq_xx
    if (rule.name === 'response_code_class') removed = m[2];
    const at = rule.name === 'response_code_class' ? family.lastIndexOf(m[1]) : start;
    family = family.slice(0, at) + family.slice(at + removed.length);
    tags.push([rule.name, m[2]]);
  }
  return { family, tags };
}

export class StatsStore {
  private readonly stats = new Map<string, Stat>();
  private readonly histograms = new Map<string, Histogram>();
  private readonly taggedCache = new Map<string, TaggedName>();

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

  histogram(name: string): Histogram {
    let h = this.histograms.get(name);
    if (!h) {
      h = new Histogram(name);
      this.histograms.set(name, h);
    }
    return h;
  }

  /** Counters and gauges sorted by name (byte order), optionally filtered. */
  list(options: { usedOnly?: boolean; filter?: RegExp } = {}): Stat[] {
    const out: Stat[] = [];
    for (const stat of this.stats.values()) {
      if (options.usedOnly && !stat.used) continue;
      if (options.filter && !options.filter.test(stat.name)) continue;
      out.push(stat);
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
  }

  /** All counters become zero; gauges and histograms are untouched (SPEC 3.2). */
  resetCounters(): void {
    for (const stat of this.stats.values()) if (stat.kind === 'counter') stat.reset();
  }
}
