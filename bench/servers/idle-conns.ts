/**
 * N idle HTTP/1.1 keep-alive connections to one server: each connection sends one POST (so it is
 * a real keep-alive connection that went through the server's parser), reads the whole answer,
 * then stays open and silent. At most CONCURRENCY connects in flight at once. Prints
 * "ready {json}" once all have answered (or failed); on each stdin line "count" prints
 * {"open":n,"answered":n,"failed":n,"closed":n}. Raise `ulimit -n` before starting it.
 * Usage: node --import tsx bench/servers/idle-conns.ts PORT PATH N [BODY]
 */
import { connect, type Socket } from 'node:net';
import { createInterface } from 'node:readline';

const port = Number(process.argv[2]);
const path = process.argv[3] ?? '/';
const n = Number(process.argv[4] ?? 10000);
const body = process.argv[5] ?? '{}';
const CONCURRENCY = Number(process.env.BENCH_IDLE_CONCURRENCY ?? 200);
const request = Buffer.from(
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: keep-alive\r\n\r\n${body}`,
);

const sockets: Socket[] = [];
let answered = 0;
let failed = 0;
let closed = 0;
let started = 0;
let settled = 0;
const firstErrors: string[] = [];

/** True once buf holds one whole HTTP response (Content-Length or chunked). */
function complete(buf: string): boolean {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const head = buf.slice(0, end).toLowerCase();
  const len = /\r\ncontent-length:\s*(\d+)/.exec(head);
  if (len) return Buffer.byteLength(buf.slice(end + 4)) >= Number(len[1]);
  if (head.includes('transfer-encoding: chunked')) return buf.endsWith('\r\n0\r\n\r\n');
  return true;
}

function open(): void {
  if (started >= n) return;
  started++;
  const sock = connect({ port, host: '127.0.0.1' });
  let buf = '';
  let done = false;
  const finish = (ok: boolean, why?: string) => {
    if (done) return;
    done = true;
    if (ok) answered++;
    else {
      failed++;
      if (why && firstErrors.length < 5) firstErrors.push(why);
    }
    settled++;
    if (settled === n) process.stdout.write(`ready ${JSON.stringify({ answered, failed, errors: firstErrors })}\n`);
    else open();
  };
  sock.setNoDelay(true);
  sock.on('connect', () => sock.write(request));
  sock.on('data', (chunk: Buffer) => {
    if (done) return;
    buf += chunk.toString('latin1');
    if (complete(buf)) finish(/^HTTP\/1\.1 2\d\d/.test(buf), buf.split('\r\n')[0]);
  });
  sock.on('error', (err) => finish(false, err.message));
  sock.on('close', () => {
    closed++;
    finish(false, 'closed before the answer');
  });
  sockets.push(sock);
}

for (let i = 0; i < Math.min(CONCURRENCY, n); i++) open();

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() === 'count') {
    const openNow = sockets.filter((s) => !s.destroyed && s.readyState === 'open').length;
    process.stdout.write(JSON.stringify({ open: openNow, answered, failed, closed }) + '\n');
  }
});
const stop = () => {
  for (const s of sockets) s.destroy();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
