/**
 * N WebSocket subscribers of the sidecar's broker: connect to URL, count frames. Prints "ready"
 * once every connection has opened; on each line "count" read from stdin prints the counts as
 * JSON ({"counts":[...],"bytes":n}).
 * Usage: node --import tsx bench/servers/ws-subscribers.ts WS_URL N
 */
import { WebSocket } from 'ws';
import { createInterface } from 'node:readline';

const url = process.argv[2]!;
const n = Number(process.argv[3] ?? 10);
const counts = new Array<number>(n).fill(0);
let bytes = 0;
let open = 0;
const sockets: WebSocket[] = [];
for (let i = 0; i < n; i++) {
  const ws = new WebSocket(url);
  ws.on('open', () => {
    if (++open === n) process.stdout.write('ready\n');
  });
  ws.on('message', (data: Buffer) => {
    counts[i]!++;
    bytes += data.length;
  });
  ws.on('error', (err) => process.stderr.write(`subscriber ${i}: ${err.message}\n`));
  ws.on('close', (code) => process.stderr.write(`subscriber ${i}: closed ${code}\n`));
  sockets.push(ws);
}
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() === 'count') process.stdout.write(JSON.stringify({ counts, bytes, open: sockets.filter((s) => s.readyState === WebSocket.OPEN).length }) + '\n');
});
const stop = () => {
  for (const s of sockets) s.terminate();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
