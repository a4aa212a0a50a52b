/**
 * The further rows of issue 7: broker fan-out (sidecar POST /broker → 10 WebSocket subscribers,
 * and the gateway's event handler), admin /stats and /clusters rendering with 1,000 clusters of 10
 * hosts (bench/admin-render.ts), and the local registry with 10,000 nodes (bench/registry-bench.ts).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { NotAvailable, cpuMicros, freePort, pin, startProcess, waitForPort, type Proc } from './lib/proc.js';
import { runLoad } from './lib/load.js';
import { fixed, int, markdownTable, max, median, min } from './lib/stats.js';
import { startMesh, tsxProcess, type Ctx } from './lib/mesh.js';
import { h2loadSection } from './h2load.js';

export interface ExtraTarget {
  label: string;
  actual?: number;
  target?: number;
  kind: 'atLeast' | 'atMost';
  unit?: string;
}

export interface ExtraSection {
  title: string;
  body: string;
  targets?: ExtraTarget[];
}

const FANOUT_SUBSCRIBERS = 10;
const MESSAGE = '{"event":"bench","n":1}';

// ------------------------------------------------------------------------------------ broker

interface Subscribers {
  proc: Proc;
  total(): Promise<{ sum: number; open: number }>;
}

async function startSubscribers(ctx: Ctx, url: string, n: number): Promise<Subscribers> {
  let ready!: () => void;
  const readyP = new Promise<void>((r) => (ready = r));
  const waiters: Array<(line: string) => void> = [];
  const proc = startProcess('ws-subscribers', process.execPath, ['--import', 'tsx', join(ctx.root, 'bench', 'servers', 'ws-subscribers.ts'), url, String(n)], {
    env: ctx.env,
    cwd: ctx.root,
    onLine: (line) => {
      if (line === 'ready') ready();
      else if (line.startsWith('{')) waiters.shift()?.(line);
    },
  });
  const deadline = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`subscribers did not connect to ${url}: ${proc.output().split('\n').slice(-2).join(' | ')}`)), 10000));
  await Promise.race([readyP, deadline]);
  return {
    proc,
    total: () =>
      new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('subscribers did not answer')), 5000);
        waiters.push((line) => {
          clearTimeout(t);
          const j = JSON.parse(line) as { counts: number[]; open: number };
          resolve({ sum: j.counts.reduce((a, b) => a + b, 0), open: j.open });
        });
        proc.child.stdin!.write('count\n');
      }),
  };
}

/** Waits until no frame has arrived for quietMs (the backlog is drained), at most timeoutMs. */
async function settle(subs: Subscribers, quietMs: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = (await subs.total()).sum;
  let since = Date.now();
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    const now = (await subs.total()).sum;
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) break;
  }
  return last;
}

