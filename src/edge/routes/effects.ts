/**
 * What a matched rule of a route file does to a request besides choosing its backend: its
 * per-route stats, its retry budget, its faults (delays and aborts drawn per request), its header
 * modifiers, its URL rewrite and redirect, its mirrors and its CORS; then the picked backend's own
 * filters (a request's view of the rule: `withRequest`), and its session (./session.ts: the
 * backend and node a request's session token names). One RuleEffects per (rule, host the
 * route matched), built once and kept while the rule's table is in use (RouteEffectsCache).
 *
 * Stats, below `vhost.<host>.route.<rule>.` (`<host>`: the route's hostname that matched, `*`
 * for a route without hostnames; `<rule>`: the rule's name):
 *   rq_total, rq_1xx ... rq_5xx (answers by class), retry, retry_overflow (retries the budget or
 *   max_retries refused), fault.delays_injected, fault.aborts_injected, mirror.sent,
 *   mirror.dropped (over the cap of mirrors in flight, or a streamed body), mirror.failed;
 *   with --stats_endpoints also rq_time, the latency histogram (ms, until the answer is sent).
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { setTimeout as delay } from 'node:timers/promises';
import { badRequest, errorWithStatus, MeshError } from '../../base/errors.js';
import { requestInfo } from '../../base/http/access-log.js';
import { splitHostHeader } from '../../base/http/host-check.js';
import { declareStats, type FamilyStats, type Histogram, type StatsScope } from '../../base/stats/store.js';
import { RetryBudget } from '../../core/upstream/retry-budget.js';
import type { RetryRules } from '../../core/client/interceptors/call.js';
import { routeCorsAnswer } from '../../base/http/cors.js';
import type { BackendRefSpec, FiltersSpec, HeaderModifierSpec, MatchSpec, RedirectSpec, RuleSpec } from './file.js';
import type { RouteChoice } from './table.js';
import { RuleSession, SessionTokens, type SessionCall } from './session.js';

export interface RoutePolicy {
  /** Only the nodes of this version of the service. */
  version?: string;
  /** `timeouts.request` (ms): the whole call, in place of --client_request_timeout (an inbound Mesh-Timeout still shortens it). */
  requestTimeoutMs?: number;
  /** `timeouts.backendRequest` (ms): each try. */
  tryTimeoutMs?: number;
  /** The rule's stats, retries, filters and faults (src/edge/routes/effects.ts). */
  effects?: RuleEffects;
  /** The path and query sent to the backend after the rule's URLRewrite; undefined: as received. */
  path?: string;
  /** The rule's sessionPersistence (proxy routes): the node the request's token names, the answer's token. */
  session?: SessionCall;
}

export const ROUTE_STATS = {
  counters: {
    requests: 'rq_total',
    rq1xx: 'rq_1xx',
    rq2xx: 'rq_2xx',
    rq3xx: 'rq_3xx',
    rq4xx: 'rq_4xx',
    rq5xx: 'rq_5xx',
    retry: 'retry',
    retryOverflow: 'retry_overflow',
    delays: 'fault.delays_injected',
    aborts: 'fault.aborts_injected',
    mirrorSent: 'mirror.sent',
    mirrorDropped: 'mirror.dropped',
    mirrorFailed: 'mirror.failed',
  },
} as const;

export type RouteStats = FamilyStats<typeof ROUTE_STATS>;

/** What the fault draw decided for one request. */
export interface FaultDraw {
  delayMs: number;
  abortStatus: number | undefined;
}

const NO_FAULT: FaultDraw = { delayMs: 0, abortStatus: undefined };

export class RuleEffects {
  readonly stats: RouteStats;
  /** The rule's own retry budget (`retry.budget`), in place of the cluster's. */
  readonly budget: RetryBudget | undefined;
  private readonly byClass: readonly RouteStats['requests'][];
  /** The rule's `retry` for the framework client (rpc and api routes). */
  readonly retryRules: RetryRules | undefined;
  /** --stats_endpoints: the rule's latency histogram (`rq_time`); unset, no time is taken. */
  private readonly time: Histogram | undefined;
  /** The filters applied, in order: the rule's, then the picked backend's (a view's, `withRequest`). */
  private chain: readonly FiltersSpec[];
  /** The CORS headers of this request's answer (a view's, `withRequest`). */
  private cors: ReadonlyArray<[string, string]> | undefined;
  /** The rule's sessionPersistence, sealing tokens with the front end's key. */
  readonly session: RuleSession | undefined;

