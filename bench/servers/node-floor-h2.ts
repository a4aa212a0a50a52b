/**
 * The HTTP/2 "Node floor": the least a Node reverse proxy speaking HTTP/2 to its clients can do.
 * node:http2's compatibility API in front (the API the gateway's `--enable_http2` builds on), h2c
 * by prior knowledge, or h2 by ALPN on TLS with `--tls CERT KEY`; one undici Pool (keep-alive,
 * HTTP/1.1) behind; request and answer streamed through, pseudo-headers and hop-by-hop headers
 * dropped. No routing, no registry, no stats, no logs.
 * Usage: node --import tsx bench/servers/node-floor-h2.ts PORT UPSTREAM_PORT [--tls CERT_FILE KEY_FILE]
 */
import { readFileSync } from 'node:fs';
import { createServer, createSecureServer, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import { Pool } from 'undici';
import { forward } from './hop-headers.js';
import { installProfileHook } from './prof-hook.js';

installProfileHook('node-floor-h2');

const port = Number(process.argv[2]);
const upstream = `http://127.0.0.1:${Number(process.argv[3])}`;
const tls = process.argv[4] === '--tls' ? { cert: readFileSync(process.argv[5]!), key: readFileSync(process.argv[6]!) } : undefined;
const pool = new Pool(upstream, { connections: 128 });

/** The request's end-to-end headers: no pseudo-header (`:method`, `:path`, ...), no hop-by-hop one. */
function requestHeaders(req: Http2ServerRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(forward(req.headers))) if (!k.startsWith(':') && v !== undefined) out[k] = String(v);
  return out;
}

const handler = (req: Http2ServerRequest, res: Http2ServerResponse) => {
  pool
    .request({ path: req.url, method: req.method as 'POST', headers: requestHeaders(req), body: req.method === 'GET' || req.method === 'HEAD' ? null : req })
    .then(({ statusCode, headers, body }) => {
      res.writeHead(statusCode, forward(headers));
      body.pipe(res as unknown as NodeJS.WritableStream);
    })
    .catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
};

const server = tls ? createSecureServer({ ...tls, allowHTTP1: false }, handler) : createServer(handler);
server.listen(port, '127.0.0.1');
const stop = () => {
  server.close();
  void pool.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