async function waitDeliveries(subs: Subscribers, expected: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = 0;
  for (;;) {
    last = (await subs.total()).sum;
    if (last >= expected || Date.now() > deadline) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface FanoutRound {
  published: number;
  rps: number;
  p50: number;
  p99: number;
  delivered: number;
  deliveredPerS: number;
  cpuUs: number;
  errors: number;
  /** Seconds the subscribers kept receiving after the load stopped. */
  drainS: number;
}

async function fanout(ctx: Ctx, publishUrl: string, subs: Subscribers, measured: Proc[]): Promise<FanoutRound[]> {
  // Correctness first: one message reaches every subscriber.
  const before = (await subs.total()).sum;
  const res = await fetch(publishUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: MESSAGE });
  await res.text();
  if (res.status !== 200 && res.status !== 204) throw new Error(`publish answered ${res.status}`);
  await waitDeliveries(subs, before + FANOUT_SUBSCRIBERS, 5000);
  const got = (await settle(subs, 500, 5000)) - before;
  if (got !== FANOUT_SUBSCRIBERS) throw new Error(`one publish gave ${got} frames to ${FANOUT_SUBSCRIBERS} subscribers (expected exactly one each)`);

  const load = {
    url: publishUrl,
    durationS: ctx.settings.duration,
    connections: ctx.settings.connections,
    threads: ctx.settings.threads,
    method: 'POST' as const,
    body: MESSAGE,
    contentType: 'application/json',
    tmp: ctx.tmp,
  };
  if (ctx.settings.warmup > 0) await runLoad(ctx.tool, { ...load, durationS: ctx.settings.warmup });
  const rounds: FanoutRound[] = [];
  for (let i = 0; i < ctx.settings.rounds; i++) {
    const d0 = await settle(subs, 500, 15000);
    const c0 = cpuMicros(measured.map((p) => p.pid));
    const r = await runLoad(ctx.tool, load);
    const c1 = cpuMicros(measured.map((p) => p.pid));
    const ok = r.requests - r.non2xx;
    // Deliveries still in flight when the load stops are counted (until quiet, at most 15 s);
    // the rate is over the load's duration plus that drain time.
    const t1 = Date.now();
    const d1 = await settle(subs, 500, 15000);
    const drainS = Math.max(0, (Date.now() - t1 - 500) / 1000);
    rounds.push({
      published: ok,
      rps: ok / r.seconds,
      p50: r.p50ms,
      p99: r.p99ms,
      delivered: d1 - d0,
      deliveredPerS: (d1 - d0) / (r.seconds + drainS),
      drainS,
      cpuUs: c0 !== undefined && c1 !== undefined && ok > 0 ? (c1 - c0) / ok : NaN,
      errors: r.non2xx + r.errors,
    });
    ctx.log(`  fan-out round ${i + 1}: ${int(ok / r.seconds)} published/s, ${int((d1 - d0) / (r.seconds + drainS))} delivered/s, drain ${drainS.toFixed(1)} s, non-2xx ${r.non2xx}`);
  }
  return rounds;
}

function fanoutRow(label: string, rounds: FanoutRound[] | string): string[] {
  if (typeof rounds === 'string') return [label, rounds.replace(/\|/g, '/'), '', '', '', '', '', '', ''];
  const m = (f: (r: FanoutRound) => number) => median(rounds.map(f));
  const rng = (f: (r: FanoutRound) => number, fmt: (n: number) => string) => (rounds.length > 1 ? ` (${fmt(min(rounds.map(f)))}–${fmt(max(rounds.map(f)))})` : '');
  const pub = rounds.reduce((a, r) => a + r.published, 0);
  const del = rounds.reduce((a, r) => a + r.delivered, 0);
  return [
    label,
    `${int(m((r) => r.rps))}${rng((r) => r.rps, int)}`,
    `${int(m((r) => r.deliveredPerS))}${rng((r) => r.deliveredPerS, int)}`,
    pub ? `${fixed((del / (pub * FANOUT_SUBSCRIBERS)) * 100, 1)}%` : '–',
    fixed(m((r) => r.drainS), 1),
    fixed(m((r) => r.p50)),
    fixed(m((r) => r.p99)),
    fixed(m((r) => r.cpuUs), 1),
    String(rounds.reduce((a, r) => a + r.errors, 0)),
  ];
}

async function brokerSection(ctx: Ctx): Promise<ExtraSection> {
  const rows: string[][] = [];
  let sidecar: Awaited<ReturnType<typeof startMesh>> | undefined;
  const own: Proc[] = [];
  try {
    sidecar = await startMesh(ctx, 'mesh-sidecar-broker', 'sidecar', []);
    own.push(sidecar.proc);
  } catch (err) {
    const why = `${err instanceof NotAvailable ? 'not available' : 'failed'}: ${(err as Error).message}`;
    rows.push(fanoutRow('sidecar POST /broker → 10 WebSocket subscribers', why));
    rows.push(fanoutRow('gateway --handler=event → sidecar → 10 WebSocket subscribers', why));
  }
  if (sidecar) {
    // 1. Sidecar publish → its own WebSocket subscribers.
    const topic = 'bench.fanout';
    try {
      const subs = await startSubscribers(ctx, `ws://127.0.0.1:${sidecar.port}/broker?topic=${topic}`, FANOUT_SUBSCRIBERS);
      own.push(subs.proc);
      try {
        rows.push(fanoutRow('sidecar POST /broker → 10 WebSocket subscribers', await fanout(ctx, `http://127.0.0.1:${sidecar.port}/broker?topic=${topic}`, subs, [sidecar.proc])));
      } finally {
        await subs.proc.stop();
      }
    } catch (err) {
      rows.push(fanoutRow('sidecar POST /broker → 10 WebSocket subscribers', `failed: ${(err as Error).message}`));
    }
    // 2. Gateway event handler → broker → the sidecar's WebSocket subscribers.
    try {
      const subs = await startSubscribers(ctx, `ws://127.0.0.1:${sidecar.port}/broker?topic=go.mesh.api.bench`, FANOUT_SUBSCRIBERS);
      own.push(subs.proc);
      await new Promise((r) => setTimeout(r, 300)); // the subscription's registry entry
      try {
        const gw = await startMesh(ctx, 'mesh-api-event', 'api', ['--handler=event']);
        own.push(gw.proc);
        rows.push(fanoutRow('gateway --handler=event → sidecar → 10 WebSocket subscribers', await fanout(ctx, `http://127.0.0.1:${gw.port}/bench/fanout`, subs, [gw.proc])));
        await gw.proc.stop();
      } finally {
        await subs.proc.stop();
      }
    } catch (err) {
      rows.push(fanoutRow('gateway --handler=event → sidecar → 10 WebSocket subscribers', `${err instanceof NotAvailable ? 'not available' : 'failed'}: ${(err as Error).message}`));
    }
  }
  await Promise.all(own.map((p) => p.stop()));
  return {
    title: 'Broker fan-out',
    body: [
      `Publishers: the load generator (${ctx.settings.connections} connections, POST \`${MESSAGE}\`); subscribers: ${FANOUT_SUBSCRIBERS} WebSocket connections in one separate process, counting frames. "delivered/s" counts frames received by all subscribers together (ideal: 10 × published/s), over the load's duration plus the "drain" time the subscribers kept receiving after the load stopped (a backlog). A ratio above 100% comes from the publishes still in flight when the load generator stops (up to one per connection): they are delivered but not counted as published; it matters only when few messages are published per round. CPU is the publishing front end's (sidecar or gateway) per published message. Same warm-up and rounds as the main table.`,
      '',
      markdownTable(
        ['path', 'published/s median (min–max)', 'delivered/s (all subscribers)', 'delivered / (published × 10)', 'drain s', 'publish p50 ms', 'publish p99 ms', 'front-end CPU µs/msg', 'errors'],
        rows,
        ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      ),
    ].join('\n'),
  };
}

// ------------------------------------------------------------------------------------ admin

/** Runs node with `args` (in the repository, with the bench's env) to its end, or kills it after timeoutMs. */
export function runNode(ctx: Ctx, args: string[], timeoutMs: number): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: ctx.root, env: { ...process.env, ...ctx.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve({ code, out, err });
    });
    child.once('error', (e) => {
      clearTimeout(t);
      resolve({ code: -1, out, err: e.message });
    });
  });
}