  constructor(
    readonly rule: RuleSpec,
    scope: StatsScope,
    private readonly random: () => number,
    latency = false,
    tokens?: SessionTokens,
  ) {
    this.session = rule.session && new RuleSession(rule.session, tokens ?? new SessionTokens());
    this.stats = declareStats(scope, ROUTE_STATS);
    this.time = latency ? scope.histogram('rq_time', { fine: true }) : undefined;
    const s = this.stats;
    this.byClass = [s.rq1xx, s.rq1xx, s.rq2xx, s.rq3xx, s.rq4xx, s.rq5xx];
    const b = rule.retry?.budget;
    this.budget = b ? new RetryBudget(b) : undefined;
    const retry = rule.retry;
    this.chain = [rule.filters];
    this.cors = undefined;
    this.retryRules = retry && { codes: retry.codes, backoffMs: retry.backoffMs, budget: this.budget, retried: () => s.retry.inc(), overflowed: () => s.retryOverflow.inc() };
  }

  /**
   * The rule takes the request (before its handler): counted, named in the access log
   * (%ROUTE_NAME%), then its fault drawn: a delay, then an abort thrown as a MeshError of the
   * fault's status (the front end's error JSON, with `errorId`). A promise only when a delay
   * was drawn.
   */
  begin(req: FrontRequest, res: FrontResponse, errorId: string): Promise<void> | undefined {
    this.count(res);
    if (this.cors) for (const [name, value] of this.cors) setCorsHeader(res, name, value);
    const info = requestInfo(req);
    if (info) info.routeName = this.rule.name;
    const fault = this.drawFault();
    if (fault.delayMs > 0) return delay(fault.delayMs).then(() => this.abort(req, fault, errorId));
    this.abort(req, fault, errorId);
    return undefined;
  }

  private abort(req: FrontRequest, fault: FaultDraw, errorId: string): void {
    if (fault.abortStatus === undefined) return;
    req.resume();
    throw errorWithStatus(errorId, fault.abortStatus, `fault injected by route ${this.rule.name}`);
  }

  /** Counts the request, and its answer's class once it is sent. */
  count(res: FrontResponse): void {
    this.stats.requests.inc();
    const time = this.time;
    const start = time ? performance.now() : 0;
    res.once('close', () => {
      if (!res.headersSent) return;
      this.byClass[Math.min(5, Math.floor(res.statusCode / 100))]?.inc();
      time?.record(performance.now() - start);
    });
  }

  /** Draws this request's faults (each by its percentage), counting what is injected. */
  drawFault(): FaultDraw {
    const fault = this.rule.fault;
    if (!fault) return NO_FAULT;
    let delayMs = 0;
    let abortStatus: number | undefined;
    if (fault.delay && this.random() * 100 < fault.delay.percentage) {
      delayMs = fault.delay.ms;
      this.stats.delays.inc();
    }
    if (fault.abort && this.random() * 100 < fault.abort.percentage) {
      abortStatus = fault.abort.status;
      this.stats.aborts.inc();
    }
    return delayMs === 0 && abortStatus === undefined ? NO_FAULT : { delayMs, abortStatus };
  }

  /**
   * The services that get a copy of this request: each mirror of the rule, a mirror with a
   * `percent` or `fraction` by its own draw (random() below numerator/denominator).
   */
  drawMirrors(): string[] {
    const out: string[] = [];
    for (const m of this.rule.filters.mirrors) {
      const f = m.fraction;
      if (!f || this.random() * f.denominator < f.numerator) out.push(m.service);
    }
    return out;
  }

