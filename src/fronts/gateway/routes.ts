/**
 * The gateway's route compilation: endpoint metadata to compiled routes, their order, and the
 * route table matched per request. Pure: no registry, no I/O (src/fronts/gateway/router.ts keeps the
 * table of the live registry).
 *
 * Endpoint metadata read (all optional except `path`):
 *   handler  api | rpc | proxy | event   (absent: rpc; `http` and `web` are accepted as proxy)
 *   method   comma list of HTTP methods  (absent: any method)
 *   path     comma list of paths         (absent: the endpoint is not routed)
 *   host     comma list of hosts         (absent: any host)
 *
 * A path is one of
 *   exact     `/greeter/hello`            the request path must be equal
 *   template  `/greeter/{name}`           `{x}` matches one non-empty segment;
 *             `/static/*`                 a trailing `/*` matches `/static` and everything under it
 *   regex     `^/items/[0-9]+`            starts with `^`; matches the WHOLE path (as if it ended in `$`);
 *                                         RE2 syntax, linear time (src/base/util/regex.ts); a path longer than
 *                                         MAX_REGEX_PATH_LENGTH never matches a regex route
 *
 * Order (deterministic, whatever order the registry lists things in): exact paths, then
 * templates, then regexes; within a kind the longer pattern first; then by service name, endpoint
 * name, pattern, handler, methods, hosts. The first route whose method, host and path match wins.
 */
import type { Service } from '../../engines/registry/registry.js';
import { compilePathRegex, escapeRegExp } from '../../base/util/regex.js';
import { exactPath, regexPath, RouteMatcher, templatePath, type CompiledRoute } from '../../edge/routes/match.js';

export type HandlerName = 'api' | 'rpc' | 'proxy' | 'event';
export type PathKind = 'exact' | 'template' | 'regex';

export const HANDLERS: readonly HandlerName[] = ['api', 'rpc', 'proxy', 'event'];

/** One route as admin /routes shows it. */
export interface RegistryRouteSpec {
  /** The pattern as declared. */
  path: string;
  kind: PathKind;
  /** Upper case; empty: any method. */
  methods: string[];
  /** Lower case; empty: any host. */
  hosts: string[];
  handler: HandlerName;
  service: string;
  /** `Endpoint.Method` of the declaring endpoint. */
  endpoint: string;
}

export interface RegistryRoute extends RegistryRouteSpec {
  /** Template parameters when the path matches, undefined when it does not. */
  matchPath(path: string): Record<string, string> | undefined;
}

export interface RouteMatch {
  route: RegistryRoute;
  params: Record<string, string>;
}

/** Why a declared path or endpoint was left out; the router logs these. */
export interface RouteProblem {
  service: string;
  endpoint: string;
  path?: string;
  reason: string;
}

const KIND_RANK: Record<PathKind, number> = { exact: 0, template: 1, regex: 2 };
const METHOD_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Z-]+$/;
const PARAM = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

// ---- parsing endpoint metadata -------------------------------------------------------------

/**
 * Splits a comma list; commas inside (), [] or {} and escaped commas do not split, so a regex like
 * `^/a{1,3}` stays whole.
 */
export function splitList(value: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let inClass = false;
  let current = '';
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (c === '\\' && i + 1 < value.length) {
      current += c + value[++i];
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
    } else if (c === '[') inClass = true;
    else if (c === '(' || c === '{') depth++;
    else if ((c === ')' || c === '}') && depth > 0) depth--;
    else if (c === ',' && depth === 0) {
      out.push(current);
      current = '';
      continue;
    }
    current += c;
  }
  out.push(current);
  return out.map((s) => s.trim()).filter((s) => s !== '');
}

interface CompiledPath {
  kind: PathKind;
  matchPath: (path: string) => Record<string, string> | undefined;
}

