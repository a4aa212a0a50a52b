/**
 * The request pipeline of every front end (the gateway, the sidecar, `mesh proxy`'s listeners), in
 * named phases (FrontPhase; docs/architecture.md, "A request's phases"): `accept` (stats, span,
 * access log) → `target` (the request target parsed once, src/base/http/target.ts) → `edge` →
 * `route` → `auth` → `handle` → `respond` → `log`. From `edge` on, a request passes a chain of
 * filters (src/edge/filters/: the Host check, the header count and names, CORS, the path's normal
 * form, Mesh-Timeout, the health path, the rate limit, the route, the auth step), composed once per
 * front end from its parts in the order of src/edge/filters/chains.ts, and then the front end's
 * `handle`; an upgrade passes its own chain, then the front end's `upgrade` (which runs its auth
 * step on the raw socket). A front end is a composition of `route`, `authorize`, `handle` and
 * `upgrade`; errors are written by src/base/http/respond.ts, on a response or a raw socket.
 *
 * The HTTP(S) server under the front ends: TLS (src/tls: files or ACME), server timeouts,
 * per-request stats (`http.<prefix>.downstream_rq_*`), the access log (src/base/http/access-log.ts),
 * errors as JSON, the limits of lifecycle.ts (connection cap, read timeouts) and the drain the
 * process drives on shutdown. */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer as createHttpServer } from '../base/http/node-http.js';
