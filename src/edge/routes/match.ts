/**
 * The one route model of the edge: every source of routes (the gateway's registry routes,
 * src/fronts/gateway/routes.ts; a route file's HTTPRoute rules, ./table.ts; the routes of a
 * `mesh proxy` listener, src/fronts/proxy/) compiles each route to a CompiledRoute, puts them in
 * its own precedence order, and matches requests with one RouteMatcher. Pure: no I/O.
 *
 * A CompiledRoute is a path (PathMatch: how the index files it and its test), optionally a
 * condition on the request tried before the path (`accepts`: host, method) and one tried after it
 * (`refine`: headers, query), and the source's own `target` that a match answers with. The
 * condition reads a per-request context `C` the source computes once per match (the Host header
 * split, the query parsed), so nothing is computed once per route.
 *
 * The matcher answers the first route, in the order given, whose conditions and path match, and it
 * only looks at the routes that can match the path, in the same order:
 *   - an exact path is looked up by the whole path;
 *   - a path that names its first segment (`/shop/cart` exact or as a prefix of whole segments,
 *     `/shop/` as a string prefix, `/users/{id}` a template) is kept per first segment, together
 *     with the paths that name none (in order), and a request takes the list of its path's first
 *     segment. MAX_BUCKETED bounds what those lists may hold; past it every request takes every
 *     such route;
 *   - a regular expression has a literal prefix every path it matches starts with (literalPrefix,
 *     src/base/util/regex.ts), so it is kept by that prefix, and a request takes the routes of the
 *     prefixes its path starts with (one lookup per distinct prefix length).
 * The lists are merged by position, so the first match is the one a scan of every route finds. A
 * small table (SCAN_AT_MOST) is scanned instead: there the index costs more than it saves.
 */
import { compilePathRegex, literalPrefix, type PathRegex } from '../../base/util/regex.js';

/** Values captured from the path (template parameters, named regex groups). */
export type Params = Record<string, string>;

/** A route's path compiled: the keys the matcher indexes it by, and its test. */
export interface PathMatch {
  /** Set when only this one path matches: the matcher looks it up by the whole path, without a test. */
  exact: string | undefined;
  /** The first segment of every path it matches (`/shop/cart` → `shop`); undefined: not known. */
  first: string | undefined;
  /** A regular expression's literal prefix (`` for none); undefined: not a regular expression. */
  regexPrefix: string | undefined;
  /** True when the path (the URL path without the query) matches. */
  test: (path: string) => boolean;
  /** When set, used instead of `test`: the captured values, undefined when the path does not match. */
  capture: ((path: string) => Params | undefined) | undefined;
}

/** One route of any source, compiled: what the RouteMatcher matches. `C` is the per-request context the conditions read. */
export interface CompiledRoute<T, C = undefined> {
  path: PathMatch;
  /** Tried before the path (cheap tests: host, method); undefined: any request. */
  accepts?: ((ctx: C) => boolean) | undefined;
  /** Tried after the path matched (headers, query parameters); undefined: nothing more. */
  refine?: ((ctx: C) => boolean) | undefined;
  /** What the source routes to: the answer of a match. */
  target: T;
}

/** A match: the route's target, and what its path captured (undefined when its path captures nothing). */
export interface RouteHit<T> {
  readonly target: T;
  readonly params: Params | undefined;
}

/** Most routes the per-segment lists hold in all (the routes that name no first segment are in every list). */
export const MAX_BUCKETED = 100_000;

/**
 * A table is scanned in order rather than indexed when its routes cost at most this much to try:
 * 1 each, 4 a regular expression (a scan tests its literal prefix first; the index looks it up).
 * Measured: the index costs a request about what 16 string tests do.
 */
export const SCAN_AT_MOST = 16;

/** The first segment of a path in normal form: `/shop/cart` → `shop`, `/` → ``. */
export function firstSegment(path: string): string {
  const slash = path.indexOf('/', 1);
  return slash < 0 ? path.slice(1) : path.slice(1, slash);
}

/** Only this path (`/a/b` matches /a/b, not /a/b/ nor /A/b). */
export function exactPath(value: string): PathMatch {
  return { exact: value, first: firstSegment(value), regexPrefix: undefined, test: (p) => p === value, capture: undefined };
}

