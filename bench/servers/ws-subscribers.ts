/**
 * N WebSocket subscribers of the sidecar's broker: connect to URL, count frames. At most
 * BENCH_WS_CONCURRENCY (default 200) connects in flight at once, so thousands can be opened
 * without overflowing the server's accept backlog. Prints "ready" once every connection has
 * opened; on each stdin line "count" prints the counts as JSON ({"counts":[...],"bytes":n,"open":n});
 * on "total" a summary without the per-connection list ({"sum":n,"min":n,"max":n,"bytes":n,"open":n,"failed":n}).
 * Raise `ulimit -n` before starting thousands.
 * Usage: node --import tsx bench/servers/ws-subscribers.ts WS_URL N
 */
import { WebSocket } from 'ws';
import { createInterface } from 'node:readline';

const url = process.argv[2]!;
const n = Number(process.argv[3] ?? 10);
const CONCURRENCY = Number(process.env.BENCH_WS_CONCURRENCY ?? 200);
const counts = new Array<number>(n).fill(0);
let bytes = 0;
let open = 0;
let failed = 0;
let started = 0;
const sockets: WebSocket[] = [];

function next(): void {
  if (started >= n) return;
  const i = started++;
  const ws = new WebSocket(url, { perMessageDeflate: false });
  let settled = false;
  ws.on('open', () => {
    settled = true;
    if (++open === n) process.stdout.write('ready\n');
    next();
  });
  ws.on('message', (data: Buffer) => {
    counts[i]!++;
    bytes += data.length;
  });
  ws.on('error', (err) => {
    if (failed < 5) process.stderr.write(`subscriber ${i}: ${err.message}\n`);
    if (!settled) {
      settled = true;
      failed++;
      next();
    }
  });
  ws.on('close', (code) => {
    if (n <= 100) process.stderr.write(`subscriber ${i}: closed ${code}\n`);
  });
  sockets.push(ws);
}
for (let k = 0; k < Math.min(CONCURRENCY, n); k++) next();

createInterface({ input: process.stdin }).on('line', (line) => {
  const cmd = line.trim();
  const openNow = () => sockets.filter((s) => s.readyState === WebSocket.OPEN).length;
  if (cmd === 'count') process.stdout.write(JSON.stringify({ counts, bytes, open: openNow() }) + '\n');
  else if (cmd === 'total') {
    let sum = 0;
    let lo = Infinity;
    let hi = 0;
    for (const c of counts) {
      sum += c;
      if (c < lo) lo = c;
      if (c > hi) hi = c;
    }
    process.stdout.write(JSON.stringify({ sum, min: lo, max: hi, bytes, open: openNow(), failed }) + '\n');
  }
});
const stop = () => {
  for (const s of sockets) s.terminate();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
