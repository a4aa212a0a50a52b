/**
 * `mesh sidecar` (SPEC 1.2, 4.2; DESIGN 6): registration, RPC, proxy and broker over HTTP and
 * WebSocket for apps in any language, plus the health-checked registration of one app.
 *
 * Routes (exact paths; the query is free):
 *   GET  /                 {"version":..,"handler":..,"namespace":..}
 *   *    /registry         registry-api.ts
 *   POST /rpc              handlers/rpc-endpoint.ts (form fields or JSON)
 *   GET  /rpc + WebSocket  a streaming call: /rpc?service=S&endpoint=E (handlers/rpc-endpoint.ts, handlers/stream.ts)
 *   *    /broker           broker-api.ts (POST publish, WebSocket subscribe)
 *   GET  /stats            the dashboard, src/fronts/dashboard (only with --enable_stats)
 *   GET  /_mesh/health     200 live / 503 draining (the front server)
 *   *    anything else     --handler=rpc (default): /<service>/<method> by RPC (SPEC 4.4, namespace
 *                          go.mesh.srv); --handler=proxy: reverse proxy to <namespace>.<first element>
 *
 * With --routes=FILE (docs/routing.md), a request at any path but the sidecar's own is first
 * matched against the route file: a match goes to the route's backend (service, version, weight)
 * with its timeouts, by the route's handler (default --handler); no match: as above.
 *
 * A browser request whose Origin is neither the sidecar's own nor allowed by --cors is refused with
 * 403 on the sidecar's own routes and the rpc handler (CSRF and cross-site WebSocket hijacking of
 * a sidecar on 127.0.0.1); proxied requests are the app's business and pass.
 *
 * Every request and WebSocket upgrade, on every path, first passes the Host check of
 * src/base/http/host-check.ts (DNS rebinding): a foreign Host gets 403, counted in
 * `http.sidecar.downstream_rq_host_refused`.
 */