async function adminSection(ctx: Ctx): Promise<ExtraSection> {
  const r = await runNode(ctx, ['--import', 'tsx', join(ctx.root, 'bench', 'admin-render.ts'), '1000', '10'], 120000);
  if (r.code !== 0) {
    return { title: 'Admin rendering (1,000 clusters × 10 hosts)', body: `failed (exit ${r.code}): ${(r.err || r.out).split('\n').slice(-3).join(' ')}` };
  }
  const lines = r.out.trim().split('\n');
  const parsed = new Map<string, number>();
  for (const l of lines) {
    const m = /^(\S+(?:\s\S+)?)\s+median\s+([\d.]+)\s*ms/.exec(l.trim());
    if (m) parsed.set(m[1]!.trim(), Number(m[2]));
  }
  const prom = parsed.get('/stats/prometheus') ?? parsed.get('/stats?format=prometheus');
  const clusters = parsed.get('/clusters');
  return {
    title: 'Admin rendering (1,000 clusters × 10 hosts)',
    body: ['`node --import tsx bench/admin-render.ts 1000 10` (owned by the admin work; milliseconds per render in one process, no HTTP):', '', '```', ...lines, '```'].join('\n'),
    targets: [
      { label: 'admin /stats?format=prometheus render (median ms) < 50 ms', actual: prom, target: 50, kind: 'atMost', unit: 'ms' },
      { label: 'admin /clusters render (median ms) < 50 ms', actual: clusters, target: 50, kind: 'atMost', unit: 'ms' },
    ],
  };
}

// ------------------------------------------------------------------------------------ registry

