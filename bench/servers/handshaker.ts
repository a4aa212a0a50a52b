/**
 * The handshake rate of a mutual TLS listener: opens TLS connections to 127.0.0.1:PORT with a
 * workload certificate of the mesh CA in CA_DIR (identity mesh.cli, issued through the build in
 * DIST_DIR), CONCURRENCY at a time for SECONDS, each closed once its handshake is done. With
 * `resume`, each connection offers the session of the one before (TLS 1.3 tickets); with `full`,
 * none. Prints one JSON line: {"handshakes":N,"resumed":N,"failed":N,"seconds":S}.
 * Usage: node --import tsx bench/servers/handshaker.ts PORT CA_DIR DIST_DIR SECONDS CONCURRENCY resume|full
 */
import { connect, type TLSSocket } from 'node:tls';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';

const [port, caDir, dist, seconds, concurrency, mode] = process.argv.slice(2) as [string, string, string, string, string, string];
const { openWorkloadTls } = (await import(pathToFileURL(join(dist, 'src/tls/workload/index.js')).href)) as typeof import('../../src/tls/workload/index.js');
const workload = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 3600_000, service: 'mesh.cli', log: pino({ level: 'warn' }) });
const resume = mode === 'resume';
const until = Date.now() + Number(seconds) * 1000;
let handshakes = 0;
let resumed = 0;
let failed = 0;
let session: Buffer | undefined;

function one(): Promise<void> {
  return new Promise((resolve) => {
    const socket: TLSSocket = connect({ host: '127.0.0.1', port: Number(port), secureContext: workload.secureContext(), rejectUnauthorized: false, ...(resume && session ? { session } : {}) }, () => {
      handshakes++;
      if (socket.isSessionReused()) resumed++;
      socket.end();
    });
    if (resume) socket.once('session', (s: Buffer) => (session = s));
    socket.on('error', () => {
      failed++;
      resolve();
    });
    socket.on('close', () => resolve());
  });
}

async function worker(): Promise<void> {
  while (Date.now() < until) await one();
}

const started = Date.now();
await Promise.all(Array.from({ length: Number(concurrency) }, worker));
process.stdout.write(JSON.stringify({ handshakes, resumed, failed, seconds: (Date.now() - started) / 1000 }) + '\n');
await workload.close();
process.exit(0);