/** Compiles one declared path; throws an Error saying why it is not acceptable. */
export function compilePath(pattern: string): CompiledPath {
  if (/\s/.test(pattern)) throw new Error('a path may not contain white space');
  if (pattern.startsWith('^')) {
    // RE2 (linear time), anchored at both ends: `^/call` matches /call only, never /call/x or
    // /foo/call. A path longer than MAX_REGEX_PATH_LENGTH does not match.
    const re = compilePathRegex(pattern);
    return { kind: 'regex', matchPath: (path) => re.exec(path) };
  }
  if (!pattern.startsWith('/')) throw new Error('a path must start with / (or ^ for a regex)');
  const segments = pattern.split('/').slice(1);
  if (!/[{}*]/.test(pattern)) return { kind: 'exact', matchPath: (path) => (path === pattern ? {} : undefined) };
  const names: string[] = [];
  let source = '^';
  let rest = false;
  segments.forEach((segment, i) => {
    if (segment === '*') {
      if (i !== segments.length - 1) throw new Error('`*` is only allowed as the last segment (`/a/*`)');
      rest = true;
      return;
    }
    const param = PARAM.exec(segment);
    if (param) {
      if (names.includes(param[1]!)) throw new Error(`parameter {${param[1]}} appears twice`);
      names.push(param[1]!);
      source += '/([^/]+)';
      return;
    }
    if (/[{}*]/.test(segment)) throw new Error(`segment "${segment}": use a whole segment {name}, or * as the last segment`);
    source += '/' + escapeRegExp(segment);
  });
  // `/a/*` matches /a, /a/ and everything under /a/; `/*` matches every path.
  source += rest ? '(?:/(.*))?$' : '$';
  const re = new RegExp(source);
  return {
    kind: 'template',
    matchPath: (path) => {
      const m = re.exec(path);
      if (!m) return undefined;
      const params: Record<string, string> = {};
      names.forEach((n, i) => (params[n] = m[i + 1]!));
      if (rest) params['*'] = m[names.length + 1] ?? '';
      return params;
    },
  };
}

function parseHandler(value: string | undefined): HandlerName | undefined {
  const h = (value ?? '').trim().toLowerCase();
  if (h === '') return 'rpc';
  if (h === 'http' || h === 'web') return 'proxy';
  return (HANDLERS as readonly string[]).includes(h) ? (h as HandlerName) : undefined;
}

function metadataValue(metadata: Record<string, string> | undefined, key: string): string | undefined {
  if (!metadata) return undefined;
  if (typeof metadata[key] === 'string') return metadata[key];
  for (const [k, v] of Object.entries(metadata)) if (k.toLowerCase() === key && typeof v === 'string') return v;
  return undefined;
}

/** True for the services a gateway with this namespace routes to. */
export function inNamespace(name: string, namespace: string): boolean {
  return name.startsWith(namespace + '.');
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function compareRoutes(a: RegistryRouteSpec, b: RegistryRouteSpec): number {
  return (
    KIND_RANK[a.kind] - KIND_RANK[b.kind] ||
    b.path.length - a.path.length ||
    cmp(a.service, b.service) ||
    cmp(a.endpoint, b.endpoint) ||
    cmp(a.path, b.path) ||
    cmp(a.handler, b.handler) ||
    cmp(a.methods.join(','), b.methods.join(',')) ||
    cmp(a.hosts.join(','), b.hosts.join(','))
  );
}

/**
 * The ordered routes of these services (every version of each; identical routes declared by
 * several versions appear once), and the problems found on the way.
 */
export function buildRoutes(services: Service[]): { routes: RegistryRoute[]; problems: RouteProblem[] } {
  const routes: RegistryRoute[] = [];
  const problems: RouteProblem[] = [];
  const seen = new Set<string>();
  for (const service of services) {
    for (const endpoint of service.endpoints ?? []) {
      const meta = endpoint.metadata;
      const pathValue = metadataValue(meta, 'path');
      if (pathValue === undefined || pathValue.trim() === '') continue;
      const where = { service: service.name, endpoint: endpoint.name };
      const handler = parseHandler(metadataValue(meta, 'handler'));
      if (!handler) {
        problems.push({ ...where, reason: `unknown handler "${metadataValue(meta, 'handler')}" (use ${HANDLERS.join(', ')})` });
        continue;
      }
      const methods = [...new Set(splitList(metadataValue(meta, 'method') ?? '').map((m) => m.toUpperCase()))].sort();
      const badMethod = methods.find((m) => !METHOD_TOKEN.test(m));
      if (badMethod !== undefined) {
        problems.push({ ...where, reason: `invalid method "${badMethod}"` });
        continue;
      }
      const hosts = [...new Set(splitList(metadataValue(meta, 'host') ?? '').map((h) => h.toLowerCase()))].sort();
      for (const path of splitList(pathValue)) {
        let compiled: CompiledPath;
        try {
          compiled = compilePath(path);
        } catch (err) {
          problems.push({ ...where, path, reason: (err as Error).message });
          continue;
        }
        const spec: RegistryRouteSpec = { path, kind: compiled.kind, methods, hosts, handler, service: service.name, endpoint: endpoint.name };
        const key = JSON.stringify(spec);
        if (seen.has(key)) continue;
        seen.add(key);
        routes.push({ ...spec, matchPath: compiled.matchPath });
      }
    }
  }
  routes.sort(compareRoutes);
  return { routes, problems };
}

/** The Host header's name (lower case, without the port) and the header as given (lower case). */
function splitHost(host: string | undefined): { name: string; full: string } {
  const full = (host ?? '').trim().toLowerCase();
  const m = /^(\[[^\]]*\]|[^:]*)(?::\d+)?$/.exec(full);
  return { name: m ? m[1]! : full, full };
}

