/**
 * The stronger "Node floor": node:http in front, one undici Pool behind, and the answer written
 * straight into the response with `Pool.stream()` (no intermediate Readable as `request()` has):
 * the request body is piped to the upstream, the answer streamed back, hop-by-hop headers dropped.
 * No routing, no registry, no stats, no logs.
 * Usage: node --import tsx bench/servers/node-floor-stream.ts PORT UPSTREAM_PORT
 */
import { createServer, type ServerResponse } from 'node:http';
import { forward } from './hop-headers.js';
import { Pool } from 'undici';
import { installProfileHook } from './prof-hook.js';

installProfileHook('node-floor-stream');

const port = Number(process.argv[2]);
const upstream = `http://127.0.0.1:${Number(process.argv[3])}`;
const pool = new Pool(upstream, { connections: 128 });

function factory(this: void, { statusCode, headers, opaque }: { statusCode: number; headers: Record<string, string | string[] | undefined>; opaque: unknown }) {
  const res = opaque as ServerResponse;
  res.writeHead(statusCode, forward(headers));
  return res;
}

const server = createServer((req, res) => {
  pool.stream(
    {
      path: req.url ?? '/',
      method: req.method as 'POST',
      headers: forward(req.headers) as Record<string, string>,
      body: req.method === 'GET' || req.method === 'HEAD' ? null : req,
      opaque: res,
    },
    factory,
    (err) => {
      if (!err) return;
      if (!res.headersSent) {
        res.writeHead(502);
        res.end();
      } else res.destroy(err);
    },
  );
});
server.listen(port, '127.0.0.1');
const stop = () => {
  server.close();
  void pool.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
