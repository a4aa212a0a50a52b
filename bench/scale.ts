/**
 * Scale rows (opt-in: `BENCH_ROWS=scale-conns,scale-ws,scale-routes,scale-etcd,xds-scale`, or
 * `BENCH_SCALE=1` for all five; never part of the default run):
 * - scale-conns: 10,000 idle keep-alive connections held on the gateway (a separate client
 *   process, servers/idle-conns.ts); the gateway's RSS, and the p99 of 50 active connections
 *   with them against without them.
 * - scale-ws: 10,000 WebSocket subscribers of one sidecar topic (servers/ws-subscribers.ts);
 *   RSS per subscriber, deliveries per second, every frame delivered.
 * - scale-routes: 1,000 services × 10 routed endpoints in the gateway's route table (registry
 *   router, no --handler) and in the registry of `--handler=rpc`; req/s against one service.
 * - scale-etcd: etcd with 10,000 nodes (bench/etcd-bench.ts): watch latency to the cluster
 *   manager, its memory. Needs MESH_BENCH_ETCD or MESH_TEST_ETCD_ADDRESS.
 * - xds-scale: `mesh xds` over 1,000 services × 10 nodes with 100 ADS streams from 4 processes
 *   (bench/xds-scale.ts): time to the first full push, registry change → push on every stream, RSS.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { NotAvailable, cpuMicros, freePort, machineBusyMicros, ownTreeMicros, pin, rssKiB, startProcess, waitForPort, withNofile, type Proc } from './lib/proc.js';
import { runLoad, type LoadResult } from './lib/load.js';
import { fixed, int, markdownTable, median } from './lib/stats.js';
import { PATH, REQUEST_BODY, ANSWER } from './lib/payload.js';
import type { Ctx } from './lib/mesh.js';
import { runNode, type ExtraSection } from './extras.js';

export const SCALE_IDS = ['scale-conns', 'scale-ws', 'scale-routes', 'scale-etcd', 'xds-scale'] as const;

const IDLE = Number(process.env.BENCH_IDLE_CONNECTIONS ?? 10000);
const SUBSCRIBERS = Number(process.env.BENCH_WS_SUBSCRIBERS ?? 10000);
const ROUTE_SERVICES = Number(process.env.BENCH_ROUTE_SERVICES ?? 1000);
const ROUTE_ENDPOINTS = 10;
const NOTE_NOISE =
  'Figures of one short run on a shared 2-CPU machine: absolute numbers and even the ratios are noisy; rerun on a quiet machine before drawing conclusions.';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mib = (kib: number | undefined) => (kib === undefined ? NaN : kib / 1024);

/** A mesh front end from dist/ with its open-file limit raised (thousands of sockets) and --max_connections above them. */
async function startBig(ctx: Ctx, name: string, command: 'api' | 'sidecar', flags: string[], registryDir = ctx.registryDir, fds = 25000): Promise<{ proc: Proc; port: number; admin: number; startMs: number }> {
  const port = await freePort();
  const admin = await freePort();
  const w = withNofile(fds, process.execPath, [
    // e.g. BENCH_SCALE_NODE_ARGS=--max-old-space-size=160: does memory growth survive a bounded heap (garbage) or not (a leak)?
    ...(process.env.BENCH_SCALE_NODE_ARGS ?? '').split(' ').filter(Boolean),
    ctx.meshMain,
    command,
    `--address=127.0.0.1:${port}`,
    `--registry_address=${registryDir}`,
    `--admin_address=127.0.0.1:${admin}`,
    `--log_level=${ctx.settings.logLevel}`,
    ...flags,
  ]);
  const t0 = performance.now();
  const proc = startProcess(name, w.command, w.args, { env: ctx.env, cwd: ctx.root });
  await waitForPort(proc, port, 60000);
  const startMs = performance.now() - t0;
  if (ctx.settings.pin) pin([proc.pid], ctx.settings.pin.proxy);
  return { proc, port, admin, startMs };
}