/**
 * A listed host matches the request's Host header: `example.com` matches with any port,
 * `example.com:8080` only that port, `*.example.com` any sub-domain (any port).
 */
export function hostMatches(listed: string, host: { name: string; full: string }): boolean {
  if (listed.startsWith('*.')) return host.name.endsWith(listed.slice(1)) && host.name.length > listed.length - 1;
  if (/:\d+$/.test(listed) && !listed.endsWith(']')) return host.full === listed;
  return host.name === listed;
}

/** What a registry route's conditions read of a request, computed once per match. */
interface RegistryRequest {
  /** The method in upper case. */
  method: string;
  host: { name: string; full: string };
}

/** A registry route in the edge's one route model: its path by kind, its methods and hosts as the condition. */
function compileRoute(r: RegistryRoute): CompiledRoute<RegistryRoute, RegistryRequest> {
  const path = r.kind === 'exact' ? exactPath(r.path) : r.kind === 'template' ? templatePath(r.path, r.matchPath) : regexPath(r.path, { capture: r.matchPath });
  const { methods, hosts } = r;
  const accepts =
    methods.length === 0 && hosts.length === 0
      ? undefined
      : (q: RegistryRequest) => (methods.length === 0 || methods.includes(q.method)) && (hosts.length === 0 || hosts.some((h) => hostMatches(h, q.host)));
  return { path, accepts, target: r };
}

/**
 * An immutable, ordered route table, matched by the edge's one matcher (src/edge/routes/match.ts):
 * exact paths are looked up by path; templates whose first segment is a literal (`/users/{id}`)
 * only by the request's first segment, regexes by their literal prefix, so a request is tried
 * against the routes that can match it, not against every service's; templates starting with a
 * parameter or `*` are tried for every request. The candidates are visited in table order, so
 * the first match is the same as a walk over the whole table.
 */
export class RouteTable {
  private readonly matcher: RouteMatcher<RegistryRoute, RegistryRequest>;

  constructor(readonly routes: readonly RegistryRoute[]) {
    this.matcher = new RouteMatcher(routes.map(compileRoute));
  }

  /** The first route for this request; path is the URL path without the query. */
  match(method: string, hostHeader: string | undefined, path: string): RouteMatch | undefined {
    const hit = this.matcher.match(path, { method: method.toUpperCase(), host: splitHost(hostHeader) });
    return hit && { route: hit.target, params: hit.params ?? {} };
  }

  /** What admin /routes shows: the routes in order, without the matchers. */
  dump(): RegistryRouteSpec[] {
    return this.routes.map((r) => ({
      path: r.path,
      kind: r.kind,
      methods: [...r.methods],
      hosts: [...r.hosts],
      handler: r.handler,
      service: r.service,
      endpoint: r.endpoint,
    }));
  }
}
