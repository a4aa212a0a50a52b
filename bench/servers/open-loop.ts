/**
 * An open-loop load generator (the cost bench, bench/cost.ts): requests are sent at a fixed rate
 * whatever the answers do, and each latency is counted from the time the request was due, not
 * from when it could be sent, so a slow answer is not hidden by the requests it held back
 * (coordinated omission). A separate process, so the harness's event loop never shares one with
 * the load.
 *
 * Usage: node --import tsx bench/servers/open-loop.ts JSON
 *   {"kind":"http","url":"http://127.0.0.1:8081/bench/call","body":"...","connections":32,"rate":1000,"seconds":10}
 *   {"kind":"grpc","target":"127.0.0.1:50051","path":"/bench.Bench/Call","metadata":{"mesh-service":"go.mesh.srv.bench"},"rate":1000,"seconds":10}
 * Prints one JSON line: {sent, ok, failed, late, p50, p90, p99, max} (latencies in µs; `late`: the
 * requests that were due but not yet sent when the run ended, or still unanswered 5 s after it).
 *
 * With `"tag":"T"` (HTTP only; the tap bench, bench/tap-cost.ts) request n goes to the URL with
 * `tag=T&i=n` added to its query, so that each request can be told apart where it is seen, and
 * the line also holds `sentAt` and `doneAt`: for each request n, when it was sent and when its
 * answer ended (or failed), in µs of the monotonic clock (process.hrtime, the same in every
 * process of the machine); -1 for a request not sent or not answered.
 */
import { Pool } from 'undici';
import * as grpc from '@grpc/grpc-js';

interface Spec {
  kind: 'http' | 'grpc';
  url?: string;
  body?: string;
  connections?: number;
  target?: string;
  path?: string;
  metadata?: Record<string, string>;
  tag?: string;
  rate: number;
  seconds: number;
}

const spec = JSON.parse(process.argv[2] ?? '{}') as Spec;
if (!(spec.rate > 0) || !(spec.seconds > 0)) throw new Error('open-loop: rate and seconds must be > 0');
if (spec.tag !== undefined && spec.kind !== 'http') throw new Error('open-loop: a tag is for HTTP loads only');

/** Sends request n; resolves true on a good answer, else what went wrong (an HTTP status, a gRPC status code and message). */
type Send = (n: number) => Promise<true | string>;

function httpSender(): { send: Send; close: () => Promise<void> } {
  const url = new URL(spec.url!);
  const pool = new Pool(url.origin, { connections: spec.connections ?? 32, pipelining: 1, keepAliveTimeout: 60_000 });
  const body = spec.body ?? '';
  const base = url.pathname + url.search;
  const tagged = spec.tag === undefined ? undefined : `${url.search ? '&' : '?'}tag=${encodeURIComponent(spec.tag)}&i=`;
  const send: Send = async (n) => {
    const res = await pool.request({ method: 'POST', path: tagged === undefined ? base : base + tagged + n, headers: { 'content-type': 'application/json' }, body });
    await res.body.dump();
    return res.statusCode === 200 || `HTTP ${res.statusCode}`;
  };
  return { send, close: () => pool.close() };
}

function grpcSender(): { send: Send; close: () => Promise<void> } {
  const client = new grpc.Client(spec.target!, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(spec.metadata ?? {})) md.set(k, v);
  const request = Buffer.from(JSON.stringify({ name: 'bench', id: 1 }));
  const send: Send = () =>
    new Promise((resolve) =>
      client.makeUnaryRequest<Buffer, Buffer>(spec.path!, (b) => b, (b) => b, request, md, { deadline: Date.now() + 10_000 }, (err) => resolve(err ? `gRPC ${err.code} ${err.details}` : true)),
    );
  return { send, close: async () => client.close() };
}

async function main(): Promise<void> {
  const { send, close } = spec.kind === 'grpc' ? grpcSender() : httpSender();
  const total = Math.round(spec.rate * spec.seconds);
  const intervalNs = 1e9 / spec.rate;
  const latencies: number[] = [];
  let ok = 0;
  let failed = 0;
  /** What the failed ones got, and how many each (at most 20 kinds). */
  const errors: Record<string, number> = {};
  const count = (what: string) => {
    if (what in errors || Object.keys(errors).length < 20) errors[what] = (errors[what] ?? 0) + 1;
  };
  let sent = 0;
  let pending = 0;
  const start = process.hrtime.bigint();
  const due = (i: number) => start + BigInt(Math.round(i * intervalNs));
  const sentAt = spec.tag === undefined ? undefined : new Array<number>(total).fill(-1);
  const doneAt = spec.tag === undefined ? undefined : new Array<number>(total).fill(-1);
  const micros = () => Math.round(Number(process.hrtime.bigint()) / 1000);
  let allSent!: () => void;
  const done = new Promise<void>((resolve) => (allSent = resolve));
  const fire = (i: number) => {
    const at = due(i);
    pending++;
    if (sentAt) sentAt[i] = micros();
    send(i).then(
      (good) => {
        latencies.push(Number(process.hrtime.bigint() - at) / 1000);
        if (good === true) ok++;
        else {
          failed++;
          count(good);
        }
      },
      (err: Error) => {
        failed++;
        count(err.message.split('\n')[0]!.slice(0, 120));
      },
    ).finally(() => {
      if (doneAt) doneAt[i] = micros();
      pending--;
      if (sent === total && pending === 0) allSent();
    });
  };
  // Every millisecond (or as soon as the loop comes back), send what is due by now.
  const tick = () => {
    const now = process.hrtime.bigint();
    while (sent < total && due(sent) <= now) fire(sent++);
    if (sent < total) setTimeout(tick, 1);
    else if (pending === 0) allSent();
  };
  tick();
  const grace = setTimeout(() => allSent(), spec.seconds * 1000 + 5000);
  await done;
  clearTimeout(grace);
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]! : 0);
  const line = JSON.stringify({ sent, ok, failed, late: total - ok - failed, p50: pct(50), p90: pct(90), p99: pct(99), max: latencies.at(-1) ?? 0, errors, ...(sentAt ? { sentAt, doneAt } : {}) }) + '\n';
  await close();
  // Exit once the line is written: a line larger than the pipe's buffer (the per-request times) is written in parts.
  process.stdout.write(line, () => process.exit(0));
}

void main();
