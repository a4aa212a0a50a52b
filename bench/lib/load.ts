/**
 * Load from a separate process: wrk when installed (Lua script for the POST body), else the
 * autocannon CLI in a child process (never in the harness's own event loop).
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { commandExists } from './proc.js';

export type LoadTool = 'wrk' | 'autocannon';

export interface LoadOptions {
  url: string;
  durationS: number;
  connections: number;
  threads: number;
  method: 'POST' | 'GET';
  body?: string;
  contentType?: string;
  /** Working directory for generated scripts. */
  tmp: string;
  /** CPU list (taskset -c) for the load generator. */
  cpus?: string;
}

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  /** Answers outside 2xx/3xx. */
  non2xx: number;
  /** Socket errors and timeouts. */
  errors: number;
}

export function pickTool(): LoadTool {
  const forced = process.env.BENCH_LOADGEN;
  if (forced === 'wrk' || forced === 'autocannon') return forced;
  return commandExists('wrk', ['-v']) ? 'wrk' : 'autocannon';
}

export async function runLoad(tool: LoadTool, o: LoadOptions): Promise<LoadResult> {
  return tool === 'wrk' ? runWrk(o) : runAutocannon(o);
}

function run(cmd: string, args: string[], timeoutMs: number, cpus?: string): Promise<{ code: number | null; out: string; err: string }> {
  if (cpus) {
    args = ['-c', cpus, cmd, ...args];
    cmd = 'taskset';
  }
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

/** One Lua script per distinct request (method, body, content type). */
const scripts = new Map<string, string>();

function luaString(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

async function runWrk(o: LoadOptions): Promise<LoadResult> {
  const lines = [`wrk.method = ${luaString(o.method)}`];
  if (o.body !== undefined) lines.push(`wrk.body = ${luaString(o.body)}`);
  if (o.contentType) lines.push(`wrk.headers["Content-Type"] = ${luaString(o.contentType)}`);
  const text = lines.join('\n') + '\n';
  let script = scripts.get(text);
  if (!script) {
    script = join(o.tmp, `wrk-${process.pid}-${scripts.size}.lua`);
    writeFileSync(script, text);
    scripts.set(text, script);
  }
  const args = ['-t', String(o.threads), '-c', String(o.connections), '-d', `${o.durationS}s`, '--latency', '-s', script, o.url];
  const r = await run('wrk', args, (o.durationS + 30) * 1000, o.cpus);
  if (r.code !== 0) throw new Error(`wrk failed (${r.code}): ${r.err || r.out}`);
  return parseWrk(r.out);
}

function toMs(value: string, unit: string): number {
  const v = Number(value);
  switch (unit) {
    case 'us':
      return v / 1000;
    case 'ms':
      return v;
    case 's':
      return v * 1000;
    case 'm':
      return v * 60000;
    default:
      return v;
  }
}

export function parseWrk(out: string): LoadResult {
  const total = /(\d+) requests in ([\d.]+)(us|ms|s|m),/.exec(out);
  if (!total) throw new Error(`cannot parse wrk output:\n${out}`);
  const requests = Number(total[1]);
  const seconds = toMs(total[2]!, total[3]!) / 1000;
  const pct = (p: string): number => {
    const m = new RegExp(`^\\s*${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(out);
    return m ? toMs(m[1]!, m[2]!) : NaN;
  };
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = sock ? sock.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? requests / seconds);
  return { requests, seconds, rps, p50ms: pct('50'), p99ms: pct('99'), non2xx, errors };
}

async function runAutocannon(o: LoadOptions): Promise<LoadResult> {
  const require = createRequire(import.meta.url);
  const bin = join(require.resolve('autocannon/package.json'), '..', 'autocannon.js');
  const args = [bin, '--json', '-c', String(o.connections), '-d', String(Math.max(1, Math.round(o.durationS))), '-m', o.method];
  if (o.contentType) args.push('-H', `Content-Type=${o.contentType}`);
  if (o.body !== undefined) args.push('-b', o.body);
  args.push(o.url);
  const r = await run(process.execPath, args, (o.durationS + 30) * 1000, o.cpus);
  if (r.code !== 0) throw new Error(`autocannon failed (${r.code}): ${r.err}`);
  const json = JSON.parse(r.out.slice(r.out.indexOf('{'))) as {
    requests: { total: number; average: number };
    latency: { p50: number; p99: number };
    duration: number;
    non2xx: number;
    errors: number;
    timeouts: number;
  };
  return {
    requests: json.requests.total,
    seconds: json.duration,
    rps: json.requests.total / json.duration,
    p50ms: json.latency.p50,
    p99ms: json.latency.p99,
    non2xx: json.non2xx,
    errors: json.errors + json.timeouts,
  };
}
