/**
 * `mesh proxy -c FILE`: a stand-alone L7 proxy (docs/proxy.md). Each listener of the file is a
 * FrontServer (TLS, CORS, `http.<listener>.downstream_rq_*` stats, graceful close) whose routes are
 * tried in file order; the first match sends the request (or WebSocket upgrade) through the proxy
 * handler to a host of its static cluster or registry service, chosen by the runtime's cluster
 * manager. No match: 404 error JSON with id `go.mesh.proxy`.
 *
 * A listener's `route_file` (Gateway API HTTPRoute documents, src/edge/routes/) is matched first,
 * reloaded on SIGHUP and when it changes: a match goes to its backend (a cluster of the file or a
 * registry service, and a version) with its timeouts, always by the proxy handler. On a listener
 * with `http2: true`, a native gRPC call that a GRPCRoute of the file takes is passed through by
 * NativeGrpc (src/edge/handlers/grpc-native.ts) instead; any other call is routed as any request.
 */
import type { IncomingMessage } from 'node:http';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Runtime } from '../../process/runtime.js';
import type { CallContext } from '../../base/util/call-context.js';
import { badRequest, ERROR_IDS, noBackend, noRoute } from '../../base/errors.js';
import { FrontServer } from '../../edge/front-server.js';
import { refuseSocket } from '../../base/http/respond.js';
import { splitTarget, targetOf } from '../../base/http/target.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';
import { handleProxy, handleProxyUpgrade } from '../../edge/handlers/proxy.js';
import { parseProxyConfig, PROXY_CONFIG_ERRORS, type ListenerConfig, type ProxyConfig, type RouteConfig } from './config.js';
import { dirname } from 'node:path';
import { declareStats, type FamilyStats } from '../../base/stats/store.js';
import { DEFAULT_SETTLE_MS, fileSignature, serialized, watchFiles, type SettleOptions } from '../../tls/workload/watch.js';
import { ConfigFileError, readConfigFileSettled } from '../../base/config/reader.js';
import { reloadOnSighup } from '../../base/util/sighup.js';

/** Reloads of the configuration file (as Envoy's `listener_manager.lds.update_*`). */
export const PROXY_CONFIG_STATS = {
  counters: { updateSuccess: 'proxy.config.update_success', updateFailure: 'proxy.config.update_failure' },
} as const;
import { LiveRoutes } from '../../edge/routes/live.js';
import { RouteMatcher } from '../../edge/routes/match.js';
import { RouteFileError, type RouteFile } from '../../edge/routes/file.js';
import { beginRule, chooseFileRoute, sendPreflight, sendRedirect, type FileRouteAnswer } from '../../edge/routes/choose.js';
import { RouteEffectsCache } from '../../edge/routes/effects.js';
import { MirrorSender } from '../../edge/handlers/mirror.js';
import type { RouteTableDump } from '../../admin/route-table.js';
import type { RequestTarget } from '../../base/http/target.js';
import { edgeContext } from '../../edge/context.js';
import { GrpcCalls, type GrpcCall } from '../../edge/handlers/grpc-calls.js';
import { listenFailure } from '../../base/util/listen-error.js';

/** How the proxy notices and reads its files (its own and the route files): the poll behind fs.watch (ms, default 2000) and the settled read. */
export type ProxyWatchOptions = { pollMs?: number } & SettleOptions;

/** What serves a request: a route of the listener's `routes`, one of its route file (a GRPCRoute's native gRPC call included), or none (404). */
type ProxyRoute = { kind: 'config'; route: RouteConfig } | FileRouteAnswer | GrpcCall | undefined;

/** The proxy forwards HTTP only: a route file's `spec.handler` may only be `proxy`. */
function onlyProxyHandler(file: RouteFile): void {
  for (const r of file.routes) {
    if (r.handler !== undefined && r.handler !== 'proxy') throw new RouteFileError(file.file, r.line, `HTTPRoute ${r.name} spec.handler: mesh proxy forwards HTTP only: use proxy (or leave it out), not ${r.handler}`);
  }
}

/** GRPCRoutes serve native gRPC calls, which are HTTP/2: a listener without `http2: true` gets none. */
function grpcNeedsHttp2(file: RouteFile, listener: string): void {
  const route = file.grpcRoutes[0];
  if (route) throw new RouteFileError(file.file, route.line, `native gRPC calls reach listener ${listener} only with http2: true (GRPCRoute serves HTTP/2 calls)`, `GRPCRoute ${route.name}`);
}

/** The `id` of every error the proxy itself writes (no route, no host, upstream failures). */
export const ERROR_ID = ERROR_IDS.proxy;

