/**
 * The route file of `mesh xds --routes`: Envoy's HTTP listener and its RouteConfiguration
 * (envoy-routes.ts, routes over RDS) served beside the registry's resources (source.ts setExtra),
 * read again on SIGHUP and when the file changes (src/edge/routes/live.ts, as the gateway's). A
 * file Envoy cannot take (a route of the rpc or api handler) or that does not parse is refused at
 * start; on a reload it keeps the last good routes and is logged (routes.update_failure counted).
 */
import type { Logger } from 'pino';
import type { HostPort } from '../base/util/address.js';
import type { StatsScope } from '../base/stats/store.js';
import type { RouteFile } from '../edge/routes/file.js';
import { LiveRoutes } from '../edge/routes/live.js';
import { envoyRoutes, type EnvoyRoutes } from './envoy-routes.js';
import type { XdsSource } from './source.js';

/** The names of what a route file becomes over xDS. */
export const ENVOY_LISTENER_NAME = 'mesh_http';
export const ENVOY_ROUTE_CONFIG_NAME = 'mesh_routes';

export interface XdsRouteFileOptions {
  file: string;
  /** Where Envoy's HTTP listener listens. */
  address: HostPort;
  source: XdsSource;
  stats: StatsScope;
  log: Logger;
  /** The bounded poll behind fs.watch (ms); default 2000. */
  pollMs?: number;
  settleMs?: number;
}

/** Loads the file (throws its RouteFileError), serves it, and reloads it until stop(). */
export function serveRouteFile(o: XdsRouteFileOptions): { stop(): void } {
  const build = (file: RouteFile): EnvoyRoutes =>
    envoyRoutes(file, { address: o.address, listenerName: ENVOY_LISTENER_NAME, routeConfigName: ENVOY_ROUTE_CONFIG_NAME, rds: true, versionSubsets: true });
  const serve = (file: RouteFile) => {
    const routes = build(file);
    for (const w of routes.warnings) o.log.warn({ file: file.file }, `route file: ${w}`);
    o.source.setExtra({
      listener: new Map([[ENVOY_LISTENER_NAME, routes.listener]]),
      route: new Map([[ENVOY_ROUTE_CONFIG_NAME, routes.routeConfiguration]]),
    });
  };
  const live = new LiveRoutes({
    file: o.file,
    stats: o.stats,
    log: o.log,
    front: 'mesh xds',
    check: (file) => void build(file),
    onReload: (file) => {
      try {
        serve(file);
      } catch (err) {
        o.log.error({ err: (err as Error).message, file: o.file }, 'route file: cannot serve it over xDS; the previous routes stay');
      }
    },
    pollMs: o.pollMs,
    settleMs: o.settleMs,
  });
  serve(live.table.source);
  live.start();
  return { stop: () => live.stop() };
}
