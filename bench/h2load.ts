/**
 * The opt-in HTTP/2 rows (`BENCH_ROWS=h2load`): h2load (nghttp2) loads `mesh api --enable_http2
 * --handler=proxy` over h2c by prior knowledge and over h2 by ALPN on its TLS listener, beside two
 * baselines in the same rounds, loaded by the same h2load with the same requests in flight:
 *  - the HTTP/2 Node floor (servers/node-floor-h2.ts: node:http2 + one undici Pool to the same
 *    backend), over h2c and over TLS h2: what mesh's own code costs on top of node:http2;
 *  - the same gateway process over HTTP/1.1 (`h2load --h1`, as many connections as the h2 legs
 *    have streams in flight): what HTTP/2 changes for the gateway, measured with one tool.
 * Rounds are interleaved (every leg once per round, the order rotating) and ratios are medians of
 * per-round ratios, as in the main table. p50/p99 come from h2load's per-request log (--log-file).
 */
import { execFileSync, spawn } from 'node:child_process';
import { connect } from 'node:http2';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NotAvailable, commandExists, cpuMicros, freePort, machineBusyMicros, ownTreeMicros, pin, waitForPort, type Proc } from './lib/proc.js';
import { fixed, int, markdownTable, max, median, min, percentile } from './lib/stats.js';
import { ANSWER_BODY, PATH, REQUEST_BODY } from './lib/payload.js';
import { startMesh, tsxProcess, type Ctx } from './lib/mesh.js';
import type { ExtraSection } from './extras.js';

/** What one h2load run printed and logged. */
export interface H2loadRun {
  protocol?: string;
  done: number;
  succeeded: number;
  failed: number;
  errored: number;
  timeout: number;
  /** Answers with a 2xx status ("status codes:"). */
  status2xx: number;
  non2xx: number;
  rps: number;
  p50ms: number;
  p99ms: number;
}

interface Leg {
  id: string;
  label: string;
  url: string;
  /** The protocol h2load must report ("Application protocol:"). */
  protocol: 'h2c' | 'h2' | 'http/1.1';
  /** h2load's connection flags (-c, -m, --h1). */
  flags: string[];
  measured: Proc;
}

interface LegRound extends H2loadRun {
  cpuUsPerReq: number;
  foreignPct: number;
}

/**
 * Reads h2load's summary ("finished in …, N req/s", "requests: …", "status codes: …",
 * "Application protocol: …") and its --log-file (start µs, status, µs to the end of the answer;
 * status 0: a stream cut at the end of the run, left out). Throws when the summary is missing.
 */
export function parseH2load(out: string, log: string): H2loadRun {
  const rq = /^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout$/m.exec(out);
  const st = /^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx$/m.exec(out);
  const fin = /^finished in [^,]+, ([\d.]+) req\/s/m.exec(out);
  if (!rq || !st || !fin) throw new Error(`h2load printed no summary: ${out.trim().split('\n').slice(-3).join(' | ')}`);
  const times: number[] = [];
  for (const line of log.split('\n')) {
    const [, status, us] = line.split('\t');
    if (status !== undefined && us !== undefined && status !== '0') times.push(Number(us) / 1000);
  }
  return {
    protocol: /^Application protocol: (\S+)$/m.exec(out)?.[1],
    done: Number(rq[3]),
    succeeded: Number(rq[4]),
    failed: Number(rq[5]),
    errored: Number(rq[6]),
    timeout: Number(rq[7]),
    status2xx: Number(st[1]),
    non2xx: Number(st[2]) + Number(st[3]) + Number(st[4]),
    rps: Number(fin[1]),
    p50ms: times.length ? percentile(times, 50) : NaN,
    p99ms: times.length ? percentile(times, 99) : NaN,
  };
}