import { createServer as createHttp2Server, constants as h2constants, type Http2Server, type Http2ServerRequest, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import { abortRequest, closeAfterAnswer, isHttp2Request, type FrontRequest, type FrontResponse } from '../base/http/front-types.js';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import type { AddressInfo, Socket } from 'node:net';
import type { EdgeContext } from './context.js';
import { badRequest, headersTooLarge, MeshError, requestTimeout } from '../base/errors.js';
import { lingerOnRest, lingerOnStream } from '../base/http/body.js';
import { attachTarget, routeOf, type RequestTarget } from '../base/http/target.js';
import { rawErrorResponse, refuseSocket, sendError } from '../base/http/respond.js';
import { parseAddress } from '../base/util/address.js';
import { httpServerOptions, KEEP_ALIVE_MS, listenOn, NODE_MAX_HEADERS_COUNT, ServerLifecycle, type DrainResult } from '../base/http/lifecycle.js';
import { declareStats, type Counter, type Gauge, type Histogram } from '../base/stats/store.js';
import { HTTP_DOWNSTREAM_STATS, httpRqClassStat, httpStatPrefix } from '../base/http/stats.js';
import { formatDuration } from '../base/util/duration.js';
import { CorsPolicy } from '../base/http/cors.js';
import { rateLimitHeaders, type FrontRateLimit, type RateDecision } from '../base/http/rate-limit.js';
import type { AccessLog } from '../base/http/access-log.js';
import { parseTraceparent, TRACEPARENT, TRACESTATE } from '../base/util/trace-context.js';
import { failSpan, SpanKind, traceOf, type Span } from '../base/tracing/tracer.js';
import type { CallContext } from '../base/util/call-context.js';
import { serveMtls } from '../base/mtls/server.js';
import type { WorkloadTls } from '../base/mtls/workload-tls.js';
import type { TlsProvider } from '../tls/provider.js';
import { HeaderNameFilter } from './filters/header-names.js';
import { compose } from '../base/util/compose.js';
import type { EdgeExchange, EdgeStep } from './filters/filter.js';
import { requestChain, upgradeChain } from './filters/chains.js';
import { FrontLimiter } from './filters/rate-limit.js';
import { HEALTH_PATH } from './filters/health.js';

/** The health-check path of a front end: 200 while live, 503 while draining (admin /healthcheck/fail; src/edge/filters/health.ts). */
export { HEALTH_PATH };

/** The front ends' own prefix: no route of a route file is matched under it (HEALTH_PATH, VERSION_PATH). */
export const OWN_PREFIX = '/_mesh/';

/** What a front end answers at `/` without a route file (its version), always. */
export const VERSION_PATH = '/_mesh/version';

/** The phases of a request, in order (see the module comment). */
export const FRONT_PHASES = ['accept', 'target', 'edge', 'route', 'auth', 'handle', 'respond', 'log'] as const;
export type FrontPhase = (typeof FRONT_PHASES)[number];

/**
 * `R`: what the front end's `route` decides for a request (once), handed to `authorize`, `handle`
 * and `upgrade`; undefined without a `route`.
 */
export interface FrontServerOptions<R = undefined, Req extends FrontRequest = IncomingMessage, Res extends FrontResponse = ServerResponse> {
  /** The process as the edge sees it (src/edge/context.ts), built once. */
  edge: EdgeContext;
  /** Names the stats (`http.<prefix>.*`) and the logs. */
  statPrefix: string;
  /** The `id` of error JSON written by this front end. */
  errorId: string;
  /**
   * Answers a request past the front end's own steps. `ctx` is the request's call context (its
   * trace): a handler passes it on explicitly, or runs inside it (`edge.context.within`) where
   * what it calls reads the ambient one.
   */
  handle: (req: Req, res: Res, ctx: CallContext, route: R) => Promise<void>;
  /**
   * The route phase: what serves the request, decided once from its target (normal form), after
   * the edge checks; `upgrade` true for an Upgrade request. Without it the route is undefined.
   */
  route?: (req: Req, target: RequestTarget, upgrade: boolean) => R;
  /** Called as a request (or upgrade) enters each phase: for tests and debugging only. */
  onPhase?: (phase: FrontPhase, req: Req) => void;
  /**
   * Asked per request: true when nothing before the handler needs the ambient context (no auth
   * step that can log), so the request is not run inside the process's ContextStore and no
   * AsyncLocalStorage is entered for it (on Node 20 entering one turns on promise hooks for the
   * whole process). The handler then gets the context only as its argument. Default: false.
   */
  explicitContext?: (req: Req) => boolean;
  /**
   * Answers an Upgrade request, once it passed the rate limit (keyed by subject: the handler runs
   * `upgradeRateLimited(req, socket, true)` after its auth step). Nothing is read from `socket` yet.
   */
  upgrade?: (req: IncomingMessage, socket: Duplex, head: Buffer, route: R) => void;
  /** Requests for which this returns false are not counted in the stats (the dashboard's own polling). */
  counted?: (req: Req) => boolean;
  /**
   * On close, after in-flight requests finished (or the drain timeout): ends the upgraded
   * connections this front end serves itself (the sidecar's broker WebSockets) before every
   * remaining connection is destroyed.
   */
  closeUpgraded?: () => Promise<void> | void;
  /**
   * Checked first on every request (health path and CORS preflight included): an error refuses it.
   * With it, a missing Host is this check's business (node's own 400 is off).
   */
  refuse?: (req: Req) => MeshError | undefined;
  /**
   * `--rate_limit`: checked on every request after the CORS step, except a preflight and the
   * health path (after `authorize` when keyed by subject); over the limit: 429 error JSON with Retry-After, counted in
   * `http.<prefix>.ratelimit.over_limit` (allowed: `http.<prefix>.ratelimit.ok`; the shared store down: `ratelimit.error`).
   */
  rateLimit?: FrontRateLimit;
  /** `--cors_max_age` in seconds: the Access-Control-Max-Age of a preflight. Default 600. */
  corsMaxAgeSec?: number;
  /**
   * Run before `handle` on every request past the health path and CORS preflights (the front
   * end's auth step, src/edge/auth/): a rejection is answered like a handler's error; undefined when
   * the request passed at once (no auth rules), so the handler runs in the same turn.
   */
  authorize?: (req: Req, res: Res, route: R) => Promise<void> | undefined;
  /**
   * Terminates mutual TLS with this workload certificate (src/base/mtls/server.ts, as
   * its mode says: permissive or strict) instead of --enable_tls: the sidecar's inbound listener.
   * `service` names it in the 400 a plain caller gets in strict mode. Such a listener is not one
   * of the process's own addresses for the self-guard (what it serves is forwarded to the app, so
   * calling it is no loop), and --cors does not apply to it (its callers are mesh processes).
   */
  mtls?: { workload: WorkloadTls; service: string };
  /**
   * HTTP/2 requests that --request_timeout does not bound (a native gRPC call: a stream may stay
   * open for as long as its own deadline says).
   */
  untimed?: (req: Req) => boolean;
  /** Certificates of this listener's own instead of the process's (--enable_tls): a Gateway's HTTPS port. */
  tls?: TlsProvider;
  /**
   * True when this request's caller may assert an end user: its `Mesh-Auth-Subject` and
   * `Mesh-Auth-Scopes` are kept (src/edge/filters/header-names.ts). Default: never, they are removed.
   */
  trustsAuthHeaders?: (req: Req) => boolean;
  /**
   * Serve HTTP/2 as well as HTTP/1.1 on the same port (`--enable_http2`): `h2` by ALPN with TLS,
   * h2c by prior knowledge without (docs/gateway.md, "HTTP/2"). Only a front end whose steps and
   * handlers take both kinds of request (`Req` includes node:http2's) can turn it on; not with
   * `mtls`.
   */
  http2?: Http2ServerRequest extends Req ? Http2Settings | boolean : never
}

/** The methods of the HTTP semantic conventions; any other is `_OTHER` (and names its span `HTTP`). */
const HTTP_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH']);

/** The method part of a server span's name (HTTP semantic conventions). */
function spanMethod(req: FrontRequest): string {
  const method = req.method ?? 'GET';
  return HTTP_METHODS.has(method) ? method : 'HTTP';
}

/** `--enable_http2`'s bounds of a session (defaults: H2_MAX_CONCURRENT_STREAMS, H2_MAX_HEADER_LIST_BYTES). */
export interface Http2Settings {
  /** Streams a client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused (RST_STREAM REFUSED_STREAM). */
  maxConcurrentStreams?: number;
  /** The decoded header list of a request, at most (SETTINGS_MAX_HEADER_LIST_SIZE, RFC 7541 sizes); more resets the stream. */
  maxHeaderListBytes?: number;
}

/** Streams at once per HTTP/2 connection (nginx: 128; Envoy's default is unbounded). */
export const H2_MAX_CONCURRENT_STREAMS = 100;
/** node:http's own bound of an HTTP/1.1 header block (16 KiB), as an HTTP/2 header list. */
export const H2_MAX_HEADER_LIST_BYTES = 16 * 1024;
/**
 * Streams a client may reset before their answer started, per HTTP/2 connection, while they are at
 * least half of the streams it opened (as Envoy's premature-reset check); past that the connection
 * is closed with GOAWAY ENHANCE_YOUR_CALM (closeOnRapidReset).
 */
export const H2_MAX_RESET_STREAMS = 100;
/** What a client sends first on an HTTP/2 connection (RFC 9113 3.4): h2c by prior knowledge. */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/**
 * Closes an HTTP/2 connection (GOAWAY) once it was quiet for KEEP_ALIVE_MS with no stream open, as
 * node:http closes an idle keep-alive connection. A connection with a stream open (an event stream
 * between two events) is left alone, as an HTTP/1.1 connection with a request in flight; node's own
 * session timeout would destroy it.
 */
function idleClose(session: ServerHttp2Session): void {
  let open = 0;
  session.on('stream', (stream: ServerHttp2Stream) => {
    open++;
    stream.once('close', () => open--);
  });
  session.setTimeout(KEEP_ALIVE_MS, () => {
    if (open === 0 && !session.closed && !session.destroyed) session.close();
  });
}

/**
 * Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once costs the
 * server a request's work each (the edge's steps, a proxied call started) while the
 * concurrent-stream cap never binds. nghttp2's own limit (a burst of 1,000 resets, then 33 a
 * second) lets ten times as many through as this: once H2_MAX_RESET_STREAMS streams were reset
 * by the client before their answer started and they are at least half of those it opened, the
 * connection is destroyed with GOAWAY ENHANCE_YOUR_CALM. 'aborted' is emitted as the RST_STREAM
 * is read, so the streams behind it in the same read are not served.
 */
function closeOnRapidReset(session: ServerHttp2Session): void {
  let opened = 0;
  let reset = 0;
  session.on('stream', (stream: ServerHttp2Stream) => {
    opened++;
    stream.once('aborted', () => {
      // Only the client's resets of streams not answered yet: the front end's own resets (a
      // destroyed answer, a gRPC call's reset passed on) come once the answer started, or by destroy.
      if (stream.destroyed || stream.headersSent) return;
      reset++;
      // With an error, or node takes the code for NO_ERROR (destroy's first argument defaults to it).
      if (reset >= H2_MAX_RESET_STREAMS && reset * 2 >= opened && !session.destroyed) session.destroy(new Error('HTTP/2 rapid reset'), h2constants.NGHTTP2_ENHANCE_YOUR_CALM);
    });
  });
}

/**
 * A stream whose answer waits on a client that reads nothing (its flow-control window shut: the
 * data written is never sent) is reset with CANCEL once nothing moved on it for `ms`
 * (--stream_idle_timeout), as the proxy handler cuts such a client off; otherwise the stream, its
 * answer and its connection (never idle with a stream open: idleClose) would be held for as long
 * as the client likes. node:http2 fires a stream's timeout only when no frame of it was read or
 * sent for `ms`, so a slow reader is not cut; a stream with nothing to send (an event stream
 * between two events, a body still coming) is left alone.
 */
function resetStalled(session: ServerHttp2Session, ms: number): void {
  if (ms <= 0) return;
  session.on('stream', (stream: ServerHttp2Stream) => {
    stream.setTimeout(ms, () => {
      const stalled = stream.writableLength > 0 || (stream.writableEnded && !stream.writableFinished);
      if (stalled && !stream.closed && !stream.destroyed) stream.close(h2constants.NGHTTP2_CANCEL);
    });
  });
}

export class FrontServer<R = undefined, Req extends FrontRequest = IncomingMessage, Res extends FrontResponse = ServerResponse> {
  /**
   * The options, as the server calls them: with `Req` only node:http's request, `http2` is off
   * (its type says so), so only node:http's objects ever reach these callbacks.
   */
  private readonly options: FrontServerOptions<R, FrontRequest, FrontResponse>;
  private server?: Server;
  private lifecycle?: ServerLifecycle;
  /** The request being received on a connection, so a read timeout can answer it. */
  private readonly receiving = new WeakMap<Duplex, FrontResponse>();
  private readonly headerTimeouts: Counter;
  private readonly requestTimeouts: Counter;
  private readonly rqTotal: Counter;
  private readonly rqClass: Counter[];
  private readonly rqActive: Gauge;
  private readonly cxActive: Gauge;
  private readonly cxTotal: Counter;
  private readonly cxHttp1Total: Counter;
  private readonly cxHttp2Total: Counter;
  private readonly cxHttp1Active: Gauge;
  private readonly cxHttp2Active: Gauge;
  private readonly rqTime: Histogram;
  readonly secure: boolean;
  /** The process's access log (--access_log), or none. */
  private readonly accessLog?: AccessLog;
  private detachTls?: () => void;
  private stopMtls?: () => void;
  private readonly onPhase?: (phase: FrontPhase, req: FrontRequest) => void;
  /** --rate_limit, shared by the request and upgrade chains. */
  private readonly limiter?: FrontLimiter;
  /** The edge's filters and the handler, composed once (src/edge/filters/chains.ts). */
  private readonly requestStep: EdgeStep<R>;
  private readonly upgradeStep?: EdgeStep<R>;

  constructor(given: FrontServerOptions<R, Req, Res>) {
    const options = given as unknown as FrontServerOptions<R, FrontRequest, FrontResponse>;
    this.options = options;
    this.onPhase = options.onPhase;
    const edge = options.edge;
    const stats = edge.stats;
    const scope = stats.scope(httpStatPrefix(options.statPrefix));
    const s = declareStats(scope, HTTP_DOWNSTREAM_STATS);
    this.rqTotal = s.rqTotal;
    this.rqClass = [1, 2, 3, 4, 5].map((c) => scope.counter(httpRqClassStat(c)));
    this.rqActive = s.rqActive;
    this.cxActive = s.cxActive;
    this.cxTotal = s.cxTotal;
    this.cxHttp1Total = s.cxHttp1Total;
    this.cxHttp2Total = s.cxHttp2Total;
    this.cxHttp1Active = s.cxHttp1Active;
    this.cxHttp2Active = s.cxHttp2Active;
    this.rqTime = s.rqTime;
    this.headerTimeouts = s.headerTimeouts;
    this.requestTimeouts = s.requestTimeouts;
    this.secure = options.mtls ? false : options.tls !== undefined || edge.settings.tls;
    this.accessLog = edge.accessLog;
    const rl = options.rateLimit;
    if (rl?.policy) this.limiter = new FrontLimiter({ ...rl, policy: rl.policy }, scope, options.errorId);
    const origins = edge.settings.corsOrigins;
    const onPhase = this.onPhase;
    const parts = {
      errorId: options.errorId,
      refuse: options.refuse,
      headerNames: new HeaderNameFilter({ policy: edge.settings.headersWithUnderscores, stats: scope, errorId: options.errorId, trustsAuthHeaders: options.trustsAuthHeaders }),
      // --cors is for browsers at the public listeners; a mutual TLS listener's callers are mesh processes.
      cors: origins.length > 0 && !options.mtls ? new CorsPolicy(origins, options.corsMaxAgeSec) : undefined,
      isLive: edge.isLive,
      limiter: this.limiter,
      limitAfterAuth: this.limitAfterAuth,
      route: options.route,
      authorize: options.authorize,
      onPhase,
    };
    const handle: EdgeStep<R> = (ex) => {
      onPhase?.('handle', ex.req);
      let handled: Promise<void>;
      try {
        handled = options.handle(ex.req, ex.res!, ex.ctx!, ex.route);
      } catch (err) {
        return ex.fail(err);
      }
      handled.catch((err: unknown) => ex.fail(err));
    };
    this.requestStep = compose(handle, requestChain(parts));
    const upgrade = options.upgrade;
    if (upgrade) {
      const upgradeStep: EdgeStep<R> = (ex) => {
        onPhase?.('handle', ex.req);
        try {
          upgrade(ex.upgrade!.req, ex.upgrade!.socket, ex.upgrade!.head, ex.route);
        } catch (err) {
          ex.fail(err);
        }
      };
      this.upgradeStep = compose(upgradeStep, upgradeChain(parts));
    }
  }

  async listen(address: string): Promise<AddressInfo> {
    const { host, port } = parseAddress(address);
    const onRequest = (req: FrontRequest, res: FrontResponse) => this.onRequest(req, res);
    const edge = this.options.edge;
    const limits = edge.settings.limits;
    const serverOptions = { ...httpServerOptions(limits), requireHostHeader: this.options.refuse === undefined };
    // TLS: the process's provider (files reloaded on change, or ACME), shared by its listeners.
    const tls = this.options.tls ?? (this.secure ? edge.tls : undefined);
    await tls?.start();
    let server: Server;
    if (tls) {
      // With HTTP/2, ALPN offers h2 first; a client that offers neither is served HTTP/1.1 as before.
      const alpn = this.options.http2 ? { ALPNProtocols: ['h2', 'http/1.1'] } : {};
      const https = createHttpsServer({ ...tls.serverOptions(), ...serverOptions, ...alpn }, onRequest);
      tls.attach(https);
      this.detachTls = () => tls.detach(https);
      server = https;
    } else {
      server = createHttpServer(serverOptions, onRequest);
    }
    const h2 = this.options.http2 ? this.http2Server(onRequest) : undefined;
    const mtls = this.options.mtls;
    const serveMutualTls = () =>
      mtls && (this.stopMtls = serveMtls(server, { workload: mtls.workload, service: mtls.service, stats: edge.stats.scope(httpStatPrefix(this.options.statPrefix)), acceptTimeoutMs: limits.headersTimeoutMs, log: edge.logging.get('http'), alpn: h2 ? ['h2', 'http/1.1'] : undefined }));
    // Each takes the one 'connection' listener there is (node:http's own) before anything else
    // listens: with HTTP/2 on a mutual TLS listener the dispatch first, then serveMtls hands it the
    // decrypted connections; without, serveMtls first, and the dispatch only counts connections.
    if (!h2) serveMutualTls();
    this.dispatch(server, h2, tls !== undefined, limits.headersTimeoutMs || limits.requestTimeoutMs);
    if (h2) serveMutualTls();
    server.on('connection', (socket: Socket) => {
      this.cxTotal.inc();
      this.cxActive.inc();
      socket.once('close', () => {
        this.cxActive.dec();
      });
    });
    server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.onClientError(err, socket, limits.headersTimeoutMs, limits.requestTimeoutMs));
    const upgradeStep = this.upgradeStep;
    if (upgradeStep) {
      server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        const onPhase = this.onPhase;
        onPhase?.('accept', req);
        socket.on('error', () => socket.destroy());
        const target = attachTarget(req);
        onPhase?.('target', req);
        onPhase?.('edge', req);
        upgradeStep(new UpgradeExchange<R>(req, target, socket, head, this.options.errorId, edge));
      });
    }
    this.server = server;
    const lifecycle = new ServerLifecycle(server, limits, { stats: edge.stats, prefix: httpStatPrefix(this.options.statPrefix) }, () => this.closeOthers());
    this.lifecycle = lifecycle;
    // Each HTTP/2 connection is drained with GOAWAY (its streams finish, no new one starts) and closed with the rest.
    h2?.on('session', (session: ServerHttp2Session) => lifecycle.addSession(session));
    const bound = await listenOn(server, host, port, edge.settings.reusePort);
    edge.addDrainable(this.lifecycle);
    if (!this.options.mtls) edge.addSelfAddress(bound.address, bound.port, this.options.statPrefix);
    return bound;
  }

  /**
   * The HTTP/2 side (--enable_http2): a node:http2 server that never listens; the listener hands it
   * the connections that speak HTTP/2 (dispatch). Its bounds per connection: the concurrent streams
   * and the header list (SETTINGS), streams reset by the client (closeOnRapidReset), node's
   * defaults for the rest (100 refused streams or 1,000 invalid frames per session end it, 10 MB
   * of session memory; nghttp2's limits on CONTINUATION frames, SETTINGS entries and queued
   * SETTINGS and PING acknowledgements), and a connection with no stream open is closed (GOAWAY)
   * after the keep-alive timeout of HTTP/1.1 (idleClose). Per stream: an answer the client reads
   * nothing of for --stream_idle_timeout is reset (resetStalled).
   */
  private http2Server(onRequest: (req: FrontRequest, res: FrontResponse) => void): Http2Server {
    const given = typeof this.options.http2 === 'object' ? this.options.http2 : {};
    const h2 = createHttp2Server(
      {
        settings: {
          maxConcurrentStreams: given.maxConcurrentStreams ?? H2_MAX_CONCURRENT_STREAMS,
          maxHeaderListSize: given.maxHeaderListBytes ?? H2_MAX_HEADER_LIST_BYTES,
          enablePush: false,
        },
        // As node:http's maxHeadersCount (lifecycle.ts): a request over MAX_HEADER_COUNT reaches the edge's 431.
        maxHeaderListPairs: NODE_MAX_HEADERS_COUNT,
      },
      onRequest,
    );
    h2.on('session', (session: ServerHttp2Session) => {
      idleClose(session);
      closeOnRapidReset(session);
      resetStalled(session, this.options.edge.settings.streamIdleTimeoutMs);
    });
    return h2;
  }

  /**
   * Who serves a connection the listener accepted. Without HTTP/2: node:http(s), counted as
   * HTTP/1.1. With it: over TLS the protocol ALPN chose (`h2`, else HTTP/1.1); in plain text the
   * first bytes say it: the HTTP/2 preface (prior knowledge) hands the connection to the HTTP/2
   * server, anything else to node:http as before (so `Upgrade: h2c` still reaches the upgrade
   * chain, which refuses it). Until those bytes came, `acceptMs` (the header timeout) bounds the wait.
   */
  private dispatch(server: Server, h2: Http2Server | undefined, secure: boolean, acceptMs: number): void {
    const event = secure ? 'secureConnection' : 'connection';
    const http1 = (socket: Socket) => {
      this.cxHttp1Total.inc();
      this.cxHttp1Active.inc();
      socket.once('close', () => this.cxHttp1Active.dec());
    };
    if (!h2) {
      server.on(event, http1);
      return;
    }
    // node:http(s) serves a connection from its own listener of this event (as serveMtls takes it).
    const listeners = server.listeners(event);
    if (listeners.length !== 1) throw new Error(`FrontServer: expected node:http's own '${event}' listener only (found ${listeners.length})`);
    const serve = listeners[0] as (socket: Socket) => void;
    server.removeListener(event, serve);
    const toHttp2 = (socket: Socket) => {
      // node:http's sockets are half-open (it ends its side itself); HTTP/2 has no half-closed
      // connection: a client that ended its side is gone, and the session must close with it (as
      // node:http2's own server makes its sockets), or its streams would wait forever.
      socket.allowHalfOpen = false;
      this.cxHttp2Total.inc();
      this.cxHttp2Active.inc();
      socket.once('close', () => this.cxHttp2Active.dec());
      h2.emit('connection', socket);
    };
    const toHttp1 = (socket: Socket) => {
      http1(socket);
      serve.call(server, socket);
    };
    if (secure) {
      server.on(event, (socket: TLSSocket) => (socket.alpnProtocol === 'h2' ? toHttp2(socket) : toHttp1(socket)));
      return;
    }
    server.on(event, (socket: Socket) => {
      // Until node:http or the HTTP/2 session listens for them, a reset is this listener's to handle.
      const onError = () => socket.destroy();
      socket.on('error', onError);
      const timer = acceptMs > 0 ? setTimeout(() => socket.destroy(), acceptMs) : undefined;
      timer?.unref();
      socket.once('close', () => clearTimeout(timer));
      let seen: Buffer | undefined;
      const onData = (chunk: Buffer) => {
        seen = seen ? Buffer.concat([seen, chunk]) : chunk;
        const n = Math.min(seen.length, H2_PREFACE.length);
        const prior = seen.compare(H2_PREFACE, 0, n, 0, n) === 0;
        if (prior && n < H2_PREFACE.length) return; // a prefix of the preface so far: wait for the rest
        socket.off('data', onData);
        clearTimeout(timer);
        socket.pause();
        socket.unshift(seen);
        socket.off('error', onError);
        if (prior) {
          // The session reads what was unshifted first, then the socket itself.
          toHttp2(socket);
          return;
        }
        toHttp1(socket);
        socket.resume();
      };
      socket.on('data', onData);
    });
  }

  /**
   * Drains (answers close their connections), stops accepting, lets in-flight requests finish (up
   * to --drain_timeout), then closes every connection. Resolves with what was cut off.
   */
  async close(): Promise<DrainResult> {
    const lifecycle = this.lifecycle;
    if (!lifecycle) return { requestsCutOff: 0, connectionsCutOff: 0 };
    this.detachTls?.();
    this.stopMtls?.();
    return lifecycle.close();
  }

  private async closeOthers(): Promise<void> {
    await this.options.closeUpgraded?.();
  }

  /**
   * A request Node could not read: a read timeout (408), a header block over Node's size limit
   * (431) or a malformed request (400), answered with error JSON while the socket is writable.
   */
  private onClientError(err: NodeJS.ErrnoException, socket: Duplex, headersMs: number, requestMs: number): void {
    const id = this.options.errorId;
    const res = this.receiving.get(socket);
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      // Headers complete (a request is being answered): the body was too slow; otherwise the headers were.
      const error = res
        ? requestTimeout(id, `request not received within ${formatDuration(requestMs)} (--request_timeout)`)
        : requestTimeout(id, `request headers not received within ${formatDuration(headersMs || requestMs)} (--request_headers_timeout)`);
      (res ? this.requestTimeouts : this.headerTimeouts).inc();
      if (res && !res.headersSent && socket.writable) {
        closeAfterAnswer(res);
        sendError(res, error, id);
        return;
      }
      if (!res && socket.writable) {
        socket.end(rawErrorResponse(error));
        return;
      }
      socket.destroy();
      return;
    }
    if (socket.writable && !res?.headersSent) {
      const error =
        err.code === 'HPE_HEADER_OVERFLOW'
          ? headersTooLarge(id, 'request header block too large')
          : badRequest(id, `malformed request: ${err.code ?? err.message}`);
      socket.end(rawErrorResponse(error));
    } else socket.destroy();
  }

  /**
   * Each request is a hop of its trace: the caller's trace id (a new trace when no valid
   * traceparent came) with a span id of its own, the parent of everything the request sends. The
   * request's handler gets that context (so its calls, messages and log lines carry it): as an
   * argument, and as the ambient context unless `explicitContext` says no step needs one; with
   * --tracing=otlp a server span records it.
   */
  private onRequest(req: FrontRequest, res: FrontResponse): void {
    const edge = this.options.edge;
    const onPhase = this.onPhase;
    onPhase?.('accept', req);
    const headers = req.headers;
    // HTTP/2: its header list as HTTP/1.1 gives it (no pseudo-header, Host from :authority), or why it is refused.
    const refused = isHttp2Request(req) ? this.http2Head(req) : undefined;
    const target = attachTarget(req);
    onPhase?.('target', req);
    const parent = parseTraceparent(headers[TRACEPARENT], headers[TRACESTATE]);
    const span = edge.tracer ? this.startSpan(req, target, parent) : undefined;
    const trace = span ? traceOf(span) : edge.context.hop(parent);
    const ctx: CallContext = { trace };
    if (this.options.explicitContext?.(req)) this.serve(req, res, ctx, span, target, refused);
    else edge.context.run(ctx, () => this.serve(req, res, ctx, span, target, refused));
  }

  /**
   * An HTTP/2 request's header list made what the edge reads on HTTP/1.1 (RFC 9113 8.3): the
   * pseudo-headers stay in `req.headers` (node's compatibility object reads its method and path
   * there) but leave `rawHeaders` (so the header count, the header names step and the forwarded
   * headers see what HTTP/1.1 has); `:authority` is the Host when none came. A Host that names
   * another host than `:authority` is refused (as Envoy does), and so is a request with neither
   * (node:http answers 400 to an HTTP/1.1 request without Host), unless the front end checks Host
   * itself (`refuse`). nghttp2 has already reset the streams RFC 9113 calls malformed (a
   * connection-specific header, an upper-case name, a missing or repeated pseudo-header).
   */
  private http2Head(req: Http2ServerRequest): MeshError | undefined {
    const headers = req.headers;
    const raw = req.rawHeaders;
    let kept = 0;
    for (let i = 0; i < raw.length; i += 2) {
      if (raw[i]!.charCodeAt(0) === 0x3a) continue;
      raw[kept++] = raw[i]!;
      raw[kept++] = raw[i + 1]!;
    }
    raw.length = kept;
    const authority = headers[':authority'];
    const host = headers.host;
    const id = this.options.errorId;
    if (req.method === 'CONNECT') return badRequest(id, 'CONNECT is not served over HTTP/2');
    if (authority !== undefined && authority !== '') {
      if (host === undefined) {
        headers.host = authority;
        raw.push('host', authority);
      } else if (host.toLowerCase() !== authority.toLowerCase()) return badRequest(id, 'the Host header and :authority name different hosts');
    } else if ((host === undefined || host === '') && this.options.refuse === undefined) return badRequest(id, 'request has neither :authority nor Host');
    return undefined;
  }

  private startSpan(req: FrontRequest, target: RequestTarget, parent: ReturnType<typeof parseTraceparent>): Span {
    // The path as received: the span says what the client sent.
    const path = target.receivedPath;
    const received = req.method ?? 'GET';
    const method = HTTP_METHODS.has(received) ? received : '_OTHER';
    const host = req.headers.host ?? '';
    const colon = host.lastIndexOf(':');
    const port = colon > host.lastIndexOf(']') ? Number(host.slice(colon + 1)) : undefined;
    const attributes: Record<string, string | number> = {
      'http.request.method': method,
      'url.path': path,
      'url.scheme': this.secure ? 'https' : 'http',
      'server.address': colon > host.lastIndexOf(']') ? host.slice(0, colon) : host,
      // Semantic conventions: `1.1`, `2`.
      'network.protocol.version': req.httpVersionMajor === 2 ? '2' : req.httpVersion,
      'client.address': req.socket.remoteAddress ?? '',
      'mesh.front': this.options.statPrefix,
    };
    if (method !== received) attributes['http.request.method_original'] = received;
    if (port !== undefined && Number.isInteger(port)) attributes['server.port'] = port;
    if (target.query !== undefined) attributes['url.query'] = target.query;
    const agent = req.headers['user-agent'];
    if (agent) attributes['user_agent.original'] = agent;
    // Named `{method}` until the handler tells the route (updated when the answer is sent).
    return this.options.edge.tracer!.startSpan(spanMethod(req), SpanKind.SERVER, parent, attributes);
  }

  private serve(req: FrontRequest, res: FrontResponse, ctx: CallContext, span: Span | undefined, target: RequestTarget, refused: MeshError | undefined): void {
    const started = performance.now();
    const accessLog = this.accessLog;
    const trace = ctx.trace!;
    const tap = this.options.edge.tap;
    const info = accessLog ? accessLog.begin(req, res, trace.traceId, tap.active) : tap.active ? tap.begin(req, res, trace.traceId, target.path) : undefined;
    // A tap that asked for bodies is attached: this request's are captured (src/base/http/tap-body.ts).
    const bodies = info && tap.bodies ? tap.captureBodies(req, res) : undefined;
    const counted = this.options.counted?.(req) ?? true;
    if (counted) {
      this.rqTotal.inc();
      this.rqActive.inc();
    }
    // One 'close' listener per response (below) serves the stats, the access log and the drain.
    const lifecycle = this.lifecycle;
    lifecycle?.track(res);
    // HTTP/1.1: node:http times the reading of a request on its connection (onClientError answers);
    // HTTP/2: each stream is timed here, its connection being shared.
    const socket = isHttp2Request(req) ? undefined : req.socket;
    const readTimer = socket ? undefined : this.timeStream(req, res);
    if (isHttp2Request(req)) lingerOnStream(req, this.options.edge.settings.maxBodyBytes);
    if (socket) {
      this.receiving.set(socket, res);
      req.once('end', () => this.receiving.get(socket) === res && this.receiving.delete(socket));
    }
    res.once('close', () => {
      lifecycle?.untrack(res);
      clearTimeout(readTimer);
      if (socket && this.receiving.get(socket) === res) this.receiving.delete(socket);
      const ms = performance.now() - started;
      if (counted) {
        this.rqActive.dec();
        // Count what was really sent; a response that never started counts as a 5xx.
        const status = res.headersSent ? res.statusCode : 500;
        this.rqClass[Math.min(4, Math.max(0, Math.floor(status / 100) - 1))]!.inc();
        this.rqTime.record(ms);
        this.options.edge.callers?.record(this.options.statPrefix, isHttp2Request(req) ? req.stream.session?.socket : req.socket, status, ms);
      }
      this.onPhase?.('log', req);
      if (info) {
        accessLog?.log(req, res, info, ms);
        if (tap.active) tap.publish(this.options.statPrefix, req, res, info, ms, bodies);
      }
      if (span) {
        const status = res.headersSent ? res.statusCode : 500;
        span.setAttribute('http.response.status_code', status);
        // HTTP semantic conventions: `{method} {http.route}` when a route is known, else `{method}`.
        const route = status === 404 ? undefined : routeOf(req);
        if (route !== undefined) span.setAttribute('http.route', route);
        span.updateName(route === undefined ? spanMethod(req) : `${spanMethod(req)} ${route}`);
        if (status >= 500) failSpan(span, res.headersSent ? `status ${status}` : 'no response sent', String(status));
        span.end();
      }
    });
    const onPhase = this.onPhase;
    if (onPhase) res.once('finish', () => onPhase('respond', req));
    onPhase?.('edge', req);
    const exchange = new RequestExchange<R>(req, res, target, ctx, this);
    if (refused) exchange.refuse(refused);
    else this.requestStep(exchange);
  }

  /**
   * --request_timeout on one HTTP/2 stream: its request (headers and body) received within it, or
   * 408 error JSON (the stream reset when the answer had started), counted in
   * `downstream_rq_timeout` as on HTTP/1.1; a request answered already whose body is still not in
   * has its stream reset with NO_ERROR then (the bound of its lingering close). The header timeout has no stream-level meaning (a
   * stream's headers come in one block; the session's idle timeout bounds a silent connection).
   */
  private timeStream(req: FrontRequest, res: FrontResponse): NodeJS.Timeout | undefined {
    const ms = this.options.edge.settings.limits.requestTimeoutMs;
    if (ms <= 0 || req.complete || this.options.untimed?.(req as Req)) return undefined;
    const timer = setTimeout(() => {
      if (req.complete) return;
      if (res.writableEnded) {
        // Answered, and the body still not in: the stream is reset (NO_ERROR: the answer stands),
        // whatever became of the lingering close (lingerOnStream) meanwhile.
        if (isHttp2Request(req) && !req.stream.destroyed && !req.stream.closed) req.stream.close(h2constants.NGHTTP2_NO_ERROR);
        return;
      }
      this.requestTimeouts.inc();
      const error = requestTimeout(this.options.errorId, `request not received within ${formatDuration(ms)} (--request_timeout)`);
      if (res.headersSent) abortRequest(req);
      else sendError(res, error, this.options.errorId);
      // The rest of the body is not waited for: the stream is reset once the answer is out (RFC 9113 8.1).
      lingerOnRest(req, res, this.options.edge.settings.maxBodyBytes, false);
    }, ms);
    timer.unref();
    req.once('end', () => clearTimeout(timer));
    return timer;
  }

  /** The `id` of this front end's error JSON. */
  get errorId(): string {
    return this.options.errorId;
  }

  /** A request's failure past the edge (a handler's error, a rejected auth step): logged unless a MeshError, then answered. */
  failRequest(req: FrontRequest, res: FrontResponse, ctx: CallContext | undefined, err: unknown): void {
    // The request's trace named here: this may run outside any ambient context (explicitContext).
    const trace = ctx?.trace;
    if (!(err instanceof MeshError)) this.options.edge.logging.get('http').error({ err: (err as Error)?.stack ?? String(err), trace_id: trace?.traceId, span_id: trace?.spanId }, 'handler failed');
    // An answer before the whole body arrived (413, a refused request): drop the rest first.
    lingerOnRest(req, res, this.options.edge.settings.maxBodyBytes, !this.lifecycle?.isDraining);
    sendError(res, err, this.options.errorId);
  }

  /** Keyed by subject, the rate limit needs the auth step's verdict first (for upgrades too: see upgradeRateLimited). */
  private get limitAfterAuth(): boolean {
    return this.options.rateLimit?.key === 'subject' && this.options.authorize !== undefined;
  }

  /**
   * The rate limit step of an upgrade (one request, whatever the connection carries later): over
   * the limit, a 429 error JSON with Retry-After and the RateLimit fields closes the connection;
   * otherwise `next` runs (at once, or once a shared store answered). Run by the front server before
   * the `upgrade` handler; keyed by subject (with an auth step), the handler calls it once its auth
   * step passed, and it only runs `next` otherwise.
   */
  upgradeRateLimited(req: FrontRequest, socket: Duplex, afterAuth: boolean, next: () => void): void {
    const limiter = this.limiter;
    if (!limiter || afterAuth !== this.limitAfterAuth) return next();
    const answer = (decision: RateDecision): void => {
      if (limiter.counted(decision)) return next();
      refuseSocket(socket, limiter.refusal(decision), this.options.errorId, { headers: rateLimitHeaders(decision) });
    };
    const decision = limiter.take(req);
    if (decision instanceof Promise) void decision.then(answer);
    else answer(decision);
  }
}

