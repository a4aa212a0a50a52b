/**
 * --metrics_address: a second, read-only listener for scrapers and kubelets. It serves only
 * `GET /metrics` (the admin's Prometheus text: every counter and gauge plus the process metrics)
 * and `GET /ready`; no Host check (it is meant to be reached from outside loopback) and nothing
 * that changes state. Exact answers are in docs/admin.md ("Metrics listener").
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from '../base/http/node-http.js';
import { renderPrometheus, PROMETHEUS_CONTENT_TYPE } from '../base/stats/render.js';
import type { ProcessMetrics } from '../base/stats/process-metrics.js';
import { httpServerOptions, listenOn } from '../base/http/lifecycle.js';
import { formatAddress, parseAddress, type HostPort } from '../base/util/address.js';
import { refreshServerStats, TEXT } from './server.js';
import type { AdminContext } from './context.js';
import { splitTarget } from '../base/http/target.js';

export type MetricsContext = Pick<AdminContext, 'stats' | 'server' | 'certs' | 'logging' | 'limits' | 'histograms' | 'aggregate'> & { processMetrics: ProcessMetrics };

export const METRICS_ALLOW = 'GET, HEAD';

/** --metrics_address: `host:port`, `[v6]:port` or `:port` (every interface). */
export function parseMetricsAddress(address: string): HostPort {
  return parseAddress(address, { what: 'metrics address' });
}

export class MetricsServer {
  private readonly http: Server;
  private bound: { host: string; port: number } | undefined;

  constructor(private readonly ctx: MetricsContext) {
    this.http = createServer({ requireHostHeader: false, ...(ctx.limits ? httpServerOptions(ctx.limits) : {}) }, (req, res) => this.serve(req, res));
    if (ctx.limits && ctx.limits.maxConnections > 0) this.http.maxConnections = ctx.limits.maxConnections;
  }

  get address(): { host: string; port: number } | undefined {
    return this.bound;
  }

  async listen(address: string): Promise<{ host: string; port: number }> {
    const { host, port } = parseMetricsAddress(address);
    const a = await listenOn(this.http, host, port);
    this.bound = { host: a.address, port: a.port };
    this.ctx.logging.get('admin').info({ address: formatAddress(this.bound.host, this.bound.port) }, 'metrics listening');
    return { ...this.bound };
  }

  async close(): Promise<void> {
    if (!this.http.listening) return;
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeAllConnections();
    await closed;
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const path = splitTarget(req.url ?? '/').path;
    if (path !== '/metrics' && path !== '/ready') return this.write(res, 404, 'Not Found\n');
    if (req.method !== 'GET' && req.method !== 'HEAD') return this.write(res, 405, 'Method Not Allowed\n', TEXT, { allow: METRICS_ALLOW });
    if (path === '/ready') {
      const live = this.ctx.server.state === 'live';
      return this.write(res, live ? 200 : 503, live ? 'LIVE\n' : 'DRAINING\n');
    }
    this.metrics(res).catch((err: unknown) => {
      this.ctx.logging.get('admin').error({ err }, 'metrics render failed');
      this.write(res, 500, `${err instanceof Error ? err.message : String(err)}\n`);
    });
  }

  private async metrics(res: ServerResponse): Promise<void> {
    refreshServerStats(this.ctx);
    // --concurrency above 1: every worker's stats and process metrics, merged.
    const merged = this.ctx.aggregate ? await this.ctx.aggregate.stats() : undefined;
    const stats = merged ? merged.store : this.ctx.stats;
    const families = merged ? merged.processFamilies : this.ctx.processMetrics.families();
    this.write(res, 200, renderPrometheus(stats, stats.list(), families, this.ctx.histograms ? stats.listHistograms() : []), PROMETHEUS_CONTENT_TYPE);
  }

  private write(res: ServerResponse, status: number, body: string | Buffer, contentType = TEXT, headers: Record<string, string> = {}): void {
    res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-cache, max-age=0', ...headers });
    res.end(body);
  }
}
