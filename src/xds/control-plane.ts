/**
 * One xDS control plane: the registry's resources (source.ts), and with a route file Envoy's
 * HTTP listener and routes (route-file.ts), served over ADS (server.ts), with the clusters it
 * serves as an admin view. `mesh xds` builds one from its runtime; tests build
 * one around any registry.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Registry } from '../engines/registry/registry.js';
import type { ResolvedClusterSettings } from '../core/upstream/config.js';
import type { ClusterManagerView } from '../core/upstream/types.js';
import type { StatsScope } from '../base/stats/store.js';
import type { Logger } from 'pino';
import { XdsProtos } from './protos.js';
import { XdsSource, type EncodedSnapshot } from './source.js';
import { XdsServer, type XdsAdmission, type XdsServerLimits } from './server.js';
import { xdsClustersView } from './clusters-view.js';
import { serveRouteFile, type XdsRouteFileOptions } from './route-file.js';

export interface XdsControlPlaneOptions {
  registry: Registry;
  settings: ResolvedClusterSettings;
  stats: StatsScope;
  log: Logger;
  credentials?: grpc.ServerCredentials;
  /** Delay between a registry change and the push. Default 100 ms. */
  debounceMs?: number;
  /** A route file served as Envoy's HTTP listener and its routes (reloaded when it changes). */
  routes?: Pick<XdsRouteFileOptions, 'file' | 'address' | 'pollMs' | 'settleMs'>;
  /** The server's bounds on its clients (defaults in server.ts; tests set them low). */
  limits?: XdsServerLimits;
  /** Who may open a stream (a token, node ids); default anyone. */
  admission?: XdsAdmission;
}

export class XdsControlPlane {
  readonly protos = new XdsProtos();
  readonly source: XdsSource;
  private server?: XdsServer;
  private routes?: { stop(): void };

  constructor(private readonly o: XdsControlPlaneOptions) {
    this.source = new XdsSource({ registry: o.registry, settings: o.settings, protos: this.protos, log: o.log, stats: o.stats, debounceMs: o.debounceMs });
  }

  /** Reads the registry, then serves; resolves with the bound port. */
  async start(host: string, port: number): Promise<number> {
    // The route file first: one Envoy cannot take refuses the start (its RouteFileError).
    if (this.o.routes) this.routes = serveRouteFile({ ...this.o.routes, source: this.source, stats: this.o.stats, log: this.o.log });
    try {
      await this.source.start();
    } catch (err) {
      this.routes?.stop();
      throw err;
    }
    this.server = new XdsServer({ source: this.source, protos: this.protos, stats: this.o.stats, log: this.o.log, credentials: this.o.credentials, admission: this.o.admission, ...this.o.limits });
    return this.server.listen(host, port);
  }

  get snapshot(): EncodedSnapshot | undefined {
    return this.source.snapshot;
  }

  /** Streams open now. */
  get clients(): number {
    return this.server?.clients ?? 0;
  }

  clustersView(): ClusterManagerView {
    return xdsClustersView(this.source, this.o.settings);
  }

  async close(): Promise<void> {
    this.routes?.stop();
    this.source.close();
    await this.server?.close();
  }
}