function shown(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}...` : path;
}

/** The URL sent upstream: the matched prefix (or exact path) replaced by prefix_rewrite, the query kept. */
export function rewriteUrl(route: RouteConfig, url: string): string {
  if (route.prefixRewrite === undefined) return url;
  const { path, search } = splitTarget(url);
  const rest = route.match.kind === 'prefix' ? path.slice(route.match.value.length) : '';
  return route.prefixRewrite + rest + search;
}

/** The target the proxy handler acquires: a static cluster name or a registry service name. */
function clusterOf(route: RouteConfig): string {
  return (route.cluster ?? route.service)!;
}

/** A listener's `routes` in the edge's one route model (src/edge/routes/match.ts): the first in file order wins. */
function routeTable(config: ListenerConfig): RouteMatcher<RouteConfig> {
  return new RouteMatcher(config.routes.map((r) => ({ path: r.path, target: r })));
}

/** What a listener routes by, swapped whole by a reload: its configuration and its route file, live. */
interface ListenerState {
  config: ListenerConfig;
  /** Its `routes` compiled to the edge's one route model, in file order. */
  table: RouteMatcher<RouteConfig>;
  /** `route_file`: matched before the listener's `routes`. */
  routes?: LiveRoutes;
}

export class ProxyListener {
  readonly name: string;
  private readonly server: FrontServer<ProxyRoute, FrontRequest, FrontResponse>;
  private readonly fe: EdgeHandlerContext;
  private state: ListenerState;
  private listening = false;
  /** The route files' rules at work: their stats, faults and filters. */
  private readonly effects: RouteEffectsCache;
  /** The native gRPC (an http2 listener's) and gRPC-Web calls that a GRPCRoute of its route file takes. */
  private readonly grpc: GrpcCalls;

  constructor(
    private readonly runtime: Runtime,
    config: ListenerConfig,
    private readonly watch: ProxyWatchOptions = {},
  ) {
    this.name = config.name;
    const edge = edgeContext(runtime);
    this.fe = { edge, namespace: '', errorId: ERROR_ID, maxBodyBytes: edge.settings.maxBodyBytes, mirrors: new MirrorSender(edge.clusters, edge.settings.clientRequestTimeoutMs) };
    this.effects = new RouteEffectsCache(runtime.stats);
    this.state = { config, table: routeTable(config), routes: this.liveRoutes(config.routeFile, config.http2) };
    this.grpc = new GrpcCalls(this.fe, { http2: config.http2, workload: () => runtime.callerWorkload });
    this.server = new FrontServer<ProxyRoute, FrontRequest, FrontResponse>({
      edge,
      http2: config.http2,
      statPrefix: config.name,
      errorId: ERROR_ID,
      route: (req, target) => this.routeOf(req, target),
      handle: (req, res, ctx, route) => this.handle(req, res, ctx, route),
      upgrade: (req, socket, head, route) => this.upgrade(req, socket, head, route),
      // A native gRPC call is bounded by its grpc-timeout, not by --request_timeout.
      untimed: (req) => this.grpc.untimed(req),
      // No auth step, and the proxy handler takes the request's context as an argument.
      explicitContext: () => true,
    });
  }

  get config(): ListenerConfig {
    return this.state.config;
  }

  get routes(): LiveRoutes | undefined {
    return this.state.routes;
  }

  private liveRoutes(file: string | undefined, http2: boolean): LiveRoutes | undefined {
    if (file === undefined) return undefined;
    const check = (parsed: RouteFile) => {
      onlyProxyHandler(parsed);
      if (!http2) grpcNeedsHttp2(parsed, this.name);
    };
    return new LiveRoutes({ ...this.watch, file, stats: this.runtime.stats, log: this.runtime.logging.get('router'), check, front: 'a mesh proxy listener' });
  }

  /**
   * The state a new configuration of this listener (same address) gives: the route file kept
   * when it is the same file (it reloads itself), else loaded now (throws its RouteFileError).
   */
  prepare(config: ListenerConfig): ListenerState {
    const current = this.state;
    return { config, table: routeTable(config), routes: config.routeFile === current.config.routeFile ? current.routes : this.liveRoutes(config.routeFile, config.http2) };
  }

  /** Swaps in a prepared state: the next request routes by it; a request already routed keeps its route. */
  swap(next: ListenerState): void {
    const old = this.state;
    this.state = next;
    if (old.routes !== next.routes) {
      old.routes?.stop();
      if (this.listening) next.routes?.start();
    }
  }

  /** The route file's first matching route (the table read once), else the first of `routes` matching the path. */
  private routeOf(req: FrontRequest, target: RequestTarget): ProxyRoute {
    const state = this.state;
    const grpc = state.routes && this.grpc.route(req, target.path);
    const routed = grpc && this.grpc.routeBy(state.routes!.tables.grpc, req, grpc);
    if (routed) return routed;
    const file = state.routes && chooseFileRoute(state.routes.table, this.effects, this.server.secure, req, target, ERROR_ID);
    if (file) return file;
    const route = state.table.match(target.path, undefined)?.target;
    return route && { kind: 'config', route };
  }

  /** The first route of `routes` matching the path, in file order. */
  route(path: string, config = this.state.config): RouteConfig | undefined {
    const table = config === this.state.config ? this.state.table : routeTable(config);
    return table.match(path, undefined)?.target;
  }

  /** What admin /routes shows for this listener: its `routes`, then its route file's (`file:<path>`). */
  dump(): RouteTableDump[] {
    const out: RouteTableDump[] = [
      {
        routeConfigName: this.name,
        versionInfo: this.config.usesRegistry ? this.runtime.clusters.versionInfo() : 'static',
        table: this.config.routes.map((r) => r.dump),
      },
    ];
    if (this.routes) {
      const d = this.routes.dump();
      out.push({ routeConfigName: `file:${d.file}`, versionInfo: d.version, table: d });
    }
    return out;
  }

  async listen(): Promise<AddressInfo> {
    try {
      const bound = await this.server.listen(this.config.address);
      this.listening = true;
      this.routes?.start();
      return bound;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      throw new Error(`listener ${this.name} cannot listen on ${this.config.address}: ${listenFailure(e, this.config.address, 'address in its configuration')}`);
    }
  }

  async close(): Promise<void> {
    this.routes?.stop();
    await this.server.close();
    this.grpc.close();
  }

  /** The handle phase: the route the route phase found (`route()`), or 404. */
  private async handle(req: FrontRequest, res: FrontResponse, ctx: CallContext, route: ProxyRoute): Promise<void> {
    const { url, path } = targetOf(req);
    if (!route) {
      req.resume();
      throw noRoute(ERROR_ID, shown(path), this.name);
    }
    if (route.kind === 'grpc' || route.kind === 'grpc-web') return this.grpc.handle(req, res, route, ctx);
    const started = route.kind === 'config' ? undefined : beginRule(route.policy, req, res, ERROR_ID);
    if (started) await started;
    switch (route.kind) {
      case 'config':
        req.url = rewriteUrl(route.route, url);
        return handleProxy(this.fe, clusterOf(route.route), this.server.secure, req, res, ctx);
      case 'redirect':
        return sendRedirect(req, res, route);
      case 'preflight':
        return sendPreflight(req, res, route);
      case 'backend':
        return handleProxy(this.fe, route.service, this.server.secure, req, res, ctx, route.policy);
      case 'no-backend':
        req.resume();
        throw noBackend(ERROR_ID, route.route, route.why);
    }
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, route: ProxyRoute): void {
    const { url, path } = targetOf(req);
    if (route?.kind === 'config') {
      req.url = rewriteUrl(route.route, url);
      handleProxyUpgrade(this.fe, clusterOf(route.route), this.server.secure, req, socket, head);
      return;
    }
    if (route?.kind === 'backend') return handleProxyUpgrade(this.fe, route.service, this.server.secure, req, socket, head, route.policy.version);
    if (route?.kind === 'redirect') return refuseSocket(socket, badRequest(ERROR_ID, `route redirects to ${route.location}: an upgrade does not follow a redirect`), ERROR_ID);
    if (route?.kind === 'no-backend') return refuseSocket(socket, noBackend(ERROR_ID, route.route, route.why), ERROR_ID);
    refuseSocket(socket, noRoute(ERROR_ID, shown(path), this.name, 'the upgrade of '), ERROR_ID);
  }
}

/**
 * The proxy: one ProxyListener per listener of the file. Its listeners are a route source of the
 * runtime (admin /routes: one table per listener, in file order).
 */
export class Proxy {
  readonly listeners: ProxyListener[];
  private readonly stats: FamilyStats<typeof PROXY_CONFIG_STATS>;
  private lastError: string | undefined;
  private stopWatch?: () => void;
  /** The text of the file last read (in use, or refused: lastError). */
  private text: string | undefined;

  constructor(
    private readonly runtime: Runtime,
    private config: ProxyConfig,
    private readonly watch: ProxyWatchOptions = {},
  ) {
    this.listeners = config.listeners.map((l) => new ProxyListener(runtime, l, watch));
    this.stats = declareStats(runtime.stats, PROXY_CONFIG_STATS);
    this.text = config.text;
    runtime.addRouteSource(() => this.listeners.flatMap((l) => l.dump()));
  }

  /** Reloads one at a time (src/tls/workload/watch.ts serialized). */
  private readonly reloadSerial = serialized(() => this.reloadOnce());

  /**
   * Reads the file again (SIGHUP, a change of the file) once it has settled (readConfigFileSettled, by readSettled: never
   * half-written, an empty file refused): the static clusters are replaced (replaceStatic) and
   * each listener's routes and route file swapped, when every listener keeps its name and
   * address; else, or when the file has an error, the running configuration stays, the reason is
   * logged (once until it changes) and counted. True when the file is in use.
   */
  reload(): Promise<boolean> {
    return this.reloadSerial();
  }

  private async reloadOnce(): Promise<boolean> {
    const file = this.config.file;
    let next: ProxyConfig;
    let states: ReturnType<ProxyListener['prepare']>[];
    try {
      // The watch fires on any change in the directory: a text already tried changes nothing.
      const text = await readConfigFileSettled(file, PROXY_CONFIG_ERRORS, this.watch);
      if (text === this.text) return this.lastError === undefined;
      this.text = text;
      next = parseProxyConfig(text, file);
      states = this.prepare(next);
    } catch (err) {
      const why = (err as Error).message;
      if (err instanceof ConfigFileError && err.code !== undefined) this.text = undefined; // unreadable, empty or changing: try again at the next event
      this.stats.updateFailure.inc();
      if (why !== this.lastError) this.runtime.logging.get('config').error({ err: why }, 'proxy config reload failed: the running configuration stays');
      this.lastError = why;
      return false;
    }
    this.runtime.clusters.replaceStatic(next.clusters);
    this.listeners.forEach((l, i) => l.swap(states[i]!));
    this.config = next;
    this.lastError = undefined;
    this.stats.updateSuccess.inc();
    this.runtime.logging.get('config').info({ file }, 'proxy config reloaded');
    return true;
  }

  /** Each listener's next state; throws when a listener is added, removed, renamed or moved, or the registry is newly needed. */
  private prepare(next: ProxyConfig): ReturnType<ProxyListener['prepare']>[] {
    const running = this.listeners.map((l) => l.name).join(', ');
    const wanted = next.listeners.map((l) => l.name).join(', ');
    if (running !== wanted) throw new Error(`${next.file}: the listeners (${wanted}) are not the running ones (${running}): adding, removing or renaming a listener needs a restart`);
    next.listeners.forEach((l, i) => {
      const was = this.listeners[i]!.config.address;
      if (l.address !== was) throw new Error(`${next.file}: listener ${l.name} moves from ${was} to ${l.address}: changing a listener's address needs a restart`);
      if (l.http2 !== this.listeners[i]!.config.http2) throw new Error(`${next.file}: listener ${l.name} turns http2 ${l.http2 ? 'on' : 'off'}: that needs a restart`);
    });
    if (next.usesRegistry && !this.config.usesRegistry) throw new Error(`${next.file}: a route now names a registry service (or a listener a route_file), and the proxy started without the registry: that needs a restart`);
    return this.listeners.map((l, i) => l.prepare(next.listeners[i]!));
  }

  /** Opens every listener (all or none). Resolves with their bound addresses, in file order. */
  async start(): Promise<Array<{ name: string; address: AddressInfo }>> {
    const bound: Array<{ name: string; address: AddressInfo }> = [];
    const opened: ProxyListener[] = [];
    try {
      for (const l of this.listeners) {
        bound.push({ name: l.name, address: await l.listen() });
        opened.push(l);
      }
    } catch (err) {
      await Promise.all(opened.map((l) => l.close()));
      throw err;
    }
    const listeners = bound.map(({ name, address }) => ({ name, address: address.address, port: address.port }));
    this.runtime.onShutdown(this.runtime.addListenerSource(() => listeners));
    this.runtime.onShutdown(() => this.close());
    const file = this.config.file;
    const unhup = reloadOnSighup(() => this.reload());
    const unwatch = watchFiles({ dirs: [dirname(file)], signature: () => fileSignature(file), onChange: () => void this.reload(), pollMs: this.watch.pollMs ?? 2000, settleMs: this.watch.settleMs ?? DEFAULT_SETTLE_MS });
    this.stopWatch = () => {
      unwatch();
      unhup();
    };
    return bound;
  }

  /** Stops accepting and lets in-flight requests finish. */
  async close(): Promise<void> {
    this.stopWatch?.();
    this.stopWatch = undefined;
    await Promise.all(this.listeners.map((l) => l.close()));
  }
}