/** A request at the edge (src/edge/filters/filter.ts): answered on its response. */
class RequestExchange<R> implements EdgeExchange<R> {
  route = undefined as R;
  readonly upgrade = undefined;

  constructor(
    readonly req: FrontRequest,
    readonly res: FrontResponse,
    readonly target: RequestTarget,
    readonly ctx: CallContext,
    private readonly server: FrontServer<R>,
  ) {}

  refuse(err: MeshError): void {
    this.req.resume();
    sendError(this.res, err, this.server.errorId);
  }

  fail(err: unknown): void {
    // Always after the turn that read the request (as a rejected promise is answered): its parser
    // has finished with a bodiless request by then, so the rest of the body is not waited for.
    queueMicrotask(() => this.server.failRequest(this.req, this.res, this.ctx, err));
  }
}

/** An upgrade request at the edge: answered on its raw socket. */
class UpgradeExchange<R> implements EdgeExchange<R> {
  route = undefined as R;
  readonly res = undefined;
  readonly ctx = undefined;
  readonly upgrade: { socket: Duplex; head: Buffer; req: IncomingMessage };

  constructor(
    readonly req: IncomingMessage,
    readonly target: RequestTarget,
    socket: Duplex,
    head: Buffer,
    private readonly errorId: string,
    private readonly edge: EdgeContext,
  ) {
    this.upgrade = { socket, head, req };
  }

  refuse(err: MeshError, headers?: Record<string, string>): void {
    refuseSocket(this.upgrade.socket, err, this.errorId, headers ? { headers } : {});
  }

  fail(err: unknown): void {
    // A refusal past the edge (a redirect's bad Host: 400) is answered as on a request.
    if (err instanceof MeshError) return this.refuse(err);
    this.edge.logging.get('http').warn({ err: (err as Error).message }, 'upgrade failed');
    this.upgrade.socket.destroy();
  }
}
