/**
 * `/stats` of the gateway and the sidecar (`--enable_stats`; DESIGN 6, docs/dashboard.md): one
 * module for both front ends.
 *
 *   GET /stats                     the HTML dashboard (live uPlot charts, cluster table)
 *   GET /stats  Accept: application/json (or ?format=json, or a JSON Content-Type as micro sent)
 *                                  the same data as JSON (DashboardJson below)
 *   GET /stats/assets/<name>       the page's script, styles and uPlot, served by the process (no CDN)
 *   GET /stats/topology            the gateway's topology JSON (./topology.ts); 404 without one (the sidecar)
 *
 * The numbers are the process's StatsStore counters `http.<prefix>.downstream_rq_*` (what admin
 * /stats prints), counted by FrontServer from the status really sent. Requests to these paths
 * are not counted: the front end passes `!isDashboardPath(path)` as FrontServer's `counted`.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { methodNotAllowed, notFound, serviceUnavailable } from '../../base/errors.js';
import { printable } from '../../base/util/text.js';
import { sendJson } from '../../base/http/respond.js';
import { targetOf } from '../../base/http/target.js';
import { packageRoot } from '../../base/util/package-root.js';
import type { StatsStore } from '../../base/stats/store.js';
import type { ServerStatsSource } from '../../base/stats/server-stats.js';
import type { ClusterManagerView, HostSnapshot } from '../../core/upstream/types.js';
import { processSampler, RequestSeries, type LoopDelay, type ProcessSampler, type StatsWindow, type StatusCounts } from './series.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import type { Topology } from './topology.js';

export const DASHBOARD_PATH = '/stats';
export const ASSETS_PATH = '/stats/assets/';
export const TOPOLOGY_PATH = '/stats/topology';
/** At most this many clusters (by name) and hosts per cluster go into one answer. */
export const MAX_CLUSTERS = 100;
export const MAX_HOSTS = 50;

/** True for the paths the dashboard answers (and that must not be counted). */
export function isDashboardPath(path: string): boolean {
  return path === DASHBOARD_PATH || path === TOPOLOGY_PATH || path.startsWith(ASSETS_PATH);
}

export interface DashboardOptions {
  stats: StatsStore;
  /** The admin's server state: version, start time, live/draining. */
  server: ServerStatsSource;
  clusters?: ClusterManagerView;
  /** The front server's stat prefix: `gateway` reads `http.gateway.*`. */
  prefix: string;
  /** Shown as the page title, e.g. `mesh api`. */
  name: string;
  /** The `id` of error JSON (405, unknown asset). */
  errorId: string;
  /** More numbers to show, by label (the sidecar's `subscribers`): JSON `extra`, a tile on the page. */
  extra?: Record<string, () => number>;
  /** Tests inject their own; default the process-wide one. */
  sampler?: ProcessSampler;
  /** --stats_histograms: the windows carry each cluster's upstream latency (p50/p99) and the page draws it. */
  histograms?: boolean;
  /** The gateway's: the processes of the mesh and the edges between them, at TOPOLOGY_PATH. */
  topology?: Topology;
}

export interface HostJson {
  /** `ip:port`, as admin /clusters names the host. */
  address: string;
  hostname: string;
  /** `healthy`, or the failure flags as admin /clusters prints them (`/failed_active_hc/failed_outlier_check`). */
  health: string;
  healthy: boolean;
  weight: number;
  /** Percent: the outlier detector's last interval when it had enough data, else since start; null without requests. */
  success_rate: number | null;
  success_rate_source: 'outlier_interval' | 'since_start' | null;
  rq_total: number;
  rq_success: number;
  rq_error: number;
  rq_timeout: number;
  rq_active: number;
  cx_active: number;
}

export interface ClusterJson {
  name: string;
  hosts_total: number;
  hosts_healthy: number;
  /** Hosts whose node serves mutual TLS: the cluster's mTLS coverage, over hosts_total. */
  hosts_mtls: number;
  hosts: HostJson[];
}

export interface DashboardJson {
  /** `mesh api` or `mesh sidecar`. */
  name: string;
  version: string;
  state: 'live' | 'draining';
  /** Epoch seconds when the process started. */
  started: number;
  /** Whole seconds since then. */
  uptime: number;
  /** Epoch seconds (millisecond precision) of this answer. */
  timestamp: number;
  /** Window length, seconds. */
  interval: number;
  /** How many windows are kept (`counters` holds at most this many). */
  windows_kept: number;
  /** Bytes, now. */
  memory: { rss: number; heap_used: number; heap_total: number; external: number };
  /** Event-loop delay of the last window (ms). */
  event_loop_delay_ms: LoopDelay | null;
  /** Where totals come from: `http.<prefix>.`. */
  stat_prefix: string;
  /** The counters now: `<stat_prefix>downstream_rq_{total,1xx..5xx,active}`, `downstream_cx_{total,active}`. */
  totals: { total: number; active: number; cx_total: number; cx_active: number } & StatusCounts;
  /** Since start, histogram bucket upper bounds (ms); null before the first request. */
  latency_ms: { p50: number | null; p90: number | null; p99: number | null; mean: number | null };
  /** --stats_histograms: true when the windows carry `clusters_latency_ms` (the page then draws per-cluster latency). */
  histograms: boolean;
  /** Closed windows, oldest first (at most windows_kept). */
  counters: readonly StatsWindow[];
  clusters: ClusterJson[];
  clusters_total: number;
  /** The values of DashboardOptions.extra, by label. */
  extra: Record<string, number>;
}

