/**
 * The reader's side of admin `/traffic` (./traffic.ts): one answer read and checked field by
 * field, the difference of two readings of a process as flows (caller → service, host → route
 * rule, caller identity → process), and the row
 * (requests a second, success rate, latency percentiles, mutual TLS share) of a group of flows.
 * Used by `mesh stat` / `mesh edges` (src/cli/stat.ts) and the gateway dashboard's
 * topology (src/fronts/dashboard/topology.ts). Every answer is outside input.
 */
import { request } from '../base/http/undici.js';
import type { ClusterTraffic, TrafficReport } from './traffic.js';
import { bucketQuantile, FINE_LATENCY, fineQuantile, Histogram } from '../base/stats/store.js';
import { printable } from '../base/util/text.js';
import { OTHER_CALLERS, PLAIN_CALLER } from '../base/http/callers.js';

/** What one process sent to one service over the window. */
export interface Flow {
  /** The caller: the process's name (a sidecar's service), else its kind. */
  from: string;
  to: string;
  answered: number;
  failed: number;
  /** Answers sent over mutual TLS (estimated: answered × the share of hosts called over it). */
  mtls: number;
  latency: number[];
  /** The latency in FINE_LATENCY's buckets (index → count); unset when a reading had none. */
  fine?: Map<number, number>;
  /** False: no latency was measured (a route file's rule without --stats_endpoints). */
  timed?: boolean;
}

export interface Row {
  answered: number;
  rps: number;
  /** 0..1; NaN with no answer. */
  success: number;
  p50: number;
  p95: number;
  p99: number;
  /** 0..1; NaN with no answer. */
  mtls: number;
}

const CLASSES = ['rq_2xx', 'rq_3xx', 'rq_4xx', 'rq_5xx'] as const;
const ROUTE_CLASSES = ['rq_1xx', ...CLASSES] as const;
export const MAX_REPORT_BYTES = 4 * 1024 * 1024;

/** A /traffic answer checked field by field; undefined when it is not one. */
export function parseTraffic(text: string): TrafficReport | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  const o = v as TrafficReport;
  const count = (x: unknown) => typeof x === 'number' && Number.isFinite(x) && x >= 0;
  const buckets = (x: unknown) => Array.isArray(x) && x.length === Histogram.BOUNDS.length + 1 && x.every(count);
  // [index, count] pairs in ascending index order, each index a bucket; absent (an older process): none.
  const fine = (x: unknown) =>
    x === undefined ||
    (Array.isArray(x) &&
      x.length <= FINE_LATENCY.buckets &&
      x.every((p, i) => Array.isArray(p) && p.length === 2 && Number.isInteger(p[0]) && p[0] >= 0 && p[0] < FINE_LATENCY.buckets && count(p[1]) && (i === 0 || p[0] > (x[i - 1] as number[])[0]!)));
  const scale = o?.latency_fine as unknown as { min_ms?: unknown; ratio?: unknown; buckets?: unknown } | undefined;
  if (scale !== undefined && (scale === null || scale.min_ms !== FINE_LATENCY.minMs || scale.ratio !== FINE_LATENCY.ratio || scale.buckets !== FINE_LATENCY.buckets)) return undefined;
  if (!o || typeof o !== 'object' || !o.process || typeof o.process.kind !== 'string' || typeof o.process.name !== 'string' || typeof o.process.id !== 'string') return undefined;
  if (!count(o.process.started_ms) || !Array.isArray(o.clusters)) return undefined;
  if (!Array.isArray(o.latency_bounds_ms) || o.latency_bounds_ms.length !== Histogram.BOUNDS.length || o.latency_bounds_ms.some((b, i) => b !== Histogram.BOUNDS[i])) return undefined;
  for (const c of o.clusters) {
    if (!c || typeof c.name !== 'string' || !CLASSES.every((k) => count(c[k])) || !count(c.hosts) || !count(c.hosts_mtls)) return undefined;
    if (!buckets(c.latency_counts) || !fine(c.latency_fine)) return undefined;
  }
  if (!Array.isArray(o.callers)) return undefined;
  for (const c of o.callers) {
    if (!c || typeof c.front !== 'string' || typeof c.identity !== 'string' || !ROUTE_CLASSES.every((k) => count(c[k])) || !buckets(c.latency_counts) || !fine(c.latency_fine)) return undefined;
  }
  if (!Array.isArray(o.routes)) return undefined;
  for (const r of o.routes) {
    if (!r || typeof r.host !== 'string' || typeof r.rule !== 'string' || !ROUTE_CLASSES.every((k) => count(r[k])) || (r.latency_counts !== null && !buckets(r.latency_counts)) || (r.latency_fine !== null && !fine(r.latency_fine))) return undefined;
  }
  return o;
}

