/**
 * `mesh api`: the HTTP entry point (SPEC 1.3, 4.3, 4.4; DESIGN section 6).
 *
 * Paths under /_mesh/ are always the gateway's:
 *   GET /_mesh/health   200 while live, 503 while draining (admin /healthcheck/fail)
 *   GET /_mesh/version  {"version":"<mesh version>"}
 * Then the route file's first matching route (`--routes=FILE`, src/edge/routes/: a backend chosen
 * by weight, sent by the route's handler), over any path (`/`, `/rpc` and `/stats` included). Then
 * the gateway's own paths:
 *   GET /               {"version":"<mesh version>"} (without a route file only: with one, `/` is the routes')
 *   POST /rpc           call a service directly (SPEC 2.8): those of --rpc_allow (403 for others); off with --enable_rpc=false
 *   GET /rpc + WebSocket a streaming call, /rpc?service=S&endpoint=E, with the same checks as POST /rpc
 *   GET /stats          with --enable_stats: the dashboard (src/fronts/dashboard; JSON for Accept: application/json)
 * Everything else goes to the handler:
 * `--handler=api|rpc|proxy|event`, or by default the registry router
 * (src/fronts/gateway/router.ts) with the api handler as the fallback.
 *
 * A route file's Gateway documents add listeners (./listeners.ts): there a request is served by
 * the routes attached to the listener its Host is for (404 when none matches; 421 over TLS when the
 * Host is for another listener than the SNI name), and by none of the gateway's own paths but /_mesh/.
 */
import { EndpointStats, type EndpointFamily } from '../../base/stats/endpoint-stats.js';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Runtime } from '../../process/runtime.js';
import type { CallContext } from '../../base/util/call-context.js';
import { ERROR_IDS, MeshError, misdirectedRequest, noBackend, noRoute, notFound, rootMethodNotAllowed } from '../../base/errors.js';
import type { TLSSocket } from 'node:tls';
import type { TlsProvider } from '../../tls/provider.js';
import type { LoadedPair } from '../../tls/files.js';
import { formatAddress, parseAddress } from '../../base/util/address.js';
import type { RouteChoice } from '../../edge/routes/table.js';
import { listenerPorts } from '../../edge/routes/listeners.js';
import type { ListenerSpec } from '../../edge/routes/file.js';
import { checkReload, ListenerCertificates, portServerName } from './listeners.js';
import { GrpcCalls, type GrpcCall } from '../../edge/handlers/grpc-calls.js';
import { FrontServer, OWN_PREFIX, VERSION_PATH, type FrontPhase, type FrontServerOptions, type Http2Settings } from '../../edge/front-server.js';
import { refuseSocket, sendJson } from '../../base/http/respond.js';
import { setRoute, targetOf, type RequestTarget } from '../../base/http/target.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';
import { resolveEventPath, resolveProxyPath, resolveRpcPath, RpcPathResolver, type RpcRoute } from '../../edge/handlers/resolve.js';
import { handleApi } from '../../edge/handlers/api.js';
import type { RoutePolicy } from '../../edge/routes/effects.js';
import { LiveRoutes } from '../../edge/routes/live.js';
import type { SettleOptions } from '../../tls/workload/watch.js';
import { RouteEffectsCache, routeAction } from '../../edge/routes/effects.js';
import { sendPreflight } from '../../edge/routes/choose.js';
import { MirrorSender } from '../../edge/handlers/mirror.js';
import type { RouteHandler } from '../../edge/routes/file.js';
import { handleRpc } from '../../edge/handlers/rpc.js';
import { handleRpcEndpoint, handleRpcStreamUpgrade } from '../../edge/handlers/rpc-endpoint.js';
import { handleEvent } from '../../edge/handlers/event.js';
import { handleProxy, handleProxyUpgrade } from '../../edge/handlers/proxy.js';
import { handleSse, StreamSockets, wantsEventStream } from '../../edge/handlers/stream.js';
import { packageVersion } from '../../admin/build-info.js';
import { RegistryRouter } from './router.js';
import type { HandlerName } from './routes.js';
import { Dashboard, isDashboardPath } from '../dashboard/dashboard.js';
import { Topology } from '../dashboard/topology.js';
import type { FrontRateLimit } from '../../base/http/rate-limit.js';
import { globsMatcher } from '../../base/util/regex.js';
import { EdgeGuard, type EdgeAuth, type EdgeTarget } from '../../edge/auth/edge.js';
import { edgeContext } from '../../edge/context.js';
import { listenFailure } from '../../base/util/listen-error.js';

