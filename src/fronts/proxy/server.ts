/**
 * `mesh proxy -c FILE`: a stand-alone L7 proxy (docs/proxy.md). Each listener of the file is a
 * FrontServer (TLS, CORS, `http.<listener>.downstream_rq_*` stats, graceful close) whose routes are
 * tried in file order; the first match sends the request (or WebSocket upgrade) through the proxy
 * handler to a host of its static cluster or registry service, chosen by the runtime's cluster
 * manager. No match: 404 error JSON with id `go.mesh.proxy`.
 *
 * A listener's `route_file` (Gateway API HTTPRoute documents, src/edge/routes/) is matched first,
 * reloaded on SIGHUP and when it changes: a match goes to its backend (a cluster of the file or a
 * registry service, and a version) with its timeouts, always by the proxy handler.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Runtime } from '../../process/runtime.js';
import type { CallContext } from '../../base/util/call-context.js';
import { ERROR_IDS, MeshError, flagged } from '../../base/errors.js';
import { FrontServer } from '../../edge/front-server.js';
import { refuseSocket } from '../../base/http/respond.js';
import { targetOf } from '../../base/http/target.js';
import type { FrontEnd } from '../../edge/handlers/front-end.js';
import { handleProxy, handleProxyUpgrade } from '../../edge/handlers/proxy.js';
import type { ListenerConfig, ProxyConfig, RouteConfig } from './config.js';
import { LiveRoutes } from '../../edge/routes/live.js';
import { RouteFileError, type RouteFile } from '../../edge/routes/file.js';
import { chooseFileRoute, type FileRouteAnswer } from '../../edge/routes/choose.js';
import type { RouteTableDump } from '../../admin/route-table.js';
import type { RequestTarget } from '../../base/http/target.js';

/** What serves a request: a route of the listener's `routes`, one of its route file, or none (404). */
type ProxyRoute = { kind: 'config'; route: RouteConfig } | FileRouteAnswer | undefined;

/** The proxy forwards HTTP only: a route file's `spec.handler` may only be `proxy`. */
function onlyProxyHandler(file: RouteFile): void {
  for (const r of file.routes) {
    if (r.handler !== undefined && r.handler !== 'proxy') throw new RouteFileError(file.file, r.line, `HTTPRoute ${r.name} spec.handler: mesh proxy forwards HTTP only: use proxy (or leave it out), not ${r.handler}`);
  }
}

/** The `id` of every error the proxy itself writes (no route, no host, upstream failures). */
export const ERROR_ID = ERROR_IDS.proxy;

function shown(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}...` : path;
}

/** The URL sent upstream: the matched prefix (or exact path) replaced by prefix_rewrite, the query kept. */
export function rewriteUrl(route: RouteConfig, url: string): string {
  if (route.prefixRewrite === undefined) return url;
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  const query = q === -1 ? '' : url.slice(q);
  const rest = route.match.kind === 'prefix' ? path.slice(route.match.value.length) : '';
  return route.prefixRewrite + rest + query;
}

/** The target the proxy handler acquires: a static cluster name or a registry service name. */
function clusterOf(route: RouteConfig): string {
  return (route.cluster ?? route.service)!;
}

export class ProxyListener {
  readonly name: string;
  private readonly server: FrontServer<ProxyRoute>;
  private readonly fe: FrontEnd;
  /** `route_file`: matched before the listener's `routes`. */
  readonly routes?: LiveRoutes;

  constructor(
    private readonly runtime: Runtime,
    readonly config: ListenerConfig,
  ) {
    this.name = config.name;
    this.fe = { runtime, namespace: '', errorId: ERROR_ID, maxBodyBytes: runtime.options.maxBodySize };
    if (config.routeFile !== undefined) {
      this.routes = new LiveRoutes({ file: config.routeFile, stats: runtime.stats, log: runtime.logging.get('router'), check: onlyProxyHandler });
    }
    this.server = new FrontServer<ProxyRoute>({
      runtime,
      statPrefix: config.name,
      errorId: ERROR_ID,
      route: (req, target) => this.routeOf(req, target),
      handle: (req, res, ctx, route) => this.handle(req, res, ctx, route),
      upgrade: (req, socket, head, route) => this.upgrade(req, socket, head, route),
      // No auth step, and the proxy handler takes the request's context as an argument.
      explicitContext: () => true,
    });
  }

  /** The route file's first matching route (the table read once), else the first of `routes` matching the path. */
  private routeOf(req: IncomingMessage, target: RequestTarget): ProxyRoute {
    const file = this.routes && chooseFileRoute(this.routes.table, req, target);
    if (file) return file;
    const route = this.route(target.path);
    return route && { kind: 'config', route };
  }

  /** The first route matching the path, in file order. */
  route(path: string): RouteConfig | undefined {
    for (const r of this.config.routes) if (r.matches(path)) return r;
    return undefined;
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
      this.routes?.start();
      return bound;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const why = e.code === 'EADDRINUSE' ? 'address already in use' : e.code === 'EADDRNOTAVAIL' ? 'address not available' : e.message;
      throw new Error(`listener ${this.name} cannot listen on ${this.config.address}: ${why}`);
    }
  }

  async close(): Promise<void> {
    this.routes?.stop();
    await this.server.close();
  }

  /** The handle phase: the route the route phase found (`route()`), or 404. */
  private async handle(req: IncomingMessage, res: ServerResponse, ctx: CallContext, route: ProxyRoute): Promise<void> {
    const { url, path } = targetOf(req);
    if (!route) {
      req.resume();
      throw flagged(new MeshError(ERROR_ID, 404, `no route for ${shown(path)} on listener ${this.name}`), 'NR');
    }
    switch (route.kind) {
      case 'config':
        req.url = rewriteUrl(route.route, url);
        return handleProxy(this.fe, clusterOf(route.route), this.server.secure, req, res, ctx);
      case 'backend':
        return handleProxy(this.fe, route.service, this.server.secure, req, res, ctx, route.policy);
      case 'no-backend':
        req.resume();
        throw new MeshError(ERROR_ID, 500, `route ${route.route}: every backend has weight 0`);
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
    if (route?.kind === 'no-backend') return refuseSocket(socket, new MeshError(ERROR_ID, 500, `route ${route.route}: every backend has weight 0`), ERROR_ID);
    refuseSocket(socket, new MeshError(ERROR_ID, 404, `no route for the upgrade of ${shown(path)} on listener ${this.name}`), ERROR_ID);
  }
}

/**
 * The proxy: one ProxyListener per listener of the file. Its listeners are a route source of the
 * runtime (admin /routes: one table per listener, in file order).
 */
export class Proxy {
  readonly listeners: ProxyListener[];

  constructor(
    private readonly runtime: Runtime,
    config: ProxyConfig,
  ) {
    this.listeners = config.listeners.map((l) => new ProxyListener(runtime, l));
    runtime.addRouteSource(() => this.listeners.flatMap((l) => l.dump()));
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
    return bound;
  }

  /** Stops accepting and lets in-flight requests finish. */
  async close(): Promise<void> {
    await Promise.all(this.listeners.map((l) => l.close()));
  }
}