const answeredOf = (c: ClusterTraffic) => c.rq_2xx + c.rq_3xx + c.rq_4xx + c.rq_5xx;

/**
 * The fine buckets of `after` less those of `before` (undefined: since the start), as a Flow's
 * `fine`; none when `after` has none (an older process), or a bucket went down (a reset).
 */
function fineDifference(after: ReadonlyArray<readonly [number, number]> | null | undefined, before: ReadonlyArray<readonly [number, number]> | null | undefined): { fine?: Map<number, number> } {
  if (!after) return {};
  const out = new Map<number, number>(after.map(([i, n]) => [i, n]));
  for (const [i, n] of before ?? []) {
    const left = (out.get(i) ?? 0) - n;
    if (left < 0) return {};
    if (left === 0) out.delete(i);
    else out.set(i, left);
  }
  return { fine: out };
}

/**
 * The flows of one process between two reports of it (`before` undefined: since it started).
 * A counter that went down (reset_counters, or another process at that address) leaves that
 * service out.
 */
export function flowsOf(before: TrafficReport | undefined, after: TrafficReport): Flow[] {
  const from = after.process.name || after.process.kind;
  const earlier = new Map((before?.process.id === after.process.id ? before.clusters : []).map((c) => [c.name, c] as const));
  const flows: Flow[] = [];
  for (const c of after.clusters) {
    const b = earlier.get(c.name);
    const answered = answeredOf(c) - (b ? answeredOf(b) : 0);
    const failed = c.rq_5xx - (b?.rq_5xx ?? 0);
    const latency = c.latency_counts.map((n, i) => n - (b?.latency_counts[i] ?? 0));
    if (answered < 0 || failed < 0 || latency.some((n) => n < 0)) continue;
    flows.push({ from, to: c.name, answered, failed, mtls: c.hosts > 0 ? (answered * c.hosts_mtls) / c.hosts : 0, latency, ...fineDifference(c.latency_fine, b?.latency_fine) });
  }
  return flows;
}

/** The route file rules of one process between two reports of it, as flows from the rule's host to the rule (no mutual TLS share). */
export function routeFlowsOf(before: TrafficReport | undefined, after: TrafficReport): Flow[] {
  const key = (r: { host: string; rule: string }) => JSON.stringify([r.host, r.rule]);
  const earlier = new Map((before?.process.id === after.process.id ? before.routes : []).map((r) => [key(r), r] as const));
  const flows: Flow[] = [];
  for (const r of after.routes) {
    const b = earlier.get(key(r));
    const answered = ROUTE_CLASSES.reduce((n, k) => n + r[k] - (b ? b[k] : 0), 0);
    const failed = r.rq_5xx - (b?.rq_5xx ?? 0);
    const latency = r.latency_counts ? r.latency_counts.map((n, i) => n - (b?.latency_counts?.[i] ?? 0)) : new Array<number>(Histogram.BOUNDS.length + 1).fill(0);
    if (answered < 0 || failed < 0 || latency.some((n) => n < 0)) continue;
    flows.push({ from: r.host, to: r.rule, answered, failed, mtls: 0, latency, ...fineDifference(r.latency_fine, b?.latency_fine), timed: r.latency_counts !== null });
  }
  return flows;
}

/**
 * Who called one process between two reports of it, as flows from the caller's identity to the
 * process (its name, else its kind); `mtls` counts every answer of a caller with an identity.
 */