/**
 * Every path under a prefix. `segments`: element by element, as the Gateway API's PathPrefix
 * (`/a` and `/a/` match /a, /a/ and /a/b, never /ab); else as a string (`/a` matches /ab too).
 */
export function prefixPath(value: string, segments: boolean): PathMatch {
  if (segments) {
    const prefix = value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
    if (prefix === '/') return { exact: undefined, first: undefined, regexPrefix: undefined, test: () => true, capture: undefined };
    return {
      exact: undefined,
      first: firstSegment(prefix),
      regexPrefix: undefined,
      test: (p) => p.startsWith(prefix) && (p.length === prefix.length || p.charCodeAt(prefix.length) === 47),
      capture: undefined,
    };
  }
  // A string prefix names the first segment only when a `/` ends it within the prefix.
  const first = value.indexOf('/', 1) < 0 ? undefined : firstSegment(value);
  return { exact: undefined, first, regexPrefix: undefined, test: (p) => p.startsWith(value), capture: undefined };
}

/**
 * A regular expression (RE2, whole path, src/base/util/regex.ts). `compiled`: already compiled
 * (else compiled when a request first reaches it, so a large table holds only the regexes requests
 * reach; the caller has checked that it compiles); `capture`: the values it captures.
 */
export function regexPath(source: string, options: { compiled?: PathRegex; capture?: (path: string) => Params | undefined } = {}): PathMatch {
  let re = options.compiled;
  return {
    exact: undefined,
    first: undefined,
    regexPrefix: literalPrefix(source),
    test: (p) => (re ??= compilePathRegex(source)).test(p),
    capture: options.capture,
  };
}

/**
 * A template of whole segments (`/users/{id}`, `/static/*`) whose `capture` says whether a path
 * matches and with what parameters; indexed by its first segment when that is literal.
 */
export function templatePath(pattern: string, capture: (path: string) => Params | undefined): PathMatch {
  const first = firstSegment(pattern);
  // A parameter or `*` (or any segment with one) names no first segment.
  return { exact: undefined, first: /[{}*]/.test(first) ? undefined : first, regexPrefix: undefined, test: (p) => capture(p) !== undefined, capture };
}

/** A route as the matcher keeps it; it is also the answer of a match that captures nothing (no object per match). */
interface Entry<T, C> extends RouteHit<T> {
  /** Its position in the table. */
  readonly order: number;
  /** A regular expression's non-empty literal prefix: a path that does not start with it is not tested. */
  readonly prefix: string | undefined;
  readonly test: (path: string) => boolean;
  readonly capture: ((path: string) => Params | undefined) | undefined;
  readonly accepts: ((ctx: C) => boolean) | undefined;
  readonly refine: ((ctx: C) => boolean) | undefined;
}

const NONE: readonly never[] = [];
/** Past every position (a small integer, as the positions are). */
const END = 0x3fffffff;

/** An immutable table of compiled routes, in the order given (the source's precedence), and its index. */
export class RouteMatcher<T, C = undefined> {
  private readonly entries: Array<Entry<T, C>>;
  /** Scan every entry (a small table). */
  private readonly scan: boolean;
  /** Exact paths, by path. */
  private readonly exact = new Map<string, Array<Entry<T, C>>>();
  /** Per first segment: the non-exact, non-regex entries that may match a path starting with it. */
  private readonly byFirst = new Map<string, Array<Entry<T, C>>>();
  /** The non-exact, non-regex entries that may match any path: what a path whose first segment no entry names takes. */
  private readonly generic: Array<Entry<T, C>> = [];
  /** The regex entries by literal prefix. */
  private readonly byPrefix = new Map<string, Array<Entry<T, C>>>();
  /** The lengths of those prefixes, shortest first. */
  private readonly prefixLengths: number[] = [];