import type { IncomingMessage } from 'node:http';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { Http2Settings } from '../../edge/front-server.js';
import { GrpcCalls, type GrpcCall } from '../../edge/handlers/grpc-calls.js';
import type { Duplex } from 'node:stream';
import type { AddressInfo } from 'node:net';
import type { Runtime } from '../../process/runtime.js';
import type { CallContext } from '../../base/util/call-context.js';
import { ERROR_IDS, forbidden, internalError, MeshError, methodNotAllowed, noBackend, notFound, originNotAllowed, rootMethodNotAllowed } from '../../base/errors.js';
import { FrontServer, VERSION_PATH, type FrontPhase } from '../../edge/front-server.js';
import { refuseSocket, sendJson } from '../../base/http/respond.js';
import { setRoute, targetOf, type RequestTarget } from '../../base/http/target.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';
import { resolveProxyPath, RpcPathResolver, type RpcRoute } from '../../edge/handlers/resolve.js';
import { handleRpc } from '../../edge/handlers/rpc.js';
import { handleRpcEndpoint, handleRpcStreamUpgrade } from '../../edge/handlers/rpc-endpoint.js';
import { handleProxy, handleProxyUpgrade } from '../../edge/handlers/proxy.js';
import { handleSse, StreamSockets, wantsEventStream } from '../../edge/handlers/stream.js';
import { packageVersion } from '../../admin/build-info.js';
import { handleRegistry } from './registry-api.js';
import { BrokerApi } from './broker-api.js';
import { Dashboard, isDashboardPath } from '../dashboard/dashboard.js';
import { AppRegistration, type AppOptions } from './health-checker.js';
import { ALLOWED_HOSTS_FLAG, HostCheck } from '../../base/http/host-check.js';
import type { FrontRateLimit } from '../../base/http/rate-limit.js';
import { EdgeGuard, type EdgeAuth, type EdgeTarget } from '../../edge/auth/edge.js';
import { SidecarInbound } from './inbound.js';
import { CALLER_NAMES, MTLS_METADATA_KEY, spiffeIdOf, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { ServiceAuthz } from '../../edge/auth/authz.js';
import { advertisedAddress } from '../../base/util/address.js';
import { handleApi } from '../../edge/handlers/api.js';
import { resolveRpcPath } from '../../edge/handlers/resolve.js';
import { LiveRoutes } from '../../edge/routes/live.js';
import { beginRule, chooseFileRoute, sendPreflight, sendRedirect } from '../../edge/routes/choose.js';
import { RouteEffectsCache, type RoutePolicy } from '../../edge/routes/effects.js';
import { MirrorSender } from '../../edge/handlers/mirror.js';
import { edgeContext } from '../../edge/context.js';
import { listenFailure } from '../../base/util/listen-error.js';

export const SIDECAR_ERROR_ID = ERROR_IDS.sidecar;
export const SIDECAR_NAMESPACE = 'go.mesh.srv';
export const SIDECAR_DEFAULT_ADDRESS = '127.0.0.1:8081';
export const SIDECAR_DEFAULT_ADMIN = '127.0.0.1:9902';
const STAT_PREFIX = 'sidecar';
export const SIDECAR_HOST_REFUSED_STAT = `http.${STAT_PREFIX}.downstream_rq_host_refused`;

export type SidecarHandler = 'rpc' | 'proxy';

export interface SidecarOptions {
  namespace?: string;
  handler?: SidecarHandler;
  /** The app to register (and health-check), from --server_name and friends. */
  app?: AppOptions;
  /** `--rate_limit`: the limiter of the listener (src/base/http/rate-limit.ts); undefined: no limit. */
  rateLimit?: FrontRateLimit;
  /** `--cors_max_age` in seconds. Default 600. */
  corsMaxAgeSec?: number;
  /** Authentication and rules (--auth, --auth_rules; src/edge/auth/). Without: spoofed Mesh-Auth-* headers are still removed. */
  auth?: EdgeAuth;
  /** --sidecar_token: every route but the health path needs `Mesh-Sidecar-Token: <token>`, upgrades included. */
  sidecarToken?: string;
  /** Called as a request enters each phase of the front server (src/edge/front-server.ts): for tests and debugging. */
  onPhase?: (phase: FrontPhase, req: FrontRequest) => void;
  /**
   * With --mtls and an app: the inbound listener (inbound.ts) the app is registered at instead of
   * its own address. The runtime needs the app's static cluster (inboundCluster).
   */
  inbound?: SidecarInboundOptions;
  /** --routes: the route file for the app's outbound calls (src/edge/routes/), matched before the handler. */
  routesFile?: string;
  /** Backend choice of the route file (tests); default Math.random. */
  routesRandom?: () => number;
  /**
   * `--enable_http2`: the listener serves HTTP/2 as well as HTTP/1.1 (h2c by prior knowledge, h2
   * by ALPN with TLS), and native gRPC calls (docs/grpc.md). Not the inbound listener.
   */
  http2?: boolean | Http2Settings;
}

export interface SidecarInboundOptions {
  /** --inbound_address: host:port to listen on. */
  address: string;
  /** --advertise: what to register instead of the bound address. */
  advertise?: string;
  /** The sidecar's workload certificate for the app. */
  workload: WorkloadTls;
  /** --authz_rules, checked on every call that arrives there. */
  authz?: ServiceAuthz;
  /** --inbound_auth_callers: the service names whose Mesh-Auth-* reach the app. Default `mesh.api`. */
  authCallers?: readonly string[];
}

/**
 * What serves a request, decided once (the front server's route phase): one of the sidecar's own
 * paths, or the handler's target (undefined: the path names no service, 404).
 */
export type SidecarRoute =
  | { kind: 'registry' | 'rpc-endpoint' | 'broker' | 'root' | 'dashboard' }
  /** `policy`: set when a route of the route file chose the backend (its version and timeouts). */
  | { kind: 'proxy'; service: string | undefined; policy?: RoutePolicy }
  /** `handler`: api only for a route file's `handler: api`. */
  | { kind: 'call'; call: RpcRoute | undefined; handler?: 'api' | 'rpc'; policy?: RoutePolicy }
  /** A route of the route file whose backends all weigh 0: 500, as on the gateway. */
  | { kind: 'no-backend'; route: string; why: string; policy: RoutePolicy }
  /** A route of the route file with a RequestRedirect: answered here. */
  | { kind: 'redirect'; status: number; location: string; policy: RoutePolicy }
  | { kind: 'preflight'; headers: Array<[string, string]>; policy: RoutePolicy }
  /** A native gRPC call over HTTP/2 (--enable_http2), passed through to a node unchanged, or a gRPC-Web call served as one. */
  | GrpcCall;

const OWN_ROUTES = new Map<string, SidecarRoute>([
  ['/registry', { kind: 'registry' }],
  ['/rpc', { kind: 'rpc-endpoint' }],
  ['/broker', { kind: 'broker' }],
  [VERSION_PATH, { kind: 'root' }],
]);
const ROOT: SidecarRoute = { kind: 'root' };
const DASHBOARD: SidecarRoute = { kind: 'dashboard' };

/** True when the request has no Origin, or its Origin is the sidecar's own or allowed by --cors. */
export function originAllowed(req: FrontRequest, cors: readonly string[]): boolean {
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  if (cors.includes('*') || cors.includes(origin)) return true;
  try {
    return new URL(origin).host === req.headers.host;
  } catch {
    return false;
  }
}

export class Sidecar {
  readonly fe: EdgeHandlerContext;
  readonly handler: SidecarHandler;
  readonly app?: AppRegistration;
  /** --routes: the route file, matched before the handler. */
  readonly routes?: LiveRoutes;
  /** The route file's rules at work: their stats, faults and filters. */
  private readonly effects?: RouteEffectsCache;
  private readonly server: FrontServer<SidecarRoute, FrontRequest, FrontResponse>;
  /** Native gRPC (--enable_http2). */
  private readonly grpc: GrpcCalls;
  private readonly broker: BrokerApi;
  private readonly streams: StreamSockets;
  private readonly dashboard?: Dashboard;
  private readonly rpcPaths: RpcPathResolver;
  private readonly hostCheck: HostCheck;
  private readonly guard: EdgeGuard;
  private readonly inbound?: SidecarInbound;
  private readonly inboundOptions?: SidecarInboundOptions;
  /** Where the inbound listener listens (once started). */
  inboundBound?: AddressInfo;
  private boundHost?: string;
  private stopping?: Promise<void>;

  constructor(
    private readonly runtime: Runtime,
    options: SidecarOptions = {},
  ) {
    const meshOptions = runtime.options;
    this.handler = options.handler ?? 'rpc';
    if (options.routesFile !== undefined) {
      const routes = new LiveRoutes({ file: options.routesFile, stats: runtime.stats, log: runtime.logging.get('router'), random: options.routesRandom, defaultHandler: this.handler, front: 'mesh sidecar' });
      this.routes = routes;
      this.effects = new RouteEffectsCache(runtime.stats);
      runtime.addRouteSource(() => {
        const d = routes.dump();
        return [{ routeConfigName: `file:${d.file}`, versionInfo: d.version, table: d }];
      });
    }
    const guard = new EdgeGuard(options.auth, { stats: runtime.stats, statPrefix: STAT_PREFIX, sidecarToken: options.sidecarToken, errorId: SIDECAR_ERROR_ID, rateLimit: options.rateLimit });
    this.guard = guard;
    const edge = edgeContext(runtime);
    this.fe = {
      edge,
      namespace: options.namespace ?? SIDECAR_NAMESPACE,
      errorId: SIDECAR_ERROR_ID,
      maxBodyBytes: edge.settings.maxBodyBytes,
      mirrors: this.routes ? new MirrorSender(edge.clusters, edge.settings.clientRequestTimeoutMs) : undefined,
      authorizeCall: (req, res, service, method) => guard.authorizeCall(req, res, service, method),
      routeCall: (req, service, method) => this.rpcCallRoute(req, service, method),
    };
    this.rpcPaths = new RpcPathResolver(this.fe.namespace);
    this.hostCheck = new HostCheck(meshOptions.adminAllowedHosts, () => this.boundHost);
    if (meshOptions.enableStats) {
      const subscribers = runtime.stats.gauge('sidecar.broker.subscribers_active');
      this.dashboard = new Dashboard({
        stats: runtime.stats,
        server: runtime.state,
        clusters: runtime.clusters,
        prefix: STAT_PREFIX,
        name: 'mesh sidecar',
        errorId: SIDECAR_ERROR_ID,
        extra: { subscribers: () => subscribers.value },
        histograms: meshOptions.statsHistograms,
      });
    }
    this.broker = new BrokerApi(this.fe);
    this.streams = new StreamSockets(this.fe);
    if (options.app) this.app = new AppRegistration(runtime, options.app);
    if (options.app && options.inbound) {
      this.inboundOptions = options.inbound;
      const workload = options.inbound.workload;
      const authCallers = new Set((options.inbound.authCallers ?? [CALLER_NAMES.gateway]).map((name) => spiffeIdOf(workload.trustDomain, name)));
      this.inbound = new SidecarInbound(runtime, { app: options.app.name, workload, authz: options.inbound.authz, authCallers, http2: options.http2 });
    }
    const grpc = new GrpcCalls(this.fe, { http2: Boolean(options.http2), workload: () => runtime.callerWorkload, routes: () => this.routes?.tables.grpc });
    this.grpc = grpc;
    runtime.onShutdown(() => grpc.close());
    this.server = new FrontServer<SidecarRoute, FrontRequest, FrontResponse>({
      edge,
      http2: options.http2,
      // A native gRPC call is bounded by its grpc-timeout, not by --request_timeout.
      untimed: (req) => this.grpc.untimed(req),
      statPrefix: STAT_PREFIX,
      errorId: SIDECAR_ERROR_ID,
      route: (req, target) => this.route(req, target),
      handle: (req, res, ctx, route) => this.handle(req, res, ctx, route),
      upgrade: (req, socket, head, route) => this.upgrade(req, socket, head, route),
      onPhase: options.onPhase,
      counted: (req) => !(this.dashboard && isDashboardPath(targetOf(req).path)),
      // Subscriptions end with 1001 once in-flight requests are done, before connections are destroyed.
      closeUpgraded: async () => {
        this.streams.close();
        await this.broker.close();
      },
      refuse: (req) => this.hostRefusal(req),
      rateLimit: options.rateLimit,
      corsMaxAgeSec: options.corsMaxAgeSec,
      // A route's CORS preflight is answered before the auth step, as --cors answers one: a browser sends it without credentials, and it reaches no backend.
      authorize: (req, res, route) => {
        if (route.kind === 'preflight') return undefined;
        const checked = guard.checkRequest(req, res, () => this.authTarget(req, route));
        return route.kind === 'grpc' || route.kind === 'grpc-web' ? this.grpc.authorized(route, checked) : checked;
      },
      // Without auth nothing before the handler needs the ambient context: handle() decides.
      explicitContext: () => !guard.enforcing,
    });
  }

  /**
   * The route phase: an own path (`/registry`, `/rpc`, `/broker`, `/_mesh/version`; `/` too without
   * a route file: with one, `/` is the routes'), else the route file's first matching route, else
   * the handler's target.
   */
  private route(req: FrontRequest, target: RequestTarget): SidecarRoute {
    const path = target.path;
    const grpc = this.grpc.route(req, path);
    if (grpc) return grpc;
    const own = OWN_ROUTES.get(path);
    if (own) return own;
    if (path === '/' && !this.routes) return ROOT;
    if (this.dashboard && isDashboardPath(path)) return DASHBOARD;
    const file = this.routes && this.fileRoute(req, target);
    if (file) return file;
    if (this.handler === 'proxy') return { kind: 'proxy', service: resolveProxyPath(path, this.fe.namespace)?.service };
    return { kind: 'call', call: this.rpcPaths.resolve(path) };
  }

  /**
   * The route file's answer (the table is read once: a reload swaps it for later requests only):
   * the backend sent by the route's handler (default --handler), or undefined when no route matches.
   */
  private fileRoute(req: FrontRequest, target: RequestTarget): SidecarRoute | undefined {
    const answer = chooseFileRoute(this.routes!.table, this.effects!, this.secure, req, target, this.fe.errorId);
    if (!answer || answer.kind !== 'backend') return answer;
    const handler = answer.handler ?? this.handler;
    if (handler === 'proxy') return { kind: 'proxy', service: answer.service, policy: answer.policy };
    const method = resolveRpcPath(answer.path, this.fe.namespace)?.method;
    return { kind: 'call', handler, call: method ? { service: answer.service, method } : undefined, policy: answer.policy };
  }

  /**
   * The route file's answer for a call at /rpc: the call is matched as a POST to
   * `/rpc/<service>/<method>` with the request's host, headers and query; a match calls the
   * route's backend (whatever its handler) with its version and timeouts.
   */
  private rpcCallRoute(req: FrontRequest, service: string, method: string): { service: string; policy: RoutePolicy } | undefined {
    if (!this.routes) return undefined;
    const answer = chooseFileRoute(this.routes.table, this.effects!, this.secure, req, { path: `/rpc/${service}/${method}`, query: targetOf(req).query }, this.fe.errorId);
    if (!answer) return undefined;
    if (answer.kind === 'no-backend') throw noBackend(this.fe.errorId, answer.route, answer.why);
    if (answer.kind === 'redirect') throw internalError(this.fe.errorId, `a call at /rpc cannot follow a redirect (route to ${answer.location})`);
    if (answer.kind === 'preflight') throw internalError(this.fe.errorId, 'a call at /rpc is not a CORS preflight');
    return { service: answer.service, policy: answer.policy };
  }

  /** What the auth rules see of a request: the service (and method) its route calls, or just the path. */
  private authTarget(req: FrontRequest, route: SidecarRoute): EdgeTarget {
    const path = targetOf(req).path;
    switch (route.kind) {
      case 'rpc-endpoint':
        return { path, call: true };
      case 'proxy':
        return { path, service: route.service };
      case 'call':
        return route.call ? { path, service: route.call.service, endpoint: route.call.method } : { path };
      default:
        return { path };
    }
  }

  get secure(): boolean {
    return this.server.secure;
  }

  /**
   * Listens on the address (and the inbound listener on its own), starts the app registration (at
   * the inbound listener's address, with mtls=true, when there is one), and hooks the shutdown.
   */
  async start(address: string): Promise<AddressInfo> {
    let bound: AddressInfo;
    try {
      bound = await this.server.listen(address);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (!e.code) throw err;
      throw new Error(`sidecar cannot listen on ${address}: ${listenFailure(e, address, '--address')}`);
    }
    this.boundHost = bound.address;
    let at;
    if (this.inbound && this.inboundOptions) {
      let inbound: AddressInfo;
      try {
        inbound = await this.inbound.listen(this.inboundOptions.address);
      } catch (err) {
        await this.server.close();
        throw new Error(`inbound listener cannot listen on ${this.inboundOptions.address}: ${listenFailure(err as NodeJS.ErrnoException, this.inboundOptions.address, '--inbound_address')}`);
      }
      this.inboundBound = inbound;
      const advertised = advertisedAddress({ host: inbound.address, port: inbound.port }, this.inboundOptions.advertise);
      at = { address: advertised.host, port: advertised.port, metadata: { [MTLS_METADATA_KEY]: 'true' } };
    }
    const listeners = [{ name: STAT_PREFIX, address: bound.address, port: bound.port }];
    if (this.inboundBound) listeners.push({ name: `${STAT_PREFIX}_inbound`, address: this.inboundBound.address, port: this.inboundBound.port });
    this.runtime.onShutdown(this.runtime.addListenerSource(() => listeners));
    this.app?.start(at);
    this.routes?.start();
    this.dashboard?.start();
    this.runtime.onShutdown(() => this.stop());
    return bound;
  }

  /**
   * Deregisters the app, drains the server (in-flight requests finish, up to --drain_timeout), ends
   * every subscription with 1001 and closes. On a runtime shutdown the app was already deregistered
   * and the server drained by the runtime's drain (the state turned draining first).
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.dashboard?.stop();
      this.routes?.stop();
      await this.app?.stop();
      await this.server.close();
      await this.inbound?.close();
      await this.broker.close();
    })();
    return this.stopping;
  }

  /** The 403 of a request whose Host is not this machine's (DNS rebinding), counted; else undefined. */
  private hostRefusal(req: FrontRequest): MeshError | undefined {
    const verdict = this.hostCheck.check(req.headers.host, req.httpVersion);
    if (verdict === 'allowed') return undefined;
    this.runtime.stats.counter(SIDECAR_HOST_REFUSED_STAT).inc();
    const detail = verdict === 'missing' ? 'a Host header is required' : `host ${req.headers.host} is not allowed (allow it with ${ALLOWED_HOSTS_FLAG})`;
    return forbidden(this.fe.errorId, detail);
  }

  /**
   * The rpc and proxy paths take the request's context as an argument; every other route runs
   * inside it (what it calls reads the ambient context).
   */
  private async handle(req: FrontRequest, res: FrontResponse, ctx: CallContext, route: SidecarRoute): Promise<void> {
    const fe = this.fe;
    const path = targetOf(req).path;
    const within = <R>(fn: () => R): R => this.runtime.context.within(ctx, fn);
    const started = 'policy' in route ? beginRule(route.policy, req, res, fe.errorId) : undefined;
    if (started) await started;
    // A route's CORS preflight reaches no backend: the route's own CORS answers it.
    if (route.kind !== 'proxy' && route.kind !== 'preflight' && !originAllowed(req, this.fe.edge.settings.corsOrigins)) {
      req.resume();
      throw originNotAllowed(fe.errorId, req.headers.origin);
    }
    switch (route.kind) {
      case 'registry':
        return within(() => handleRegistry(fe, req, res));
      case 'rpc-endpoint':
        return within(() => handleRpcEndpoint(fe, req, res));
      case 'broker':
        return within(() => this.broker.handle(req, res));
      case 'root':
        req.resume();
        if (req.method !== 'GET' && req.method !== 'HEAD') {
          res.setHeader('allow', 'GET, HEAD');
          throw rootMethodNotAllowed(fe.errorId, req.method, targetOf(req).path);
        }
        sendJson(res, 200, { version: packageVersion(), handler: this.handler, namespace: fe.namespace });
        return;
      case 'dashboard':
        return within(() => this.dashboard!.handle(req, res));
      case 'proxy':
        if (!route.service) {
          req.resume();
          throw notFound(fe.errorId, `path ${path} names no service (the first path element, in namespace ${fe.namespace})`);
        }
        return handleProxy(fe, route.service, this.secure, req, res, ctx, route.policy);
      case 'no-backend':
        req.resume();
        throw noBackend(fe.errorId, route.route, route.why);
      case 'redirect':
        return sendRedirect(req, res, route);
      case 'preflight':
        return sendPreflight(req, res, route);
      case 'grpc':
      case 'grpc-web':
        return this.grpc.handle(req, res, route, ctx);
    }
    const method = req.method ?? 'GET';
    if (method === 'OPTIONS' || method === 'TRACE' || method === 'CONNECT') {
      req.resume();
      res.setHeader('allow', 'GET, POST, PUT, PATCH, DELETE');
      throw methodNotAllowed(fe.errorId, `method ${method} not allowed on ${path}`);
    }
    const call = route.call;
    if (!call) {
      req.resume();
      throw notFound(fe.errorId, `path ${path} names no service and method (use /<service>/<method>, namespace ${fe.namespace})`);
    }
    setRoute(req, targetOf(req).path);
    // Streams are not served by routes (as on the gateway): a routed call is a unary one.
    if (!route.policy && wantsEventStream(req)) return within(() => handleSse(fe, this.streams, call, req, res));
    return route.handler === 'api' ? handleApi(fe, call, req, res, ctx, route.policy) : handleRpc(fe, call, req, res, ctx, route.policy);
  }

  /** The handle phase of an upgrade (the Host check was the chain's first step): the auth step, then upgradeAuthorized. */
  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, route: SidecarRoute): void {
    const fe = this.fe;
    const { path } = targetOf(req);
    // Under the proxy handler the auth rules see the app's service at every path but /registry, /rpc and / (/broker and the dashboard's paths included).
    // A proxy route of the route file sends the upgrade to its backend (and version).
    const routed = route.kind === 'proxy' && route.policy ? { service: route.service!, version: route.policy.version } : undefined;
    const proxied = routed ?? (this.handler === 'proxy' && path !== '/registry' && path !== '/rpc' && path !== '/' ? resolveProxyPath(path, fe.namespace) : undefined);
    const target = proxied ? { path, service: proxied.service } : this.handler === 'rpc' || path === '/rpc' ? this.authTarget(req, route) : { path };
    this.guard.check(req, undefined, target).then(
      () => this.server.upgradeRateLimited(req, socket, true, () => this.upgradeAuthorized(req, socket, head, path, route, proxied?.service, routed?.version)),
      (err: unknown) => refuseSocket(socket, err, fe.errorId),
    );
  }

  private upgradeAuthorized(req: IncomingMessage, socket: Duplex, head: Buffer, path: string, route: SidecarRoute, proxied: string | undefined, version?: string): void {
    const fe = this.fe;
    const refuse = (err: MeshError): void => refuseSocket(socket, err, fe.errorId, { linger: false });
    if (path === '/broker') {
      if (!originAllowed(req, this.fe.edge.settings.corsOrigins)) return refuse(originNotAllowed(fe.errorId, req.headers.origin));
      return this.broker.upgrade(req, socket, head);
    }
    if (path === '/rpc') {
      if (!originAllowed(req, this.fe.edge.settings.corsOrigins)) return refuse(originNotAllowed(fe.errorId, req.headers.origin));
      void handleRpcStreamUpgrade(fe, this.streams, req, socket, head);
      return;
    }
    if (proxied) return handleProxyUpgrade(fe, proxied, this.secure, req, socket, head, version);
    // A call route of the route file serves no stream (as on the gateway).
    const stream = route.kind === 'call' && !route.policy ? route.call : undefined;
    if (stream) {
      if (!originAllowed(req, this.fe.edge.settings.corsOrigins)) return refuse(originNotAllowed(fe.errorId, req.headers.origin));
      void this.streams.upgrade(stream, req, socket, head);
      return;
    }
    refuse(notFound(fe.errorId, `no WebSocket endpoint at ${path} (subscribe at /broker?topic=T${this.handler === 'proxy' ? '; streaming calls at /rpc?service=S&endpoint=E' : '; streaming endpoints at /<service>/<method> and /rpc?service=S&endpoint=E; with --handler=proxy upgrades are proxied to the app'})`));
  }
}
