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
 * The scan only looks at entries that can match the path, in the same order:
 *   - an Exact or PathPrefix path names its first segment (`/shop/cart` → `shop`), so those
 *     entries are kept per first segment (with the `/` prefixes, in order), and a request takes
 *     the list of its path's first segment. MAX_BUCKETED bounds what those lists may hold; past it
 *     every request takes every such entry.
 *   - a RegularExpression path has a literal prefix every path it matches starts with
 *     (`/svc/items/[0-9]+` → `/svc/items/`; literalPrefix, src/base/util/regex.ts), so those
 *     entries are indexed by it, and a request takes the entries of the prefixes its path starts
 *     with (one lookup per distinct prefix length); a regex without one (``) is taken always.
 * The two lists are merged by precedence order, so the first match is the one a scan of every
 * entry would find. A regex is compiled when a request first reaches it (the parser compiled each
 * once to check it): a table of 10,000 regex rules costs a request what a small one does, and
 * holds only the regexes requests reach.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { splitHostHeader } from '../../base/http/host-check.js';
import { compilePathRegex, literalPrefix, type PathRegex } from '../../base/util/regex.js';
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
  /** Its place in the precedence order. */
  order: number;
  /** The first segment every path this entry matches has; undefined: any (regex, `/` prefix). */
  first: string | undefined;
  /** A RegularExpression path's literal prefix; undefined: not a regex. */
  regexPrefix: string | undefined;
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

/** A regex's test, compiled on its first use (the parser has checked that it compiles). */
function lazyRegex(source: string): Test {
  let re: PathRegex | undefined;
  return (v) => (re ??= compilePathRegex(source)).test(v);
}

function valueTest(m: ValueMatchSpec): ValueTest {
  if (m.type === 'Exact') {
    const want = m.value;
    return { name: m.name, test: (v) => v === want };
  }
  return { name: m.name, test: lazyRegex(m.value) };
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
  if (type === 'RegularExpression') return { test: lazyRegex(value), rank: [1, -value.length] };
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

const NONE: readonly Entry[] = [];

export class CompiledRoutes {
  private readonly entries: Entry[] = [];
  /** Per first segment: the Exact and PathPrefix entries that may match a path starting with it, in precedence order. */
  private readonly byFirst = new Map<string, Entry[]>();
  /** The Exact and PathPrefix entries that may match any path: what a path whose first segment no entry names takes. */
  private readonly generic: Entry[];
  /** The RegularExpression entries by literal prefix, each list in precedence order. */
  private readonly byPrefix = new Map<string, Entry[]>();
  /** The lengths of those prefixes, shortest first. */
  private readonly prefixLengths: number[];
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
              order: 0,
              first: firstOf(match),
              regexPrefix: match.path.type === 'RegularExpression' ? literalPrefix(match.path.value) : undefined,
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
    this.entries.forEach((e, i) => (e.order = i));
    this.needsQuery = this.entries.some((e) => e.query.length > 0);
    const plain = this.entries.filter((e) => e.regexPrefix === undefined);
    for (const e of this.entries) {
      if (e.regexPrefix === undefined) continue;
      const list = this.byPrefix.get(e.regexPrefix);
      if (list) list.push(e);
      else this.byPrefix.set(e.regexPrefix, [e]);
    }
    this.prefixLengths = [...new Set([...this.byPrefix.keys()].map((p) => p.length))].sort((a, b) => a - b);
    this.generic = plain.filter((e) => e.first === undefined);
    const firsts = new Set<string>();
    for (const e of plain) if (e.first !== undefined) firsts.add(e.first);
    if (firsts.size * this.generic.length + plain.length <= MAX_BUCKETED) {
      const lists = new Map<string, Entry[]>();
      for (const first of firsts) lists.set(first, []);
      for (const e of plain) {
        if (e.first === undefined) for (const list of lists.values()) list.push(e);
        else lists.get(e.first)!.push(e);
      }
      for (const [first, list] of lists) this.byFirst.set(first, list);
    } else this.generic = plain;
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
    const plain = this.byFirst.get(firstSegment(req.path)) ?? this.generic;
    const regex = this.regexCandidates(req.path);
    // The two lists merged by precedence order.
    for (let i = 0, j = 0; i < plain.length || j < regex.length; ) {
      const e = j >= regex.length || (i < plain.length && plain[i]!.order < regex[j]!.order) ? plain[i++]! : regex[j++]!;
      if (e.host && (host === undefined || !e.host(host))) continue;
      if (e.method !== undefined && e.method !== req.method) continue;
      if (!e.path(req.path)) continue;
      if (e.headers.length > 0 && !headersMatch(e.headers, req.headers)) continue;
      if (e.query.length > 0 && !queryMatch(e.query, params)) continue;
      return { route: e.route, rule: e.rule, backend: this.pick(e.rule.backendRefs), hostname: e.hostname, match: e.match };
    }
    return undefined;
  }

  /** The regex entries whose literal prefix `path` starts with, in precedence order. */
  private regexCandidates(path: string): readonly Entry[] {
    let out: Entry[] | undefined;
    let merged = false;
    for (const length of this.prefixLengths) {
      if (length > path.length) break;
      const list = this.byPrefix.get(length === 0 ? '' : path.slice(0, length));
      if (!list) continue;
      if (!out) out = list;
      else {
        out = out.concat(list);
        merged = true;
      }
    }
    if (merged) out!.sort((a, b) => a.order - b.order);
    return out ?? NONE;
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