  constructor(routes: ReadonlyArray<CompiledRoute<T, C>>) {
    let cost = 0;
    this.entries = routes.map((r, order) => {
      const { regexPrefix, test, capture } = r.path;
      cost += regexPrefix === undefined ? 1 : 4;
      return { order, prefix: regexPrefix || undefined, test, capture, accepts: r.accepts, refine: r.refine, target: r.target, params: undefined };
    });
    this.scan = cost <= SCAN_AT_MOST;
    if (this.scan) return;
    const plain: Array<{ e: Entry<T, C>; first: string | undefined }> = [];
    routes.forEach((r, i) => {
      const e = this.entries[i]!;
      const { exact, regexPrefix, first } = r.path;
      if (exact !== undefined) push(this.exact, exact, e);
      else if (regexPrefix !== undefined) push(this.byPrefix, regexPrefix, e);
      else plain.push({ e, first });
    });
    this.prefixLengths = [...new Set([...this.byPrefix.keys()].map((p) => p.length))].sort((a, b) => a - b);
    const firsts = new Set<string>();
    for (const { e, first } of plain) {
      if (first === undefined) this.generic.push(e);
      else firsts.add(first);
    }
    if (firsts.size * this.generic.length + plain.length <= MAX_BUCKETED) {
      for (const first of firsts) this.byFirst.set(first, []);
      for (const { e, first } of plain) {
        if (first === undefined) for (const list of this.byFirst.values()) list.push(e);
        else this.byFirst.get(first)!.push(e);
      }
    } else this.generic = plain.map((p) => p.e);
  }

  get size(): number {
    return this.entries.length;
  }

  /** The targets in table order. */
  targets(): T[] {
    return this.entries.map((e) => e.target);
  }

  /** The first route whose conditions and path match; path is the URL path without the query. */
  match(path: string, ctx: C): RouteHit<T> | undefined {
    return this.scan ? this.scanAll(path, ctx) : this.indexed(path, ctx);
  }

  /** A small table: every entry in order. */
  private scanAll(path: string, ctx: C): RouteHit<T> | undefined {
    const entries = this.entries;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.prefix !== undefined && !path.startsWith(e.prefix)) continue;
      if (e.accepts !== undefined && !e.accepts(ctx)) continue;
      if (e.capture === undefined) {
        if (e.test(path) && (e.refine === undefined || e.refine(ctx))) return e;
      } else {
        const params = e.capture(path);
        if (params !== undefined && (e.refine === undefined || e.refine(ctx))) return { target: e.target, params };
      }
    }
    return undefined;
  }

  /** The entries the index gives for this path, merged by position. */
  private indexed(path: string, ctx: C): RouteHit<T> | undefined {
    const exact = this.exact.size > 0 ? (this.exact.get(path) ?? NONE) : NONE;
    const plain = this.byFirst.get(firstSegment(path)) ?? this.generic;
    const regex = this.byPrefix.size > 0 ? this.regexCandidates(path) : NONE;
    for (let i = 0, j = 0, k = 0; ; ) {
      const a = i < exact.length ? exact[i]!.order : END;
      const b = j < plain.length ? plain[j]!.order : END;
      const c = k < regex.length ? regex[k]!.order : END;
      let hit: RouteHit<T> | undefined;
      if (a < b && a < c) hit = this.try(exact[i++]!, path, ctx, true);
      else if (b < c) hit = this.try(plain[j++]!, path, ctx, false);
      else if (c !== END) hit = this.try(regex[k++]!, path, ctx, false);
      else return undefined;
      if (hit) return hit;
    }
  }

  /** The entry's answer when it matches; `byPath`: found by its exact path (no path test). */
  private try(e: Entry<T, C>, path: string, ctx: C, byPath: boolean): RouteHit<T> | undefined {
    if (e.accepts !== undefined && !e.accepts(ctx)) return undefined;
    let params: Params | undefined;
    if (!byPath) {
      if (e.capture !== undefined) {
        params = e.capture(path);
        if (params === undefined) return undefined;
      } else if (!e.test(path)) return undefined;
    }
    if (e.refine !== undefined && !e.refine(ctx)) return undefined;
    return params === undefined ? e : { target: e.target, params };
  }

  /** The regex entries whose literal prefix `path` starts with, in table order. */
  private regexCandidates(path: string): ReadonlyArray<Entry<T, C>> {
    let out: Array<Entry<T, C>> | undefined;
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
}

function push<E>(map: Map<string, E[]>, key: string, e: E): void {
  const list = map.get(key);
  if (list) list.push(e);
  else map.set(key, [e]);
}