// ---- assets ---------------------------------------------------------------------------------

interface AssetSource {
  type: string;
  path: () => string;
  /** Made from the file's text (the page of a process without a topology). */
  edit?: (text: string) => string;
}

const require = createRequire(import.meta.url);
const own = (name: string) => () => join(packageRoot(), 'src', 'fronts', 'dashboard', name);
const uplot = (name: string) => () => require.resolve(`uplot/dist/${name}`);

const PAGE: AssetSource = { type: 'text/html; charset=utf-8', path: own('page.html') };
/**
 * The page of a process that serves no topology (the sidecar): without the topology section and
 * its script, so that the page asks for nothing the process does not serve (a 404 the browser's
 * console would show).
 */
const PAGE_WITHOUT_TOPOLOGY: AssetSource = {
  ...PAGE,
  edit: (text) => {
    const out = text.replace(/<script src="stats\/assets\/topology\.js" defer><\/script>\n/, '').replace(/<section id="topology"[^>]*>[\s\S]*?<\/section>\n\n?/, '');
    if (out.includes('topology')) throw new Error('page.html: the topology section or its script is not where the sidecar\'s page leaves it out');
    return out;
  },
};
const ASSETS: Record<string, AssetSource> = {
  'dashboard.js': { type: 'text/javascript; charset=utf-8', path: own('dashboard.js') },
  'topology.js': { type: 'text/javascript; charset=utf-8', path: own('topology.js') },
  'dashboard.css': { type: 'text/css; charset=utf-8', path: own('dashboard.css') },
  'uPlot.iife.min.js': { type: 'text/javascript; charset=utf-8', path: uplot('uPlot.iife.min.js') },
  'uPlot.min.css': { type: 'text/css; charset=utf-8', path: uplot('uPlot.min.css') },
};

interface LoadedAsset {
  type: string;
  body: Buffer;
  etag: string;
}
const loaded = new Map<AssetSource, LoadedAsset>();

function load(source: AssetSource): LoadedAsset {
  let asset = loaded.get(source);
  if (!asset) {
    const body = source.edit ? Buffer.from(source.edit(readFileSync(source.path(), 'utf8'))) : readFileSync(source.path());
    asset = { type: source.type, body, etag: `"${createHash('sha1').update(body).digest('base64url')}"` };
    loaded.set(source, asset);
  }
  return asset;
}

/** Throws naming the first asset that cannot be found (uplot not installed, src/fronts/dashboard missing). */
export function checkAssets(): void {
  for (const source of [PAGE, ...Object.values(ASSETS)]) {
    let path: string;
    try {
      path = source.path();
    } catch (err) {
      throw new SchemaOptionError('enable_stats', `{enable_stats}: dashboard asset not found: ${(err as Error).message} (is the uplot package installed?)`);
    }
    if (!existsSync(path)) throw new SchemaOptionError('enable_stats', `{enable_stats}: dashboard asset not found: ${path}`);
  }
}

const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