export function callerFlowsOf(before: TrafficReport | undefined, after: TrafficReport): Flow[] {
  const to = after.process.name || after.process.kind;
  const key = (c: { front: string; identity: string }) => JSON.stringify([c.front, c.identity]);
  const earlier = new Map((before?.process.id === after.process.id ? before.callers : []).map((c) => [key(c), c] as const));
  const flows: Flow[] = [];
  for (const c of after.callers) {
    const b = earlier.get(key(c));
    const answered = ROUTE_CLASSES.reduce((n, k) => n + c[k] - (b ? b[k] : 0), 0);
    const failed = c.rq_5xx - (b?.rq_5xx ?? 0);
    const latency = c.latency_counts.map((n, i) => n - (b?.latency_counts[i] ?? 0));
    if (answered < 0 || failed < 0 || latency.some((n) => n < 0)) continue;
    flows.push({ from: c.identity, to, answered, failed, mtls: c.identity === PLAIN_CALLER || c.identity === OTHER_CALLERS ? 0 : answered, latency, ...fineDifference(c.latency_fine, b?.latency_fine) });
  }
  return flows;
}

/** One row of the flows given, over `seconds`. */
export function rowOf(flows: readonly Flow[], seconds: number): Row {
  const latency = new Array<number>(Histogram.BOUNDS.length + 1).fill(0);
  let answered = 0;
  let failed = 0;
  let mtls = 0;
  for (const f of flows) {
    answered += f.answered;
    failed += f.failed;
    mtls += f.mtls;
    f.latency.forEach((n, i) => (latency[i]! += n));
  }
  const timed = flows.filter((f) => f.timed !== false);
  // The fine buckets when every timed flow has them (within 2 %), else the bounds of Histogram.BOUNDS.
  let quantile = (q: number) => bucketQuantile(latency, q);
  if (timed.length > 0 && timed.every((f) => f.fine)) {
    const fine = new Map<number, number>();
    for (const f of timed) for (const [i, n] of f.fine!) fine.set(i, (fine.get(i) ?? 0) + n);
    const pairs = [...fine].sort((a, b) => a[0] - b[0]);
    quantile = (q) => fineQuantile(pairs, q);
  }
  return {
    answered,
    rps: seconds > 0 ? answered / seconds : NaN,
    success: answered > 0 ? (answered - failed) / answered : NaN,
    p50: timed.length > 0 ? quantile(0.5) : NaN,
    p95: timed.length > 0 ? quantile(0.95) : NaN,
    p99: timed.length > 0 ? quantile(0.99) : NaN,
    mtls: answered > 0 ? mtls / answered : NaN,
  };
}

/** Groups the flows by `key`, sorted by it. */
export function grouped(flows: readonly Flow[], key: (f: Flow) => string): [string, Flow[]][] {
  const groups = new Map<string, Flow[]>();
  for (const f of flows) {
    const k = key(f);
    const list = groups.get(k);
    if (list) list.push(f);
    else groups.set(k, [f]);
  }
  return [...groups].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** Why one admin's /traffic was not read: `status` when it answered another status. */
export interface TrafficFailure {
  error: string;
  status?: number;
}

export interface FetchTrafficOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** For the whole exchange (connect, headers, body). */
  timeoutMs: number;
}

/** Reads and checks `http://<admin>/traffic`: the report, or why not (printable text). */
export async function fetchTraffic(admin: string, options: FetchTrafficOptions): Promise<TrafficReport | TrafficFailure> {
  const headers: Record<string, string> = {};
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  try {
    const res = await request(`http://${admin}/traffic`, {
      headers,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      signal: options.timeoutMs > 0 ? AbortSignal.timeout(options.timeoutMs) : undefined,
    });
    let text = '';
    for await (const chunk of res.body) {
      text += chunk;
      if (text.length > MAX_REPORT_BYTES) {
        res.body.destroy();
        return { error: `/traffic answer over ${MAX_REPORT_BYTES} bytes` };
      }
    }
    if (res.statusCode !== 200) return { error: `/traffic answered ${res.statusCode}`, status: res.statusCode };
    return parseTraffic(text) ?? { error: '/traffic did not answer a traffic report' };
  } catch (err) {
    const e = err as Error;
    const why = e.name === 'TimeoutError' || e.name === 'AbortError' ? `no answer within ${options.timeoutMs} ms` : e.message;
    return { error: `cannot read /traffic (${printable(why)})` };
  }
}

/** True when fetchTraffic could not read a report. */
export const isFailure = (r: TrafficReport | TrafficFailure): r is TrafficFailure => 'error' in r;
