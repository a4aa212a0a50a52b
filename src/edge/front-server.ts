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
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import type { AddressInfo, Socket } from 'node:net';
import type { EdgeContext } from './context.js';
import { badRequest, headersTooLarge, MeshError, requestTimeout } from '../base/errors.js';
import { lingerOnRest } from '../base/http/body.js';
import { attachTarget, routeOf, type RequestTarget } from '../base/http/target.js';
import { rawErrorResponse, refuseSocket, sendError } from '../base/http/respond.js';
import { parseAddress } from '../base/util/address.js';
import { httpServerOptions, listenOn, ServerLifecycle, type DrainResult } from '../base/http/lifecycle.js';
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
export interface FrontServerOptions<R = undefined> {
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
  handle: (req: IncomingMessage, res: ServerResponse, ctx: CallContext, route: R) => Promise<void>;
  /**
   * The route phase: what serves the request, decided once from its target (normal form), after
   * the edge checks; `upgrade` true for an Upgrade request. Without it the route is undefined.
   */
  route?: (req: IncomingMessage, target: RequestTarget, upgrade: boolean) => R;
  /** Called as a request (or upgrade) enters each phase: for tests and debugging only. */
  onPhase?: (phase: FrontPhase, req: IncomingMessage) => void;
  /**
   * Asked per request: true when nothing before the handler needs the ambient context (no auth
   * step that can log), so the request is not run inside the process's ContextStore and no
   * AsyncLocalStorage is entered for it (on Node 20 entering one turns on promise hooks for the
   * whole process). The handler then gets the context only as its argument. Default: false.
   */
  explicitContext?: (req: IncomingMessage) => boolean;
  /**
   * Answers an Upgrade request, once it passed the rate limit (keyed by subject: the handler runs
   * `upgradeRateLimited(req, socket, true)` after its auth step). Nothing is read from `socket` yet.
   */
  upgrade?: (req: IncomingMessage, socket: Duplex, head: Buffer, route: R) => void;
  /** Requests for which this returns false are not counted in the stats (the dashboard's own polling). */
  counted?: (req: IncomingMessage) => boolean;
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
  refuse?: (req: IncomingMessage) => MeshError | undefined;
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
  authorize?: (req: IncomingMessage, res: ServerResponse, route: R) => Promise<void> | undefined;
  /**
   * Terminates mutual TLS with this workload certificate (src/base/mtls/server.ts, as
   * its mode says: permissive or strict) instead of --enable_tls: the sidecar's inbound listener.
   * `service` names it in the 400 a plain caller gets in strict mode. Such a listener is not one
   * of the process's own addresses for the self-guard (what it serves is forwarded to the app, so
   * calling it is no loop), and --cors does not apply to it (its callers are mesh processes).
   */
  mtls?: { workload: WorkloadTls; service: string };
  /** Certificates of this listener's own instead of the process's (--enable_tls): a Gateway's HTTPS port. */
  tls?: TlsProvider;
  /**
   * True when this request's caller may assert an end user: its `Mesh-Auth-Subject` and
   * `Mesh-Auth-Scopes` are kept (src/edge/filters/header-names.ts). Default: never, they are removed.
   */
  trustsAuthHeaders?: (req: IncomingMessage) => boolean;
}

/** The methods of the HTTP semantic conventions; any other is `_OTHER` (and names its span `HTTP`). */
const HTTP_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH']);

/** The method part of a server span's name (HTTP semantic conventions). */
function spanMethod(req: IncomingMessage): string {
  const method = req.method ?? 'GET';
  return HTTP_METHODS.has(method) ? method : 'HTTP';
}

export class FrontServer<R = undefined> {
  private server?: Server;
  private lifecycle?: ServerLifecycle;
  /** The request being received on a connection, so a read timeout can answer it. */
  private readonly receiving = new WeakMap<Duplex, ServerResponse>();
  private readonly headerTimeouts: Counter;
  private readonly requestTimeouts: Counter;
  private readonly rqTotal: Counter;
  private readonly rqClass: Counter[];
  private readonly rqActive: Gauge;
  private readonly cxActive: Gauge;
  private readonly cxTotal: Counter;
  private readonly rqTime: Histogram;
  readonly secure: boolean;
  /** The process's access log (--access_log), or none. */
  private readonly accessLog?: AccessLog;
  private detachTls?: () => void;
  private stopMtls?: () => void;
  private readonly onPhase?: (phase: FrontPhase, req: IncomingMessage) => void;
  /** --rate_limit, shared by the request and upgrade chains. */
  private readonly limiter?: FrontLimiter;
  /** The edge's filters and the handler, composed once (src/edge/filters/chains.ts). */
  private readonly requestStep: EdgeStep<R>;
  private readonly upgradeStep?: EdgeStep<R>;

