/**
 * The "Node floor": the least a Node reverse proxy can do. node:http in front, one undici Pool
 * (keep-alive) behind, request and answer streamed through, hop-by-hop headers dropped. No
 * routing, no registry, no stats, no logs.
 * Usage: node --import tsx bench/servers/node-floor.ts PORT UPSTREAM_PORT
 */
import { createServer } from 'node:http';
import { forward } from './hop-headers.js';
import { Pool } from 'undici';
import { installProfileHook } from './prof-hook.js';

installProfileHook('node-floor');

const port = Number(process.argv[2]);
const upstream = `http://127.0.0.1:${Number(process.argv[3])}`;
const pool = new Pool(upstream, { connections: 128 });

const server = createServer((req, res) => {
  pool
    .request({ path: req.url ?? '/', method: req.method as 'POST', headers: forward(req.headers) as Record<string, string>, body: req.method === 'GET' || req.method === 'HEAD' ? null : req })
    .then(({ statusCode, headers, body }) => {
      res.writeHead(statusCode, forward(headers));
      body.pipe(res);
    })
    .catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
});
server.listen(port, '127.0.0.1');
const stop = () => {
  server.close();
  void pool.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
