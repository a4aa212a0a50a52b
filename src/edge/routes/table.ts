/**
 * A route file compiled for matching (src/edge/routes/file.ts parses it): one entry per
 * (route, rule, match, hostname), ordered once by precedence, and matched per request by a scan
 * that stops at the first entry whose host, path, method, headers and query parameters match.
 * Then one backend of the rule is chosen by weight. Pure: no I/O, no state but the table itself.
 *
 * Precedence (as the Gateway API's, with regular expressions placed as Envoy Gateway does):
 *   1. the host: an exact hostname, then wildcards (the longer suffix first), then routes without
 *      hostnames;
 *   2. the path: Exact, then RegularExpression (the longer pattern first), then PathPrefix (the
 *      longer prefix first);
 *   3. a match with a method before one without; then more header matches; then more query
 *      parameter matches;
 *   4. the order in the file (route, then rule, then match).
 * Regular expressions run on RE2 (linear time, src/base/util/regex.ts) and match the whole path,
 * header value or parameter value.
 *
 * The entries are compiled to the edge's one route model (CompiledRoute, ./match.ts) in that
 * order and matched by its RouteMatcher, which only looks at the entries that can match the path
 * (by exact path, first segment, and a regular expression's literal prefix). A regex is compiled
 * when a request first reaches it (the parser compiled each once to check it): a table of 10,000
 * regex rules costs a request what a small one does, and holds only the regexes requests reach.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { splitHostHeader } from '../../base/http/host-check.js';
import { compilePathRegex, type PathRegex } from '../../base/util/regex.js';
import { exactPath, prefixPath, regexPath, RouteMatcher, type CompiledRoute, type PathMatch } from './match.js';
import type { BackendRefSpec, MatchSpec, RouteFile, RouteSpec, RuleSpec, ValueMatchSpec } from './file.js';

/** What a request offers to the matcher. */
export interface RouteRequest {
  method: string;
  host: string | undefined;
  /** The path's normal form, without the query. */
  path: string;
  /** The query without `?`, if any. */
  query: string | undefined;
  headers: IncomingHttpHeaders;
}

/** The matcher's answer: the route and rule, and the backend chosen (undefined when every weight is 0). */
export interface RouteChoice {
  route: RouteSpec;
  rule: RuleSpec;
  backend: BackendRefSpec | undefined;
  /** The match of the rule that matched (a PathPrefix rewrite replaces its prefix). */
  match: MatchSpec;
  /** The hostname of the route that matched (as written, `*.example.com` included); undefined: a route without hostnames. */
  hostname: string | undefined;
}

type Test = (value: string) => boolean;

export interface ValueTest {
  name: string;
  test: Test;
}

/** What an entry routes to: one (route, rule, match, hostname) of the file. */
interface FileTarget {
  route: RouteSpec;
  rule: RuleSpec;
  match: MatchSpec;
  hostname: string | undefined;
}

/** What the entries' conditions read of a request, computed once per match. */
interface FileRequest {
  /** The Host header's name (hostOf). */
  host: string | undefined;
  method: string;
  headers: IncomingHttpHeaders;
  /** The query parsed, when some entry matches on a query parameter. */
  params: URLSearchParams | undefined;
}

interface Entry {
  compiled: CompiledRoute<FileTarget, FileRequest>;
  rank: number[];
}

/** A regex's test, compiled on its first use (the parser has checked that it compiles). */
function lazyRegex(source: string): Test {
  let re: PathRegex | undefined;
  return (v) => (re ??= compilePathRegex(source)).test(v);
}

/** A header's or query parameter's test (a regex compiled on first use). */
export function valueTest(m: ValueMatchSpec): ValueTest {
  if (m.type === 'Exact') {
    const want = m.value;
    return { name: m.name, test: (v) => v === want };
  }
  return { name: m.name, test: lazyRegex(m.value) };
}

function pathOf(match: MatchSpec): { path: PathMatch; rank: number[] } {
  const { type, value } = match.path;
  if (type === 'Exact') return { path: exactPath(value), rank: [0, -value.length] };
  if (type === 'RegularExpression') return { path: regexPath(value), rank: [1, -value.length] };
  // Element by element: `/a` and `/a/` match /a, /a/ and /a/b, never /ab.
  const prefix = value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
  return { path: prefixPath(value, true), rank: [2, prefix === '/' ? -1 : -prefix.length] };
}

/** A route hostname's test (undefined: any host) and its precedence rank: exact, then wildcards (longer first), then none. */
export function hostTest(hostname: string | undefined): { test: ((host: string) => boolean) | undefined; rank: number[] } {
  if (hostname === undefined) return { test: undefined, rank: [2, 0] };
  if (hostname.startsWith('*.')) {
    const suffix = hostname.slice(1); // `.example.com`
    return { test: (h) => h.length > suffix.length && h.endsWith(suffix), rank: [1, -suffix.length] };
  }
  return { test: (h) => h === hostname, rank: [0, 0] };
}

/** The host and method condition of an entry; undefined: any request. */
function acceptsOf(host: ((host: string) => boolean) | undefined, method: string | undefined): ((req: FileRequest) => boolean) | undefined {
  if (host === undefined && method === undefined) return undefined;
  if (method === undefined) return (req) => req.host !== undefined && host!(req.host);
  if (host === undefined) return (req) => req.method === method;
  return (req) => req.host !== undefined && host(req.host) && req.method === method;
}

