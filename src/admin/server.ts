/**
 * The admin interface (SPEC 1.1 and 4.1, DESIGN 7): a plain-HTTP server, loopback by default,
 * with Envoy's text-era endpoints over one process's AdminContext. Decisions and exact bodies are
 * in docs/admin.md.
 */
import { printable } from '../base/util/text.js';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from '../base/http/node-http.js';
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { LEVELS, SUBSYSTEMS, isLevel, type Subsystem } from '../base/util/log.js';
import { renderJson, renderPrometheus, renderText, PROMETHEUS_CONTENT_TYPE } from '../base/stats/render.js';
import { updateServerStats } from '../base/stats/server-stats.js';
import { ProcessMetrics } from '../base/stats/process-metrics.js';
import type { AdminContext, RouteTableDump } from './context.js';
import { parseQuery, type Query } from './query.js';
import { httpServerOptions, listenOn } from '../base/http/lifecycle.js';
import { renderClustersJson, renderClustersText } from './clusters.js';
import { renderCerts, secondsUntilFirstExpiring } from './certs.js';
import { renderConfigDump, renderListenersJson, renderListenersText } from './config-dump.js';
import { CpuProfiler } from './profiler.js';
import { hotRestartVersion } from './build-info.js';
import { ALLOWED_HOSTS_FLAG, HostCheck } from '../base/http/host-check.js';
import { HTTP_LIFECYCLE_STATS, httpStatPrefix } from '../base/http/stats.js';
import { formatAddress, isLoopback, isWildcard, parseAddress, type HostPort } from '../base/util/address.js';
import { compileSearchRegex, type SearchRegex } from '../base/util/regex.js';
import { clientText } from '../base/util/text.js';
import { splitTarget } from '../base/http/target.js';
import { badRequest, ERROR_IDS, forbidden, serviceUnavailable, type MeshError } from '../base/errors.js';
import { NDJSON, parseTapQuery, TapStream, type TapStats } from './tap.js';
import { serveMtls } from '../base/mtls/server.js';
import { peerIdentityOf } from '../base/mtls/workload-tls.js';

export const TEXT = 'text/plain; charset=UTF-8';
/** Counts requests refused by the Host check. */
export const HOST_REFUSED_STAT = `${httpStatPrefix('admin')}downstream_rq_host_refused`;
/** A header a cross-origin page cannot send without a CORS preflight (which the admin never grants). */
export const ADMIN_HEADER = 'x-mesh-admin';
/** Request headers only a browser sends (a tool such as curl sends none of them). */
const BROWSER_MARKERS = ['origin', 'referer', 'cookie', 'sec-fetch-site', 'sec-fetch-mode', 'sec-fetch-dest', 'sec-fetch-user'];
/**
 * Headers a proxy adds to what it forwards (the canonical spelling, for the error): a mutating
 * request that carries one came through a proxy, perhaps another mesh process's gateway whose
 * client picked this admin as a backend, and is refused unless --admin_token is set.
 */
const FORWARDING_MARKERS = ['X-Forwarded-For', 'X-Forwarded-Host', 'X-Forwarded-Proto', 'Forwarded', 'Via'];
/** Content types a page may send cross-origin without a preflight (CORS "simple" requests). */
const SIMPLE_CONTENT_TYPES = new Set(['application/x-www-form-urlencoded', 'multipart/form-data', 'text/plain']);
export const JSON_TYPE = 'application/json';

export interface AdminReply {
  status: number;
  body: string | Buffer;
  contentType?: string;
  headers?: Record<string, string>;
  /** Runs once the response has been flushed (/quitquitquit). */
  afterFlush?: () => void;
}

interface Endpoint {
  path: string;
  help: string;
  /** Whether this request changes state (cross-site refusal applies). */
  mutates: (query: Query) => boolean;
  handle: (query: Query) => AdminReply | Promise<AdminReply>;
  /** Whether the endpoint exists now (checked at each request); absent: always. */
  available?: () => boolean;
  /** A streaming answer (/tap): takes the response over, or returns a reply to write instead. */
  stream?: (query: Query, req: IncomingMessage, res: ServerResponse) => AdminReply | undefined;
}

/** The path of the live request stream, whose refusals are counted (admin.tap.refused). */
const TAP_PATH = '/tap';
/** The stats of /tap. */
export const TAP_STATS = { active: 'admin.tap.active', events: 'admin.tap.events', dropped: 'admin.tap.dropped', refused: 'admin.tap.refused' } as const;

