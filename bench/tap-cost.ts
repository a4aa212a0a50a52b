/**
 * `npm run bench:tap`: what an admin `/tap` costs the gateway (docs/admin.md, "/tap"). One
 * `mesh api --handler=proxy` in front of the bench backend, loaded open loop at a fixed rate
 * (bench/servers/open-loop.ts, every request tagged `tag=<round>&i=<n>`) in alternating rounds:
 * no tap, a tap attached (bench/servers/tap-reader.ts reading `/tap?rate=…` in a process of its
 * own), no tap, a tap... Per round: the gateway's CPU per answered request (from /proc); with the
 * tap, the events received against the requests answered (lost = answered − events − the
 * `{"dropped":N}` lines) and each event's delay from its request's send (and from its answer's
 * end). It prints medians and ratios: tap / no tap (paired with the neighbouring no-tap rounds),
 * and the spread of the no-tap rounds between themselves (A/A). With BENCH_TAP_KINDS=tap,filtered
 * the tap rounds alternate with rounds of a tap whose filter takes nothing (the event is built for
 * every request, none is written): the part of the cost before and after the filter. With
 * BENCH_TAP_BASELINE=<another build's dist/src/cli/main.js> and `baseline` among the kinds, a second
 * gateway of that build (the same code without the tap's per-request check: bench/README.md) serves
 * the `baseline` rounds: the A/B twin of the no-tap rounds. See bench/README.md ("What a tap costs").
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir, cpus, release } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { finished } from 'node:stream/promises';
import { cpuMicros, freePort, killAllSync, machineBusyMicros, ownTreeMicros, pin, pinning, rssKiB, startProcess, stopAll, waitForPort, type Proc } from './lib/proc.js';
import { fixed, markdownTable, median, parseSeconds, percentile, ratio } from './lib/stats.js';
import { BACKEND_SERVICE, PATH, REQUEST_BODY } from './lib/payload.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const MAIN = process.env.BENCH_MESH_MAIN ?? join(ROOT, 'dist/src/cli/main.js');
const QUICK = process.env.BENCH_QUICK === '1';
const RATE = Number(process.env.BENCH_TAP_LOAD_RATE ?? 1000);
const TAP_RATE = Number(process.env.BENCH_TAP_RATE ?? 1000);
const ROUNDS = Number(process.env.BENCH_TAP_ROUNDS ?? (QUICK ? 4 : 10));
const SECONDS = parseSeconds(process.env.BENCH_TAP_SECONDS, QUICK ? 2 : 12);
const WARMUP = parseSeconds(process.env.BENCH_TAP_WARMUP, QUICK ? 1 : 3);
/** After the load, how long the tap is read before it is closed: past one `{"dropped":N}` report. */
const DRAIN_MS = 1500;
/** Before every round's load (with or without a tap): the machine settles after the processes started for it. */
const SETTLE_MS = 1000;
/** The tap rounds between the no-tap rounds, in turn: `tap` (takes every request), `filtered` (a tap whose filter takes none). */
const KINDS = (process.env.BENCH_TAP_KINDS ?? 'tap').split(',').filter(Boolean) as Kind[];
/** The build the `baseline` rounds run (its main.js). */
const BASELINE = process.env.BENCH_TAP_BASELINE;
const OUT = process.env.BENCH_OUT ?? join(tmpdir(), QUICK ? 'mesh-bench-RESULTS.tap.quick.md' : 'mesh-bench-RESULTS.tap.md');

