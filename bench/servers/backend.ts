/**
 * The small JSON backend every row calls: a bare node:http server (keep-alive, Node's defaults).
 * Any POST (or GET) gets the same small JSON. It also serves the mesh RPC wire protocol
 * (DESIGN section 5), which is the same thing: `POST /` with Mesh-Service/Mesh-Endpoint headers
 * gets the same JSON with Content-Type application/json.
 * Usage: node --import tsx bench/servers/backend.ts PORT [--mtls CA_DIR DIST_DIR]
 *
 * With --mtls it serves mutual TLS as a mesh node does: a workload certificate for
 * go.mesh.srv.bench issued by the mesh CA in CA_DIR (through the build in DIST_DIR), a client
 * certificate required and verified against the CA's roots.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { ANSWER_BODY } from '../lib/payload.js';

const port = Number(process.argv[2] ?? 0);
const answer = Buffer.from(ANSWER_BODY);
const headers = { 'content-type': 'application/json', 'content-length': String(answer.length) };

const handler = (req: IncomingMessage, res: ServerResponse) => {
  // Read (and drop) the request body before answering, as a real handler would.
  req.on('data', () => {});
  req.on('end', () => {
    res.writeHead(200, headers);
    res.end(answer);
  });
};

async function serverOf(): Promise<ReturnType<typeof createServer>> {
  if (process.argv[3] !== '--mtls') return createServer(handler);
  const [caDir, dist] = [process.argv[4]!, process.argv[5]!];
  const { openWorkloadTls } = (await import(pathToFileURL(join(dist, 'src/tls/workload/index.js')).href)) as typeof import('../../src/tls/workload/index.js');
  const workload = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 24 * 3600_000, service: 'go.mesh.srv.bench', log: pino({ level: 'warn' }) });
  const pems = workload.contextOptions();
  return createHttpsServer({ cert: pems.cert, key: pems.key, ca: [...pems.ca], requestCert: true, rejectUnauthorized: true }, handler) as unknown as ReturnType<typeof createServer>;
}

const server = await serverOf();
server.listen(port, '127.0.0.1');
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