export const DEFAULT_ADDRESS = ':8080';
export const DEFAULT_NAMESPACE = 'go.mesh.api';
/** The `id` of every error the gateway itself writes. */
export const ERROR_ID = ERROR_IDS.gateway;
/** Stats of the gateway's listener: http.gateway.downstream_rq_*. */
export const STAT_PREFIX = 'gateway';

export interface GatewayOptions {
  /** Listen address, `host:port` or `:port` (all interfaces). Default `:8080`. */
  address?: string;
  /** Default go.mesh.api. */
  namespace?: string;
  /** A fixed handler; undefined: the registry router, falling back to the api handler. */
  handler?: HandlerName;
  /** Serve /stats. */
  enableStats?: boolean;
  /** Router rebuild coalescing delay (ms). */
  routerDebounceMs?: number;
  /** Serve POST /rpc (default true); false: /rpc is a path like any other. */
  enableRpc?: boolean;
  /**
   * `--enable_http2`: serve HTTP/2 as well as HTTP/1.1 on the listener (h2 by ALPN with TLS, h2c by
   * prior knowledge without); `true` with the default bounds, or the bounds (src/edge/front-server.ts).
   */
  http2?: boolean | Http2Settings;
  /** Globs over the service names /rpc may call (`*` any run of characters, `?` one); default all. */
  rpcAllow?: string[];
  /** `--rate_limit`: the limiter of the listener (src/base/http/rate-limit.ts); undefined: no limit. */
  rateLimit?: FrontRateLimit;
  /** `--cors_max_age` in seconds. Default 600. */
  corsMaxAgeSec?: number;
  /** Authentication and rules (--auth, --auth_rules; src/edge/auth/). Without: spoofed Mesh-Auth-* headers are still removed. */
  auth?: EdgeAuth;
  /** Called as a request enters each phase of the front server (src/edge/front-server.ts): for tests and debugging. */
  onPhase?: (phase: FrontPhase, req: FrontRequest) => void;
  /** `--routes`: the route file (loaded by the constructor: a bad file throws its RouteFileError). */
  routesFile?: string;
  /** Backend choice of the route file (tests); default Math.random. */
  routesRandom?: () => number;
  /** How a change of the route file is read (tests; src/tls/workload/watch.ts readSettled); default 50 ms between reads. */
  routesSettle?: SettleOptions;
  /** `--gateway_ports`: where a Gateway listener's port (as written) listens; default the same port. */
  gatewayPorts?: Map<number, number>;
}

/**
 * What serves a request, decided once per request (the front server's route phase) and read by
 * the auth step, the handler and the upgrade: the gateway's own paths, or a call, proxy or event
 * target (from the fixed `--handler`, a registry route, or the api fallback); a target left
 * undefined names no service (404).
 */