if (!(RATE > 0) || !(TAP_RATE >= 1) || !(ROUNDS >= 2) || !Number.isInteger(ROUNDS)) {
  throw new Error('bench:tap: BENCH_TAP_LOAD_RATE and BENCH_TAP_RATE must be > 0, BENCH_TAP_ROUNDS an integer ≥ 2');
}
if (KINDS.length === 0 || KINDS.some((k) => k !== 'tap' && k !== 'filtered' && k !== 'baseline')) throw new Error(`bench:tap: BENCH_TAP_KINDS: a comma list of tap, filtered, baseline (got "${process.env.BENCH_TAP_KINDS}")`);
if (KINDS.includes('baseline') && !(BASELINE && existsSync(BASELINE))) throw new Error(`bench:tap: the baseline kind needs BENCH_TAP_BASELINE, another build's main.js (got "${BASELINE ?? ''}")`);

const tmp = mkdtempSync(join(tmpdir(), 'mesh-tap-cost-'));
/**
 * BENCH_PIN (as `npm run bench`): the gateway gets CPU 0 to itself, and this process and all it
 * starts (backend, load, tap reader: they inherit it) the others; in the field the tap's reader
 * (`mesh tap`) runs elsewhere, and unpinned the scheduler's placement swings the gateway's CPU.
 */
const PIN = pinning();

/** A round's tap: none, one taking every request, one whose filter takes none; or no tap on the baseline build. */
type Kind = 'none' | 'tap' | 'filtered' | 'baseline';
/** A path no request has: the filtered tap's prefix. */
const NO_MATCH = '/no-such-path';

interface Load {
  sent: number;
  ok: number;
  failed: number;
  late: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  sentAt?: number[];
  doneAt?: number[];
}

interface TapRead {
  events: number;
  dropped: number;
  other: number;
  duplicates: number;
  bad: number;
  arrivals: Array<[number, number, number]>;
}

interface Round {
  n: number;
  kind: Kind;
  load: Load;
  cpuPerRequestUs: number;
  /** CPU of processes not started by the bench, in CPUs (1 = one CPU busy), during the load. */
  others: number;
  rssMiB: number;
  read?: TapRead;
  /** ms from each tagged request's send to its event's arrival, and from its answer's end. */
  delays: number[];
  afterAnswer: number[];
  /** The delay of the round's first request's event (the first event after the tap attached). */
  first?: number;
  lost?: number;
}

function mesh(args: string[]): void {
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, MESH_HOME: tmp } });
  if (r.status !== 0) throw new Error(`mesh ${args.slice(0, 2).join(' ')}: ${(r.stderr || r.stdout).trim().split('\n')[0]}`);
}

function tsx(name: string, script: string, args: string[], onLine?: (line: string) => void): Proc {
  return startProcess(name, process.execPath, ['--import', 'tsx', join(ROOT, 'bench', script), ...args], { cwd: ROOT, onLine });
}

/**
 * Resolves when the process has exited and its stdout has been read to the end: its result line
 * (hundreds of KB with the per-request times) may still be in the pipe when 'exit' comes.
 */
async function closed(p: Proc): Promise<void> {
  await Promise.all([finished(p.child.stdout!).catch(() => undefined), p.waitExit()]);
}

async function openLoop(url: string, rate: number, seconds: number, tag?: string): Promise<Load> {
  let line = '';
  const spec = { kind: 'http', url, body: REQUEST_BODY, connections: Math.max(8, Math.ceil(rate / 100)), rate, seconds, tag };
  const p = tsx('open-loop', 'servers/open-loop.ts', [JSON.stringify(spec)], (l) => (line = l));
  await closed(p);
  try {
    return JSON.parse(line) as Load;
  } catch {
    throw new Error(`open-loop gave no result:\n${p.output()}`);
  }
}