  /**
   * This rule for one request: the same stats, budget and faults, with the picked backend's
   * filters applied after the rule's, and the CORS headers of the answer. Itself when there are
   * neither.
   */
  withRequest(backendFilters: FiltersSpec | undefined, cors: ReadonlyArray<[string, string]> | undefined): RuleEffects {
    if (!backendFilters && !cors) return this;
    const view = Object.create(this) as RuleEffects;
    view.chain = backendFilters ? [...this.chain, backendFilters] : this.chain;
    view.cors = cors;
    return view;
  }

  /** The request headers sent upstream (undici's flat list) after each RequestHeaderModifier and URLRewrite's hostname (the rule's, then the backend's). */
  requestHeaders(flat: string[]): string[] {
    let out = flat;
    for (const f of this.chain) {
      const mod = f.requestHeaders;
      const host = f.rewrite?.hostname;
      if (mod) out = modifyHeaders(out, mod);
      if (host !== undefined) out = modifyHeaders(out, { set: [['host', host]], add: [], remove: [] });
    }
    return out;
  }

  /** The answer's headers (flat, as written to the client) after each ResponseHeaderModifier, then the CORS headers (which replace the backend's). */
  responseHeaders(): ((flat: string[]) => string[]) | undefined {
    const mods = this.chain.flatMap((f) => (f.responseHeaders ? [f.responseHeaders] : []));
    const cors = this.cors;
    if (mods.length === 0 && !cors) return undefined;
    return (flat) => {
      let out = flat;
      for (const mod of mods) out = modifyHeaders(out, mod);
      return cors ? withCorsHeaders(out, cors) : out;
    };
  }

  /** Request metadata (rpc and api routes) after each RequestHeaderModifier. */
  metadata(metadata: Record<string, string>): Record<string, string> {
    let out = metadata;
    for (const f of this.chain) {
      const mod = f.requestHeaders;
      if (!mod) continue;
      out = { ...out };
      for (const name of mod.remove) delete out[name];
      for (const [name, value] of mod.set) out[name] = value;
      for (const [name, value] of mod.add) out[name] = out[name] === undefined ? value : `${out[name]}, ${value}`;
    }
    return out;
  }
}

/** Sets a CORS header on an answer not yet written (`vary` adds Origin to the names there). */
function setCorsHeader(res: FrontResponse, name: string, value: string): void {
  if (name !== 'vary') return void res.setHeader(name, value);
  const before = res.getHeader('vary');
  const names = before === undefined ? [] : String(before).split(',').map((v) => v.trim());
  if (!names.some((v) => v.toLowerCase() === 'origin' || v === '*')) res.setHeader('vary', [...names.filter((v) => v !== ''), value].join(', '));
}

/**
 * A proxied answer's headers with the route's CORS headers: the backend's own Access-Control-*
 * answer headers are dropped (the route's policy is the one in force), Origin is added to its Vary.
 */
function withCorsHeaders(flat: string[], cors: ReadonlyArray<[string, string]>): string[] {
  const out: string[] = [];
  let vary = false;
  for (let i = 0; i < flat.length; i += 2) {
    const lower = flat[i]!.toLowerCase();
    if (lower.startsWith('access-control-')) continue;
    let value = flat[i + 1]!;
    if (lower === 'vary' && cors.some(([n]) => n === 'vary')) {
      vary = true;
      if (!value.split(',').some((v) => ['origin', '*'].includes(v.trim().toLowerCase()))) value = `${value}, Origin`;
    }
    out.push(flat[i]!, value);
  }
  for (const [name, value] of cors) if (name !== 'vary' || !vary) out.push(name, value);
  return out;
}

/**
 * A flat header list with a modifier applied, names compared in any case: `remove` drops every
 * value of a name, `set` replaces them with one, `add` appends one more (after the others).
 */
export function modifyHeaders(flat: string[], mod: HeaderModifierSpec): string[] {
  const drop = new Set<string>(mod.remove);
  for (const [name] of mod.set) drop.add(name);
  const out: string[] = [];
  for (let i = 0; i < flat.length; i += 2) if (!drop.has(flat[i]!.toLowerCase())) out.push(flat[i]!, flat[i + 1]!);
  for (const [name, value] of mod.set) out.push(name, value);
  for (const [name, value] of mod.add) out.push(name, value);
  return out;
}