export type GatewayRoute =
  | { kind: 'root' | 'dashboard' | 'rpc-endpoint' | 'none' }
  /** `stream`: false at the gateway's own paths, where no streaming call (SSE, WebSocket) is served. */
  /** `policy`: set when a route of the route file chose the backend (its version and timeouts). */
  /** `stat`: the registry router's route stats (--stats_endpoints). */
  | { kind: 'call'; handler: 'api' | 'rpc'; call: RpcRoute | undefined; stream: boolean; policy?: RoutePolicy; stat?: EndpointFamily }
  | { kind: 'proxy'; service: string | undefined; policy?: RoutePolicy; stat?: EndpointFamily }
  /** A route of the route file whose backends all weigh 0: 500, as the Gateway API says. */
  | { kind: 'no-backend'; route: string; why: string; policy?: RoutePolicy }
  /** A Gateway listener (`listener`) with no route for the request: 404. */
  | { kind: 'unrouted'; listener: string }
  /** Over TLS, a Host for another Gateway listener than the SNI name's: 421. */
  | { kind: 'misdirected'; host: string; sni: string }
  /** A native gRPC call over HTTP/2 (`/<package.Service>/<Method>`), passed through to a node unchanged, or a gRPC-Web call (HTTP/1.1 or HTTP/2) served as one. */
  | GrpcCall
  /** A route of the route file with a RequestRedirect: answered here. */
  | { kind: 'redirect'; status: number; location: string; policy: RoutePolicy }
  /** A CORS preflight a route's CORS filter answers. */
  | { kind: 'preflight'; headers: Array<[string, string]>; policy: RoutePolicy }
  | { kind: 'event'; event: { topic: string; name: string } | undefined; stat?: EndpointFamily };

const ROOT: GatewayRoute = { kind: 'root' };
const DASHBOARD: GatewayRoute = { kind: 'dashboard' };
const RPC_ENDPOINT: GatewayRoute = { kind: 'rpc-endpoint' };
const NONE: GatewayRoute = { kind: 'none' };

