/**
 * `mesh api`: the HTTP entry point (SPEC 1.3, 4.3, 4.4; DESIGN section 6).
 *
 * Paths the gateway answers itself, whatever the handler:
 *   GET /               {"version":"<mesh version>"}
 *   POST /rpc           call a service directly (SPEC 2.8): those of --rpc_allow (403 for others); off with --enable_rpc=false
 *   GET /rpc + WebSocket a streaming call, /rpc?service=S&endpoint=E, with the same checks as POST /rpc
 *   GET /stats          with --enable_stats: the dashboard (src/dashboard; JSON for Accept: application/json)
 *   GET /_mesh/health   200 while live, 503 while draining (admin /healthcheck/fail)
 * Everything else goes to the handler: `--handler=api|rpc|proxy|event`, or by default the
 * registry router (src/gateway/router.ts) with the api handler as the fallback.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Runtime } from '../runtime.js';
import type { CallContext } from '../util/call-context.js';
import { MeshError } from '../errors.js';
import { FrontServer } from '../http/front-server.js';
import { refuseSocket, sendJson } from '../http/respond.js';
import { targetOf } from '../http/target.js';
import type { FrontEnd } from '../handlers/front-end.js';
import { resolveEventPath, resolveProxyPath, RpcPathResolver, type RpcRoute } from '../handlers/resolve.js';
import { handleApi } from '../handlers/api.js';
import { handleRpc } from '../handlers/rpc.js';
import { handleRpcEndpoint, handleRpcStreamUpgrade } from '../handlers/rpc-endpoint.js';
import { handleEvent } from '../handlers/event.js';
import { handleProxy, handleProxyUpgrade } from '../handlers/proxy.js';
import { handleSse, StreamSockets, wantsEventStream } from '../handlers/stream.js';
import { packageVersion } from '../admin/build-info.js';
import { RegistryRouter } from './router.js';
import type { HandlerName, RouteMatch } from './routes.js';
import { Dashboard, isDashboardPath } from '../dashboard/dashboard.js';
import type { FrontRateLimit } from '../http/rate-limit.js';
import { globsMatcher } from '../util/regex.js';
import { EdgeGuard, type EdgeAuth, type EdgeTarget } from '../auth/edge.js';

export const DEFAULT_ADDRESS = ':8080';
export const DEFAULT_NAMESPACE = 'go.mesh.api';
/** The `id` of every error the gateway itself writes. */
export const ERROR_ID = 'go.mesh.api';
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
  /** Globs over the service names /rpc may call (`*` any run of characters, `?` one); default all. */
  rpcAllow?: string[];
  /** `--rate_limit`: the limiter of the listener (src/http/rate-limit.ts); undefined: no limit. */
  rateLimit?: FrontRateLimit;
  /** `--cors_max_age` in seconds. Default 600. */
  corsMaxAgeSec?: number;
  /** Authentication and rules (--auth, --auth_rules; src/auth/). Without: spoofed Mesh-Auth-* headers are still removed. */
  auth?: EdgeAuth;
}