/** Runs h2load for `seconds` against `leg` (on the load CPUs when pinning); its output and log. */
function h2load(ctx: Ctx, leg: Leg, seconds: number, log?: string): Promise<{ code: number | null; out: string }> {
  const body = join(ctx.tmp, 'h2load-body.json');
  writeFileSync(body, REQUEST_BODY);
  const args = ['-D', `${Math.max(1, Math.round(seconds * 1000))}ms`, ...leg.flags, '-d', body, '-H', 'content-type: application/json', ...(log ? [`--log-file=${log}`] : []), leg.url];
  const [cmd, argv] = ctx.settings.pin ? ['taskset', ['-c', ctx.settings.pin.rest, 'h2load', ...args]] : ['h2load', args];
  return new Promise((resolve) => {
    const child = spawn(cmd as string, argv as string[], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000);
    child.once('error', (e) => {
      clearTimeout(timer);
      resolve({ code: -1, out: e.message });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/** One measured round of a leg: h2load's figures, the measured process's CPU per request, other load. */
async function round(ctx: Ctx, leg: Leg, seconds: number): Promise<LegRound> {
  const log = join(ctx.tmp, `h2load-${leg.id}.log`);
  const cpu0 = cpuMicros([leg.measured.pid]) ?? NaN;
  const busy0 = machineBusyMicros() ?? NaN;
  const own0 = ownTreeMicros() ?? NaN;
  const t0 = Date.now();
  const r = await h2load(ctx, leg, seconds, log);
  const wallUs = (Date.now() - t0) * 1000;
  const cpu = (cpuMicros([leg.measured.pid]) ?? NaN) - cpu0;
  const foreign = (machineBusyMicros() ?? NaN) - busy0 - ((ownTreeMicros() ?? NaN) - own0);
  let text = '';
  try {
    text = readFileSync(log, 'utf8');
  } finally {
    rmSync(log, { force: true });
  }
  if (r.code !== 0) throw new Error(`h2load exited ${r.code}: ${r.out.trim().split('\n').slice(-2).join(' | ')}`);
  const run = parseH2load(r.out, text);
  if (run.protocol !== leg.protocol) throw new Error(`h2load negotiated ${run.protocol ?? 'nothing'}, not ${leg.protocol}`);
  return { ...run, cpuUsPerReq: run.done ? cpu / run.done : NaN, foreignPct: Math.max(0, (foreign / wallUs) * 100) };
}

/** One POST of the bench body over HTTP/2 (TLS not verified: a certificate made for the run); the answer's status and body. */
function h2Post(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const session = connect(url, { rejectUnauthorized: false });
    session.once('error', reject);
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/json' });
    let status = 0;
    let body = '';
    req.on('response', (h) => (status = Number(h[':status'])));
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.once('end', () => {
      session.close();
      resolve({ status, body });
    });
    req.once('error', reject);
    req.end(REQUEST_BODY);
  });
}

/** Checks that a leg answers the backend's exact JSON over its protocol. */
async function check(leg: Leg): Promise<void> {
  const a = leg.protocol === 'http/1.1' ? await fetch(leg.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: REQUEST_BODY }).then(async (r) => ({ status: r.status, body: await r.text() })) : await h2Post(leg.url.slice(0, -PATH.length));
  if (a.status !== 200 || a.body !== ANSWER_BODY) throw new Error(`${leg.id}: ${a.status} ${a.body.slice(0, 200)}`);
}

/** Per-round ratios of leg a to leg b (round i against round i), their median. */
function paired(a: LegRound[] | undefined, b: LegRound[] | undefined, f: (r: LegRound) => number): number {
  if (!a?.length || !b?.length) return NaN;
  const n = Math.min(a.length, b.length);
  return median(Array.from({ length: n }, (_, i) => f(a[i]!) / f(b[i]!)).filter(Number.isFinite));
}

export async function h2loadSection(ctx: Ctx): Promise<ExtraSection> {
  const title = 'HTTP/2 with h2load: the gateway over h2c and TLS h2 against the HTTP/2 Node floor and its own HTTP/1.1 (h2load)';
  if (!commandExists('h2load', ['--version'])) return { title, body: "not available: h2load is not installed (Debian's nghttp2-client package)" };
  const s = ctx.settings;
  const streams = Number(process.env.BENCH_H2_STREAMS ?? 10);
  const conns = Number(process.env.BENCH_H2_CONNECTIONS ?? Math.max(1, Math.round(s.connections / streams)));
  const h2 = ['-c', String(conns), '-m', String(streams)];
  const h1 = ['--h1', '-c', String(conns * streams), '-m', '1'];
  const cert = join(ctx.tmp, 'h2load-cert.pem');
  const key = join(ctx.tmp, 'h2load-key.pem');
  const own: Proc[] = [];
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
    const flags = ['--enable_http2', '--handler=proxy', '--namespace=go.mesh.srv'];
    const plain = await startMesh(ctx, 'mesh-h2c', 'api', flags);
    own.push(plain.proc);
    const tls = await startMesh(ctx, 'mesh-h2-tls', 'api', [...flags, '--enable_tls', `--tls_cert_file=${cert}`, `--tls_key_file=${key}`]);
    own.push(tls.proc);
    const floor = async (name: string, extra: string[]) => {
      const port = await freePort();
      const proc = tsxProcess(ctx, name, 'servers/node-floor-h2.ts', [String(port), String(ctx.backendPort), ...extra]);
      own.push(proc);
      await waitForPort(proc, port, 20000);
      return { proc, port };
    };
    const fPlain = await floor('node-floor-h2c', []);
    const fTls = await floor('node-floor-h2-tls', ['--tls', cert, key]);
    const legs: Leg[] = [
      { id: 'gateway-h2c', label: 'gateway, h2c (prior knowledge)', url: `http://127.0.0.1:${plain.port}${PATH}`, protocol: 'h2c', flags: h2, measured: plain.proc },
      { id: 'gateway-h2', label: 'gateway, h2 over TLS (ALPN)', url: `https://127.0.0.1:${tls.port}${PATH}`, protocol: 'h2', flags: h2, measured: tls.proc },
      { id: 'gateway-h1', label: 'gateway, HTTP/1.1 (`h2load --h1`, same process as h2c)', url: `http://127.0.0.1:${plain.port}${PATH}`, protocol: 'http/1.1', flags: h1, measured: plain.proc },
      { id: 'floor-h2c', label: 'Node floor, h2c (servers/node-floor-h2.ts)', url: `http://127.0.0.1:${fPlain.port}${PATH}`, protocol: 'h2c', flags: h2, measured: fPlain.proc },
      { id: 'floor-h2', label: 'Node floor, h2 over TLS', url: `https://127.0.0.1:${fTls.port}${PATH}`, protocol: 'h2', flags: h2, measured: fTls.proc },
    ];
    if (s.pin) for (const l of legs) pin([l.measured.pid], s.pin.proxy);
    for (const l of legs) await check(l);
    ctx.log(`h2load rows: ${legs.length} legs answer; warming up`);
    for (const l of legs) if (s.warmup > 0) await h2load(ctx, l, s.warmup);
    const maxOther = Number(process.env.BENCH_MAX_OTHER ?? 50);
    const rounds = new Map<string, LegRound[]>(legs.map((l) => [l.id, []]));
    const failed = new Map<string, string>();
    for (let i = 0; i < s.rounds; i++) {
      const order = legs.map((_, k) => legs[(k + i) % legs.length]!);
      for (const l of order) {
        if (failed.has(l.id)) continue;
        await h2load(ctx, l, 1);
        try {
          // As the main table: a round disturbed by other processes is measured again once, the quieter kept.
          let r = await round(ctx, l, s.duration);
          if (r.foreignPct > maxOther) {
            const again = await round(ctx, l, s.duration);
            if (again.foreignPct < r.foreignPct) r = again;
          }
          rounds.get(l.id)!.push(r);
        } catch (err) {
          failed.set(l.id, (err as Error).message);
        }
      }
      ctx.log(`h2load rows: round ${i + 1}/${s.rounds} done`);
    }
    const rowOf = (l: Leg): string[] => {
      const rr = rounds.get(l.id)!;
      if (failed.has(l.id) || rr.length === 0) return [l.label, 'failed', failed.get(l.id) ?? 'no round', '', '', '', '', ''];
      const rps = rr.map((r) => r.rps);
      const errors = rr.reduce((a, r) => a + r.failed + r.errored + r.timeout + r.non2xx, 0);
      return [
        l.label,
        rr[0]!.protocol ?? '?',
        `${int(median(rps))} (${int(min(rps))}–${int(max(rps))})`,
        fixed(median(rr.map((r) => r.p50ms))),
        fixed(median(rr.map((r) => r.p99ms))),
        fixed(median(rr.map((r) => r.cpuUsPerReq)), 1),
        String(errors),
        fixed(median(rr.map((r) => r.foreignPct)), 0),
      ];
    };
    const table = markdownTable(['leg', 'protocol', 'req/s median (min–max)', 'p50 ms', 'p99 ms', 'CPU µs/req', 'errors', 'other load %CPU'], legs.map(rowOf), ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r']);
    const r = (id: string) => rounds.get(id);
    const line = (text: string, a: string, b: string) => {
      const rps = paired(r(a), r(b), (x) => x.rps);
      const cpu = paired(r(a), r(b), (x) => x.cpuUsPerReq);
      return `- ${text}: req/s ${Number.isFinite(rps) ? `${rps.toFixed(2)}×` : '–'}, CPU per request ${Number.isFinite(cpu) ? `${cpu.toFixed(2)}×` : '–'}`;
    };
    const ratios = [
      line('gateway h2c ÷ Node floor h2c', 'gateway-h2c', 'floor-h2c'),
      line('gateway h2 over TLS ÷ Node floor h2 over TLS', 'gateway-h2', 'floor-h2'),
      line('gateway h2c ÷ the same gateway over HTTP/1.1', 'gateway-h2c', 'gateway-h1'),
      line('gateway h2 over TLS ÷ gateway h2c', 'gateway-h2', 'gateway-h2c'),
    ];
    for (const t of ratios) ctx.log(`h2load rows: ${t.slice(2)}`);
    const body = [
      `h2load ${h2loadVersion()}, POST \`${REQUEST_BODY}\` to \`${PATH}\` (the backend's JSON back): the h2 legs \`-c ${conns} -m ${streams}\` (${conns * streams} streams in flight), the HTTP/1.1 leg \`--h1 -c ${conns * streams} -m 1\`; ${s.rounds} round(s) of ${s.duration} s per leg, interleaved, each after 1 s of h2load of its own; a round during which other processes used more than ${maxOther}% of a CPU is measured again once and the quieter one kept. The gateway is \`mesh api --enable_http2 --handler=proxy --namespace=go.mesh.srv\` (with \`--enable_tls\` and a certificate made for the run for TLS); the HTTP/1.1 leg loads the h2c gateway's process. CPU: the measured process (pinned like the main table's proxies when pinning is on). Ratios: medians of per-round ratios.`,
      '',
      table,
      '',
      ...ratios,
    ].join('\n');
    return { title, body };
  } catch (err) {
    if (err instanceof NotAvailable) return { title, body: `not available: ${err.message}` };
    return { title, body: `failed: ${(err as Error).message}` };
  } finally {
    await Promise.all(own.map((p) => p.stop()));
  }
}

function h2loadVersion(): string {
  try {
    return execFileSync('h2load', ['--version'], { encoding: 'utf8' }).trim().replace(/^h2load /, '');
  } catch {
    return '?';
  }
}