/** An error JSON reply of the admin (/tap's refusals). */
function errorReply(err: MeshError, headers?: Record<string, string>): AdminReply {
  return { status: err.code, body: err.toBody(), contentType: JSON_TYPE, headers };
}

/** A request's URL as logged: at most this many characters of it (client text: cut, then escaped). */
const MAX_LOGGED_URL = 1024;
/** A request header as logged (client text: cut, then escaped); absent stays absent. */
const loggedHeader = (v: string | string[] | undefined): string | undefined => (v === undefined ? undefined : clientText(String(v)));

const ok = (): AdminReply => ({ status: 200, body: 'OK\n' });
const text = (status: number, body: string | Buffer): AdminReply => ({ status, body });
const always = () => true;
const never = () => false;

export const STATS_USAGE = 'usage: /stats?format=(json|prometheus|text)\n\n';
export const CLUSTERS_USAGE = 'usage: /clusters?format=(json|text)\n\n';
export const LISTENERS_USAGE = 'usage: /listeners?format=(json|text)\n\n';
export const CPUPROFILER_USAGE = '?enable=<y|n>\n';
export const LOGGING_USAGE =
  'usage: /logging?<name>=<level> (change single level)\n' +
  'usage: /logging?level=<level> (change all levels)\n' +
  `levels: ${LEVELS.map((l) => `${l} `).join('')}\n`;
export const ROUTES_USAGE =
  '{\n' +
  '    "general_usage": "/routes (dump all dynamic HTTP route tables).",\n' +
  '    "specify_name_usage": "/routes?route_config_name=<name> (dump all dynamic HTTP route tables with the <name> if any)."\n' +
  '}\n';

/**
 * --admin_address / admin.address: `host:port`, `[v6]:port` or `:port` (every interface), as every
 * address (src/base/util/address.ts); the defaults name 127.0.0.1 explicitly.
 */
export function parseAdminAddress(address: string): HostPort {
  return parseAddress(address, { what: 'admin address' });
}