function shown(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}...` : path;
}

export class Gateway {
  readonly namespace: string;
  private readonly rpcPaths: RpcPathResolver;
  readonly handler?: HandlerName;
  readonly router?: RegistryRouter;
  readonly dashboard?: Dashboard;
  readonly fe: FrontEnd;
  private readonly server: FrontServer;
  private readonly address: string;
  private readonly enableRpc: boolean;
  private readonly rpcAllowed?: (service: string) => boolean;
  private readonly guard: EdgeGuard;
  private readonly streams: StreamSockets;

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
    this.address = options.address ?? DEFAULT_ADDRESS;
    this.enableRpc = options.enableRpc ?? true;
    const allow = options.rpcAllow ?? [];
    if (allow.length > 0 && !allow.includes('*')) this.rpcAllowed = globsMatcher(allow);
    this.guard = new EdgeGuard(options.auth, { stats: runtime.stats, statPrefix: STAT_PREFIX, errorId: ERROR_ID, rateLimit: options.rateLimit });
    const guard = this.guard;
    this.fe = {
      runtime,
      namespace: this.namespace,
      errorId: ERROR_ID,
      maxBodyBytes: runtime.options.maxBodySize,
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
    if (options.enableStats) {
      this.dashboard = new Dashboard({ stats: runtime.stats, server: runtime.state, clusters: runtime.clusters, prefix: STAT_PREFIX, name: 'mesh api', errorId: ERROR_ID, histograms: runtime.options.statsHistograms });
    }
    const dashboard = this.dashboard;
    this.streams = new StreamSockets(this.fe);
    this.server = new FrontServer({
      runtime,
      statPrefix: STAT_PREFIX,
      errorId: ERROR_ID,
      handle: (req, res, ctx) => this.handle(req, res, ctx),
      upgrade: (req, socket, head) => this.upgrade(req, socket, head),
      closeUpgraded: () => this.streams.close(),
      counted: (req) => !(dashboard && isDashboardPath(targetOf(req).path)),
      rateLimit: options.rateLimit,
      corsMaxAgeSec: options.corsMaxAgeSec,
      authorize: (req, res) => guard.checkRequest(req, res, () => this.authTarget(req)),
      // Without auth nothing before the handler needs the ambient context: handle() decides.
      explicitContext: () => !guard.enforcing,
    });
  }

  /** What the auth rules see of a request: the service and endpoint the handler will call, as handle() resolves them. */
  private authTarget(req: IncomingMessage): EdgeTarget {
    const { url, path } = targetOf(req);
    if (path === '/rpc' && this.enableRpc) return { path, call: true };
    if (path === '/' || (this.dashboard && isDashboardPath(path))) return { path };
    const ns = this.namespace;
    const rpc = () => {
      const t = this.rpcPaths.resolve(url);
      return t ? { path, service: t.service, endpoint: t.method } : { path };
    };
    switch (this.handler) {
      case 'api':
      case 'rpc':
        return rpc();
      case 'proxy':
        return { path, service: resolveProxyPath(url, ns)?.service };
      case 'event': {
        const t = resolveEventPath(url, ns);
        return t ? { path, service: t.topic, endpoint: t.name } : { path };
      }
      default: {
        const match = this.router!.match(req.method ?? 'GET', req.headers.host, path);
        if (!match) return rpc();
        const { route } = match;
        if (route.handler === 'proxy') return { path, service: route.service };
        if (route.handler === 'event') {
          const t = resolveEventPath(url, ns) ?? { topic: route.service, name: route.endpoint };
          return { path, service: t.topic, endpoint: t.name };
        }
        return { path, service: route.service, endpoint: route.endpoint };
      }
    }
  }

  /** Builds the first route table, then listens. Resolves with the bound address. */
  async start(): Promise<AddressInfo> {
    await this.router?.start();
    this.dashboard?.start();
    let bound: AddressInfo;
    try {
      bound = await this.server.listen(this.address);
    } catch (err) {
      this.router?.stop();
      this.dashboard?.stop();
      const e = err as NodeJS.ErrnoException;
      if (!e.code) throw err;
      throw new Error(`gateway cannot listen on ${this.address}: ${e.code === 'EADDRINUSE' ? 'address already in use' : e.message}`);
    }
    this.runtime.onShutdown(() => this.close());
    return bound;
  }

  /** Drains the listener (lets in-flight requests finish, up to --drain_timeout), then stops routing. */
  async close(): Promise<void> {
    await this.server.close();
    this.router?.stop();
    this.dashboard?.stop();
  }

  /**
   * The rpc, api and proxy handlers take the request's context as an argument; every other handler runs
   * inside it (what they call reads the ambient context).
   */
  private async handle(req: IncomingMessage, res: ServerResponse, ctx: CallContext): Promise<void> {
    const { url, path } = targetOf(req);
    const within = <R>(fn: () => R): R => this.runtime.context.within(ctx, fn);
    if (this.dashboard && isDashboardPath(path)) return within(() => this.dashboard!.handle(req, res));
    if (path === '/') return this.root(req, res);
    if (path === '/rpc' && this.enableRpc) return within(() => handleRpcEndpoint(this.fe, req, res, this.rpcAllowed));
    if (wantsEventStream(req)) {
      const route = this.streamRoute(req, url, path);
      if (route) return within(() => handleSse(this.fe, this.streams, route, req, res));
    }
    const ns = this.namespace;
    switch (this.handler) {
      case 'api':
        return handleApi(this.fe, this.rpcTarget(req, url, path), req, res, ctx);
      case 'rpc':
        return handleRpc(this.fe, this.rpcTarget(req, url, path), req, res, ctx);
      case 'proxy': {
        const target = resolveProxyPath(url, ns);
        if (!target) throw this.noService(req, path);
        return handleProxy(this.fe, target.service, this.server.secure, req, res, ctx);
      }
      case 'event': {
        const target = resolveEventPath(url, ns);
        if (!target) throw this.noService(req, path, 'use /<topic>/<event>');
        return within(() => handleEvent(this.fe, target, req, res));
      }
      default: {
        const match = this.router!.match(req.method ?? 'GET', req.headers.host, path);
        if (match) return this.dispatch(match, url, req, res, ctx);
        return handleApi(this.fe, this.rpcTarget(req, url, path), req, res, ctx);
      }
    }
  }

  /** A matched route: its handler decides, with the declaring service and endpoint. */
  private dispatch(match: RouteMatch, url: string, req: IncomingMessage, res: ServerResponse, ctx: CallContext): Promise<void> {
    const { route } = match;
    const context = this.runtime.context;
    switch (route.handler) {
      case 'rpc':
        return handleRpc(this.fe, { service: route.service, method: route.endpoint }, req, res, ctx);
      case 'api':
        return handleApi(this.fe, { service: route.service, method: route.endpoint }, req, res, ctx);
      case 'proxy':
        return handleProxy(this.fe, route.service, this.server.secure, req, res, ctx);
      case 'event':
        return context.within(ctx, () => handleEvent(this.fe, resolveEventPath(url, this.namespace) ?? { topic: route.service, name: route.endpoint }, req, res));
    }
  }

  private rpcTarget(req: IncomingMessage, url: string, path: string) {
    const target = this.rpcPaths.resolve(url);
    if (!target) throw this.noService(req, path, 'use /<service>/<method>');
    return target;
  }

  private noService(req: IncomingMessage, path: string, hint?: string): MeshError {
    req.resume();
    return new MeshError(ERROR_ID, 404, `path ${shown(path)} names no service${hint ? `: ${hint}` : ''}`);
  }

  private root(req: IncomingMessage, res: ServerResponse): void {
    req.resume();
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      throw new MeshError(ERROR_ID, 405, `method ${req.method} not allowed on /: use GET`);
    }
    sendJson(res, 200, { version: packageVersion() });
  }

  /**
   * The service and method of a streaming call at this path (SSE or WebSocket): under the rpc and
   * api handlers, a route of either, or the fallback; undefined for the proxy and event handlers.
   */
  private streamRoute(req: IncomingMessage, url: string, path: string): RpcRoute | undefined {
    if (path === '/' || path === '/rpc' || (this.dashboard && isDashboardPath(path))) return undefined;
    switch (this.handler) {
      case 'api':
      case 'rpc':
        return this.rpcPaths.resolve(url);
      case 'proxy':
      case 'event':
        return undefined;
      default: {
        const match = this.router!.match(req.method ?? 'GET', req.headers.host, path);
        if (!match) return this.rpcPaths.resolve(url);
        const { route } = match;
        return route.handler === 'rpc' || route.handler === 'api' ? { service: route.service, method: route.endpoint } : undefined;
      }
    }
  }

  /**
   * WebSocket (any Upgrade) requests: tunnelled by the proxy handler or a proxy route (once the
   * node answers 101); streams at an rpc or api path; refused otherwise. Each passes the auth step
   * (and, keyed by subject, the rate limit after it) first.
   */
  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { url, path } = targetOf(req);
    const checked = (target: EdgeTarget, then: () => void) =>
      this.guard.check(req, undefined, target).then(
        () => {
          if (!this.server.upgradeRateLimited(req, socket, true)) then();
        },
        (err: unknown) => refuseSocket(socket, err, ERROR_ID),
      );
    if (path === '/rpc' && this.enableRpc) {
      checked({ path, call: true }, () => handleRpcStreamUpgrade(this.fe, this.streams, req, socket, head, this.rpcAllowed));
      return;
    }
    const stream = this.streamRoute(req, url, path);
    if (stream) {
      checked({ path, service: stream.service, endpoint: stream.method }, () => this.streams.upgrade(stream, req, socket, head));
      return;
    }
    let service: string | undefined;
    if (this.handler === 'proxy') service = resolveProxyPath(url, this.namespace)?.service;
    else if (!this.handler) {
      const match = this.router!.match(req.method ?? 'GET', req.headers.host, path);
      if (match?.route.handler === 'proxy') service = match.route.service;
    }
    if (service) {
      const proxied = service;
      checked({ path, service: proxied }, () => handleProxyUpgrade(this.fe, proxied, this.server.secure, req, socket, head));
      return;
    }
    refuseSocket(socket, new MeshError(ERROR_ID, 404, `no proxy route for the upgrade of ${shown(path)}`), ERROR_ID);
  }
}

/** Human description of the handler, for the start-up line. */
export function describeHandler(handler: HandlerName | undefined): string {
  return handler ? `${handler} handler` : 'registry router, api handler fallback';
}