  constructor(private readonly options: FrontServerOptions<R>) {
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
          upgrade(ex.req, ex.upgrade!.socket, ex.upgrade!.head, ex.route);
        } catch (err) {
          ex.fail(err);
        }
      };
      this.upgradeStep = compose(upgradeStep, upgradeChain(parts));
    }
  }

  async listen(address: string): Promise<AddressInfo> {
    const { host, port } = parseAddress(address);
    const onRequest = (req: IncomingMessage, res: ServerResponse) => this.onRequest(req, res);
    const edge = this.options.edge;
    const limits = edge.settings.limits;
    const serverOptions = { ...httpServerOptions(limits), requireHostHeader: this.options.refuse === undefined };
    // TLS: the process's provider (files reloaded on change, or ACME), shared by its listeners.
    const tls = this.options.tls ?? (this.secure ? edge.tls : undefined);
    await tls?.start();
    let server: Server;
    if (tls) {
      const https = createHttpsServer({ ...tls.serverOptions(), ...serverOptions }, onRequest);
      tls.attach(https);
      this.detachTls = () => tls.detach(https);
      server = https;
    } else {
      server = createHttpServer(serverOptions, onRequest);
      const mtls = this.options.mtls;
      // Before anything else listens for the server's connections (serveMtls takes node:http's own listener).
      if (mtls) this.stopMtls = serveMtls(server, { workload: mtls.workload, service: mtls.service, stats: edge.stats.scope(httpStatPrefix(this.options.statPrefix)), acceptTimeoutMs: limits.headersTimeoutMs, log: edge.logging.get('http') });
    }
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
    this.lifecycle = new ServerLifecycle(server, limits, { stats: edge.stats, prefix: httpStatPrefix(this.options.statPrefix) }, () => this.closeOthers());
    const bound = await listenOn(server, host, port, edge.settings.reusePort);
    edge.addDrainable(this.lifecycle);
    if (!this.options.mtls) edge.addSelfAddress(bound.address, bound.port, this.options.statPrefix);
    return bound;
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
        res.shouldKeepAlive = false;
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
  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const edge = this.options.edge;
    const onPhase = this.onPhase;
    onPhase?.('accept', req);
    const headers = req.headers;
    const target = attachTarget(req);
    onPhase?.('target', req);
    const parent = parseTraceparent(headers[TRACEPARENT], headers[TRACESTATE]);
    const span = edge.tracer ? this.startSpan(req, target, parent) : undefined;
    const trace = span ? traceOf(span) : edge.context.hop(parent);
    const ctx: CallContext = { trace };
    if (this.options.explicitContext?.(req)) this.serve(req, res, ctx, span, target);
    else edge.context.run(ctx, () => this.serve(req, res, ctx, span, target));
  }

  private startSpan(req: IncomingMessage, target: RequestTarget, parent: ReturnType<typeof parseTraceparent>): Span {
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
      'network.protocol.version': req.httpVersion,
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

  private serve(req: IncomingMessage, res: ServerResponse, ctx: CallContext, span: Span | undefined, target: RequestTarget): void {
    const started = performance.now();
    const accessLog = this.accessLog;
    const trace = ctx.trace!;
    const tap = this.options.edge.tap;
    const info = accessLog ? accessLog.begin(req, res, trace.traceId, tap.active) : tap.active ? tap.begin(req, res, trace.traceId) : undefined;
    const counted = this.options.counted?.(req) ?? true;
    if (counted) {
      this.rqTotal.inc();
      this.rqActive.inc();
    }
    // One 'close' listener per response (below) serves the stats, the access log and the drain.
    const lifecycle = this.lifecycle;
    lifecycle?.track(res);
    const socket = req.socket;
    this.receiving.set(socket, res);
    req.once('end', () => this.receiving.get(socket) === res && this.receiving.delete(socket));
    res.once('close', () => {
      lifecycle?.untrack(res);
      if (this.receiving.get(socket) === res) this.receiving.delete(socket);
      const ms = performance.now() - started;
      if (counted) {
        this.rqActive.dec();
        // Count what was really sent; a response that never started counts as a 5xx.
        const status = res.headersSent ? res.statusCode : 500;
        this.rqClass[Math.min(4, Math.max(0, Math.floor(status / 100) - 1))]!.inc();
        this.rqTime.record(ms);
      }
      this.onPhase?.('log', req);
      if (info) {
        accessLog?.log(req, res, info, ms);
        if (tap.active) tap.publish(this.options.statPrefix, req, res, info, ms);
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
    this.requestStep(new RequestExchange<R>(req, res, target, ctx, this));
  }

  /** The `id` of this front end's error JSON. */
  get errorId(): string {
    return this.options.errorId;
  }

  /** A request's failure past the edge (a handler's error, a rejected auth step): logged unless a MeshError, then answered. */
  failRequest(req: IncomingMessage, res: ServerResponse, ctx: CallContext | undefined, err: unknown): void {
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
  upgradeRateLimited(req: IncomingMessage, socket: Duplex, afterAuth: boolean, next: () => void): void {
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
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
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
  readonly upgrade: { socket: Duplex; head: Buffer };

  constructor(
    readonly req: IncomingMessage,
    readonly target: RequestTarget,
    socket: Duplex,
    head: Buffer,
    private readonly errorId: string,
    private readonly edge: EdgeContext,
  ) {
    this.upgrade = { socket, head };
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
