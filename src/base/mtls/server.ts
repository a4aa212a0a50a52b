/**
 * The server side of mutual TLS between mesh processes: an HTTP server (node:http, listening on
 * its own port as before) made to terminate mTLS with the process's workload certificate.
 *
 * - The server's one 'connection' listener is the one served: node:http's own, or the front
 *   server's HTTP/1.1-or-HTTP/2 dispatch (then ALPN offers `h2` too, and the dispatch reads the
 *   decrypted preface).
 * - Every accepted connection is sniffed: its first byte says which protocol it speaks (a TLS
 *   handshake record starts with 0x16). TLS goes through a TLS server of its own (never
 *   listening) that requires a client certificate and verifies it against the trusted roots;
 *   once the handshake is done the TLS socket is handed to the HTTP server. Plain HTTP is handed
 *   to the HTTP server as it is (permissive), or refused with a 400 error answer naming the
 *   service (strict). The first chunk is put back (unshift) before either sees it.
 * - A connection that sends nothing, or never finishes its handshake, is closed after the
 *   server's header timeout (it is not the HTTP server's yet, so the HTTP timeouts do not see it).
 * - Each new handshake uses the workload's current certificate and roots (tls.Server's
 *   setSecureContext on each change): a renewed certificate or a new root applies to the next
 *   connection, and connections already open keep theirs.
 * - The caller's identity is its certificate's SPIFFE ID: peerIdentityOf(req.socket). A certificate
 *   with no valid SPIFFE ID of the workload's trust domain (spiffeIdProblem) is answered 403 and
 *   closed, in either mode: it is never served as a plain caller.
 * - `ssl.*` stats under the server's scope, named after Envoy's: handshake, session_reused,
 *   fail_verify_no_cert (no client certificate), fail_verify_error (not signed by a trusted root),
 *   fail_verify_san (no valid SPIFFE ID of the trust domain), connection_error (any other failed
 *   handshake), and downstream_cx_plain_refused (plain HTTP in strict mode).
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import { badRequest, forbidden } from '../errors.js';
import { refuseSocket } from '../http/respond.js';
import { declareStats, type StatsScope } from '../stats/store.js';
import { peerIdentityProblem, type WorkloadTls } from './workload-tls.js';

export const MTLS_SERVER_STATS = {
  counters: {
    handshake: 'ssl.handshake',
    sessionReused: 'ssl.session_reused',
    noCert: 'ssl.fail_verify_no_cert',
    verifyError: 'ssl.fail_verify_error',
    connectionError: 'ssl.connection_error',
    plainRefused: 'downstream_cx_plain_refused',
    badIdentity: 'ssl.fail_verify_san',
  },
} as const;

/** The first byte of a TLS record carrying a handshake (a ClientHello). */
const TLS_HANDSHAKE = 0x16;

/** Without a header timeout, how long a connection may take to say something and finish its handshake. */
const DEFAULT_ACCEPT_TIMEOUT_MS = 10_000;

export interface MtlsServerOptions {
  workload: WorkloadTls;
  /** Names the service in the error answer to a plain caller in strict mode. */
  service: string;
  /** The server's stats scope (`http.<prefix>.`): the ssl.* counters are created under it. */
  stats: StatsScope;
  /** Bound (ms) on the first byte and the TLS handshake: the server's header timeout. */
  acceptTimeoutMs: number;
  log?: Logger;
  /** The protocols offered by ALPN (`['h2', 'http/1.1']` on a listener that serves HTTP/2); none: no ALPN. */
  alpn?: string[];
  /** Instead of the workload's mode (the admin interface serves mutual TLS besides plain HTTP, whatever --mtls). */
  mode?: 'permissive' | 'strict';
}

/**
 * Makes `server` (a node:http server, before it listens) serve mutual TLS as its workload's mode
 * says (permissive: TLS and plain on one port; strict: mTLS only). Returns what undoes the
 * subscription to certificate changes (call it when the server closes).
 */
