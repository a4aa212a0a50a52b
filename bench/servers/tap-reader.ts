/**
 * A tap client for the tap bench (bench/tap-cost.ts): reads an admin `/tap` NDJSON stream, as
 * `mesh tap` or `curl -N` would, in a process of its own, and keeps for each event of the tagged
 * requests (query `tag=T&i=n`, bench/servers/open-loop.ts) when it arrived.
 *
 * Usage: node --import tsx bench/servers/tap-reader.ts JSON
 *   {"url":"http://127.0.0.1:9901/tap?path_prefix=/bench&rate=1000","tag":"r1"}
 * Prints `{"ready":true}` once the tap's 200 head has come (the tap is attached then), and, when
 * a line `stop` comes on stdin, one JSON line and exits:
 *   {events, dropped, other, duplicates, bad, arrivals: [[n, µs, status], ...]}
 * `events`: events of the tag (each request counted once; `duplicates` more); `dropped`: the sum of
 * the stream's `{"dropped":N}` lines; `other`: events of other requests; `bad`: lines that are not
 * JSON; arrival times in µs of the monotonic clock (process.hrtime), taken when the chunk holding
 * the line was read.
 */
import { get } from 'node:http';
import { createInterface } from 'node:readline';

interface Spec {
  url: string;
  tag: string;
}

const spec = JSON.parse(process.argv[2] ?? '{}') as Spec;
if (!spec.url || !spec.tag) throw new Error('tap-reader: url and tag are required');

const arrivals: Array<[number, number, number]> = [];
const seen = new Set<number>();
let dropped = 0;
let other = 0;
let duplicates = 0;
let bad = 0;

function take(line: string, at: number): void {
  if (line === '') return;
  let e: { dropped?: number; query?: string | null; status?: number };
  try {
    e = JSON.parse(line) as typeof e;
  } catch {
    bad++;
    return;
  }
  if (typeof e.dropped === 'number') {
    dropped += e.dropped;
    return;
  }
  const q = new URLSearchParams(e.query ?? '');
  const n = Number(q.get('i'));
  if (q.get('tag') !== spec.tag || !Number.isInteger(n)) {
    other++;
    return;
  }
  if (seen.has(n)) {
    duplicates++;
    return;
  }
  seen.add(n);
  arrivals.push([n, at, e.status ?? 0]);
}

const req = get(spec.url, { agent: false }, (res) => {
  if (res.statusCode !== 200) {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (c: string) => (body += c));
    res.on('end', () => {
      process.stderr.write(`tap-reader: ${res.statusCode} ${body}\n`);
      process.exit(1);
    });
    return;
  }
  process.stdout.write('{"ready":true}\n');
  let rest = '';
  res.setEncoding('utf8');
  res.on('data', (chunk: string) => {
    const at = Math.round(Number(process.hrtime.bigint()) / 1000);
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) take(line, at);
  });
});
req.on('error', (err) => {
  process.stderr.write(`tap-reader: ${err.message}\n`);
  process.exit(1);
});

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() !== 'stop') return;
  process.stdout.write(JSON.stringify({ events: seen.size, dropped, other, duplicates, bad, arrivals }) + '\n', () => {
    req.destroy();
    process.exit(0);
  });
});