/** A bench script (tsx) with its open-file limit raised, talking on stdin/stdout lines. */
function startClient(ctx: Ctx, name: string, script: string, args: string[], fds: number, env: NodeJS.ProcessEnv = {}) {
  const waiters: Array<(line: string) => void> = [];
  const lines: string[] = [];
  const w = withNofile(fds, process.execPath, ['--import', 'tsx', join(ctx.root, 'bench', script), ...args]);
  const proc = startProcess(name, w.command, w.args, {
    env: { ...ctx.env, ...env },
    cwd: ctx.root,
    onLine: (line) => {
      const waiter = waiters.shift();
      if (waiter) waiter(line);
      else lines.push(line);
    },
  });
  if (ctx.settings.pin) pin([proc.pid], ctx.settings.pin.rest);
  const nextLine = (timeoutMs: number) =>
    new Promise<string>((resolve, reject) => {
      const queued = lines.shift();
      if (queued !== undefined) return resolve(queued);
      const t = setTimeout(() => reject(new Error(`${name}: no answer within ${timeoutMs} ms: ${proc.output().split('\n').slice(-3).join(' | ')}`)), timeoutMs);
      waiters.push((line) => {
        clearTimeout(t);
        resolve(line);
      });
    });
  const ask = async (cmd: string, timeoutMs = 10000): Promise<string> => {
    proc.child.stdin!.write(`${cmd}\n`);
    return nextLine(timeoutMs);
  };
  return { proc, nextLine, ask };
}

async function check(url: string, body = REQUEST_BODY): Promise<void> {
  const deadline = Date.now() + 20000;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const text = await res.text();
      if (res.status === 200 && JSON.stringify(JSON.parse(text)) === JSON.stringify(ANSWER)) return;
      last = `${res.status} ${text.slice(0, 200)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(200);
  }
  throw new Error(`no correct answer from ${url}: ${last}`);
}

interface Measured extends LoadResult {
  /** CPU of the measured process per request, µs. */
  cpuUs: number;
  /** CPU used by processes outside the benchmark during the load, % of one CPU. */
  foreignPct: number;
}

/** One load run against url, with the CPU per request of the measured processes and the machine's other load. */
async function measure(ctx: Ctx, url: string, pids: number[]): Promise<Measured> {
  const c0 = cpuMicros(pids);
  const m0 = machineBusyMicros();
  const o0 = ownTreeMicros();
  const w0 = performance.now();
  const r = await load(ctx, url);
  const w1 = performance.now();
  const m1 = machineBusyMicros();
  const o1 = ownTreeMicros();
  const c1 = cpuMicros(pids);
  const foreignPct = m0 !== undefined && m1 !== undefined && o0 !== undefined && o1 !== undefined ? Math.max(0, (m1 - m0 - (o1 - o0)) / ((w1 - w0) * 1000)) * 100 : NaN;
  return { ...r, cpuUs: c0 !== undefined && c1 !== undefined && r.requests > 0 ? (c1 - c0) / r.requests : NaN, foreignPct };
}

function load(ctx: Ctx, url: string, durationS = ctx.settings.duration) {
  return runLoad(ctx.tool, {
    url,
    durationS,
    connections: ctx.settings.connections,
    threads: ctx.settings.threads,
    method: 'POST',
    body: REQUEST_BODY,
    contentType: 'application/json',
    tmp: ctx.tmp,
    cpus: ctx.settings.pin?.rest,
  });
}

/** The JavaScript heap in use of a mesh process (admin /stats server.memory_allocated), MiB; NaN when unknown. */
async function heapMiB(admin: number): Promise<number> {
  try {
    const res = await fetch(`http://127.0.0.1:${admin}/stats`);
    const m = /^server\.memory_allocated: (\d+)$/m.exec(await res.text());
    return m ? Number(m[1]) / 2 ** 20 : NaN;
  } catch {
    return NaN;
  }
}

const failed = (title: string, err: unknown): ExtraSection => ({
  title,
  body: `${err instanceof NotAvailable ? 'not available' : 'failed'}: ${(err as Error).message.split('\n')[0]}`,
});

// ------------------------------------------------------------------------------------ idle connections

