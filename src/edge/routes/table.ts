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
 * The scan only looks at entries that can match the path's first segment: an Exact or PathPrefix
 * path names its first segment (`/shop/cart` → `shop`), so the entries are also kept per first
 * segment (with the regex and `/` entries, in the same order), and a request scans the list of its
 * path's first segment. MAX_BUCKETED bounds what those lists may hold; past it every request
 * scans every entry.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { compilePathRegex } from '../../base/util/regex.js';
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

interface ValueTest {
  name: string;
  test: Test;
}

/** Most entries the per-segment lists hold in all (the regex and `/` entries are in every list). */
export const MAX_BUCKETED = 100_000;

interface Entry {
  /** The first segment every path this entry matches has; undefined: any (regex, `/` prefix). */
  first: string | undefined;
  route: RouteSpec;
  rule: RuleSpec;
  hostname: string | undefined;
  match: MatchSpec;
  /** undefined: any host. */
  host: ((host: string) => boolean) | undefined;
  path: Test;
  method: string | undefined;
  headers: ValueTest[];
  query: ValueTest[];
  rank: number[];
}

function valueTest(m: ValueMatchSpec): ValueTest {
  if (m.type === 'Exact') {
    const want = m.value;
    return { name: m.name, test: (v) => v === want };
  }
  const re = compilePathRegex(m.value);
  return { name: m.name, test: (v) => re.test(v) };
}

/** The first segment of a path in normal form: `/shop/cart` → `shop`, `/` → ``. */
function firstSegment(path: string): string {
  const slash = path.indexOf('/', 1);
  return slash < 0 ? path.slice(1) : path.slice(1, slash);
}

function firstOf(match: MatchSpec): string | undefined {
  const { type, value } = match.path;
  if (type === 'RegularExpression' || (type === 'PathPrefix' && value === '/')) return undefined;
  return firstSegment(value);
}

function pathTest(match: MatchSpec): { test: Test; rank: number[] } {
  const { type, value } = match.path;
  if (type === 'Exact') return { test: (p) => p === value, rank: [0, -value.length] };
  if (type === 'RegularExpression') {
    const re = compilePathRegex(value);
    return { test: (p) => re.test(p), rank: [1, -value.length] };
  }
  // Element by element: `/a` and `/a/` match /a, /a/ and /a/b, never /ab.
  const prefix = value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
  if (prefix === '/') return { test: () => true, rank: [2, -1] };
  return { test: (p) => p.startsWith(prefix) && (p.length === prefix.length || p.charCodeAt(prefix.length) === 47), rank: [2, -prefix.length] };
}

function hostTest(hostname: string | undefined): { test: ((host: string) => boolean) | undefined; rank: number[] } {
  if (hostname === undefined) return { test: undefined, rank: [2, 0] };
  if (hostname.startsWith('*.')) {
    const suffix = hostname.slice(1); // `.example.com`
    return { test: (h) => h.length > suffix.length && h.endsWith(suffix), rank: [1, -suffix.length] };
  }
  return { test: (h) => h === hostname, rank: [0, 0] };
}

/** The Host header's name, lower case, without its port. */
export function hostOf(header: string | undefined): string | undefined {
  if (header === undefined || header === '') return undefined;
  let host = header;
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    host = end < 0 ? host : host.slice(0, end + 1);
  } else {
    const colon = host.lastIndexOf(':');
    if (colon >= 0) host = host.slice(0, colon);
  }
  return host.toLowerCase();
}

function compare(a: Entry, b: Entry): number {
  for (let i = 0; i < a.rank.length; i++) if (a.rank[i] !== b.rank[i]) return a.rank[i]! - b.rank[i]!;
  return 0;
}

export class CompiledRoutes {
  private readonly entries: Entry[] = [];
  /** Per first segment: the entries that may match a path starting with it, in precedence order. */
  private readonly byFirst = new Map<string, Entry[]>();
  /** The entries that may match any path: what a path whose first segment no entry names scans. */
  private readonly generic: Entry[];
  /** True when some entry matches on a query parameter (else the query is never parsed). */
  private readonly needsQuery: boolean;

  /**
   * Compiles a parsed file. Throws an Error only for what parsing cannot see (none today: every
   * regex was compiled by the parser's rules); `random` chooses backends (default Math.random).
   */
  constructor(
    readonly source: RouteFile,
    private readonly random: () => number = Math.random,
  ) {
    let order = 0;
    for (const route of source.routes) {
      const hostnames = route.hostnames.length > 0 ? route.hostnames : [undefined];
      for (const rule of route.rules) {
        for (const match of rule.matches) {
          const path = pathTest(match);
          const headers = match.headers.map(valueTest);
          const query = match.queryParams.map(valueTest);
          for (const hostname of hostnames) {
            const host = hostTest(hostname);
            this.entries.push({
              first: firstOf(match),
              route,
              rule,
              hostname,
              match,
              host: host.test,
              path: path.test,
              method: match.method,
              headers,
              query,
              rank: [...host.rank, ...path.rank, match.method ? 0 : 1, -headers.length, -query.length, order],
            });
          }
          order++;
        }
      }
    }
    this.entries.sort(compare);
    this.needsQuery = this.entries.some((e) => e.query.length > 0);
    this.generic = this.entries.filter((e) => e.first === undefined);
    const firsts = new Set<string>();
    for (const e of this.entries) if (e.first !== undefined) firsts.add(e.first);
    if (firsts.size * this.generic.length + this.entries.length <= MAX_BUCKETED) {
      for (const first of firsts) this.byFirst.set(first, this.entries.filter((e) => e.first === undefined || e.first === first));
    } else this.generic = this.entries;
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
    return this.entries.map(({ route, rule, match, hostname }) => ({ route, rule, match, hostname }));
  }

  /** The first matching entry's route and rule, with a backend chosen by weight; undefined: no route matches. */
  match(req: RouteRequest): RouteChoice | undefined {
    const host = hostOf(req.host);
    let params: URLSearchParams | undefined;
    if (this.needsQuery && req.query) params = new URLSearchParams(req.query);
    const entries = this.byFirst.get(firstSegment(req.path)) ?? this.generic;
    for (const e of entries) {
      if (e.host && (host === undefined || !e.host(host))) continue;
      if (e.method !== undefined && e.method !== req.method) continue;
      if (!e.path(req.path)) continue;
      if (e.headers.length > 0 && !headersMatch(e.headers, req.headers)) continue;
      if (e.query.length > 0 && !queryMatch(e.query, params)) continue;
      return { route: e.route, rule: e.rule, backend: this.pick(e.rule.backendRefs), hostname: e.hostname, match: e.match };
    }
    return undefined;
  }

  private pick(refs: readonly BackendRefSpec[]): BackendRefSpec | undefined {
    if (refs.length === 0) return undefined;
    if (refs.length === 1) return refs[0]!.weight > 0 ? refs[0] : undefined;
    let total = 0;
    for (const r of refs) total += r.weight;
    if (total === 0) return undefined;
    let at = this.random() * total;
    let last: BackendRefSpec | undefined;
    for (const r of refs) {
      if (r.weight === 0) continue;
      if (at < r.weight) return r;
      at -= r.weight;
      last = r;
    }
    return last;
  }
}

/** Every header test passes (a repeated header is tested as its values joined by `, `). */
function headersMatch(tests: readonly ValueTest[], headers: IncomingHttpHeaders): boolean {
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
