/**
 * The gateway's registry router (DESIGN section 4): keeps the route table (src/fronts/gateway/routes.ts)
 * of the services in the gateway's namespace, rebuilt when the registry changes, and matched per
 * request without touching the registry; dumped for admin /routes.
 */
import type { Logger } from 'pino';
import type { Registry, Service, Watcher } from '../../engines/registry/registry.js';
import { byVersion } from '../../engines/registry/records.js';
import { buildRoutes, inNamespace, RouteTable, type RegistryRoute, type RegistryRouteSpec, type RouteMatch } from './routes.js';

export interface RegistryRouterOptions {
  registry: Registry;
  namespace: string;
  logger: Logger;
  /** Coalescing delay after a registry change before the table is rebuilt. Default 50 ms. */
  debounceMs?: number;
  /** A full rebuild this often even without changes (a missed watch event heals). Default 60 s. */
  refreshMs?: number;
  /** Retry delay after a failed rebuild. Default 1 s. */
  retryMs?: number;
}

/**
 * Keeps a RouteTable for the namespace: built at start, rebuilt (coalesced) after every registry
 * change to a service of the namespace, periodically, and after a failure. A failed rebuild keeps
 * the previous table.
 */
export class RegistryRouter {
  private table = new RouteTable([]);
  private versionInfo = '0';
  private watcher?: Watcher;
  private timer?: NodeJS.Timeout;
  private refreshTimer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;
  /** Problems already logged, so a bad path is reported once, not at every rebuild. */
  private reported = new Set<string>();
  private readonly debounceMs: number;
  private readonly refreshMs: number;
  private readonly retryMs: number;
  /** Completed rebuilds (tests and logs). */
  builds = 0;

  constructor(private readonly options: RegistryRouterOptions) {
    this.debounceMs = options.debounceMs ?? 50;
    this.refreshMs = options.refreshMs ?? 60_000;
    this.retryMs = options.retryMs ?? 1_000;
  }

  /** Starts watching and builds the first table (a registry failure is logged and retried, not thrown). */
  async start(): Promise<void> {
    const { registry, namespace } = this.options;
    this.watcher = registry.watch((event) => {
      if (inNamespace(event.service.name, namespace)) this.schedule(this.debounceMs);
    });
    this.refreshTimer = setInterval(() => this.schedule(0), this.refreshMs);
    this.refreshTimer.unref();
    await this.rebuild();
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.stop();
    this.watcher = undefined;
    if (this.timer) clearTimeout(this.timer);
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    this.timer = this.refreshTimer = undefined;
  }

  match(method: string, host: string | undefined, path: string): RouteMatch | undefined {
    return this.table.match(method, host, path);
  }

  get routes(): readonly RegistryRoute[] {
    return this.table.routes;
  }

  /** The registry revision the current table was built from. */
  get version(): string {
    return this.versionInfo;
  }

  /** For admin /routes. */
  dump(): { routeConfigName: string; versionInfo: string; table: RegistryRouteSpec[] } {
    return { routeConfigName: this.options.namespace, versionInfo: this.versionInfo, table: this.table.dump() };
  }

  private schedule(delayMs: number): void {
    if (this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.rebuild();
    }, delayMs);
    this.timer.unref();
  }

  /** Rebuilds now; a rebuild asked for while one runs runs once more after it. */
  rebuild(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.build();
      } while (this.again && !this.stopped);
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  private async build(): Promise<void> {
    const { registry, namespace, logger } = this.options;
    try {
      // The revision first: the table reflects at least this revision.
      const revision = registry.revision();
      const names = (await registry.listServices()).map((s) => s.name).filter((n) => inNamespace(n, namespace));
      const services: Service[] = [];
      for (const name of [...new Set(names)].sort()) {
        const versions = await registry.getService(name);
        versions.sort(byVersion);
        services.push(...versions);
      }
      if (this.stopped) return;
      const { routes, problems } = buildRoutes(services);
      const reported = new Set<string>();
      for (const p of problems) {
        const key = JSON.stringify(p);
        reported.add(key);
        if (!this.reported.has(key)) logger.warn(p, 'route ignored');
      }
      this.reported = reported;
      const changed = JSON.stringify(this.table.dump()) !== JSON.stringify(routes.map(({ matchPath: _m, ...spec }) => spec));
      this.table = new RouteTable(routes);
      this.versionInfo = revision;
      this.builds++;
      if (changed) logger.info({ namespace, routes: routes.length, version: revision }, 'route table rebuilt');
    } catch (err) {
      logger.error({ err: (err as Error).message }, 'route table rebuild failed; keeping the previous table');
      if (!this.stopped) {
        const retry = setTimeout(() => this.schedule(0), this.retryMs);
        retry.unref();
      }
    }
  }
}