/** Starts a tap reader and resolves once its tap is attached (the 200 head came). */
async function attachTap(admin: number, tag: string, prefix: string): Promise<{ proc: Proc; result: () => Promise<TapRead> }> {
  let ready!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  let last = '';
  const url = `http://127.0.0.1:${admin}/tap?path_prefix=${encodeURIComponent(prefix)}&rate=${TAP_RATE}`;
  const proc = tsx('tap-reader', 'servers/tap-reader.ts', [JSON.stringify({ url, tag })], (l) => {
    if (l === '{"ready":true}') ready();
    else last = l;
  });
  await Promise.race([isReady, proc.waitExit().then(() => Promise.reject(new Error(`tap-reader exited:\n${proc.output()}`)))]);
  return {
    proc,
    async result() {
      const done = closed(proc);
      proc.child.stdin!.write('stop\n');
      await done;
      try {
        return JSON.parse(last) as TapRead;
      } catch {
        throw new Error(`tap-reader gave no result:\n${proc.output()}`);
      }
    },
  };
}

/** A gateway under test: its process, the URL loaded, its admin port. */
interface Gateway {
  proc: Proc;
  url: string;
  admin: number;
}

async function round(n: number, kind: Kind, { proc: gateway, url, admin }: Gateway, seconds: number): Promise<Round> {
  const tag = `r${n}`;
  const reader = kind === 'none' || kind === 'baseline' ? undefined : await attachTap(admin, tag, kind === 'tap' ? PATH : NO_MATCH);
  await new Promise((res) => setTimeout(res, SETTLE_MS));
  const busy0 = machineBusyMicros() ?? 0;
  const own0 = ownTreeMicros() ?? 0;
  const cpu0 = cpuMicros([gateway.pid]) ?? 0;
  const load = await openLoop(url, RATE, seconds, tag);
  const cpu1 = cpuMicros([gateway.pid]) ?? 0;
  const own1 = ownTreeMicros() ?? 0;
  const busy1 = machineBusyMicros() ?? 0;
  const rssMiB = (rssKiB(gateway.pid) ?? 0) / 1024;
  const r: Round = {
    n,
    kind,
    load,
    cpuPerRequestUs: (cpu1 - cpu0) / Math.max(1, load.ok),
    others: Math.max(0, busy1 - busy0 - (own1 - own0)) / (seconds * 1e6),
    rssMiB,
    delays: [],
    afterAnswer: [],
  };
  if (reader && kind === 'tap') {
    await new Promise((res) => setTimeout(res, DRAIN_MS));
    const read = await reader.result();
    r.read = read;
    for (const [i, at] of read.arrivals) {
      const sent = load.sentAt?.[i] ?? -1;
      const done = load.doneAt?.[i] ?? -1;
      if (sent >= 0) r.delays.push((at - sent) / 1000);
      if (done >= 0) r.afterAnswer.push((at - done) / 1000);
    }
    const first = read.arrivals.find(([i]) => i === 0);
    const sent0 = load.sentAt?.[0] ?? -1;
    if (first && sent0 >= 0) r.first = (first[1] - sent0) / 1000;
    // Every answered request (any status) made an event: lost = answered − received − reported dropped.
    r.lost = load.ok + load.failed - read.events - read.dropped;
  } else if (reader) {
    const read = await reader.result();
    if (read.events + read.other > 0) throw new Error(`the filtered tap got ${read.events + read.other} events`);
  }
  return r;
}

function pct(values: number[], p: number): number {
  return percentile(values, p);
}