function shown(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}...` : path;
}

export class Gateway {
  readonly namespace: string;
  private readonly rpcPaths: RpcPathResolver;
  readonly handler?: HandlerName;
  readonly router?: RegistryRouter;
  /** `--routes`: the route file, matched before the handler or the registry router. */
  readonly routes?: LiveRoutes;
  /** The route file's rules at work: their stats, faults and filters. */
  private readonly effects?: RouteEffectsCache;
  /**
   * --stats_endpoints: the registry router's per-route stats, as the endpoints of the service
   * `gateway` (`service.gateway.endpoint.<service>/<Endpoint.Method>.`; a path no route
   * matches, and with --handler, which has no routes, every request: `_other`). A route file's
   * rules count under their own `vhost.` stats.
   */
  private readonly routeStats?: EndpointStats;
  readonly dashboard?: Dashboard;
  readonly fe: EdgeHandlerContext;
  private readonly server: FrontServer<GatewayRoute>;
  private readonly address: string;
  private readonly enableRpc: boolean;
  private readonly rpcAllowed?: (service: string) => boolean;
  private readonly guard: EdgeGuard;
  private readonly streams: StreamSockets;
  private readonly options: GatewayOptions;
  /** The servers of the route file's Gateway ports, by the port as written. */
  private readonly portServers = new Map<number, { server: FrontServer<GatewayRoute>; certs?: ListenerCertificates }>();
  /** Native gRPC (with --enable_http2) and gRPC-Web calls: the connections to the nodes, the service names, the stats. */
  private readonly grpc: GrpcCalls;
  /** The route file's Gateway ports listening: the port as written, the URL it listens on, its listeners. */
  readonly gatewayPorts: Array<{ port: number; url: string; listeners: string[] }> = [];
  /** The Gateway ports and protocols listening (listenerPorts): what a reload may not change. */
  private startedPorts?: string;
  /** The certificate pairs of the file a reload is about to put in use (read by its check). */
  private pendingPairs = new Map<ListenerSpec, LoadedPair>();

  /**
   * Builds the gateway; its router (when there is one) is a route source of the runtime, listed
   * by admin /routes.
   */
  constructor(
    private readonly runtime: Runtime,
    options: GatewayOptions = {},
  ) {
    this.namespace = (options.namespace ?? DEFAULT_NAMESPACE).replace(/\.+$/, '') || DEFAULT_NAMESPACE;
    this.rpcPaths = new RpcPathResolver(this.namespace);
    this.handler = options.handler;
    this.options = options;
    this.address = options.address ?? DEFAULT_ADDRESS;
    this.enableRpc = options.enableRpc ?? true;
    const allow = options.rpcAllow ?? [];
    if (allow.length > 0 && !allow.includes('*')) this.rpcAllowed = globsMatcher(allow);
    this.guard = new EdgeGuard(options.auth, { stats: runtime.stats, statPrefix: STAT_PREFIX, errorId: ERROR_ID, rateLimit: options.rateLimit });
    const guard = this.guard;
    if (options.routesFile !== undefined) {
      const defaultHandler: RouteHandler = this.handler === 'api' || this.handler === 'rpc' || this.handler === 'proxy' ? this.handler : 'api';
      const routes = new LiveRoutes({
        ...options.routesSettle,
        file: options.routesFile,
        stats: runtime.stats,
        log: runtime.logging.get('router'),
        random: options.routesRandom,
        defaultHandler,
        gateways: true,
        check: (file) => void (this.pendingPairs = checkReload(file, this.startedPorts)),
        onReload: () => this.reloadCertificates(),
      });
      this.routes = routes;
      this.effects = new RouteEffectsCache(runtime.stats, undefined, runtime.options.statsEndpoints);
      runtime.addRouteSource(() => {
        const d = routes.dump();
        return [{ routeConfigName: `file:${d.file}`, versionInfo: d.version, table: d }];
      });
    }
    const edge = edgeContext(runtime);
    this.fe = {
      edge,
      namespace: this.namespace,
      errorId: ERROR_ID,
      maxBodyBytes: edge.settings.maxBodyBytes,
      mirrors: this.routes ? new MirrorSender(edge.clusters, edge.settings.clientRequestTimeoutMs) : undefined,
      authorizeCall: (req, res, service, method) => guard.authorizeCall(req, res, service, method),
    };
    if (!this.handler) {
      const router = new RegistryRouter({
        registry: runtime.registry,
        namespace: this.namespace,
        logger: runtime.logging.get('router'),
        debounceMs: options.routerDebounceMs,
      });
      this.router = router;
      runtime.addRouteSource(() => [router.dump()]);
    }
    if (runtime.options.statsEndpoints) this.routeStats = new EndpointStats(runtime.stats, STAT_PREFIX);
    if (options.enableStats) {
      const topology = new Topology({ registry: runtime.registry, adminToken: runtime.options.adminToken });
      this.dashboard = new Dashboard({ stats: runtime.stats, server: runtime.state, clusters: runtime.clusters, prefix: STAT_PREFIX, name: 'mesh api', errorId: ERROR_ID, histograms: runtime.options.statsHistograms, topology });
    }
    const dashboard = this.dashboard;
    this.streams = new StreamSockets(this.fe);
    const grpc = new GrpcCalls(this.fe, { http2: Boolean(options.http2), workload: () => runtime.callerWorkload, routes: () => this.routes?.tables.grpc });
    this.grpc = grpc;
    runtime.onShutdown(() => grpc.close());
    this.server = this.frontServer(STAT_PREFIX, (req, target, upgrade) => this.route(req, target, upgrade));
  }

  /** A front server of the gateway: its own listener's, or a Gateway port's (with its certificates). */
  private frontServer(statPrefix: string, route: NonNullable<FrontServerOptions<GatewayRoute, FrontRequest, FrontResponse>['route']>, tls?: TlsProvider): FrontServer<GatewayRoute, FrontRequest, FrontResponse> {
    const guard = this.guard;
    const dashboard = this.dashboard;
    const server: FrontServer<GatewayRoute, FrontRequest, FrontResponse> = new FrontServer<GatewayRoute, FrontRequest, FrontResponse>({
      edge: this.fe.edge,
      http2: this.options.http2,
      statPrefix,
      errorId: ERROR_ID,
      route,
      tls,
      handle: (req, res, ctx, r) => this.handle(req, res, ctx, r, server),
      upgrade: (req, socket, head, r) => this.upgrade(req, socket, head, r, server),
      onPhase: this.options.onPhase,
      closeUpgraded: () => this.streams.close(),
      // A native gRPC call is bounded by its grpc-timeout, not by --request_timeout.
      untimed: (req) => this.grpc.untimed(req),
      counted: (req) => !(dashboard && isDashboardPath(targetOf(req).path)),
      rateLimit: this.options.rateLimit,
      corsMaxAgeSec: this.options.corsMaxAgeSec,
      // A route's CORS preflight is answered before the auth step, as --cors answers one: a browser sends it without credentials, and it reaches no backend.
      authorize: (req, res, r) => {
        if (r.kind === 'preflight') return undefined;
        const checked = guard.checkRequest(req, res, () => this.authTarget(req, r));
        return r.kind === 'grpc' || r.kind === 'grpc-web' ? this.grpc.authorized(r, checked) : checked;
      },
      // Without auth nothing before the handler needs the ambient context: handle() decides.
      explicitContext: () => !guard.enforcing,
    });
    return server;
  }

  /**
   * The route phase: `/_mesh/version` (the health path was answered before), then the route file's
   * first matching route (a route's explicit match wins over the gateway's own paths; nothing
   * under /_mesh/ is matched), then the gateway's own paths (for an upgrade only /rpc: an upgrade
   * at `/` or the dashboard can only be proxied; `/` only without a route file), then the
   * handler's target. No streaming call is served at an own path, nor at /rpc when
   * --enable_rpc=false.
   */
  private route(req: FrontRequest, target: RequestTarget, upgrade: boolean): GatewayRoute {
    const path = target.path;
    if (path === VERSION_PATH) return upgrade ? NONE : ROOT;
    const grpc = this.grpc.route(req, path);
    if (grpc) return grpc;
    const fromFile = this.routes && !path.startsWith(OWN_PREFIX) ? this.fileRoute(req, target) : undefined;
    const own = (path === '/' && !this.routes) || (this.dashboard !== undefined && isDashboardPath(path));
    if (!fromFile) {
      if (own && !upgrade) return path === '/' ? ROOT : DASHBOARD;
      if (path === '/rpc' && this.enableRpc) return RPC_ENDPOINT;
    }
    const to = fromFile || this.targetRoute(req, target);
    if (to.kind === 'call' && (own || path === '/' || path === '/rpc')) to.stream = false;
    return own && to.kind !== 'proxy' && to.kind !== 'call' ? NONE : to;
  }

  /**
   * The route file's answer: the first matching route's backend (chosen by weight), sent by the
   * route's handler (`spec.handler`, else --handler when it is api, rpc or proxy, else api).
   * Undefined when no route matches: the request goes where it would without the file. The table
   * is read once here: a reload swaps it for later requests only.
   */
  private fileRoute(req: FrontRequest, target: RequestTarget): GatewayRoute | undefined {
    const choice = this.routes!.table.match({ method: req.method ?? 'GET', host: req.headers.host, path: target.path, query: target.query, headers: req.headers });
    return choice && this.chosen(choice, req, target, this.server.secure);
  }

  /**
   * The route phase of a Gateway port (`port` as written): `/_mesh/version`, nothing else under
   * /_mesh/, then the routes of the listener the Host is for (see the module comment).
   */
  private listenerRoute(port: number, secure: boolean, req: FrontRequest, target: RequestTarget, upgrade: boolean): GatewayRoute {
    const path = target.path;
    if (path === VERSION_PATH) return upgrade ? NONE : ROOT;
    const listeners = this.routes!.tables.ports.get(port);
    const host = req.headers.host;
    const forHost = listeners?.forHost(host);
    if (secure && listeners) {
      const sni = (req.socket as TLSSocket).servername;
      const forSni = listeners.forName(typeof sni === 'string' ? sni.toLowerCase() : undefined);
      if (forSni !== forHost) return { kind: 'misdirected', host: host ?? '', sni: typeof sni === 'string' ? sni : 'no name' };
    }
    const name = forHost ? `${forHost.gateway}/${forHost.listener.name}` : portServerName(port);
    if (!forHost || path.startsWith(OWN_PREFIX)) return { kind: 'unrouted', listener: name };
    // A gRPC call (native or gRPC-Web) a GRPCRoute of the listener takes; the others are matched as any request.
    const grpc = this.grpc.route(req, path);
    const routed = grpc && this.grpc.routeBy(forHost.grpc, req, grpc);
    if (routed) return routed;
    const choice = forHost.table.match({ method: req.method ?? 'GET', host, path, query: target.query, headers: req.headers });
    return (choice && this.chosen(choice, req, target, secure, port)) ?? { kind: 'unrouted', listener: name };
  }

  /** What a route of the file chose serves the request; `port`: the Gateway listener's (a redirect keeps it). */
  private chosen(choice: RouteChoice, req: FrontRequest, target: RequestTarget, secure: boolean, port?: number): GatewayRoute {
    const path = target.path;
    const action = routeAction(choice, this.effects!.of(choice), { secure, host: req.headers.host, listenerPort: port, path, query: target.query, errorId: ERROR_ID, method: req.method, headers: req.headers });
    if (action.kind === 'redirect' || action.kind === 'preflight') return action;
    if (action.kind === 'no-backend') return { kind: 'no-backend', route: choice.route.name, why: action.why, policy: action.policy };
    const { backend, policy } = action;
    const handler: RouteHandler = choice.route.handler ?? (this.handler === 'api' || this.handler === 'rpc' || this.handler === 'proxy' ? this.handler : 'api');
    if (handler === 'proxy') return { kind: 'proxy', service: backend.name, policy };
    const method = resolveRpcPath(action.path, this.namespace)?.method;
    return { kind: 'call', handler, call: method ? { service: backend.name, method } : undefined, stream: false, policy };
  }

  /** The `--handler`'s target for a path, or the registry router's (one match), the api handler as the fallback. */
  private targetRoute(req: FrontRequest, target: RequestTarget): GatewayRoute {
    const path = target.path;
    const ns = this.namespace;
    switch (this.handler) {
      case 'api':
      case 'rpc':
        return { kind: 'call', handler: this.handler, call: this.rpcPaths.resolve(path), stream: true, stat: this.routeStats?.of(undefined) };
      case 'proxy':
        return { kind: 'proxy', service: resolveProxyPath(path, ns)?.service, stat: this.routeStats?.of(undefined) };
      case 'event':
        return { kind: 'event', event: resolveEventPath(path, ns), stat: this.routeStats?.of(undefined) };
      default: {
        const match = this.router!.match(req.method ?? 'GET', req.headers.host, path);
        if (!match) return { kind: 'call', handler: 'api', call: this.rpcPaths.resolve(path), stream: true, stat: this.routeStats?.of(undefined) };
        const { route } = match;
        const stat = this.routeStats?.declare(`${route.service}/${route.endpoint}`);
        switch (route.handler) {
          case 'rpc':
          case 'api':
            return { kind: 'call', handler: route.handler, call: { service: route.service, method: route.endpoint }, stream: true, stat };
          case 'proxy':
            return { kind: 'proxy', service: route.service, stat };
          case 'event':
            return { kind: 'event', event: resolveEventPath(path, ns) ?? { topic: route.service, name: route.endpoint }, stat };
        }
      }
    }
  }

  /** What the auth rules see of a request: the service and endpoint its route calls. */
  private authTarget(req: FrontRequest, route: GatewayRoute): EdgeTarget {
    const path = targetOf(req).path;
    switch (route.kind) {
      case 'rpc-endpoint':
        return { path, call: true };
      case 'call':
        return route.call ? { path, service: route.call.service, endpoint: route.call.method } : { path };
      case 'proxy':
        return { path, service: route.service };
      case 'event':
        return route.event ? { path, service: route.event.topic, endpoint: route.event.name } : { path };
      default:
        return { path };
    }
  }

  /** Builds the first route table, then listens. Resolves with the bound address. */
  async start(): Promise<AddressInfo> {
    await this.router?.start();
    this.routes?.start();
    this.dashboard?.start();
    let bound: AddressInfo;
    try {
      bound = await this.server.listen(this.address);
      const listeners = [{ name: STAT_PREFIX, address: bound.address, port: bound.port }];
      this.runtime.onShutdown(this.runtime.addListenerSource(() => listeners));
      await this.listenGatewayPorts(listeners);
    } catch (err) {
      await Promise.all([...this.portServers.values()].map((p) => p.server.close()));
      this.router?.stop();
      this.routes?.stop();
      this.dashboard?.stop();
      const e = err as NodeJS.ErrnoException;
      if (!e.code) throw err;
      throw new Error(`gateway cannot listen on ${this.address}: ${listenFailure(e, this.address, '--address')}`);
    }
    this.runtime.onShutdown(() => this.close());
    return bound;
  }

  /**
   * Listens on each port of the route file's Gateway documents, on the host of --address (at the
   * port --gateway_ports maps it to), and lists each in `listeners` (admin /listeners).
   */
  private async listenGatewayPorts(listeners: Array<{ name: string; address: string; port: number }>): Promise<void> {
    const routes = this.routes;
    if (!routes) return;
    const { host } = parseAddress(this.address);
    const remap = this.options.gatewayPorts ?? new Map<number, number>();
    for (const [port, plan] of routes.tables.ports) {
      const name = portServerName(port);
      const certs = plan.protocol === 'HTTPS' ? new ListenerCertificates(plan, this.pendingPairs) : undefined;
      const server = this.frontServer(name, (req, target, upgrade) => this.listenerRoute(port, certs !== undefined, req, target, upgrade), certs);
      this.portServers.set(port, { server, certs });
      if (certs) this.runtime.onShutdown(this.runtime.addCertificateSource(() => certs.certificates()));
      const at = formatAddress(host, remap.get(port) ?? port);
      let bound: AddressInfo;
      try {
        bound = await server.listen(at);
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        throw new Error(`gateway cannot listen on ${at} for the Gateway listeners of port ${port}: ${listenFailure(e, at, `mapping of port ${port} in --gateway_ports`)}`);
      }
      listeners.push({ name, address: bound.address, port: bound.port });
      this.gatewayPorts.push({ port, url: `${certs ? 'https' : 'http'}://${formatAddress(bound.address, bound.port)}`, listeners: plan.listeners.map((l) => `${l.gateway}/${l.listener.name}`) });
    }
    this.startedPorts = listenerPorts(routes.table.source);
  }

  /** A reload put a new file in use: each HTTPS port presents its listeners' new certificates. */
  private reloadCertificates(): void {
    const ports = this.routes!.tables.ports;
    for (const [port, { certs }] of this.portServers) certs?.update(ports.get(port)!, this.pendingPairs);
  }

  /** Drains the listener (lets in-flight requests finish, up to --drain_timeout), then stops routing. */
  async close(): Promise<void> {
    await Promise.all([this.server.close(), ...[...this.portServers.values()].map((p) => p.server.close())]);
    this.router?.stop();
    this.routes?.stop();
    this.dashboard?.stop();
  }

  /**
   * The handle phase. The rpc, api and proxy handlers take the request's context as an argument;
   * every other handler runs inside it (what they call reads the ambient context).
   */
  private async handle(req: FrontRequest, res: FrontResponse, ctx: CallContext, route: GatewayRoute, server: FrontServer<GatewayRoute, FrontRequest, FrontResponse>): Promise<void> {
    const effects = 'policy' in route ? route.policy?.effects : undefined;
    const stat = 'stat' in route ? route.stat : undefined;
    if (stat) {
      const start = performance.now();
      res.once('close', () => res.headersSent && stat.record(res.statusCode, performance.now() - start));
    }
    const started = effects?.begin(req, res, ERROR_ID);
    if (started) await started;
    const within = <R>(fn: () => R): R => this.runtime.context.within(ctx, fn);
    switch (route.kind) {
      case 'dashboard':
        return within(() => this.dashboard!.handle(req, res));
      case 'root':
        return this.root(req, res);
      case 'rpc-endpoint':
        return within(() => handleRpcEndpoint(this.fe, req, res, this.rpcAllowed));
      case 'call': {
        const call = route.call;
        if (!call) throw this.noService(req, 'use /<service>/<method>');
        setRoute(req, targetOf(req).path);
        if (route.stream && wantsEventStream(req)) return within(() => handleSse(this.fe, this.streams, call, req, res));
        return route.handler === 'rpc' ? handleRpc(this.fe, call, req, res, ctx, route.policy) : handleApi(this.fe, call, req, res, ctx, route.policy);
      }
      case 'proxy':
        if (!route.service) throw this.noService(req);
        return handleProxy(this.fe, route.service, server.secure, req, res, ctx, route.policy);
      case 'redirect':
        req.resume();
        res.writeHead(route.status, { location: route.location, 'content-length': '0' });
        res.end();
        return;
      case 'preflight':
        return sendPreflight(req, res, route);
      case 'no-backend':
        req.resume();
        throw noBackend(ERROR_ID, route.route, route.why);
      case 'event': {
        const event = route.event;
        if (!event) throw this.noService(req, 'use /<topic>/<event>');
        return within(() => handleEvent(this.fe, event, req, res));
      }
      case 'none':
        throw this.noService(req);
      case 'unrouted':
        req.resume();
        throw noRoute(ERROR_ID, shown(targetOf(req).path), route.listener);
      case 'misdirected':
        req.resume();
        throw misdirectedRequest(ERROR_ID, shown(route.host), shown(route.sni));
      case 'grpc':
      case 'grpc-web':
        return this.grpc.handle(req, res, route, ctx);
    }
  }

  private noService(req: FrontRequest, hint?: string): MeshError {
    const path = targetOf(req).path;
    req.resume();
    return notFound(ERROR_ID, `path ${shown(path)} names no service${hint ? `: ${hint}` : ''}`);
  }

  private root(req: FrontRequest, res: FrontResponse): void {
    req.resume();
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      throw rootMethodNotAllowed(ERROR_ID, req.method, targetOf(req).path);
    }
    sendJson(res, 200, { version: packageVersion() });
  }

  /**
   * The handle phase of a WebSocket (any Upgrade) request: tunnelled by the proxy handler or a
   * proxy route (once the node answers 101); a stream at an rpc or api path or at /rpc; refused
   * otherwise. Each passes the auth step (and, keyed by subject, the rate limit after it) first.
   */
  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, route: GatewayRoute, server: FrontServer<GatewayRoute, FrontRequest, FrontResponse>): void {
    const path = targetOf(req).path;
    const checked = (target: EdgeTarget, then: () => void) =>
      this.guard.check(req, undefined, target).then(
        () => server.upgradeRateLimited(req, socket, true, then),
        (err: unknown) => refuseSocket(socket, err, ERROR_ID),
      );
    switch (route.kind) {
      case 'rpc-endpoint':
        checked({ path, call: true }, () => handleRpcStreamUpgrade(this.fe, this.streams, req, socket, head, this.rpcAllowed));
        return;
      case 'call': {
        const stream = route.call;
        if (!stream || !route.stream) break;
        checked({ path, service: stream.service, endpoint: stream.method }, () => this.streams.upgrade(stream, req, socket, head));
        return;
      }
      case 'proxy': {
        const service = route.service;
        if (!service) break;
        checked({ path, service }, () => handleProxyUpgrade(this.fe, service, server.secure, req, socket, head, route.policy?.version));
        return;
      }
      case 'unrouted':
        return refuseSocket(socket, noRoute(ERROR_ID, shown(path), route.listener, 'the upgrade of '), ERROR_ID);
      case 'misdirected':
        return refuseSocket(socket, misdirectedRequest(ERROR_ID, shown(route.host), shown(route.sni)), ERROR_ID);
    }
    refuseSocket(socket, notFound(ERROR_ID, `no proxy route for the upgrade of ${shown(path)}`), ERROR_ID);
  }
}

/** Human description of the handler, for the start-up line. */
export function describeHandler(handler: HandlerName | undefined): string {
  return handler ? `${handler} handler` : 'registry router, api handler fallback';
}
