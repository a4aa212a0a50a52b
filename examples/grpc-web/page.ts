/**
 * Serves the gRPC-Web example's page (README.md beside it): index.html, with the gateway's URL in
 * it, and client.js bundled for the browser with esbuild, from http://127.0.0.1:<--port>.
 *
 *   npx tsx examples/grpc-web/page.ts --port=8000 --gateway=http://127.0.0.1:8080
 *
 * Prints `page on http://127.0.0.1:<port>` once listening (`--port=0`: any free port).
 */
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { build } from 'esbuild';

const arg = (name: string, dflt: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt;
const gateway = arg('gateway', 'http://127.0.0.1:8080');
const here = import.meta.dirname;

const bundle = await build({ entryPoints: [join(here, 'client.js')], bundle: true, format: 'esm', write: false, loader: { '.proto': 'text' }, logLevel: 'warning' });
const script = bundle.outputFiles[0]!.text;
const page = readFileSync(join(here, 'index.html'), 'utf8').replace('GATEWAY', gateway.replace(/[^A-Za-z0-9:/.[\]_-]/g, ''));

const server = createServer((req, res) => {
  req.resume();
  const path = new URL(req.url ?? '/', 'http://page').pathname;
  if (path === '/') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
  } else if (path === '/client.js') {
    res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(script);
  } else {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
  }
});
server.listen(Number(arg('port', '8000')), '127.0.0.1', () => console.log(`page on http://127.0.0.1:${(server.address() as AddressInfo).port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
