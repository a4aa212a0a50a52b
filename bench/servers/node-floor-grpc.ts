/**
 * The gRPC "Node floor": the least a Node proxy can do to pass gRPC calls through, the baseline of
 * the cost bench's gRPC sidecar rows (bench/cost.ts). node:http2's core API on both sides: each
 * stream in front opens a stream on one HTTP/2 session to the upstream; headers, messages and
 * trailers are passed through unread (connection-specific headers dropped), a reset goes both
 * ways. No service lookup, no balancing, no deadlines, no stats, no logs.
 * In front h2c by prior knowledge, or with `--serve-mtls` h2 by ALPN on mutual TLS; behind h2c,
 * or with `--upstream-mtls` h2 on mutual TLS. The certificates are mesh workload certificates of
 * the CA in CA_DIR (made by the build in DIST_DIR), as a sidecar's are.
 * Usage: node --import tsx bench/servers/node-floor-grpc.ts PORT UPSTREAM_PORT [--serve-mtls CA_DIR DIST_DIR] [--upstream-mtls CA_DIR DIST_DIR]
 */
import { connect, createServer, createSecureServer, constants, type ClientHttp2Session, type Http2Server, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { installProfileHook } from './prof-hook.js';

installProfileHook('node-floor-grpc');

const port = Number(process.argv[2]);
const upstreamPort = Number(process.argv[3]);
const flag = (name: string): [string, string] | undefined => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : [process.argv[i + 1]!, process.argv[i + 2]!];
};

/** A workload certificate of the mesh CA: what a sidecar presents and trusts. */
async function workloadPems(caDir: string, dist: string, service: string): Promise<{ cert: string; key: string; ca: string[] }> {
  const { openWorkloadTls } = (await import(pathToFileURL(join(dist, 'src/tls/workload/index.js')).href)) as typeof import('../../src/tls/workload/index.js');
  const workload = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 24 * 3600_000, service, log: pino({ level: 'warn' }) });
  const pems = workload.contextOptions();
  return { cert: String(pems.cert), key: String(pems.key), ca: [...pems.ca].map(String) };
}

const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'http2-settings']);

/** The headers passed on: every field but the connection-specific ones (and, from an answer, its pseudo-headers but `:status`). */
function passed(headers: IncomingHttpHeaders, answer: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const k in headers) {
    if (CONNECTION_SPECIFIC.has(k) || (answer && k.startsWith(':') && k !== ':status')) continue;
    out[k] = headers[k];
  }
  return out;
}

const serveMtls = flag('--serve-mtls');
const upstreamMtls = flag('--upstream-mtls');
const upstreamTls = upstreamMtls ? await workloadPems(upstreamMtls[0], upstreamMtls[1], 'go.mesh.srv.floor-a') : undefined;
const authority = upstreamTls ? `https://127.0.0.1:${upstreamPort}` : `http://127.0.0.1:${upstreamPort}`;

let session: ClientHttp2Session | undefined;
/** The one session to the upstream, opened again once it closes. */
function upstream(): ClientHttp2Session {
  if (session && !session.closed && !session.destroyed) return session;
  const s = connect(authority, upstreamTls ? { ...upstreamTls, rejectUnauthorized: true, checkServerIdentity: () => undefined } : {});
  s.on('error', () => undefined);
  s.on('close', () => {
    if (session === s) session = undefined;
  });
  session = s;
  return s;
}

function onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
  const up = upstream().request(passed(headers, false), { endStream: false });
  let trailers: OutgoingHttpHeaders = {};
  stream.pipe(up);
  up.on('response', (h) => {
    if (stream.destroyed) return;
    stream.respond(passed(h, true), { waitForTrailers: true });
    up.pipe(stream);
  });
  up.on('trailers', (t) => (trailers = passed(t, true)));
  stream.on('wantTrailers', () => stream.sendTrailers(trailers));
  up.on('error', () => {
    if (!stream.destroyed) stream.close(constants.NGHTTP2_CANCEL);
  });
  stream.on('error', () => undefined);
  stream.on('close', () => {
    if (!up.destroyed) up.close(constants.NGHTTP2_CANCEL);
  });
}

const serverTls = serveMtls ? await workloadPems(serveMtls[0], serveMtls[1], 'go.mesh.srv.floor-b') : undefined;
const server: Http2Server = serverTls ? (createSecureServer({ ...serverTls, requestCert: true, rejectUnauthorized: true }) as unknown as Http2Server) : createServer();
server.on('stream', onStream);
server.on('sessionError', () => undefined);
server.listen(port, '127.0.0.1');
const stop = () => {
  session?.close();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