/** The path after a ReplaceFullPath or ReplacePrefixMatch (the match's PathPrefix replaced). */
export function rewritePath(path: string, modifier: { type: 'ReplacePrefixMatch' | 'ReplaceFullPath'; value: string }, match: MatchSpec): string {
  if (modifier.type === 'ReplaceFullPath') return modifier.value;
  const raw = match.path.value;
  const prefix = raw.length > 1 && raw.endsWith('/') ? raw.slice(0, -1) : raw;
  const rest = prefix === '/' ? path : path.slice(prefix.length);
  let replaced = modifier.value;
  if (replaced.endsWith('/') && rest.startsWith('/')) replaced = replaced.slice(0, -1);
  const out = replaced + rest;
  return out === '' ? '/' : out;
}

/**
 * The Location of a RequestRedirect: the request's scheme, host, port and path unless the filter
 * sets them (on a Gateway listener the port is the listener's, as the Gateway writes it); the query kept. Undefined when the request's Host is not a host[:port]
 * (splitHostHeader: no user, path, query or fragment, not empty): the client chose it, and it
 * would be copied into the Location.
 */
export function redirectLocation(redirect: RedirectSpec, match: MatchSpec, req: { secure: boolean; host: string | undefined; listenerPort?: number; path: string; query: string | undefined }): string | undefined {
  const scheme = redirect.scheme ?? (req.secure ? 'https' : 'http');
  const authority = splitHostHeader(req.host);
  if (!authority) return undefined;
  let host = authority.host;
  let port = req.listenerPort ?? authority.port;
  if (redirect.hostname !== undefined) host = redirect.hostname;
  if (redirect.port !== undefined) port = redirect.port;
  else if (redirect.scheme !== undefined) port = undefined; // a new scheme: its well-known port
  if ((scheme === 'http' && port === 80) || (scheme === 'https' && port === 443)) port = undefined;
  const path = redirect.path ? rewritePath(req.path, redirect.path, match) : req.path;
  return `${scheme}://${host}${port === undefined ? '' : `:${port}`}${path}${req.query === undefined ? '' : `?${req.query}`}`;
}

/** What a matched rule makes of a request (routeAction). */
export type RouteAction =
  /** A RequestRedirect: answered at once, with an empty body. */
  | { kind: 'redirect'; status: number; location: string; policy: RoutePolicy }
  /** A CORS preflight the rule's CORS filter answers: 200, these headers, an empty body. */
  | { kind: 'preflight'; headers: Array<[string, string]>; policy: RoutePolicy }
  /** No backend to send to (every backend weighs 0, the rule has none, the one drawn is not a mesh service): 500, `why` says which. */
  | { kind: 'no-backend'; why: string; policy: RoutePolicy }
  /** Sent to the backend; `path`: the path after the rule's URLRewrite (what an rpc or api path mapping reads). */
  | { kind: 'send'; backend: BackendRefSpec; path: string; policy: RoutePolicy };

/**
 * A matched rule applied to a request, the same on every front end: its redirect, or its backend
 * with the policy the handler follows (version, timeouts, effects, and with a URLRewrite the path
 * and query sent). `req.path` is the request's path in normal form, `req.query` its query.
 */
