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
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { tapAdmins } from './tap.js';
import type { TrafficReport } from '../admin/traffic.js';
import { callerFlowsOf, fetchTraffic, flowsOf, grouped, isFailure, routeFlowsOf, rowOf, type Flow, type Row } from '../admin/traffic-flows.js';
import { printable } from '../base/util/text.js';
import { formatTable } from './table.js';

const pct = (x: number) => (Number.isNaN(x) ? '-' : `${(Math.floor(x * 1000) / 10).toFixed(1)}%`);
/** Three significant digits (158ms, 1.49ms): a percentile of the fine buckets is within 2 %. */
const ms = (x: number) => (Number.isNaN(x) ? '-' : `${Number(x.toPrecision(3))}ms`);
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
  const report = await fetchTraffic(admin, { token: config.admin_token, timeoutMs: config.client_request_timeout as number });
  if (!isFailure(report)) return report;
  io.err(`mesh: ${printable(admin)}: ${report.error}${report.status === 401 ? ' (give its --admin_token)' : ''}: left out\n`);
  return undefined;
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