/** Brings the `server.*` gauges up to date (before any render of the stats). */
export function refreshServerStats(ctx: Pick<AdminContext, 'stats' | 'server' | 'certs'>): void {
  const { stats, server, certs } = ctx;
  updateServerStats(stats, server, certs ? { secondsUntilFirstCertExpiring: secondsUntilFirstExpiring(certs(), server.now()) } : {});
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export class AdminServer {
  private readonly ctx: AdminContext;
  private readonly endpoints = new Map<string, Endpoint>();
  private readonly http: Server;
  private readonly profiler = new CpuProfiler();
  private readonly regexCache = new Map<string, SearchRegex | Error>();
  private readonly tokenDigest: Buffer | undefined;
  private stopMtls?: () => void;
  private readonly hostCheck: HostCheck;
  private bound: { host: string; port: number } | undefined;
  /** The process metrics of the Prometheus format: the context's, or the admin's own (closed with it). */
  private readonly processMetrics: ProcessMetrics;
  private readonly ownsProcessMetrics: boolean;
  /** The /tap answers open now (ended on close). */
  private readonly taps = new Set<TapStream>();
  private readonly tapStats: TapStats | undefined;

  constructor(ctx: AdminContext) {
    this.ctx = ctx;
    this.ownsProcessMetrics = !ctx.processMetrics;
    this.processMetrics = ctx.processMetrics ?? new ProcessMetrics();
    this.tokenDigest = ctx.token ? digest(ctx.token) : undefined;
    this.hostCheck = new HostCheck(ctx.allowedHosts ?? [], () => this.bound?.host);
    if (ctx.tap) this.tapStats = { active: ctx.stats.gauge(TAP_STATS.active), events: ctx.stats.counter(TAP_STATS.events), dropped: ctx.stats.counter(TAP_STATS.dropped) };
    const endpoints = this.buildEndpoints().sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    for (const e of endpoints) this.endpoints.set(e.path, e);
    // A missing Host is answered by the Host check (403), not by node's own 400.
    this.http = createServer({ requireHostHeader: false, ...(ctx.limits ? httpServerOptions(ctx.limits) : {}) }, (req, res) => {
      this.serve(req, res).catch((err: unknown) => {
        this.log().error({ err }, 'admin request failed');
        if (!res.headersSent) this.write(res, text(500, `${err instanceof Error ? err.message : String(err)}\n`));
        else res.destroy();
      });
    });
    // --tap_allowed_identities: mutual TLS besides plain HTTP on the same port (the first byte tells them apart).
    const tapMtls = ctx.tapMtls;
    if (tapMtls) {
      this.stopMtls = serveMtls(this.http, {
        workload: tapMtls.workload,
        service: 'mesh.admin',
        stats: ctx.stats.scope(httpStatPrefix('admin')),
        acceptTimeoutMs: ctx.limits?.headersTimeoutMs ?? 0,
        log: this.log(),
        mode: 'permissive',
      });
    }
    // Over --max_connections Node closes the accepted connection at once and emits 'drop'.
    if (ctx.limits && ctx.limits.maxConnections > 0) this.http.maxConnections = ctx.limits.maxConnections;
    // Created on the first overflow, so /stats shows it only once there is one.
    this.http.on('drop', () => ctx.stats.scope(httpStatPrefix('admin')).counter(HTTP_LIFECYCLE_STATS.counters.overflow).inc());
  }

  /** The `admin commands are:` list served by / and /help: the endpoints that exist now. */
  get help(): string {
    let body = 'admin commands are:\n';
    for (const e of this.endpoints.values()) if (!e.available || e.available()) body += `  ${e.path}: ${e.help}\n`;
    return body;
  }

  get address(): { host: string; port: number } | undefined {
    return this.bound;
  }

  async listen(address = '127.0.0.1:9901'): Promise<{ host: string; port: number }> {
    const { host, port } = parseAdminAddress(address);
    const a = await listenOn(this.http, host, port);
    this.bound = { host: a.address, port: a.port };
    this.log().info({ address: formatAddress(this.bound.host, this.bound.port) }, 'admin listening');
    if (!isLoopback(this.bound.host) && !this.tokenDigest) {
      this.log().warn(
        { address: formatAddress(this.bound.host, this.bound.port) },
        'admin listening on a non-loopback address without --admin_token: anyone who can reach it can drain, quit and reconfigure this process',
      );
    }
    return { ...this.bound };
  }

  async close(): Promise<void> {
    if (this.ownsProcessMetrics) this.processMetrics.close();
    await this.profiler.dispose();
    // Every tap ends cleanly (its last line written), for at most a second.
    if (this.taps.size > 0) await Promise.race([Promise.all([...this.taps].map((t) => t.end())), new Promise((r) => setTimeout(r, 1000).unref())]);
    this.stopMtls?.();
    if (!this.http.listening) return;
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeAllConnections();
    await closed;
  }

  private log() {
    return this.ctx.logging.get('admin');
  }

  // ---------------------------------------------------------------- dispatch

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    req.on('error', () => undefined);
    const url = req.url ?? '/';
    const target = splitTarget(url);
    let path = target.path;
    if (/^https?:\/\//i.test(path)) {
      // absolute-form request target (a proxy-style request line)
      try {
        path = new URL(path).pathname;
      } catch {
        // not a URL: stays an unknown path
      }
    }
    const method = req.method ?? 'GET';

    const verdict = this.hostCheck.check(req.headers.host, req.httpVersion);
    if (verdict !== 'allowed') {
      this.ctx.stats.counter(HOST_REFUSED_STAT).inc();
      this.log().warn({ host: req.headers.host, path }, 'admin refused a request for a foreign Host');
      this.tapRefused(path);
      return this.write(
        res,
        text(403, verdict === 'missing' ? `Host header missing; see ${ALLOWED_HOSTS_FLAG}\n` : `Host "${req.headers.host}" is not allowed; see ${ALLOWED_HOSTS_FLAG}\n`),
      );
    }
    // Over mutual TLS (--tap_allowed_identities): /tap only, to the identities allowed, which need no token.
    const identity = this.ctx.tapMtls ? peerIdentityOf(req.socket) : undefined;
    if (identity !== undefined) {
      if (path !== TAP_PATH) {
        this.log().warn({ path, identity: clientText(identity) }, 'admin refused a request over mutual TLS: only /tap is served there');
        return this.write(res, text(403, `Forbidden: over mutual TLS this admin interface serves only ${TAP_PATH}; ask for ${path} over plain HTTP.\n`));
      }
      if (!this.ctx.tapMtls!.allowed.includes(identity)) {
        this.log().warn({ path, identity: clientText(identity) }, 'admin refused a tap: its identity is not in --tap_allowed_identities');
        this.tapRefused(path);
        return this.write(res, text(403, `Forbidden: ${identity} may not tap this process (see --tap_allowed_identities).\n`));
      }
    } else if (this.tokenDigest && !this.authorized(req)) {
      if (path === TAP_PATH) this.log().warn({ path, authorization: req.headers.authorization === undefined ? 'none' : 'wrong' }, 'admin refused a tap without the admin token');
      this.tapRefused(path);
      return this.write(res, {
        status: 401,
        body: 'Unauthorized: this admin interface needs "Authorization: Bearer <token>"\n',
        headers: { 'WWW-Authenticate': 'Bearer realm="mesh admin"' },
      });
    }
    const found = this.endpoints.get(path);
    const endpoint = found && (!found.available || found.available()) ? found : undefined;
    if (!endpoint) return this.write(res, text(404, `invalid path. ${this.help}`));
    if (method !== 'GET' && method !== 'POST') {
      return this.write(res, { status: 405, body: `Method ${method} not allowed, GET or POST required.`, headers: { Allow: 'GET, POST' } });
    }
    const query = parseQuery(target.search.slice(1));
    const mutates = endpoint.mutates(query);
    if (mutates && this.crossSite(req)) {
      this.log().warn({ path, origin: loggedHeader(req.headers.origin), site: loggedHeader(req.headers['sec-fetch-site']) }, 'admin refused a cross-site request');
      this.tapRefused(path);
      return this.write(res, text(403, `Forbidden: ${path} changes state and refuses cross-site requests.\n`));
    }
    if (mutates && this.simpleBrowserRequest(req)) {
      this.log().warn({ path, origin: loggedHeader(req.headers.origin), site: loggedHeader(req.headers['sec-fetch-site']) }, 'admin refused a simple browser request');
      this.tapRefused(path);
      return this.write(res, text(403, `Forbidden: ${path} changes state; a browser request must carry the header "X-Mesh-Admin: 1".\n`));
    }
    const marker = mutates && !this.tokenDigest ? FORWARDING_MARKERS.find((h) => req.headers[h.toLowerCase()] !== undefined) : undefined;
    if (marker !== undefined) {
      this.log().warn({ path, header: marker, forwardedFor: loggedHeader(req.headers['x-forwarded-for']) }, 'admin refused a forwarded request');
      this.tapRefused(path);
      return this.write(res, text(403, `Forbidden: ${path} changes state and refuses forwarded requests (${marker}); set --admin_token to manage this process through a proxy.\n`));
    }
    if (mutates) this.log().info({ method, url: clientText(url, MAX_LOGGED_URL) }, 'admin operation');
    else this.log().debug({ method, url: clientText(url, MAX_LOGGED_URL) }, 'admin request');
    if (endpoint.stream) {
      const refusal = endpoint.stream(query, req, res);
      if (refusal) this.write(res, refusal);
      return;
    }
    const reply = await endpoint.handle(query);
    this.write(res, reply);
  }

  private write(res: ServerResponse, reply: AdminReply): void {
    const body = typeof reply.body === 'string' ? Buffer.from(reply.body, 'utf8') : reply.body;
    res.writeHead(reply.status, {
      'Content-Type': reply.contentType ?? TEXT,
      'Cache-Control': 'no-cache, max-age=0',
      'X-Content-Type-Options': 'nosniff',
      'Content-Length': String(body.length),
      ...reply.headers,
    });
    if (reply.afterFlush) res.once('finish', reply.afterFlush);
    res.end(body);
  }

  /** Counts a refused /tap (admin.tap.refused). */
  private tapRefused(path: string): void {
    if (path === TAP_PATH && this.tapStats) this.ctx.stats.counter(TAP_STATS.refused).inc();
  }

  /**
   * /tap: checks the parameters (400 naming the bad one), attaches a tap to the process's hub (503
   * over its cap) and streams NDJSON until the client goes away or the admin closes.
   */
  private tap(query: Query, req: IncomingMessage, res: ServerResponse): AdminReply | undefined {
    const hub = this.ctx.tap!;
    const stats = this.tapStats!;
    const filter = parseTapQuery(query);
    if ('parameter' in filter) return errorReply(badRequest(ERROR_IDS.admin, filter.detail));
    if (filter.bodies && !hub.bodiesAllowed) {
      this.ctx.stats.counter(TAP_STATS.refused).inc();
      this.log().warn({ path: TAP_PATH }, 'admin refused a tap: bodies are not allowed on this process');
      return errorReply(forbidden(ERROR_IDS.admin, 'tap bodies are not allowed on this process: start it with --tap_bodies_max_bytes=SIZE to allow bodies=true'));
    }
    const aggregate = this.ctx.aggregate;
    // --concurrency above 1: the workers serve the requests; their relays match and sample, this stream paces the sum.
    const stream = new TapStream(res, aggregate ? { ...filter, sample: 1 } : filter, stats);
    const detachHere = hub.attach(stream);
    const detachWorkers = detachHere && aggregate ? aggregate.tap(filter, { deliver: (e) => stream.offer(e), dropped: (n) => stream.droppedElsewhere(n) }) : undefined;
    const detach = detachHere && (() => (detachHere(), detachWorkers?.()));
    if (!detach) {
      stream.stop();
      this.ctx.stats.counter(TAP_STATS.refused).inc();
      this.log().warn({ path: TAP_PATH, taps: hub.size }, 'admin refused a tap: too many taps');
      return errorReply(serviceUnavailable(ERROR_IDS.admin, `too many taps: at most ${hub.maxTaps} at once on this process; retry later`), { 'Retry-After': '1' });
    }
    stats.active.inc();
    this.taps.add(stream);
    const remote = req.socket.remoteAddress;
    const identity = peerIdentityOf(req.socket);
    this.log().info({ filter: Object.fromEntries([...query].map(([k, v]) => [clientText(k), clientText(v)])), remote, ...(identity ? { identity: clientText(identity) } : {}) }, 'tap started');
    res.once('close', () => {
      stream.stop();
      detach();
      this.taps.delete(stream);
      stats.active.dec();
      this.log().info({ remote }, 'tap ended');
    });
    req.resume();
    res.writeHead(200, { 'Content-Type': NDJSON, 'Cache-Control': 'no-cache, max-age=0', 'X-Content-Type-Options': 'nosniff' });
    res.flushHeaders();
    return undefined;
  }

  private authorized(req: IncomingMessage): boolean {
    const header = req.headers.authorization;
    const m = header ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header) : null;
    if (!m) return false;
    return timingSafeEqual(digest(m[1]!), this.tokenDigest!);
  }

  /**
   * A browser's request from another site: `Sec-Fetch-Site: cross-site` or `same-site` (another
   * port of the same host is same-site, and is exactly what a local web page is), or an `Origin`
   * that is not this admin's own (`null` included).
   */
  private crossSite(req: IncomingMessage): boolean {
    const site = req.headers['sec-fetch-site'];
    if (site === 'cross-site' || site === 'same-site') return true;
    const origin = req.headers.origin;
    if (origin === undefined) return false;
    return !this.ownOrigin(origin, req.headers.host);
  }

  /**
   * A request that a web page could have sent without a CORS preflight: it carries a browser marker
   * (Origin, Referer, Cookie, Sec-Fetch-*) and nothing a page cannot send cross-origin freely
   * (X-Mesh-Admin, Authorization, a Content-Type other than the three simple ones). Two exceptions:
   * with --admin_token every request already proved the token; `Sec-Fetch-Site: none` without
   * Origin is the person at the address bar (no page can make a browser send it).
   */
  private simpleBrowserRequest(req: IncomingMessage): boolean {
    if (this.tokenDigest) return false;
    const h = req.headers;
    if (!BROWSER_MARKERS.some((name) => h[name] !== undefined)) return false;
    if (h['sec-fetch-site'] === 'none' && h.origin === undefined) return false;
    if (h[ADMIN_HEADER] !== undefined || h.authorization !== undefined) return false;
    const type = h['content-type'];
    if (type !== undefined && !SIMPLE_CONTENT_TYPES.has(type.split(';')[0]!.trim().toLowerCase())) return false;
    return true;
  }

  private ownOrigin(origin: string, hostHeader: string | undefined): boolean {
    let u: URL;
    try {
      u = new URL(origin);
    } catch {
      return false;
    }
    if (u.protocol !== 'http:' || !this.bound) return false;
    if (Number(u.port || '80') !== this.bound.port) return false;
    const host = u.hostname.replace(/^\[|\]$/g, '');
    const bound = this.bound.host;
    if (host === bound) return true;
    if (isLoopback(host) && (isLoopback(bound) || isWildcard(bound))) return true;
    // Bound to a wildcard and reached by an IP address: the Host header names the same IP.
    // (A DNS name is not trusted this way: DNS rebinding makes Host and Origin agree.)
    if (isWildcard(bound) && isIP(host) !== 0 && hostHeader !== undefined && u.host === hostHeader) return true;
    return false;
  }

  // ---------------------------------------------------------------- endpoints

  private buildEndpoints(): Endpoint[] {
    const ctx = this.ctx;
    const list: Endpoint[] = [
      { path: '/', help: 'print out list of admin commands', mutates: never, handle: () => text(200, this.help) },
      { path: '/help', help: 'print out list of admin commands', mutates: never, handle: () => text(200, this.help) },
      {
        path: '/certs',
        help: 'print certs on machine',
        mutates: never,
        handle: async () => ({
          status: 200,
          body: renderCerts(ctx.aggregate ? await ctx.aggregate.certs() : (ctx.certs?.() ?? []), ctx.server.now()),
          contentType: JSON_TYPE,
        }),
      },
      { path: '/clusters', help: 'upstream cluster status', mutates: never, handle: (q) => this.clusters(q) },
      { path: '/cpuprofiler', help: 'enable/disable the CPU profiler', mutates: always, handle: (q) => this.cpuProfiler(q) },
      {
        path: '/healthcheck/fail',
        help: 'cause the server to fail health checks',
        mutates: always,
        handle: async () => {
          await ctx.server.fail();
          return ok();
        },
      },
      {
        path: '/healthcheck/ok',
        help: 'cause the server to pass health checks',
        mutates: always,
        handle: async () => {
          await ctx.server.ok();
          return ok();
        },
      },
      {
        path: '/hot_restart_version',
        help: 'print the hot restart compatibility version',
        mutates: never,
        handle: () => text(200, hotRestartVersion()),
      },
      { path: '/logging', help: 'query/change logging levels', mutates: (q) => q.size > 0, handle: (q) => this.logging(q) },
      {
        path: '/quitquitquit',
        help: 'exit the server',
        mutates: always,
        handle: (q) => {
          const asked = q.get('process');
          if (asked !== undefined && asked !== ctx.processId) return text(409, `this is process ${ctx.processId ?? '(none)'}, not ${printable(asked).slice(0, 128)}: not quitting\n`);
          return {
          ...ok(),
          afterFlush: () => {
            ctx.quit().catch((err: unknown) => this.log().error({ err }, 'quit failed'));
          },
          };
        },
      },
      {
        path: '/ready',
        help: 'print server state, return 200 if LIVE, otherwise return 503',
        mutates: never,
        handle: () => (ctx.server.state === 'live' ? text(200, 'LIVE\n') : text(503, 'DRAINING\n')),
      },
      {
        path: '/reset_counters',
        help: 'reset all counters to zero',
        mutates: always,
        handle: async () => {
          ctx.stats.resetCounters();
          await ctx.aggregate?.resetCounters();
          return ok();
        },
      },
      ...(ctx.tap
        ? [
            {
              path: TAP_PATH,
              help: 'stream the requests this process serves, one JSON event a line (filters: service, route, path_prefix, method, status, identity, min_duration_ms, sample, rate; bodies=true: with the bodies, where allowed)',
              // Privileged: it shows other people's requests; refused cross-site and through a proxy as a mutating request is.
              mutates: always,
              handle: () => text(405, 'streamed\n'),
              stream: (q: Query, req: IncomingMessage, res: ServerResponse) => this.tap(q, req, res),
              // Only where front ends serve (they list their listeners): a framework service's or mesh xds's admin has
              // nothing to tap. With --concurrency above 1 the primary taps its workers.
              available: ctx.hasListeners && !ctx.aggregate ? ctx.hasListeners : undefined,
            },
          ]
        : []),
      { path: '/server_info', help: 'print server version/status information', mutates: never, handle: () => text(200, this.serverInfo()) },
      { path: '/stats', help: 'print server stats', mutates: never, handle: (q) => this.stats(q, q.get('format')) },
      {
        path: '/stats/prometheus',
        help: 'print server stats in prometheus format',
        mutates: never,
        handle: (q) => this.stats(q, 'prometheus'),
      },
    ];
    // One configuration a process: the object itself; several (--concurrency): a list.
    const jsonOfProcesses = (path: string, help: string, read: (() => unknown[] | Promise<unknown[]>) | undefined, available: (() => boolean) | undefined): void => {
      if (!read) return;
      list.push({
        path,
        help,
        mutates: never,
        handle: async () => {
          const all = await read();
          return { status: 200, body: `${JSON.stringify(all.length === 1 ? all[0] : all, null, 2)}\n`, contentType: JSON_TYPE };
        },
        available,
      });
    };
    const traffic = ctx.traffic;
    if (traffic) {
      list.push({
        path: '/traffic',
        help: 'print what this process sent to each service it calls (answers by class, latency buckets, hosts over mutual TLS) as JSON, for mesh stat and mesh edges',
        mutates: never,
        handle: async () => ({ status: 200, body: `${JSON.stringify(await traffic())}\n`, contentType: JSON_TYPE }),
      });
    }
    jsonOfProcesses('/auth_rules', 'print the loaded authorization rules (--auth_rules, --authz_rules) as JSON', ctx.authRules, ctx.hasAuthRules);
    jsonOfProcesses('/rate_limits', 'print the rate limit store (--rate_limit_store): its kind, address, state (up or down) and since when, as JSON', ctx.rateLimits, ctx.hasRateLimits);
    const listeners = ctx.listeners;
    if (listeners) {
      list.push({
        path: '/listeners',
        help: 'print listener info',
        mutates: never,
        handle: (q) => {
          const format = q.get('format');
          if (q.size > 1 || (q.size === 1 && format === undefined) || (format !== undefined && format !== 'text' && format !== 'json')) return text(400, LISTENERS_USAGE);
          return format === 'json' ? { status: 200, body: renderListenersJson(listeners()), contentType: JSON_TYPE } : text(200, renderListenersText(listeners()));
        },
        available: ctx.hasListeners,
      });
    }
    const options = ctx.options;
    if (options) {
      list.push({
        path: '/config_dump',
        help: 'dump the current configuration (options without secrets, routes, clusters, listeners) as JSON',
        mutates: never,
        handle: async () => ({
          status: 200,
          contentType: JSON_TYPE,
          body: renderConfigDump({ options: options(), routes: ctx.routes?.() ?? [], clusters: ctx.clusters?.clusters() ?? [], listeners: ctx.listeners?.() ?? [] }),
        }),
      });
    }
    const aggregate = ctx.aggregate;
    const routes = ctx.routes;
    if (routes) {
      list.push({
        path: '/routes',
        help: 'print out currently loaded dynamic HTTP route tables',
        mutates: never,
        handle: async (q) => this.routes(q, aggregate ? await aggregate.routes() : routes()),
        available: ctx.hasRoutes,
      });
    }
    return list;
  }

  /** `mesh <sha>/<version>/<Clean|Modified>/<RELEASE|DEBUG> <live|draining> <epoch s> <total s> <epoch>\n` */
  serverInfo(): string {
    const s = this.ctx.server;
    const now = s.now();
    const epochSeconds = Math.max(0, Math.floor((now - s.startedAt) / 1000));
    const totalSeconds = Math.max(0, Math.floor((now - s.firstStartedAt) / 1000));
    // --concurrency above 1: the workers, by index, after the fields of a single process.
    const workers = this.ctx.aggregate
      ? ` concurrency=${this.ctx.aggregate.concurrency} workers=${this.ctx.aggregate.workers().map((w) => `${w.index}:${w.pid}`).join(',')}`
      : '';
    return `mesh ${s.sha}/${s.version}/${s.status}/${s.buildType} ${s.state} ${epochSeconds} ${totalSeconds} ${s.epoch}${workers}\n`;
  }

  private async clusters(q: Query): Promise<AdminReply> {
    const format = q.get('format');
    if (format !== undefined && format !== 'text' && format !== 'json') return text(400, CLUSTERS_USAGE);
    const view = this.ctx.aggregate ? await this.ctx.aggregate.clusters() : this.ctx.clusters;
    if (format === 'json') return { status: 200, body: renderClustersJson(view), contentType: JSON_TYPE };
    return text(200, renderClustersText(view));
  }

  /**
   * A `filter=` regex, compiled by the linear-time engine (RE2 syntax, bounded length and size:
   * src/base/util/regex.ts), or why it is refused. Cached (at most 64, then emptied).
   */
  private filterRegex(source: string): SearchRegex | Error {
    let re = this.regexCache.get(source);
    if (!re) {
      try {
        re = compileSearchRegex(source);
      } catch (err) {
        re = err instanceof Error ? err : new Error(String(err));
      }
      if (this.regexCache.size >= 64) this.regexCache.clear();
      this.regexCache.set(source, re);
    }
    return re;
  }

  private async stats(q: Query, format: string | undefined): Promise<AdminReply> {
    if (format !== undefined && format !== 'text' && format !== 'json' && format !== 'prometheus') return text(400, STATS_USAGE);
    const filterSource = q.get('filter');
    let filter: SearchRegex | undefined;
    if (filterSource !== undefined) {
      const re = this.filterRegex(filterSource);
      if (re instanceof Error) return text(400, `Invalid filter: ${re.message}\n`);
      filter = re;
    }
    refreshServerStats(this.ctx);
    const merged = this.ctx.aggregate ? await this.ctx.aggregate.stats() : undefined;
    const stats = merged ? merged.store : this.ctx.stats;
    const usedOnly = q.has('usedonly');
    const list = stats.list({ usedOnly, filter });
    const histograms = this.ctx.histograms ? stats.listHistograms({ usedOnly, filter }) : [];
    if (format === 'json') return { status: 200, body: renderJson(list, histograms), contentType: JSON_TYPE };
    if (format === 'prometheus') {
      const families = merged ? merged.processFamilies.filter((f) => !filter || filter.test(f.metric)) : this.processMetrics.families(filter);
      const body = renderPrometheus(stats, list, families, histograms);
      return { status: 200, body, contentType: PROMETHEUS_CONTENT_TYPE };
    }
    return text(200, renderText(list, histograms));
  }

  private async logging(q: Query): Promise<AdminReply> {
    const logging = this.ctx.logging;
    let good = q.size === 0;
    if (q.size === 1) {
      const [name, level] = q.entries().next().value as [string, string];
      if (isLevel(level)) {
        if (name === 'level') {
          logging.setAll(level);
          good = true;
        } else if ((SUBSYSTEMS as readonly string[]).includes(name)) {
          logging.setLevel(name as Subsystem, level);
          good = true;
        }
        if (good) await this.ctx.aggregate?.logging(name, level);
      }
    }
    let body = good ? '' : LOGGING_USAGE;
    body += 'active loggers:\n';
    for (const s of SUBSYSTEMS) body += `  ${s}: ${logging.level(s)}\n`;
    body += '\n';
    return text(good ? 200 : 400, body);
  }

  private async cpuProfiler(q: Query): Promise<AdminReply> {
    const enable = q.get('enable');
    if (q.size !== 1 || (enable !== 'y' && enable !== 'n')) return text(400, CPUPROFILER_USAGE);
    if (enable === 'y') {
      try {
        await this.profiler.start();
      } catch (err) {
        this.log().error({ err }, 'cpu profiler failed to start');
        return text(500, 'failure to start the profiler');
      }
      return ok();
    }
    try {
      const file = await this.profiler.stop(this.ctx.profileDir ?? tmpdir());
      return text(200, file ? `OK\n${file}\n` : 'OK\n');
    } catch (err) {
      this.log().error({ err }, 'cpu profiler failed to write the profile');
      return text(500, `failure to write the profile: ${err instanceof Error ? err.message : String(err)}\n`);
    }
  }

  private routes(q: Query, all: RouteTableDump[]): AdminReply {
    const name = q.get('route_config_name');
    if (q.size > 1 || (q.size === 1 && name === undefined)) return { status: 400, body: ROUTES_USAGE, contentType: JSON_TYPE };
    const tables = all.filter((t) => name === undefined || t.routeConfigName === name);
    let body = '[\n';
    tables.forEach((t, i) => {
      if (i > 0) body += ',';
      body +=
        '{\n' +
        `"version_info": ${JSON.stringify(t.versionInfo)},\n` +
        `"route_config_name": ${JSON.stringify(t.routeConfigName)},\n` +
        `"route_table_dump": ${JSON.stringify(t.table ?? null)}\n` +
        '}\n';
    });
    body += ']\n';
    return { status: 200, body, contentType: JSON_TYPE };
  }
}