export function routeAction(choice: RouteChoice, ruleEffects: RuleEffects, req: RouteActionRequest): RouteAction {
  const rule = choice.rule;
  let cors: Array<[string, string]> | undefined;
  if (rule.filters.cors) {
    const answer = routeCorsAnswer(rule.filters.cors, req.method, req.headers ?? {});
    if (answer.preflight) return { kind: 'preflight', headers: answer.headers, policy: { effects: ruleEffects } };
    if (answer.headers.length > 0) cors = answer.headers;
  }
  let effects = ruleEffects.withRequest(undefined, cors);
  const redirect = rule.filters.redirect;
  if (redirect) return redirectAction(redirect, choice.match, req, effects);
  // A session's token names the backend (one of the rule's) its first request was sent to.
  const session = ruleEffects.session;
  const hit = session && req.headers ? session.find(req.headers, rule.backendRefs) : undefined;
  const backend = hit?.backend ?? choice.backend;
  if (!backend) return { kind: 'no-backend', why: rule.backendRefs.length === 0 ? 'the rule has no backendRefs' : 'every backend has weight 0', policy: { effects } };
  if (backend.unresolved) return { kind: 'no-backend', why: backend.unresolved, policy: { effects } };
  const own = backend.filters;
  if (own) {
    effects = ruleEffects.withRequest(own, cors);
    if (own.redirect) return redirectAction(own.redirect, choice.match, req, effects);
  }
  const policy: RoutePolicy = { version: backend.version, requestTimeoutMs: rule.requestTimeoutMs || undefined, tryTimeoutMs: rule.backendRequestTimeoutMs || undefined, effects };
  if (session) policy.session = session.call(backend, hit, req.secure);
  const rewrite = own?.rewrite?.path ?? rule.filters.rewrite?.path;
  if (!rewrite) return { kind: 'send', backend, path: req.path, policy };
  const path = rewritePath(req.path, rewrite, choice.match);
  policy.path = req.query === undefined ? path : `${path}?${req.query}`;
  return { kind: 'send', backend, path, policy };
}

/** What routeAction reads of a request. `method` and `headers`: for a rule's CORS and session (absent: no CORS request, no session token). */
export interface RouteActionRequest {
  secure: boolean;
  host: string | undefined;
  /** On a Gateway listener: its port as written (a redirect's default port). */
  listenerPort?: number;
  path: string;
  query: string | undefined;
  errorId: string;
  method?: string;
  headers?: FrontRequest['headers'];
}

function redirectAction(redirect: RedirectSpec, match: MatchSpec, req: RouteActionRequest, effects: RuleEffects): RouteAction {
  const location = redirectLocation(redirect, match, req);
  if (location === undefined) throw badRedirectHost(req.host, req.errorId);
  return { kind: 'redirect', status: redirect.statusCode, location, policy: { effects } };
}

/** The 400 of a redirect whose request's Host is not a host[:port]. */
function badRedirectHost(host: string | undefined, errorId: string): MeshError {
  const shown = host === undefined ? 'missing' : JSON.stringify(host.length > 100 ? `${host.slice(0, 100)}...` : host);
  return badRequest(errorId, `invalid Host ${shown}: a redirect needs the request's Host to be host[:port] (a name, IPv4 or [IPv6] address; no user, path, query or fragment)`);
}

/** The stat name of a host: as written, `*` for a route without hostnames. */
function vhostName(hostname: string | undefined): string {
  return hostname ?? '*';
}

/**
 * The RuleEffects of the rules in use, made on first use: by rule (weakly, so that a reloaded
 * table's old rules go with it), then by the host that matched.
 */
export class RouteEffectsCache {
  private readonly byRule = new WeakMap<RuleSpec, Map<string, RuleEffects>>();
  /** The key of this front end's session tokens (sessionPersistence), drawn at random: tokens hold for as long as it runs, across reloads. */
  private readonly tokens = new SessionTokens();

  constructor(
    private readonly stats: StatsScope,
    private readonly random: () => number = Math.random,
    /** --stats_endpoints: each rule also keeps its latency histogram. */
    private readonly latency = false,
  ) {}

  of(choice: RouteChoice): RuleEffects {
    let byHost = this.byRule.get(choice.rule);
    if (!byHost) this.byRule.set(choice.rule, (byHost = new Map()));
    const vhost = vhostName(choice.hostname);
    let effects = byHost.get(vhost);
    if (!effects) byHost.set(vhost, (effects = new RuleEffects(choice.rule, this.stats.scope(`vhost.${vhost}.route.${choice.rule.name}.`), this.random, this.latency, this.tokens)));
    return effects;
  }
}