function sendAsset(req: FrontRequest, res: FrontResponse, asset: LoadedAsset, cache: string): void {
  const headers: Record<string, string | number> = { ...PAGE_HEADERS, 'content-type': asset.type, etag: asset.etag, 'cache-control': cache };
  if (req.headers['if-none-match'] === asset.etag) {
    res.writeHead(304, headers);
    res.end();
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': asset.body.byteLength });
  res.end(asset.body);
}

function wantsJson(req: FrontRequest, query: string | undefined): boolean {
  if (query !== undefined && new URLSearchParams(query).get('format') === 'json') return true;
  if (/application\/json/i.test(String(req.headers.accept ?? ''))) return true;
  return /^application\/json/i.test(String(req.headers['content-type'] ?? ''));
}

// ---- clusters -------------------------------------------------------------------------------

function hostJson(h: HostSnapshot): HostJson {
  const failed = h.failedActiveHc || h.failedOutlierCheck;
  const done = h.stats.rq_success + h.stats.rq_error;
  let success_rate: number | null = null;
  let success_rate_source: HostJson['success_rate_source'] = null;
  if (h.successRate >= 0) {
    success_rate = h.successRate;
    success_rate_source = 'outlier_interval';
  } else if (done > 0) {
    success_rate = (h.stats.rq_success / done) * 100;
    success_rate_source = 'since_start';
  }
  return {
    address: `${h.address}:${h.port}`,
    hostname: h.hostname,
    health: failed ? (h.failedActiveHc ? '/failed_active_hc' : '') + (h.failedOutlierCheck ? '/failed_outlier_check' : '') : 'healthy',
    healthy: !failed,
    weight: h.weight,
    success_rate: success_rate === null ? null : Math.round(success_rate * 100) / 100,
    success_rate_source,
    rq_total: h.stats.rq_total,
    rq_success: h.stats.rq_success,
    rq_error: h.stats.rq_error,
    rq_timeout: h.stats.rq_timeout,
    rq_active: h.stats.rq_active,
    cx_active: h.stats.cx_active,
  };
}

function clustersJson(view: ClusterManagerView | undefined): { clusters: ClusterJson[]; total: number } {
  if (!view) return { clusters: [], total: 0 };
  const all = view.clusters();
  const clusters = all.slice(0, MAX_CLUSTERS).map((c) => ({
    name: c.name,
    hosts_total: c.hosts.length,
    hosts_healthy: c.hosts.filter((h) => !h.failedActiveHc && !h.failedOutlierCheck).length,
    hosts_mtls: c.hosts.filter((h) => h.mtls === true).length,
    hosts: c.hosts.slice(0, MAX_HOSTS).map(hostJson),
  }));
  return { clusters, total: all.length };
}

// ---- the dashboard --------------------------------------------------------------------------

export class Dashboard {
  private readonly series: RequestSeries;
  private readonly sampler: ProcessSampler;
  private sampling = false;

  constructor(private readonly options: DashboardOptions) {
    this.sampler = options.sampler ?? processSampler;
    checkAssets();
    this.series = new RequestSeries(options.stats, options.prefix, undefined, undefined, options.histograms ?? false);
  }

  /** Starts sampling: a window closes every second (the first one started with the constructor). */
  start(): void {
    if (this.sampling) return;
    this.sampling = true;
    this.sampler.add(this.series);
  }

  stop(): void {
    if (!this.sampling) return;
    this.sampling = false;
    this.sampler.remove(this.series);
  }

  snapshot(now = this.options.server.now()): DashboardJson {
    const server = this.options.server;
    const series = this.series;
    const mem = process.memoryUsage();
    const windows = series.windows();
    const { clusters, total } = clustersJson(this.options.clusters);
    return {
      name: this.options.name,
      version: server.version,
      state: server.state,
      started: Math.floor(server.startedAt / 1000),
      uptime: Math.max(0, Math.floor((now - server.startedAt) / 1000)),
      timestamp: now / 1000,
      interval: this.sampler.intervalMs / 1000,
      windows_kept: series.keep,
      memory: { rss: mem.rss, heap_used: mem.heapUsed, heap_total: mem.heapTotal, external: mem.external },
      event_loop_delay_ms: windows.at(-1)?.event_loop_delay_ms ?? null,
      stat_prefix: series.statPrefix,
      totals: series.totals(),
      latency_ms: series.latency(),
      histograms: series.clusterLatency,
      counters: windows,
      clusters,
      clusters_total: total,
      extra: this.extra(),
    };
  }

  private extra(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [label, read] of Object.entries(this.options.extra ?? {})) out[label] = read();
    return out;
  }

  /** Answers a path for which isDashboardPath() is true. Errors are thrown as MeshError. */
  handle(req: FrontRequest, res: FrontResponse): void | Promise<void> {
    req.resume();
    const { path, query } = targetOf(req);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      throw methodNotAllowed(this.options.errorId, `method ${req.method} not allowed on ${path}: use GET`);
    }
    if (path === DASHBOARD_PATH) {
      if (wantsJson(req, query)) sendJson(res, 200, this.snapshot(), { 'cache-control': 'no-store', vary: 'Accept' });
      else sendAsset(req, res, load(this.options.topology ? PAGE : PAGE_WITHOUT_TOPOLOGY), 'no-store');
      return;
    }
    if (path === TOPOLOGY_PATH) {
      const topology = this.options.topology;
      if (!topology) throw notFound(this.options.errorId, 'no topology here: mesh api --enable_stats serves it');
      return topology.snapshot().then(
        (json) => sendJson(res, 200, json, { 'cache-control': 'no-store' }),
        (err: unknown) => {
          throw serviceUnavailable(this.options.errorId, `cannot read the process records of the registry: ${printable((err as Error).message)}`);
        },
      );
    }
    const name = path.slice(ASSETS_PATH.length);
    const source = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!source) throw notFound(this.options.errorId, `no dashboard asset ${name.slice(0, 100)}`);
    sendAsset(req, res, load(source), 'no-cache');
  }
}