async function idleConnections(ctx: Ctx): Promise<ExtraSection> {
  const title = `Scale: ${int(IDLE)} idle keep-alive connections on the gateway (scale-conns)`;
  const own: Proc[] = [];
  try {
    const g = await startBig(ctx, 'mesh-api-rpc-idle', 'api', ['--handler=rpc', '--namespace=go.mesh.srv', `--max_connections=${IDLE + 1000}`]);
    own.push(g.proc);
    const url = `http://127.0.0.1:${g.port}${PATH}`;
    await check(url);
    if (ctx.settings.warmup > 0) await load(ctx, url, ctx.settings.warmup);
    const rounds: Array<{ without: Measured; withIdle: Measured; after: Measured }> = [];
    let rssBase = NaN;
    let rssIdle = NaN;
    let heapBase = NaN;
    let heapIdle = NaN;
    let held = NaN;
    let openMs = NaN;
    let answered = NaN;
    for (let i = 0; i < ctx.settings.rounds; i++) {
      const without = await measure(ctx, url, [g.proc.pid]);
      // Memory from the first round only: later ones start with the previous round's garbage.
      if (i === 0) {
        rssBase = mib(rssKiB(g.proc.pid));
        heapBase = await heapMiB(g.admin);
      }
      const t0 = performance.now();
      const client = startClient(ctx, 'idle-conns', 'servers/idle-conns.ts', [String(g.port), PATH, String(IDLE), REQUEST_BODY], IDLE + 1000);
      own.push(client.proc);
      const ready = await client.nextLine(180000);
      openMs = performance.now() - t0;
      if (!ready.startsWith('ready ')) throw new Error(`idle client: ${ready}`);
      const r = JSON.parse(ready.slice(6)) as { answered: number; failed: number; errors: string[] };
      answered = r.answered;
      if (r.failed > 0) ctx.log(`  scale-conns: ${r.failed} of ${IDLE} idle connections failed: ${r.errors.join('; ')}`);
      await sleep(1000);
      if (i === 0) {
        rssIdle = mib(rssKiB(g.proc.pid));
        heapIdle = await heapMiB(g.admin);
      }
      const withIdle = await measure(ctx, url, [g.proc.pid]);
      held = (JSON.parse(await client.ask('count')) as { open: number }).open;
      await client.proc.stop();
      await sleep(1500);
      const after = await measure(ctx, url, [g.proc.pid]);
      rounds.push({ without, withIdle, after });
      ctx.log(
        `  scale-conns round ${i + 1}: p99 ${fixed(without.p99ms)} / ${fixed(withIdle.p99ms)} (with ${int(held)} idle) / ${fixed(after.p99ms)} ms; CPU ${fixed(without.cpuUs, 1)} / ${fixed(withIdle.cpuUs, 1)} / ${fixed(after.cpuUs, 1)} µs/req; RSS ${fixed(rssBase, 0)} → ${fixed(rssIdle, 0)} MiB (round 1)`,
      );
    }
    // "Without" is the better of the runs before and after (one disturbed by outside load must not flatter the ratio).
    const base = (r: (typeof rounds)[number]) => Math.min(r.without.p99ms, r.after.p99ms);
    const p99Ratio = median(rounds.map((r) => r.withIdle.p99ms / base(r)));
    const rpsRatio = median(rounds.map((r) => r.withIdle.rps / Math.max(r.without.rps, r.after.rps)));
    const cpuRatio = median(rounds.map((r) => r.withIdle.cpuUs / Math.min(r.without.cpuUs, r.after.cpuUs)));
    const m = (f: (r: (typeof rounds)[number]) => number) => median(rounds.map(f));
    return {
      title,
      body: [
        `\`mesh api --handler=rpc --max_connections=${IDLE + 1000}\` (log level ${ctx.settings.logLevel}). A separate client process (servers/idle-conns.ts, \`ulimit -n\` raised in a shell wrapper) opens ${int(IDLE)} connections to it, sends one POST on each (a real keep-alive connection through the parser), reads the answer and keeps the connection open and silent. Meanwhile the load generator runs ${ctx.settings.connections} active connections for ${ctx.settings.duration} s; the same load runs before the idle connections are opened and after they are closed, and "without" is the better of the two (lower p99 and CPU, higher req/s), so that a run disturbed by outside load does not flatter the ratio. ${NOTE_NOISE}`,
        '',
        markdownTable(
          ['measure', 'value'],
          [
            ['idle connections answered / still open during the load', `${int(answered)} / ${int(held)}`],
            ['time to open them all', `${int(openMs)} ms`],
            ['gateway RSS without / with them (first round)', `${fixed(rssBase, 0)} / ${fixed(rssIdle, 0)} MiB`],
            ['RSS per idle connection', `${fixed(((rssIdle - rssBase) * 1024) / (held || IDLE), 1)} KiB`],
            ['gateway JS heap in use without / with them (admin server.memory_allocated, no forced GC)', `${fixed(heapBase, 1)} / ${fixed(heapIdle, 1)} MiB (${fixed(((heapIdle - heapBase) * 1024) / (held || IDLE), 1)} KiB per connection)`],
            ['p99, 50 active connections, without (before, after)', `${fixed(m((r) => r.without.p99ms))}, ${fixed(m((r) => r.after.p99ms))} ms`],
            [`p99, 50 active connections, with ${int(IDLE)} idle`, `${fixed(m((r) => r.withIdle.p99ms))} ms`],
            ['**p99 with ÷ without** (target ≤ 1.2×)', `**${fixed(p99Ratio)}×**`],
            ['req/s without (best) / with', `${int(m((r) => Math.max(r.without.rps, r.after.rps)))} / ${int(m((r) => r.withIdle.rps))} (${fixed(rpsRatio)}×)`],
            ['gateway CPU µs/request without (before, after) / with', `${fixed(m((r) => r.without.cpuUs), 1)}, ${fixed(m((r) => r.after.cpuUs), 1)} / ${fixed(m((r) => r.withIdle.cpuUs), 1)} (with ÷ best without: ${fixed(cpuRatio)}×)`],
            ['other load %CPU during the three runs', `${fixed(m((r) => r.without.foreignPct), 0)}, ${fixed(m((r) => r.withIdle.foreignPct), 0)}, ${fixed(m((r) => r.after.foreignPct), 0)}`],
          ],
          ['l', 'r'],
        ),
      ].join('\n'),
      targets: [{ label: `gateway p99 with ${int(IDLE)} idle keep-alive connections ÷ without ≤ 1.2`, actual: p99Ratio, target: 1.2, kind: 'atMost', unit: 'x' }],
    };
  } catch (err) {
    return failed(title, err);
  } finally {
    await Promise.all(own.map((p) => p.stop()));
  }
}