async function registrySection(ctx: Ctx): Promise<ExtraSection> {
  const dir = join(ctx.tmp, 'registry-10k');
  const { mkdirSync } = await import('node:fs');
  mkdirSync(dir, { recursive: true });
  const r = await runNode(ctx, ['--import', 'tsx', join(ctx.root, 'bench', 'registry-bench.ts'), '1000', '10', dir], 180000);
  const title = 'Local registry (SQLite) with 10,000 nodes';
  if (r.code !== 0) return { title, body: `failed (exit ${r.code}): ${(r.err || r.out).split('\n').slice(-3).join(' ')}` };
  type S = { median: number; p99: number; max: number; n: number };
  const j = JSON.parse(r.out.trim().split('\n').pop()!) as {
    services: number;
    nodes: number;
    registerMs: S;
    registerTotalMs: number;
    lookupUs: S;
    listMs: S;
    listed: number;
    watchAllMs: S;
    watchOneMs: S;
    rssMiB: number;
  };
  const row = (what: string, s: S, unit: string, digits = 2) => [what, `${fixed(s.median, digits)} ${unit}`, `${fixed(s.p99, digits)} ${unit}`, `${fixed(s.max, digits)} ${unit}`, String(s.n)];
  return {
    title,
    body: [
      `${int(j.services)} services × ${int(j.nodes / j.services)} nodes = ${int(j.nodes)} nodes in one registry directory; a writer and a reader connection in one process (bench/registry-bench.ts); the watcher polls \`PRAGMA data_version\` (50 ms) as another process would. Registering all took ${int(j.registerTotalMs)} ms; process RSS ${fixed(j.rssMiB, 0)} MiB.`,
      '',
      markdownTable(
        ['operation', 'median', 'p99', 'max', 'samples'],
        [
          row('register one service (10 nodes)', j.registerMs, 'ms'),
          row('getService (other connection)', j.lookupUs, 'µs', 0),
          row(`listServices (${j.listed} services)`, j.listMs, 'ms'),
          row('watch latency, watching all services', j.watchAllMs, 'ms'),
          row('watch latency, watching one service', j.watchOneMs, 'ms'),
        ],
        ['l', 'r', 'r', 'r', 'r'],
      ),
    ].join('\n'),
    targets: [{ label: 'registry watch latency (all services, p99) within 100 ms (DESIGN section 2)', actual: j.watchAllMs.p99, target: 100, kind: 'atMost', unit: 'ms' }],
  };
}

export async function runExtras(ctx: Ctx, secondsLeft: number): Promise<ExtraSection[]> {
  const out: ExtraSection[] = [];
  const rows = ctx.settings.rows;
  const want = (id: string) => rows.length === 0 || rows.includes(id);
  if (want('broker') && secondsLeft > 60) {
    ctx.log('further rows: broker fan-out');
    out.push(await brokerSection(ctx));
  }
  if (want('admin')) {
    ctx.log('further rows: admin rendering');
    out.push(await adminSection(ctx));
  }
  if (want('registry')) {
    ctx.log('further rows: registry with 10,000 nodes');
    out.push(await registrySection(ctx));
  }
  // Opt-in: only when BENCH_ROWS names them.
  if (rows.includes('route-regex')) {
    ctx.log('further rows: route file of 10,000 regex rules');
    out.push(await routeRegexSection(ctx));
  }
  if (rows.includes('handshake')) {
    ctx.log('further rows: mutual TLS handshake rate');
    out.push(await handshakeSection(ctx));
  }
  if (rows.includes('h2load')) {
    ctx.log('further rows: HTTP/2 with h2load');
    out.push(await h2loadSection(ctx));
  }
  return out;
}

// ------------------------------------------------------------------------------------ route file regexes

/**
 * A route file of 10,000 RegularExpression rules against one of 10 (bench/route-regex.ts, in one
 * process, no HTTP): load time and heap, and the CPU of one match, hit and miss, in alternating
 * rounds of the same run, with the ratio of the large table to the small one.
 */
