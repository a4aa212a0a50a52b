/**
 * `mesh proxy -c FILE`: a stand-alone L7 proxy (docs/proxy.md). Each listener of the file is a
 * FrontServer (TLS, CORS, `http.<listener>.downstream_rq_*` stats, graceful close) whose routes are
 * tried in file order; the first match sends the request (or WebSocket upgrade) through the proxy
 * handler to a host of its static cluster or registry service, chosen by the runtime's cluster
 * manager. No match: 404 error JSON with id `go.mesh.proxy`.
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
  private readonly server: FrontServer<RouteConfig | undefined>;
  private readonly fe: FrontEnd;

  constructor(
    private readonly runtime: Runtime,
    readonly config: ListenerConfig,
  ) {
    this.name = config.name;
    this.fe = { runtime, namespace: '', errorId: ERROR_ID, maxBodyBytes: runtime.options.maxBodySize };
    this.server = new FrontServer<RouteConfig | undefined>({
      runtime,
      statPrefix: config.name,
      errorId: ERROR_ID,
      route: (_req, target) => this.route(target.path),
      handle: (req, res, ctx, route) => this.handle(req, res, ctx, route),
      upgrade: (req, socket, head, route) => this.upgrade(req, socket, head, route),
      // No auth step, and the proxy handler takes the request's context as an argument.
      explicitContext: () => true,
    });
  }

  /** The first route matching the path, in file order. */
  route(path: string): RouteConfig | undefined {
    for (const r of this.config.routes) if (r.matches(path)) return r;
    return undefined;
  }

  /** What admin /routes shows for this listener. */
  dump(): { routeConfigName: string; versionInfo: string; table: unknown } {
    return {
      routeConfigName: this.name,
      versionInfo: this.config.usesRegistry ? this.runtime.clusters.versionInfo() : 'static',
      table: this.config.routes.map((r) => r.dump),
    };
  }

  async listen(): Promise<AddressInfo> {
    try {
      return await this.server.listen(this.config.address);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const why = e.code === 'EADDRINUSE' ? 'address already in use' : e.code === 'EADDRNOTAVAIL' ? 'address not available' : e.message;
      throw new Error(`listener ${this.name} cannot listen on ${this.config.address}: ${why}`);
    }
  }

  async close(): Promise<void> {
    await this.server.close();
  }

  /** The handle phase: the route the route phase found (`route()`), or 404. */
  private async handle(req: IncomingMessage, res: ServerResponse, ctx: CallContext, route: RouteConfig | undefined): Promise<void> {
    const { url, path } = targetOf(req);
    if (!route) {
      req.resume();
      throw flagged(new MeshError(ERROR_ID, 404, `no route for ${shown(path)} on listener ${this.name}`), 'NR');
    }
    req.url = rewriteUrl(route, url);
    return handleProxy(this.fe, clusterOf(route), this.server.secure, req, res, ctx);
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, route: RouteConfig | undefined): void {
    const { url, path } = targetOf(req);
    if (route) {
      req.url = rewriteUrl(route, url);
      handleProxyUpgrade(this.fe, clusterOf(route), this.server.secure, req, socket, head);
      return;
    }
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
    runtime.addRouteSource(() => this.listeners.map((l) => l.dump()));
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
    this.runtime.onShutdown(() => this.close());
    return bound;
  }

  /** Stops accepting and lets in-flight requests finish. */
  async close(): Promise<void> {
    await Promise.all(this.listeners.map((l) => l.close()));
  }
}