export function serveMtls(server: Server, options: MtlsServerOptions): () => void {
  const { workload } = options;
  const mode = options.mode ?? workload.mode;
  if (mode === 'off') return () => {};
  const strict = mode === 'strict';
  const s = declareStats(options.stats, MTLS_SERVER_STATS);
  // node:http serves a connection from its 'connection' listener (documented: a socket emitted
  // there is served). That listener is taken out, so the socket reaches it only once its first
  // byte said what it speaks; other 'connection' listeners (connection tracking) still see every
  // raw socket.
  const listeners = server.listeners('connection');
  if (listeners.length !== 1) throw new Error(`serveMtls: call it on a new HTTP server, before anything else listens for its connections (found ${listeners.length} listeners)`);
  const serve = listeners[0] as (socket: Socket | TLSSocket) => void;
  server.removeListener('connection', serve);
  const acceptTimeoutMs = options.acceptTimeoutMs > 0 ? options.acceptTimeoutMs : DEFAULT_ACCEPT_TIMEOUT_MS;

  const tls = createTlsServer({ requestCert: true, rejectUnauthorized: true, handshakeTimeout: acceptTimeoutMs, ...(options.alpn ? { ALPNProtocols: options.alpn } : {}) });
  // The workload's certificate, key and roots; again after each renewal (or change of roots), for
  // the next handshakes. The ticket keys are kept, so a session made before a renewal resumes
  // after it; tls.Server gives the context its session id context (without one, a server that
  // asks for client certificates cannot resume sessions).
  const load = () => {
    const pems = workload.contextOptions();
    tls.setSecureContext({ cert: pems.cert, key: pems.key, ca: [...pems.ca], ticketKeys: tls.getTicketKeys() });
  };
  load();
  const unsubscribe = workload.onChange(() => {
    try {
      load();
    } catch (err) {
      options.log?.error({ service: options.service, err: (err as Error).message }, 'mTLS: the renewed certificate cannot be used; the previous one is kept');
    }
  });
  tls.on('secureConnection', (socket: TLSSocket) => {
    s.handshake.inc();
    if (socket.isSessionReused()) s.sessionReused.inc();
    // A certificate of the mesh's CA that the CA would never issue (no SPIFFE ID, another trust
    // domain, an ID not in the specification's form): refused, in either mode, never taken as plain.
    const problem = peerIdentityProblem(socket.getPeerCertificate(), workload.trustDomain);
    if (problem) {
      s.badIdentity.inc();
      options.log?.warn({ service: options.service, remote: socket.remoteAddress, reason: problem }, 'mTLS caller refused: its certificate has no valid identity');
      refuseSocket(socket, forbidden(options.service, `service ${options.service} refuses this client certificate: ${problem}`), options.service);
      return;
    }
    serve.call(server, socket);
  });
  tls.on('tlsClientError', (err: Error & { code?: string }, socket: TLSSocket) => {
    if (socket.authorizationError) s.verifyError.inc();
    else if (err.code === 'ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE') s.noCert.inc();
    else s.connectionError.inc();
    options.log?.debug({ service: options.service, remote: socket.remoteAddress, err: err.message, reason: socket.authorizationError || err.code }, 'mTLS handshake refused');
    // A handshake timeout leaves the socket open: it is closed here, as every failed handshake.
    socket.destroy();
  });

  server.prependListener('connection', (socket: Socket) => {
    // Until node:http or the TLS socket listens for them, a reset is this listener's to handle.
    const onError = () => socket.destroy();
    socket.on('error', onError);
    const timer = setTimeout(() => socket.destroy(), acceptTimeoutMs);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
    socket.once('data', (chunk: Buffer) => {
      // From here the TLS server's handshake timeout, or node:http's header timeout, bounds it.
      clearTimeout(timer);
      socket.pause();
      socket.unshift(chunk);
      if (chunk[0] === TLS_HANDSHAKE) {
        // The socket is the HTTP server's once the handshake is done ('secureConnection').
        tls.emit('connection', socket);
        return;
      }
      if (strict) {
        s.plainRefused.inc();
        refuseSocket(socket, badRequest(options.service, `service ${options.service} accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate`), options.service);
        return;
      }
      socket.removeListener('error', onError);
      serve.call(server, socket);
      socket.resume();
    });
  });
  return unsubscribe;
}
