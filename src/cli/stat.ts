/**
 * `mesh stat services` and `mesh edges` (docs/cli.md, "The mesh at a glance"): the admin
 * `/traffic` counters (src/admin/traffic.ts) of every process `mesh ps` lists (or of --admin),
 * read twice --window apart, and the difference: per service, and per caller → service edge,
 * requests a second, success rate, latency percentiles (the upper bound of the latency bucket
 * holding them) and the share sent over mutual TLS. With --window=0, the counters since each
 * process started. No Prometheus: the processes' own counters.
 *
 * The answers are outside input: a process whose answer is not a report is said on stderr and
 * left out, and every string is printed through printable.
 */
import { request } from 'undici';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { tapAdmins } from './tap.js';
import type { ClusterTraffic, TrafficReport } from '../admin/traffic.js';
import { bucketQuantile, Histogram } from '../base/stats/store.js';
import { printable } from '../base/util/text.js';
import { formatTable } from './table.js';
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
const MAX_REPORT_BYTES = 4 * 1024 * 1024;

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
  if (!o || typeof o !== 'object' || !o.process || typeof o.process.kind !== 'string' || typeof o.process.name !== 'string' || typeof o.process.id !== 'string') return undefined;
  if (!count(o.process.started_ms) || !Array.isArray(o.clusters)) return undefined;
  if (!Array.isArray(o.latency_bounds_ms) || o.latency_bounds_ms.length !== Histogram.BOUNDS.length || o.latency_bounds_ms.some((b, i) => b !== Histogram.BOUNDS[i])) return undefined;
  for (const c of o.clusters) {
    if (!c || typeof c.name !== 'string' || !CLASSES.every((k) => count(c[k])) || !count(c.hosts) || !count(c.hosts_mtls)) return undefined;
    if (!buckets(c.latency_counts)) return undefined;
  }
  if (!Array.isArray(o.callers)) return undefined;
  for (const c of o.callers) {
    if (!c || typeof c.front !== 'string' || typeof c.identity !== 'string' || !ROUTE_CLASSES.every((k) => count(c[k])) || !buckets(c.latency_counts)) return undefined;
  }
  if (!Array.isArray(o.routes)) return undefined;
  for (const r of o.routes) {
    if (!r || typeof r.host !== 'string' || typeof r.rule !== 'string' || !ROUTE_CLASSES.every((k) => count(r[k])) || (r.latency_counts !== null && !buckets(r.latency_counts))) return undefined;
  }
  return o;
}

