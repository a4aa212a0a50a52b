/**
 * The small JSON backend every row calls: a bare node:http server (keep-alive, Node's defaults).
 * Any POST (or GET) gets the same small JSON. It also serves the mesh RPC wire protocol
 * (DESIGN section 5), which is the same thing: `POST /` with Mesh-Service/Mesh-Endpoint headers
 * gets the same JSON with Content-Type application/json.
 * Usage: node --import tsx bench/servers/backend.ts PORT
 */
import { createServer } from 'node:http';
import { ANSWER_BODY } from '../lib/payload.js';

const port = Number(process.argv[2] ?? 0);
const answer = Buffer.from(ANSWER_BODY);
const headers = { 'content-type': 'application/json', 'content-length': String(answer.length) };

const server = createServer((req, res) => {
  // Read (and drop) the request body before answering, as a real handler would.
  req.on('data', () => {});
  req.on('end', () => {
    res.writeHead(200, headers);
    res.end(answer);
  });
});
server.listen(port, '127.0.0.1');
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