/** The header and query parameter condition of an entry; undefined: none. */
function refineOf(headers: readonly ValueTest[], query: readonly ValueTest[]): ((req: FileRequest) => boolean) | undefined {
  if (headers.length === 0 && query.length === 0) return undefined;
  return (req) => (headers.length === 0 || headersMatch(headers, req.headers)) && (query.length === 0 || queryMatch(query, req.params));
}

/**
 * The Host header's name, lower case, without its port; undefined when there is none or it is not
 * host[:port] (splitHostHeader: `a@evil.example` matches no route with hostnames).
 */
export function hostOf(header: string | undefined): string | undefined {
  return splitHostHeader(header)?.host.toLowerCase();
}

function compare(a: Entry, b: Entry): number {
  for (let i = 0; i < a.rank.length; i++) if (a.rank[i] !== b.rank[i]) return a.rank[i]! - b.rank[i]!;
  return 0;
}

export class CompiledRoutes {
  /** The entries in precedence order, matched by the edge's one matcher. */
  private readonly matcher: RouteMatcher<FileTarget, FileRequest>;
  /** True when some entry matches on a query parameter (else the query is never parsed). */
  private readonly needsQuery: boolean;

  /**
   * Compiles a parsed file. Throws an Error only for what parsing cannot see (none today: every
   * regex was compiled by the parser's rules); `random` chooses backends (default Math.random);
   * `routes`: the routes of the file this table serves (a Gateway listener's: ./listeners.ts), default all.
   */
  constructor(
    readonly source: RouteFile,
    private readonly random: () => number = Math.random,
    routes: readonly RouteSpec[] = source.routes,
  ) {
    const entries: Entry[] = [];
    let order = 0;
    let needsQuery = false;
    for (const route of routes) {
      const hostnames = route.hostnames.length > 0 ? route.hostnames : [undefined];
      for (const rule of route.rules) {
        for (const match of rule.matches) {
          const path = pathOf(match);
          const headers = match.headers.map(valueTest);
          const query = match.queryParams.map(valueTest);
          const refine = refineOf(headers, query);
          if (query.length > 0) needsQuery = true;
          for (const hostname of hostnames) {
            const host = hostTest(hostname);
            entries.push({
              compiled: { path: path.path, accepts: acceptsOf(host.test, match.method), refine, target: { route, rule, match, hostname } },
              rank: [...host.rank, ...path.rank, match.method ? 0 : 1, -headers.length, -query.length, order],
            });
          }
          order++;
        }
      }
    }
    entries.sort(compare);
    this.needsQuery = needsQuery;
    this.matcher = new RouteMatcher(entries.map((e) => e.compiled));
  }

  get size(): number {
    return this.source.routes.length;
  }

  /**
   * Every (route, rule, match, hostname) in the order the matcher tries them: what a data plane
   * that takes routes first-match-wins (Envoy, src/xds/envoy-routes.ts) needs to match as this
   * table does.
   */
  inOrder(): Array<{ route: RouteSpec; rule: RuleSpec; match: MatchSpec; hostname: string | undefined }> {
    return this.matcher.targets().map(({ route, rule, match, hostname }) => ({ route, rule, match, hostname }));
  }

  /** The first matching entry's route and rule, with a backend chosen by weight; undefined: no route matches. */
  match(req: RouteRequest): RouteChoice | undefined {
    const params = this.needsQuery && req.query ? new URLSearchParams(req.query) : undefined;
    const hit = this.matcher.match(req.path, { host: hostOf(req.host), method: req.method, headers: req.headers, params });
    if (!hit) return undefined;
    const { route, rule, hostname, match } = hit.target;
    return { route, rule, backend: pickBackend(rule.backendRefs, this.random), hostname, match };
  }
}

/** One of a rule's backends, drawn by weight; undefined when there is none or every weight is 0. */
export function pickBackend(refs: readonly BackendRefSpec[], random: () => number): BackendRefSpec | undefined {
  if (refs.length === 0) return undefined;
  if (refs.length === 1) return refs[0]!.weight > 0 ? refs[0] : undefined;
  let total = 0;
  for (const r of refs) total += r.weight;
  if (total === 0) return undefined;
  let at = random() * total;
  let last: BackendRefSpec | undefined;
  for (const r of refs) {
    if (r.weight === 0) continue;
    if (at < r.weight) return r;
    at -= r.weight;
    last = r;
  }
  return last;
}

/** Every header test passes (a repeated header is tested as its values joined by `, `). */
export function headersMatch(tests: readonly ValueTest[], headers: IncomingHttpHeaders): boolean {
  for (const h of tests) {
    const value = headers[h.name];
    if (value === undefined || !h.test(Array.isArray(value) ? value.join(', ') : value)) return false;
  }
  return true;
}

/** Every query parameter test passes, on the parameter's first value. */
function queryMatch(tests: readonly ValueTest[], params: URLSearchParams | undefined): boolean {
  for (const q of tests) {
    const value = params?.get(q.name);
    if (value === null || value === undefined || !q.test(value)) return false;
  }
  return true;
}
