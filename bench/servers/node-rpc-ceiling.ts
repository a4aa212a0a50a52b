/**
 * A reference, not a product: how little CPU a gateway's rpc path can cost on Node. node:http in
 * front; the small body is buffered; the call is sent in the mesh wire protocol (POST / with
 * Mesh-Service / Mesh-Endpoint) through undici's low-level Pool.dispatch() with a plain handler
 * object: no AbortController, no per-request timer (the pool's headersTimeout/bodyTimeout bound
 * it), no Readable for the answer; headers precomputed. No routing beyond one fixed target, no
 * stats. The gap between this row and `mesh-rpc` is what the mesh code itself costs.
 * Usage: node --import tsx bench/servers/node-rpc-ceiling.ts PORT UPSTREAM_PORT
 */
import { createServer, type ServerResponse } from 'node:http';
import { Pool } from 'undici';
import { installProfileHook } from './prof-hook.js';
import { BACKEND_SERVICE } from '../lib/payload.js';

installProfileHook('node-rpc-ceiling');
const port = Number(process.argv[2]);
const pool = new Pool(`http://127.0.0.1:${Number(process.argv[3])}`, { connections: 128, headersTimeout: 5000, bodyTimeout: 5000 });
const EMPTY = Buffer.alloc(0);
/**
 * BENCH_CEILING_MODE (for experiments): dispatch (default); request: Pool.request() and
 * `for await` over the answer; request-abort: the same plus an AbortController and a setTimeout
 * per request (the shape of src/core/transport/rpc.ts sendRpc); request-signal: the AbortController
 * only; request-timer: the timer only.
 */
const MODE = process.env.BENCH_CEILING_MODE ?? 'dispatch';

async function viaRequest(body: Buffer, res: ServerResponse): Promise<void> {
  let controller: AbortController | undefined;
  let timer: NodeJS.Timeout | undefined;
  if (MODE === 'request-abort' || MODE === 'request-signal') controller = new AbortController();
  if (MODE === 'request-abort' || MODE === 'request-timer') timer = setTimeout(() => controller?.abort(), 5000);
  try {
    const up = await pool.request({
      path: '/',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mesh-service': BACKEND_SERVICE, 'mesh-endpoint': 'Bench.Call' },
      body,
      signal: controller?.signal,
    });
    const chunks: Buffer[] = [];
    for await (const c of up.body) chunks.push(c as Buffer);
    const out = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
    res.end(out);
  } catch {
    if (!res.headersSent) res.writeHead(502, { 'content-length': 0 });
    res.end();
  } finally {
    if (timer) clearTimeout(timer);
  }
}

class Answer {
  private chunks: Buffer[] = [];
  private status = 0;
  constructor(private readonly res: ServerResponse) {}
  onConnect(): void {}
  onHeaders(status: number): boolean {
    this.status = status;
    return true;
  }
  onData(chunk: Buffer): boolean {
    this.chunks.push(chunk);
    return true;
  }
  onComplete(): void {
    const body = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.res.writeHead(this.status >= 200 && this.status < 300 ? 200 : 502, { 'content-type': 'application/json', 'content-length': body.length });
    this.res.end(body);
  }
  onError(): void {
    if (!this.res.headersSent) this.res.writeHead(502, { 'content-length': 0 });
    this.res.end();
  }
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 0 ? EMPTY : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    if (MODE === 'dispatch') {
      pool.dispatch(
        {
          origin: pool as never,
          path: '/',
          method: 'POST',
          headers: ['content-type', 'application/json', 'mesh-service', BACKEND_SERVICE, 'mesh-endpoint', 'Bench.Call', 'content-length', String(body.length)],
          body,
        },
        new Answer(res) as never,
      );
    } else void viaRequest(body, res);
  });
});
server.listen(port, '127.0.0.1');
const stop = () => {
  server.close();
  void pool.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