// ------------------------------------------------------------------------------------ WebSocket subscribers

async function wsSubscribers(ctx: Ctx): Promise<ExtraSection> {
  const title = `Scale: ${int(SUBSCRIBERS)} WebSocket subscribers on one sidecar topic (scale-ws)`;
  const own: Proc[] = [];
  try {
    const sc = await startBig(ctx, 'mesh-sidecar-ws', 'sidecar', [`--max_connections=${SUBSCRIBERS + 1000}`]);
    own.push(sc.proc);
    const topic = 'bench.scale';
    const publishUrl = `http://127.0.0.1:${sc.port}/broker?topic=${topic}`;
    // Warm the publish path before the baseline RSS.
    for (let i = 0; i < 20; i++) await (await fetch(publishUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"warm":1}' })).text();
    await sleep(500);
    const rss0 = mib(rssKiB(sc.proc.pid));
    const heap0 = await heapMiB(sc.admin);
    const t0 = performance.now();
    const subs = startClient(ctx, 'ws-subscribers-10k', 'servers/ws-subscribers.ts', [`ws://127.0.0.1:${sc.port}/broker?topic=${topic}`, String(SUBSCRIBERS)], SUBSCRIBERS + 1000);
    own.push(subs.proc);
    const ready = await subs.nextLine(240000);
    if (ready !== 'ready') throw new Error(`subscribers: ${ready}`);
    const connectMs = performance.now() - t0;
    type Total = { sum: number; min: number; max: number; open: number; failed: number };
    const total = async () => JSON.parse(await subs.ask('total')) as Total;
    const waitSum = async (want: number, timeoutMs: number): Promise<Total> => {
      const deadline = Date.now() + timeoutMs;
      let t = await total();
      while (t.sum < want && Date.now() < deadline) {
        await sleep(50);
        t = await total();
      }
      return t;
    };
    // One publish first: every subscriber gets it (the subscriptions are in place).
    await (await fetch(publishUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"n":0}' })).text();
    const first = await waitSum(SUBSCRIBERS, 30000);
    await sleep(500);
    const rss1 = mib(rssKiB(sc.proc.pid));
    const heap1 = await heapMiB(sc.admin);
    const messages = ctx.settings.quick ? 20 : 100;
    const publishMs: number[] = [];
    const p0 = performance.now();
    let non2xx = 0;
    for (let i = 1; i <= messages; i++) {
      const s = performance.now();
      const res = await fetch(publishUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"n":${i}}` });
      await res.text();
      if (res.status !== 200 && res.status !== 204) non2xx++;
      publishMs.push(performance.now() - s);
    }
    const want = SUBSCRIBERS * (messages + 1);
    const end = await waitSum(want, 120000);
    const deliverS = (performance.now() - p0) / 1000;
    // Anything beyond the expected count would be a duplicate: wait a moment and look again.
    await sleep(500);
    const final = await total();
    const rss2 = mib(rssKiB(sc.proc.pid));
    const heap2 = await heapMiB(sc.admin);
    const delivered = final.sum - first.sum;
    const expected = SUBSCRIBERS * messages;
    ctx.log(`  scale-ws: ${int(delivered)} of ${int(expected)} delivered in ${deliverS.toFixed(1)} s; RSS ${fixed(rss0, 0)} → ${fixed(rss1, 0)} MiB`);
    return {
      title,
      body: [
        `\`mesh sidecar --max_connections=${SUBSCRIBERS + 1000}\` (log level ${ctx.settings.logLevel}); ${int(SUBSCRIBERS)} WebSocket connections to \`/broker?topic=${topic}\` from one separate process (servers/ws-subscribers.ts, at most 200 connects in flight, \`ulimit -n\` raised), counting frames. One publish first (each subscriber must get it), then ${messages} messages published one after the other with \`POST /broker?topic=${topic}\`; "deliveries/s" is the frames received by all subscribers over the time from the first of those publishes to the last frame. ${NOTE_NOISE}`,
        '',
        markdownTable(
          ['measure', 'value'],
          [
            ['subscribers open (failed to connect)', `${int(final.open)} (${int(final.failed)})`],
            ['time to connect them all', `${int(connectMs)} ms`],
            ['first publish: frames received', `${int(first.sum)} of ${int(SUBSCRIBERS)}`],
            ['sidecar RSS without / with the subscribers', `${fixed(rss0, 0)} / ${fixed(rss1, 0)} MiB (${fixed(rss2, 0)} MiB after the publishes)`],
            ['**RSS per subscriber**', `**${fixed(((rss1 - rss0) * 1024) / SUBSCRIBERS, 1)} KiB**`],
            ['sidecar JS heap in use: without / with the subscribers / after the publishes (admin server.memory_allocated, no forced GC)', `${fixed(heap0, 1)} / ${fixed(heap1, 1)} / ${fixed(heap2, 1)} MiB (${fixed(((heap1 - heap0) * 1024) / SUBSCRIBERS, 1)} KiB per subscriber)`],
            ['messages published (non-2xx)', `${messages} (${non2xx})`],
            ['publish latency median / max', `${fixed(median(publishMs))} / ${fixed(Math.max(...publishMs))} ms`],
            ['**deliveries/s**', `**${int(delivered / deliverS)}**`],
            ['**delivered / expected**', `**${int(delivered)} / ${int(expected)} (${fixed((delivered / expected) * 100, 1)}%)**; per subscriber min ${final.min - 1}, max ${final.max - 1} of ${messages}`],
            ['all delivered within the wait (120 s)', end.sum >= want ? 'yes' : 'no'],
          ],
          ['l', 'r'],
        ),
      ].join('\n'),
      targets: [{ label: `sidecar: every frame delivered to ${int(SUBSCRIBERS)} WebSocket subscribers (delivered ÷ expected = 1)`, actual: delivered / expected, target: 1, kind: 'atLeast', unit: 'x' }],
    };
  } catch (err) {
    return failed(title, err);
  } finally {
    await Promise.all(own.map((p) => p.stop()));
  }
}

// ------------------------------------------------------------------------------------ route table

/** Runs a TypeScript script of the bench (through tsx) to its end. */
function runScript(ctx: Ctx, args: string[], timeoutMs: number, nodeArgs: string[] = []): Promise<{ code: number | null; out: string; err: string }> {
  return runNode(ctx, [...nodeArgs, '--import', 'tsx', ...args], timeoutMs);
}

async function routeTable(ctx: Ctx): Promise<ExtraSection> {
  const title = `Scale: ${int(ROUTE_SERVICES)} services × ${ROUTE_ENDPOINTS} endpoints in the gateway's route table (scale-routes)`;
  const own: Proc[] = [];
  try {
    const dirs = { one: join(ctx.tmp, 'routes-1'), many: join(ctx.tmp, `routes-${ROUTE_SERVICES}`) };
    const counts: Record<string, { services: number; routes: number }> = {};
    for (const [k, n] of [['one', 1], ['many', ROUTE_SERVICES]] as const) {
      mkdirSync(dirs[k], { recursive: true });
      const r = await runScript(ctx, [join(ctx.root, 'bench', 'servers', 'register-routes.ts'), dirs[k], String(n), String(ROUTE_ENDPOINTS), String(ctx.backendPort)], 300000);
      if (r.code !== 0) throw new Error(`register-routes: ${(r.err || r.out).split('\n').slice(-3).join(' ')}`);
      counts[k] = JSON.parse(r.out.trim().split('\n').pop()!) as { services: number; routes: number };
    }
    // Gateways: the registry router (no --handler) and --handler=rpc, each on the small and the big registry.
    const gw: Record<string, { port: number; proc: Proc; startMs: number; admin: number }> = {};
    for (const mode of ['router', 'rpc'] as const) {
      for (const k of ['one', 'many'] as const) {
        const flags = mode === 'rpc' ? ['--handler=rpc', '--namespace=go.mesh.srv'] : ['--namespace=go.mesh.srv'];
        const g = await startBig(ctx, `mesh-api-${mode}-${k}`, 'api', flags, dirs[k]);
        own.push(g.proc);
        gw[`${mode}-${k}`] = g;
      }
    }
    // What is measured: path → gateway; the router's exact path, its template path (behind every
    // other service's templates), and the rpc handler.
    const cases = [
      { id: 'router exact `/bench/call`', mode: 'router', path: '/bench/call' },
      { id: 'router template `/b/{name}` (after the other templates)', mode: 'router', path: '/b/call' },
      { id: '`--handler=rpc` `/bench/call`', mode: 'rpc', path: '/bench/call' },
    ];
    for (const c of cases) for (const k of ['one', 'many']) await check(`http://127.0.0.1:${gw[`${c.mode}-${k}`]!.port}${c.path}`);
    // The route count the big router holds (admin /routes).
    let tableSize = NaN;
    try {
      const res = await fetch(`http://127.0.0.1:${gw['router-many']!.admin}/routes`);
      const j = (await res.json()) as { configs?: Array<{ table?: unknown[]; dynamic_route_configs?: unknown }> } | unknown[];
      const text = JSON.stringify(j);
      tableSize = (text.match(/"endpoint":/g) ?? []).length;
    } catch {
      /* not essential */
    }
    for (const g of Object.values(gw)) if (ctx.settings.warmup > 0) await load(ctx, `http://127.0.0.1:${g.port}/bench/call`, ctx.settings.warmup);
    const results = new Map<string, Measured[]>();
    for (let i = 0; i < ctx.settings.rounds; i++) {
      for (const c of cases) {
        for (const k of i % 2 === 0 ? ['one', 'many'] : ['many', 'one']) {
          const g = gw[`${c.mode}-${k}`]!;
          if (ctx.settings.pin) {
            for (const other of Object.values(gw)) pin([other.proc.pid], ctx.settings.pin.rest);
            pin([g.proc.pid], ctx.settings.pin.proxy);
          }
          const r = await measure(ctx, `http://127.0.0.1:${g.port}${c.path}`, [g.proc.pid]);
          const key = `${c.id}|${k}`;
          results.set(key, [...(results.get(key) ?? []), r]);
          ctx.log(`  scale-routes ${c.mode} ${c.path} ${k}: ${int(r.rps)} req/s, p99 ${fixed(r.p99ms)} ms, ${fixed(r.cpuUs, 1)} µs/req, other load ${fixed(r.foreignPct, 0)}%${r.non2xx ? `, non-2xx ${r.non2xx}` : ''}`);
        }
      }
    }
    const rows = cases.map((c) => {
      const one = results.get(`${c.id}|one`)!;
      const many = results.get(`${c.id}|many`)!;
      const paired = median(one.map((o, i) => many[i]!.rps / o.rps));
      const cpu = median(one.map((o, i) => many[i]!.cpuUs / o.cpuUs));
      return [
        c.id,
        int(median(one.map((x) => x.rps))),
        int(median(many.map((x) => x.rps))),
        `${fixed(paired)}×`,
        `${fixed(median(one.map((x) => x.cpuUs)), 1)} / ${fixed(median(many.map((x) => x.cpuUs)), 1)} (${fixed(cpu)}×)`,
        `${fixed(median(one.map((x) => x.p99ms)))} / ${fixed(median(many.map((x) => x.p99ms)))}`,
        String([...one, ...many].reduce((a, x) => a + x.non2xx + x.errors, 0)),
        `${fixed(median(one.map((x) => x.foreignPct)), 0)} / ${fixed(median(many.map((x) => x.foreignPct)), 0)}`,
      ];
    });
    const ratioOf = (id: string) => {
      const one = results.get(`${id}|one`)!;
      const many = results.get(`${id}|many`)!;
      return median(one.map((o, i) => many[i]!.rps / o.rps));
    };
    return {
      title,
      body: [
        `Two local registries: one with the bench service alone (go.mesh.srv.bench, ${counts.one!.routes} routed endpoints), one with it and ${int(ROUTE_SERVICES - 1)} more services of ${ROUTE_ENDPOINTS} routed endpoints each (per 10: 6 exact paths, 3 templates \`/rNNNN/eK/{id}\`, 1 regex; ${int(counts.many!.routes)} routes${Number.isFinite(tableSize) ? `, ${int(tableSize)} in the big router's admin /routes` : ''}), every endpoint \`method: POST\` (servers/register-routes.ts). Gateways: \`mesh api --namespace=go.mesh.srv\` (no --handler: the registry router matches every request against the table) and \`mesh api --handler=rpc --namespace=go.mesh.srv\`, one on each registry, all running at once; the measured one on the proxy CPU. The bench service's template \`/b/{name}\` is the shortest, so it is tried after every other service's templates. Gateway start (spawn to listening): router ${int(gw['router-one']!.startMs)} ms with one service, ${int(gw['router-many']!.startMs)} ms with ${int(ROUTE_SERVICES)}. ${ctx.settings.rounds} round(s) of ${ctx.settings.duration} s, one/many order alternating; ratio = median of per-round ratios. ${NOTE_NOISE}`,
        '',
        markdownTable(
          ['request', 'req/s, 1 service', `req/s, ${int(ROUTE_SERVICES)} services`, `req/s ${int(ROUTE_SERVICES)} ÷ 1 (target ≥ 0.95)`, 'gateway CPU µs/req, 1 / many (many ÷ 1)', 'p99 ms (1 / many)', 'errors', 'other load %CPU (1 / many)'],
          rows,
          ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
        ),
      ].join('\n'),
      targets: cases.map((c) => ({ label: `route table: ${c.id.replace(/`/g, '')} req/s with ${int(ROUTE_SERVICES)} services ÷ with 1 ≥ 0.95`, actual: ratioOf(c.id), target: 0.95, kind: 'atLeast' as const, unit: 'x' })),
    };
  } catch (err) {
    return failed(title, err);
  } finally {
    await Promise.all(own.map((p) => p.stop()));
  }
}

// ------------------------------------------------------------------------------------ etcd

async function etcdNodes(ctx: Ctx): Promise<ExtraSection> {
  const title = 'Scale: etcd with 10,000 nodes, watch latency and cluster manager memory (scale-etcd)';
  const address = process.env.MESH_BENCH_ETCD || process.env.MESH_TEST_ETCD_ADDRESS;
  if (!address) return { title, body: 'skipped: no etcd (set MESH_BENCH_ETCD=host:port, or MESH_TEST_ETCD_ADDRESS)' };
  const samples = ctx.settings.quick ? 30 : 100;
  const r = await runScript(ctx, [join(ctx.root, 'bench', 'etcd-bench.ts'), address, '100', '100', String(samples)], 600000, ['--expose-gc']);
  if (r.code !== 0) return { title, body: `failed (exit ${r.code}): ${(r.err || r.out).split('\n').filter(Boolean).slice(-3).join(' ')}` };
  type S = { median: number; p99: number; max: number; n: number };
  const j = JSON.parse(r.out.trim().split('\n').pop()!) as {
    services: number;
    nodes: number;
    registerTotalMs: number;
    clusterLoadMs: number;
    heapBeforeMiB: number;
    heapAfterMiB: number;
    rssBeforeMiB: number;
    rssAfterMiB: number;
    watchMs: S;
    clusterMs: S;
  };
  const row = (what: string, s: S) => [what, `${fixed(s.median)} ms`, `${fixed(s.p99)} ms`, `${fixed(s.max)} ms`, String(s.n)];
  return {
    title,
    body: [
      `etcd at ${address}; \`bench/etcd-bench.ts\`: ${int(j.services)} services × ${int(j.nodes / j.services)} nodes = ${int(j.nodes)} nodes (no TTL) under a key prefix of its own (deleted at the end), registered one service at a time in ${int(j.registerTotalMs)} ms. A second registry client (its own etcd connection) feeds a cluster manager (src/core/upstream) that holds a cluster for every service (${int(j.clusterLoadMs)} ms to load all ${int(j.services)}). Memory of that process after GC: heap ${fixed(j.heapBeforeMiB, 1)} → ${fixed(j.heapAfterMiB, 1)} MiB (**${fixed(((j.heapAfterMiB - j.heapBeforeMiB) * 1024 * 1024) / j.nodes, 0)} bytes of heap per host**), RSS ${fixed(j.rssBeforeMiB, 0)} → ${fixed(j.rssAfterMiB, 0)} MiB. Watch latency: one new node registered at a time (${j.clusterMs.n} samples, 20 ms apart), timed until the other client's watch event and until the cluster manager's cluster has the host (polled every 1 ms). ${NOTE_NOISE}`,
      '',
      markdownTable(['watch latency', 'median', 'p99', 'max', 'samples'], [row('register → registry watch event (other client)', j.watchMs), row('register → cluster manager has the host', j.clusterMs)], ['l', 'r', 'r', 'r', 'r']),
    ].join('\n'),
    targets: [{ label: 'etcd, 10,000 nodes: register → cluster manager view p99 within 100 ms', actual: j.clusterMs.p99, target: 100, kind: 'atMost', unit: 'ms' }],
  };
}

// ------------------------------------------------------------------------------------ xDS

async function xdsScale(ctx: Ctx): Promise<ExtraSection> {
  const title = 'Scale: mesh xds with 1,000 services × 10 nodes and 100 ADS streams (xds-scale)';
  const dir = join(ctx.tmp, 'xds-scale');
  mkdirSync(dir, { recursive: true });
  const r = await runScript(ctx, [join(ctx.root, 'bench', 'xds-scale.ts'), ctx.meshMain, dir, '1000', '10', '100', '4', ctx.settings.quick ? '3' : '10'], 900000);
  if (r.code !== 0) return { title, body: `failed (exit ${r.code}): ${(r.err || r.out).split('\n').filter(Boolean).slice(-3).join(' ')}` };
  type S = { median: number; p99: number; max: number; n: number };
  const j = JSON.parse(r.out.trim().split('\n').pop()!) as {
    services: number;
    nodes: number;
    streams: number;
    procs: number;
    registerMs: number;
    startMs: number;
    firstPushMs: S;
    newClientMs: number;
    changeToAllStreamsMs: S;
    rssMiB: { idle: number; clients: number; afterChanges: number };
  };
  return {
    title,
    body: [
      `\`bench/xds-scale.ts\` (also runnable alone): an embedded (local) registry of ${int(j.services)} services × ${int(j.nodes / j.services)} nodes (written in ${int(j.registerMs)} ms, one service a transaction), \`mesh xds\` from dist/ on it (${int(j.startMs)} ms from spawn to listening), then ${j.streams} ADS streams opened at once from ${j.procs} processes (\`bench/servers/xds-clients.ts\`, @grpc/grpc-js with the reduced protos; each stream asks as Envoy does: every cluster, then the endpoints of each, and ACKs). A full push is every cluster and every endpoint set. A change is one node added to one service by another process; its time runs to the push on the last of the ${j.streams} streams (the local registry's poll, 50 ms, and mesh xds's debounce, 100 ms, included). ${NOTE_NOISE}`,
      '',
      markdownTable(
        ['measure', 'median', 'p99', 'max', 'n'],
        [
          [`first full push, ${j.streams} streams opened at once`, `${fixed(j.firstPushMs.median, 0)} ms`, `${fixed(j.firstPushMs.p99, 0)} ms`, `${fixed(j.firstPushMs.max, 0)} ms`, String(j.firstPushMs.n)],
          ['first full push, one new client while they are served', `${fixed(j.newClientMs, 0)} ms`, '', '', '1'],
          [`registry change → push on all ${j.streams} streams`, `${fixed(j.changeToAllStreamsMs.median, 0)} ms`, `${fixed(j.changeToAllStreamsMs.p99, 0)} ms`, `${fixed(j.changeToAllStreamsMs.max, 0)} ms`, String(j.changeToAllStreamsMs.n)],
          ['mesh xds RSS: before clients / with them / after the changes', `${fixed(j.rssMiB.idle, 0)} / ${fixed(j.rssMiB.clients, 0)} / ${fixed(j.rssMiB.afterChanges, 0)} MiB`, '', '', ''],
        ],
        ['l', 'r', 'r', 'r', 'r'],
      ),
    ].join('\n'),
    targets: [{ label: 'mesh xds, 1,000 services × 10 nodes, 100 streams: registry change → push on every stream within 1 s (max)', actual: j.changeToAllStreamsMs.max, target: 1000, kind: 'atMost', unit: 'ms' }],
  };
}

/** The scale rows asked for: BENCH_SCALE=1 (all), or their ids in BENCH_ROWS. Never in the default run. */
export function scaleWanted(rows: string[]): string[] {
  if (process.env.BENCH_SCALE === '1') return [...SCALE_IDS];
  return SCALE_IDS.filter((id) => rows.includes(id));
}

export async function runScale(ctx: Ctx, ids: string[]): Promise<ExtraSection[]> {
  const out: ExtraSection[] = [];
  const run: Record<string, (c: Ctx) => Promise<ExtraSection>> = {
    'scale-conns': idleConnections,
    'scale-ws': wsSubscribers,
    'scale-routes': routeTable,
    'scale-etcd': etcdNodes,
    'xds-scale': xdsScale,
  };
  for (const id of ids) {
    ctx.log(`scale row: ${id}`);
    out.push(await run[id]!(ctx));
  }
  return out;
}