async function routeRegexSection(ctx: Ctx): Promise<ExtraSection> {
  const title = 'Route file: 10,000 regex rules against 10 (route-regex)';
  const r = await runNode(ctx, ['--expose-gc', '--import', 'tsx', join(ctx.root, 'bench', 'route-regex.ts'), '10000'], 180000);
  if (r.code !== 0) return { title, body: `failed (exit ${r.code}): ${(r.err || r.out).split('\n').slice(-3).join(' ')}` };
  type T = { rules: number; parseMs: number; compileMs: number; heapMiB: number; hitUs: number; missUs: number };
  const j = JSON.parse(r.out.trim().split('\n').pop()!) as { small: T; large: T; ratio: { hit: number; miss: number } };
  const row = (t: T) => [int(t.rules), `${fixed(t.parseMs, 0)} ms`, `${fixed(t.compileMs, 1)} ms`, `${fixed(t.heapMiB, 1)} MiB`, `${fixed(t.hitUs, 2)} µs`, `${fixed(t.missUs, 2)} µs`];
  return {
    title,
    body: [
      '`node --expose-gc --import tsx bench/route-regex.ts 10000`: rules `/svc<r>-<k>/items/[0-9]+(/[a-z]+)?`, 16 per route; hit: the last rule; miss: its prefix, another path. CPU per match: best of 7 alternating rounds of 2,000 matches.',
      '',
      markdownTable(['rules', 'parse', 'compile', 'heap', 'hit', 'miss'], [row(j.small), row(j.large)]),
      '',
      `10,000 rules against 10: hit ${fixed(j.ratio.hit, 2)}×, miss ${fixed(j.ratio.miss, 2)}×.`,
    ].join('\n'),
    targets: [
      { label: 'route file, 10,000 regex rules: one match, hit (µs) ≤ 1,000 µs', actual: j.large.hitUs, target: 1000, kind: 'atMost', unit: 'µs' },
      { label: 'route file, 10,000 regex rules: one match, miss (µs) ≤ 1,000 µs', actual: j.large.missUs, target: 1000, kind: 'atMost', unit: 'µs' },
    ],
  };
}

// ------------------------------------------------------------------------------------ mutual TLS handshakes

/**
 * The handshakes a strict framework service sustains (its RPC server's mutual TLS listener): the
 * API service of the api row, started with --mtls=strict, and a client process opening
 * connections 16 at a time for 5 s, each closed after its handshake, with and without session
 * resumption. The service is pinned as the measured process.
 */
async function handshakeSection(ctx: Ctx): Promise<ExtraSection> {
  const title = 'Mutual TLS handshakes (a strict framework service)';
  if (!existsSync(ctx.meshMain)) return { title, body: 'not available: dist not built' };
  const caDir = join(ctx.tmp, 'ca-handshake');
  const init = spawnSync(process.execPath, [ctx.meshMain, 'ca', 'init', `--ca_dir=${caDir}`], { cwd: ctx.root, env: ctx.env, encoding: 'utf8' });
  if (init.status !== 0) return { title, body: `not available: mesh ca init: ${init.stderr.trim()}` };
  const port = await freePort();
  const svc = tsxProcess(ctx, 'bench-api-service-mtls', 'servers/api-service.ts', [
    `--address=127.0.0.1:${port}`,
    `--registry_address=${join(ctx.tmp, 'registry-handshake')}`,
    '--admin_address=off',
    '--log_level=warning',
    '--mtls=strict',
    `--ca_dir=${caDir}`,
  ]);
  const rows: string[][] = [];
  try {
    await waitForPort(svc, port, 20000);
    if (ctx.settings.pin) pin([svc.pid], ctx.settings.pin.proxy);
    for (const mode of ['full', 'resume'] as const) {
      const before = cpuMicros([svc.pid]) ?? 0;
      const client = spawnSync(process.execPath, ['--import', 'tsx', join(ctx.root, 'bench/servers/handshaker.ts'), String(port), caDir, join(ctx.root, 'dist'), ctx.settings.quick ? '2' : '5', '16', mode], { cwd: ctx.root, env: { ...process.env, ...ctx.env }, encoding: 'utf8', timeout: 60000 });
      const used = (cpuMicros([svc.pid]) ?? 0) - before;
      const r = JSON.parse(client.stdout.trim().split('\n').pop() ?? '{}') as { handshakes?: number; resumed?: number; failed?: number; seconds?: number };
      if (!r.handshakes || !r.seconds) {
        rows.push([mode, 'failed', client.stderr.trim().split('\n')[0] ?? '', '', '']);
        continue;
      }
      rows.push([mode === 'full' ? 'full handshake' : 'session resumed', int(r.handshakes / r.seconds), fixed(used / r.handshakes, 1), int(r.resumed ?? 0), int(r.failed ?? 0)]);
    }
  } finally {
    await svc.stop();
  }
  const body = [
    'A framework service with `--mtls=strict` (bench/servers/api-service.ts), pinned as the measured process; a client process (bench/servers/handshaker.ts, identity mesh.cli) opens connections 16 at a time, each closed after its handshake.',
    '',
    markdownTable(['connections', 'handshakes/s', 'service CPU µs/handshake', 'resumed', 'failed'], rows),
  ].join('\n');
  return { title, body };
}