function report(rounds: Round[], started: Date): string {
  const off = rounds.filter((r) => r.kind === 'none');
  const on = rounds.filter((r) => r.kind === 'tap');
  const filtered = rounds.filter((r) => r.kind === 'filtered');
  const baseline = rounds.filter((r) => r.kind === 'baseline');
  const cpuOff = median(off.map((r) => r.cpuPerRequestUs));
  const cpuOn = median(on.map((r) => r.cpuPerRequestUs));
  // Each tap round against the mean of the no-tap rounds beside it (drift cancels).
  const pairedOf = (list: Round[]) =>
    list.map((t) => {
      const near = rounds.filter((r) => r.kind === 'none' && Math.abs(r.n - t.n) === 1).map((r) => r.cpuPerRequestUs);
      return t.cpuPerRequestUs / (near.reduce((a, b) => a + b, 0) / near.length);
    });
  const paired = pairedOf(on);
  const pairedFiltered = pairedOf(filtered);
  // This build's no-tap rounds against the baseline build's beside them: the no-tap path's cost.
  const noTapCost = median(pairedOf(baseline).map((x) => 1 / x));
  // A/A: each no-tap round against the previous no-tap round (the same build, nothing changed).
  const aa = off.slice(1).map((r, i) => r.cpuPerRequestUs / off[i]!.cpuPerRequestUs);
  const aaDev = aa.map((x) => Math.abs(x - 1) * 100);
  const delays = on.flatMap((r) => r.delays);
  const after = on.flatMap((r) => r.afterAnswer);
  const firsts = on.map((r) => r.first).filter((x): x is number => x !== undefined);
  const lost = on.reduce((a, r) => a + (r.lost ?? 0), 0);
  const dropped = on.reduce((a, r) => a + (r.read?.dropped ?? 0), 0);
  const events = on.reduce((a, r) => a + (r.read?.events ?? 0), 0);
  const answered = on.reduce((a, r) => a + r.load.ok + r.load.failed, 0);
  const over100 = delays.filter((d) => d > 100).length;
  const over100After = after.filter((d) => d > 100).length;
  const ms = (us: number) => fixed(us / 1000);
  const rows = rounds.map((r) => [
    String(r.n),
    r.kind === 'none' ? 'no tap' : r.kind === 'tap' ? 'tap' : r.kind === 'filtered' ? 'tap, filtered out' : 'no tap, baseline build',
    `${r.load.ok}/${r.load.sent}`,
    fixed(r.cpuPerRequestUs, 1),
    ms(r.load.p50),
    ms(r.load.p99),
    fixed(r.rssMiB, 0),
    fixed(r.others * 100, 0),
    r.read ? String(r.read.events) : '–',
    r.read ? String(r.read.dropped) : '–',
    r.lost === undefined ? '–' : String(r.lost),
    r.first === undefined ? '–' : fixed(r.first, 1),
    r.delays.length ? `${fixed(pct(r.delays, 50))} / ${fixed(pct(r.delays, 99))} / ${fixed(Math.max(...r.delays))}` : '–',
  ]);
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
  const tapRatio = median(paired);
  const node = process.version;
  return [
    '# What a tap costs',
    '',
    `Made by \`npm run bench:tap\` on ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC: ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Linux ${release()}, Node ${node}. \`mesh api --handler=proxy --namespace=go.mesh.srv --log_level=warning\` in front of the bench backend; open-loop \`POST ${PATH}?tag=…&i=…\` at ${RATE}/s, ${ROUNDS} rounds of ${SECONDS} s alternating no tap / one tap (\`/tap?path_prefix=${PATH}&rate=${TAP_RATE}\`, read by a client process of its own)${KINDS.includes('filtered') ? ` / no tap / one tap whose filter takes nothing (\`path_prefix=${NO_MATCH}\`: its requests get no record)` : ''}${KINDS.includes('baseline') ? ` / no tap / no tap on a second gateway of the baseline build (\`${BASELINE}\`)` : ''}, after ${WARMUP} s of warm-up each way; ${PIN ? `pinned: the gateway on CPU ${PIN.proxy}, the backend, load and tap reader on CPU ${PIN.rest}` : 'not pinned'}.`,
    '',
    'CPU: user + system time of the gateway per answered request, µs. "others": CPU used by processes the bench did not start, during the round (100 = one CPU). Delays: ms from a request\'s send to its event\'s arrival at the tap client (p50 / p99 / max); "first": the round\'s first request\'s event. Lost: answered − events − `{"dropped":N}`.',
    '',
    markdownTable(['round', 'tap', 'ok/sent', 'CPU µs/req', 'p50 ms', 'p99 ms', 'RSS MiB', 'others %', 'events', 'dropped', 'lost', 'first ms', 'delay p50 / p99 / max ms'], rows, ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l']),
    '',
    '## Summary',
    '',
    `- CPU per request, median: no tap ${fixed(cpuOff, 1)} µs (${off.length} rounds), one tap ${fixed(cpuOn, 1)} µs (${on.length} rounds); tap / no tap ${ratio(cpuOn / cpuOff)} on medians, ${ratio(tapRatio)} median of each tap round against its neighbouring no-tap rounds (per round: ${paired.map((x) => fixed(x, 3)).join(', ')})`,
    ...(filtered.length ? [`- a tap whose path prefix takes nothing (its requests get no record since the hub checks path and method at their start): ${fixed(median(filtered.map((r) => r.cpuPerRequestUs)), 1)} µs (${filtered.length} rounds), ${ratio(median(pairedFiltered))} median against its neighbouring no-tap rounds (per round: ${pairedFiltered.map((x) => fixed(x, 3)).join(', ')})`] : []),
    ...(baseline.length ? [`- this build with no tap against the baseline build beside it: ${ratio(noTapCost)} median (per round: ${pairedOf(baseline).map((x) => fixed(1 / x, 3)).join(', ')}; baseline ${fixed(median(baseline.map((r) => r.cpuPerRequestUs)), 1)} µs over ${baseline.length} rounds)`] : []),
    `- A/A (no-tap round against the previous no-tap round): ${aa.map((x) => fixed(x, 3)).join(', ')}; median |Δ| ${fixed(median(aaDev), 1)} %, max ${fixed(Math.max(...aaDev), 1)} %`,
    `- client latency, median of rounds: no tap p50 ${ms(median(off.map((r) => r.load.p50)))} ms, p99 ${ms(median(off.map((r) => r.load.p99)))} ms; tap p50 ${ms(median(on.map((r) => r.load.p50)))} ms, p99 ${ms(median(on.map((r) => r.load.p99)))} ms`,
    `- events: ${events} received of ${answered} answered, ${dropped} reported dropped, ${lost} lost${on.some((r) => (r.read?.duplicates ?? 0) + (r.read?.bad ?? 0) > 0) ? ` (duplicates ${on.reduce((a, r) => a + (r.read?.duplicates ?? 0), 0)}, bad lines ${on.reduce((a, r) => a + (r.read?.bad ?? 0), 0)})` : ''}`,
    `- delay from send to event: p50 ${fixed(pct(delays, 50))} ms, p99 ${fixed(pct(delays, 99))} ms, max ${fixed(Math.max(...delays))} ms, ${over100} over 100 ms; from the answer's end to the event (what the tap itself adds): p50 ${fixed(pct(after, 50))} ms, p99 ${fixed(pct(after, 99))} ms, max ${fixed(Math.max(...after))} ms, ${over100After} over 100 ms; first event of each tap round: ${firsts.map((x) => fixed(x, 1)).join(', ')} ms`,
    '',
    '## Targets',
    '',
    baseline.length
      ? `- no tap: ${fixed((noTapCost - 1) * 100, 1)} % CPU per request against the baseline build (target ≤ +1 %): ${verdict(noTapCost <= 1.01)}, with an A/A spread of ${fixed(median(aaDev), 1)} %`
      : `- no tap: within the A/A spread (target ≤ +1 %): one build only (BENCH_TAP_BASELINE sets one without the tap's check against it); the A/A spread above is the resolution of this run`,
    `- one tap at ${RATE}/s: ${fixed((tapRatio - 1) * 100, 1)} % CPU per request (target ≤ +5 %): ${verdict(tapRatio <= 1.05)}`,
    `- first event within 100 ms of its request: max ${fixed(Math.max(...firsts), 1)} ms for each round's first, ${over100} of ${delays.length} events over 100 ms after their request's send (the request's own latency included), ${over100After} over 100 ms after their answer's end: ${verdict(over100 === 0)}`,
    `- no event lost below the cap (${RATE}/s load, cap ${TAP_RATE}/s): ${lost} lost, ${dropped} dropped: ${verdict(lost === 0 && (RATE > TAP_RATE || dropped === 0))}`,
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} not built: npm run build`);
  const started = new Date();
  if (PIN && !pin([process.pid], PIN.rest)) throw new Error('bench:tap: taskset could not pin the bench (BENCH_PIN=0 runs unpinned)');
  const registry = join(tmp, 'registry');
  mkdirSync(registry, { recursive: true, mode: 0o700 });
  const backendPort = await freePort();
  const backend = tsx('backend', 'servers/backend.ts', [String(backendPort)]);
  await waitForPort(backend, backendPort);
  mesh(['register', 'service', JSON.stringify({ Name: BACKEND_SERVICE, Nodes: [{ Id: `${BACKEND_SERVICE}-1`, Address: '127.0.0.1', Port: backendPort }] }), `--registry_address=${registry}`]);
  const start = async (main: string, name: string): Promise<Gateway> => {
    const port = await freePort();
    const admin = await freePort();
    const proc = startProcess(
      name,
      process.execPath,
      [main, 'api', `--address=127.0.0.1:${port}`, `--admin_address=127.0.0.1:${admin}`, `--registry_address=${registry}`, '--log_level=warning', '--handler=proxy', '--namespace=go.mesh.srv'],
      { cwd: ROOT, env: { MESH_HOME: tmp } },
    );
    await waitForPort(proc, port, 30_000);
    await waitForPort(proc, admin, 30_000);
    if (PIN && !pin([proc.pid], PIN.proxy)) throw new Error(`bench:tap: taskset could not pin the ${name} (BENCH_PIN=0 runs unpinned)`);
    const url = `http://127.0.0.1:${port}${PATH}`;
    const check = await openLoop(url, 5, 1, 'check');
    if (check.ok === 0) throw new Error(`the ${name} gave no good answer (${JSON.stringify({ ...check, sentAt: undefined, doneAt: undefined })}):\n${proc.output()}`);
    return { proc, url, admin };
  };
  const gateway = await start(MAIN, 'gateway');
  const base = KINDS.includes('baseline') ? await start(BASELINE!, 'baseline gateway') : undefined;
  // Warm-up every way (the tap's event path is compiled too), not counted.
  await round(-3, 'none', gateway, WARMUP);
  await round(-2, 'tap', gateway, WARMUP);
  if (base) await round(-1, 'baseline', base, WARMUP);
  const rounds: Round[] = [];
  for (let n = 0; n < ROUNDS; n++) {
    const kind = n % 2 === 0 ? 'none' : KINDS[((n - 1) / 2) % KINDS.length]!;
    const r = await round(n, kind, kind === 'baseline' ? base! : gateway, SECONDS);
    rounds.push(r);
    console.log(
      `round ${n} ${r.kind}: ok ${r.load.ok}/${r.load.sent}, ${fixed(r.cpuPerRequestUs, 1)} µs/req, p99 ${fixed(r.load.p99 / 1000)} ms, others ${fixed(r.others * 100, 0)} %` +
        (r.read ? `; events ${r.read.events}, dropped ${r.read.dropped}, lost ${r.lost}, delay p50 ${fixed(pct(r.delays, 50))} ms p99 ${fixed(pct(r.delays, 99))} ms` : ''),
    );
  }
  await gateway.proc.stop();
  await base?.proc.stop();
  await backend.stop();
  const text = report(rounds, started);
  writeFileSync(OUT, text);
  console.log(`\n${text}\nwritten to ${OUT}`);
}

process.on('SIGINT', () => {
  killAllSync();
  process.exit(130);
});
main()
  .catch((err: unknown) => {
    console.error(`bench:tap: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await stopAll();
    rmSync(tmp, { recursive: true, force: true });
  });
