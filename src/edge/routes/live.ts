/**
 * A front end's route file, live: loaded at start (an error there is a start-up error), read
 * again on SIGHUP and when the file changes (fs.watch on its directory plus a bounded poll), once
 * its content has settled (readConfigFileSettled, src/base/config/reader.ts, by readSettled: a file rewritten in place is never taken half-written, and
 * an empty file is refused; src/tls/workload/watch.ts). A good new file replaces the compiled
 * table in one assignment, so a request that read the table keeps it and the next one gets the
 * new one; a bad new file keeps the old table, is logged once (until the error changes) and
 * counted.
 *
 * Stats: `routes.update_success`, `routes.update_failure` (as Envoy's `rds.<name>.update_*`), and
 * the gauge `routes.active` (routes of the table in use).
 */
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { declareStats, type FamilyStats, type StatsScope } from '../../base/stats/store.js';
import { fileSignature, DEFAULT_SETTLE_MS, serialized, watchFiles, type SettleOptions } from '../../tls/workload/watch.js';
import { readConfigFileSettled } from '../../base/config/reader.js';
import { checkHandlers, loadRouteFile, MAX_ROUTE_FILE_BYTES, parseRouteFile, ROUTE_FILE_ERRORS, type GrpcRouteSpec, type RouteFile, type RouteHandler, type RouteSpec } from './file.js';
import type { CompiledRoutes } from './table.js';
import { compileTables, type GatewayTables } from './listeners.js';
import { routeStatus, type RouteStatus } from './status.js';
import { RouteFileError } from './file.js';
import { reloadOnSighup } from '../../base/util/sighup.js';

export const ROUTE_FILE_STATS = {
  counters: { updateSuccess: 'routes.update_success', updateFailure: 'routes.update_failure' },
  gauges: { active: 'routes.active' },
} as const;

/** `settleMs` is the wait after a change event and between the reads that must agree (default 50). */
export interface LiveRoutesOptions extends SettleOptions {
  file: string;
  stats: StatsScope;
  log: Logger;
  /** The handler of a route without `spec.handler`: what only a proxy route does is refused on others (checkHandlers). */
  defaultHandler?: RouteHandler;
  /** Backend choice (tests); default Math.random. */
  random?: () => number;
  /** The bounded poll behind fs.watch (ms). Default 2000. */
  pollMs?: number;
  /** What the front end refuses in a file it cannot serve (throws a RouteFileError), at start and on each reload. */
  check?: (file: RouteFile) => void;
  /** Told of each new file put in use by a reload (not of the first load). */
  onReload?: (file: RouteFile) => void;
  /**
   * The front end serves Gateway documents (mesh api: src/fronts/gateway/listeners.ts); without,
   * a file that holds one is refused, naming this front end (`front`).
   */
  gateways?: boolean;
  /** How the front end is named in that refusal; default `this front end`. */
  front?: string;
}

export class LiveRoutes {
  /** The tables in use (the front end's own and each Gateway port's): read once per request. */
  tables: GatewayTables;
  private loadedAt = new Date();
  private lastError: string | undefined;
  private readonly stats: FamilyStats<typeof ROUTE_FILE_STATS>;
  private stopWatch?: () => void;
  /** Reloads one at a time (src/tls/workload/watch.ts serialized). */
  private readonly reloadSerial = serialized(() => this.reloadOnce());

  /** Loads the file; throws its RouteFileError. */
  constructor(private readonly options: LiveRoutesOptions) {
    this.stats = declareStats(options.stats, ROUTE_FILE_STATS);
    this.tables = compileTables(this.load(), options.random);
    this.stats.active.set(this.table.size);
  }

  private load(): RouteFile {
    return this.check(loadRouteFile(this.options.file));
  }

  /** The table of the front end's own listener. */
  get table(): CompiledRoutes {
    return this.tables.main;
  }

  private check(parsed: RouteFile): RouteFile {
    if (!this.options.gateways) refuseGateways(parsed, this.options.front ?? 'this front end');
    if (this.options.defaultHandler) checkHandlers(parsed, this.options.defaultHandler);
    this.options.check?.(parsed);
    return parsed;
  }

  /** Reloads on SIGHUP and when the file changes, until stop(). */
  start(): void {
    if (this.stopWatch) return;
    const file = this.options.file;
    const unhup = reloadOnSighup(() => this.reload());
    const unwatch = watchFiles({ dirs: [dirname(file)], signature: () => fileSignature(file), onChange: () => void this.reload(), pollMs: this.options.pollMs ?? 2000, settleMs: this.options.settleMs ?? DEFAULT_SETTLE_MS });
    this.stopWatch = () => {
      unwatch();
      unhup();
    };
  }

  stop(): void {
    this.stopWatch?.();
    this.stopWatch = undefined;
  }

  /**
   * Reads the file again once it has settled (reloads run one at a time). An unchanged file (same
   * content hash) changes nothing; a bad, empty or still changing one keeps the table in use.
   * True when the table in use is the file's content.
   */
  reload(): Promise<boolean> {
    return this.reloadSerial();
  }

  private async reloadOnce(): Promise<boolean> {
    const { file, log } = this.options;
    let next: GatewayTables;
    try {
      const text = await readConfigFileSettled(file, ROUTE_FILE_ERRORS, this.options, MAX_ROUTE_FILE_BYTES);
      const parsed = this.check(parseRouteFile(text, file));
      if (parsed.version === this.table.source.version) {
        this.lastError = undefined;
        return true;
      }
      next = compileTables(parsed, this.options.random);
    } catch (err) {
      const why = (err as Error).message;
      this.stats.updateFailure.inc();
      if (why !== this.lastError) log.error({ err: why }, 'route file reload failed: the previous routes stay');
      this.lastError = why;
      return false;
    }
    this.tables = next;
    this.loadedAt = new Date();
    this.lastError = undefined;
    this.stats.updateSuccess.inc();
    this.stats.active.set(next.main.size);
    log.info({ file, routes: next.main.size, version: next.main.source.version }, 'route file reloaded');
    this.options.onReload?.(next.main.source);
    return true;
  }

  get routes(): readonly RouteSpec[] {
    return this.table.source.routes;
  }

  /**
   * For admin /routes and /config_dump: the routes (and GRPCRoutes) with their source and version, and each
   * route's Gateway API status (./status.ts: from the file; the registry is not asked).
   */
  dump(): { file: string; version: string; loaded_at: string; last_reload_error: string | null; routes: RouteSpec[]; grpc_routes?: GrpcRouteSpec[]; status: RouteStatus[] } {
    const source = this.table.source;
    const grpc = source.grpcRoutes.length > 0 ? { grpc_routes: source.grpcRoutes } : {};
    return { file: source.file, version: source.version, loaded_at: this.loadedAt.toISOString(), last_reload_error: this.lastError ?? null, routes: source.routes, ...grpc, status: routeStatus(source) };
  }
}

/** A file with Gateway documents, given to a front end that does not serve them: its first Gateway is refused. */
export function refuseGateways(parsed: RouteFile, front: string): void {
  const gateway = parsed.gateways[0];
  if (gateway) throw new RouteFileError(parsed.file, gateway.line, `Gateway documents are served by mesh api only; ${front} serves HTTPRoute documents`, `Gateway ${gateway.name}`);
}