const answeredOf = (c: ClusterTraffic) => c.rq_2xx + c.rq_3xx + c.rq_4xx + c.rq_5xx;

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
    flows.push({ from, to: c.name, answered, failed, mtls: c.hosts > 0 ? (answered * c.hosts_mtls) / c.hosts : 0, latency });
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
    flows.push({ from: r.host, to: r.rule, answered, failed, mtls: 0, latency, timed: r.latency_counts !== null });
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
    flows.push({ from: c.identity, to, answered, failed, mtls: c.identity === PLAIN_CALLER || c.identity === OTHER_CALLERS ? 0 : answered, latency });
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
  const timed = flows.some((f) => f.timed !== false);
  return {
    answered,
    rps: seconds > 0 ? answered / seconds : NaN,
    success: answered > 0 ? (answered - failed) / answered : NaN,
    p50: timed ? bucketQuantile(latency, 0.5) : NaN,
    p95: timed ? bucketQuantile(latency, 0.95) : NaN,
    p99: timed ? bucketQuantile(latency, 0.99) : NaN,
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

const pct = (x: number) => (Number.isNaN(x) ? '-' : `${(Math.floor(x * 1000) / 10).toFixed(1)}%`);
const ms = (x: number) => (Number.isNaN(x) ? '-' : `${x}ms`);
const rate = (x: number) => (Number.isNaN(x) ? '-' : x.toFixed(1));
const json = (x: number) => (Number.isNaN(x) ? null : Math.round(x * 1000) / 1000);

export function formatServices(rows: readonly [string, Row][]): string {
  return formatTable(
    ['SERVICE', 'REQUESTS', 'RPS', 'SUCCESS', 'P50', 'P95', 'P99', 'MTLS'],
    rows.map(([name, r]) => [printable(name), String(r.answered), rate(r.rps), pct(r.success), ms(r.p50), ms(r.p95), ms(r.p99), pct(r.mtls)]),
  );
}

export function formatEdges(rows: readonly [string, string, Row][]): string {
  return formatTable(
    ['FROM', 'TO', 'REQUESTS', 'RPS', 'SUCCESS', 'P99', 'MTLS'],
    rows.map(([from, to, r]) => [printable(from), printable(to), String(r.answered), rate(r.rps), pct(r.success), ms(r.p99), pct(r.mtls)]),
  );
}

/** Reads /traffic of one admin; undefined (said on stderr) when it cannot. */
async function readTraffic(admin: string, config: Config, io: Pick<Output, 'err'>): Promise<TrafficReport | undefined> {
  const headers: Record<string, string> = {};
  if (config.admin_token) headers.authorization = `Bearer ${config.admin_token}`;
  try {
    const res = await request(`http://${admin}/traffic`, { headers, headersTimeout: config.client_request_timeout, bodyTimeout: config.client_request_timeout });
    let text = '';
    for await (const chunk of res.body) {
      text += chunk;
      if (text.length > MAX_REPORT_BYTES) {
        res.body.destroy();
        io.err(`mesh: ${printable(admin)}: /traffic answer over ${MAX_REPORT_BYTES} bytes: left out\n`);
        return undefined;
      }
    }
    if (res.statusCode !== 200) {
      io.err(`mesh: ${printable(admin)}: /traffic answered ${res.statusCode}${res.statusCode === 401 ? ' (give its --admin_token)' : ''}: left out\n`);
      return undefined;
    }
    const report = parseTraffic(text);
    if (!report) io.err(`mesh: ${printable(admin)}: /traffic did not answer a traffic report: left out\n`);
    return report;
  } catch (err) {
    io.err(`mesh: ${printable(admin)}: cannot read /traffic (${printable((err as Error).message)}): left out\n`);
    return undefined;
  }
}

/** The flows (`of` a process's two reports) of every process over --window (0: since each started), and the seconds they cover. */
async function sample(config: Config, io: Pick<Output, 'err'>, of: (before: TrafficReport | undefined, after: TrafficReport) => Flow[] = flowsOf): Promise<{ flows: Flow[]; seconds: number }> {
  const admins = await tapAdmins(config, io);
  const windowMs = config.window as number;
  const readAll = () => Promise.all(admins.map((a) => readTraffic(a, config, io)));
  const first = await readAll();
  if (windowMs === 0) {
    const now = Date.now();
    const flows: Flow[] = [];
    let seconds = 0;
    for (const r of first) {
      if (!r) continue;
      flows.push(...of(undefined, r));
      seconds = Math.max(seconds, (now - r.process.started_ms) / 1000);
    }
    return { flows, seconds };
  }
  io.err(`mesh: sampling ${first.filter(Boolean).length} process(es) for ${windowMs / 1000} s\n`);
  const started = Date.now();
  await new Promise((r) => setTimeout(r, windowMs));
  const second = await readAll();
  const seconds = (Date.now() - started) / 1000;
  const flows: Flow[] = [];
  second.forEach((r, i) => {
    if (r && first[i]) flows.push(...of(first[i], r));
  });
  return { flows, seconds };
}

/** `mesh stat routes`: per route file rule (and the host it matched). */
async function statRoutes(config: Config, io: Output): Promise<number> {
  const { flows, seconds } = await sample(config, io, routeFlowsOf);
  const rows = grouped(flows, (f) => JSON.stringify([f.to, f.from])).map(([key, fs]) => {
    const [rule, host] = JSON.parse(key) as [string, string];
    return [rule, host, rowOf(fs, seconds)] as [string, string, Row];
  });
  if (config.output === 'json') {
    io.out(JSON.stringify(rows.map(([route, host, r]) => ({ route, host, requests: r.answered, rps: json(r.rps), success: json(r.success), p50_ms: json(r.p50), p95_ms: json(r.p95), p99_ms: json(r.p99) }))) + '\n');
  } else {
    io.out(formatTable(['ROUTE', 'HOST', 'REQUESTS', 'RPS', 'SUCCESS', 'P50', 'P95', 'P99'], rows.map(([route, host, r]) => [printable(route), printable(host), String(r.answered), rate(r.rps), pct(r.success), ms(r.p50), ms(r.p95), ms(r.p99)])));
  }
  return 0;
}

/** `mesh stat identities`: per caller identity, what every process it called answered it. */
async function statIdentities(config: Config, io: Output): Promise<number> {
  const { flows, seconds } = await sample(config, io, callerFlowsOf);
  const rows = grouped(flows, (f) => f.from).map(([identity, fs]) => [identity, rowOf(fs, seconds)] as [string, Row]);
  if (config.output === 'json') {
    io.out(JSON.stringify(rows.map(([identity, r]) => ({ identity, requests: r.answered, rps: json(r.rps), success: json(r.success), p50_ms: json(r.p50), p95_ms: json(r.p95), p99_ms: json(r.p99), mtls: json(r.mtls) }))) + '\n');
  } else {
    io.out(formatTable(['IDENTITY', 'REQUESTS', 'RPS', 'SUCCESS', 'P50', 'P95', 'P99', 'MTLS'], rows.map(([identity, r]) => [printable(identity), String(r.answered), rate(r.rps), pct(r.success), ms(r.p50), ms(r.p95), ms(r.p99), pct(r.mtls)])));
  }
  return 0;
}

/** `mesh stat services|routes|identities`. */
export async function runStat(positionals: string[], config: Config, io: Output): Promise<number> {
  if (positionals.length > 2) throw new UsageError(`mesh stat ${positionals[1]} takes no further argument (got "${printable(positionals[2]!)}")`);
  if (positionals[1] === 'routes') return statRoutes(config, io);
  if (positionals[1] === 'identities') return statIdentities(config, io);
  const { flows, seconds } = await sample(config, io);
  const rows = grouped(flows, (f) => f.to).map(([name, fs]) => [name, rowOf(fs, seconds)] as [string, Row]);
  if (config.output === 'json') {
    io.out(JSON.stringify(rows.map(([service, r]) => ({ service, requests: r.answered, rps: json(r.rps), success: json(r.success), p50_ms: json(r.p50), p95_ms: json(r.p95), p99_ms: json(r.p99), mtls: json(r.mtls) }))) + '\n');
  } else io.out(formatServices(rows));
  return 0;
}

/** `mesh edges`. */
export async function runEdges(positionals: string[], config: Config, io: Output): Promise<number> {
  if (positionals.length > 1) throw new UsageError(`mesh edges takes no argument (got "${printable(positionals[1]!)}")`);
  const { flows, seconds } = await sample(config, io);
  const rows = grouped(flows, (f) => JSON.stringify([f.from, f.to])).map(([key, fs]) => {
    const [from, to] = JSON.parse(key) as [string, string];
    return [from, to, rowOf(fs, seconds)] as [string, string, Row];
  });
  if (config.output === 'json') {
    io.out(JSON.stringify(rows.map(([from, to, r]) => ({ from, to, requests: r.answered, rps: json(r.rps), success: json(r.success), p99_ms: json(r.p99), mtls: json(r.mtls) }))) + '\n');
  } else io.out(formatEdges(rows));
  return 0;
}
