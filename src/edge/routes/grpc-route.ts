/**
 * A route file's GRPCRoute documents compiled for native gRPC calls (docs/routing.md, "GRPCRoute:
 * native gRPC calls"; src/edge/routes/file.ts parses them): one entry per (route, rule, match,
 * hostname), ordered once by the Gateway API's GRPCRoute precedence, matched per call by the
 * edge's one RouteMatcher on the call's path (`/<package.Service>/<Method>`), then one backend of
 * the rule drawn by weight. Pure: no I/O.
 *
 * Precedence:
 *   1. the host (`:authority` without its port): an exact hostname, then wildcards (the longer
 *      suffix first), then routes without hostnames;
 *   2. the method match: Exact, then RegularExpression, then none; then the more characters of
 *      service, then of method (service and method before either alone);
 *   3. more header matches;
 *   4. the order in the file (route, then rule, then match).
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { compilePathRegex, type PathRegex } from '../../base/util/regex.js';
import { exactPath, prefixPath, RouteMatcher, type CompiledRoute, type PathMatch } from './match.js';
import { headersMatch, hostOf, hostTest, pickBackend, valueTest } from './table.js';
import { modifyHeaders } from './effects.js';
import type { GrpcMatchSpec, GrpcMethodMatchSpec, GrpcRouteSpec, GrpcRuleSpec, HeaderModifierSpec, MirrorSpec } from './file.js';

/** What a native gRPC call offers to the matcher. */
export interface GrpcRouteRequest {
  /** `/<package.Service>/<Method>` (a gRPC method path: src/edge/handlers/grpc-pass.ts grpcMethodOf). */
  path: string;
  authority: string | undefined;
  headers: IncomingHttpHeaders;
}

/** A call a GRPCRoute takes: where it goes and what the rule changes, or why it cannot go anywhere. */
export type GrpcRouteAnswer =
  | {
      kind: 'backend';
      route: string;
      rule: string;
      service: string;
      /** Only the nodes of this registry version; undefined: any node of the service. */
      version: string | undefined;
      /** The request's headers as the node gets them (the request header modifiers applied). */
      requestHeaders: IncomingHttpHeaders;
      /** Applies the response header modifiers to the answer's headers (not its trailers); undefined: none. */
      responseHeaders: ((headers: OutgoingHttpHeaders) => void) | undefined;
      /** The rule's RequestMirror filters. */
      mirrors: readonly MirrorSpec[];
    }
  | { kind: 'unavailable'; route: string; rule: string; message: string };

interface Target {
  route: GrpcRouteSpec;
  rule: GrpcRuleSpec;
}

interface CallContext {
  host: string | undefined;
  headers: IncomingHttpHeaders;
}

/** A regex over a whole name, compiled on first use (the parser has checked that it compiles). */
function lazy(source: string): (value: string) => boolean {
  let re: PathRegex | undefined;
  return (v) => (re ??= compilePathRegex(source)).test(v);
}

/** The method match as a path match of `/<service>/<method>`, and its precedence rank. */
function methodPath(m: GrpcMethodMatchSpec | undefined): { path: PathMatch; rank: number[] } {
  if (!m) return { path: prefixPath('/', true), rank: [2, 0, 0] };
  // A leading `.` (a fully qualified protobuf name) is not part of the call's path.
  const service = m.service?.replace(/^\./, '');
  const rank = [m.type === 'Exact' ? 0 : 1, -(m.service?.length ?? 0), -(m.method?.length ?? 0)];
  if (m.type === 'Exact') {
    if (service !== undefined && m.method !== undefined) return { path: exactPath(`/${service}/${m.method}`), rank };
    if (service !== undefined) return { path: prefixPath(`/${service}/`, false), rank };
    const tail = `/${m.method}`;
    return { path: custom((p) => p.endsWith(tail) && p.lastIndexOf('/') === p.length - tail.length), rank };
  }
  const serviceTest = m.service === undefined ? undefined : lazy(m.service);
  const methodTest = m.method === undefined ? undefined : lazy(m.method);
  return {
    path: custom((p) => {
      const slash = p.lastIndexOf('/');
      return (serviceTest === undefined || serviceTest(p.slice(1, slash))) && (methodTest === undefined || methodTest(p.slice(slash + 1)));
    }),
    rank,
  };
}

function custom(test: (path: string) => boolean): PathMatch {
  return { exact: undefined, first: undefined, regexPrefix: undefined, test, capture: undefined };
}

export class CompiledGrpcRoutes {
  private readonly matcher: RouteMatcher<Target, CallContext>;

  /** `random` chooses backends (default Math.random). */
  constructor(
    readonly routes: readonly GrpcRouteSpec[],
    private readonly random: () => number = Math.random,
  ) {
    const entries: Array<{ compiled: CompiledRoute<Target, CallContext>; rank: number[] }> = [];
    let order = 0;
    for (const route of routes) {
      const hostnames = route.hostnames.length > 0 ? route.hostnames : [undefined];
      for (const rule of route.rules) {
        for (const match of rule.matches) {
          const method = methodPath(match.method);
          const refine = refineOf(match);
          for (const hostname of hostnames) {
            const host = hostTest(hostname);
            const test = host.test;
            entries.push({
              compiled: { path: method.path, accepts: test && ((c) => c.host !== undefined && test(c.host)), refine, target: { route, rule } },
              rank: [...host.rank, ...method.rank, -match.headers.length, order],
            });
          }
          order++;
        }
      }
    }
    entries.sort((a, b) => {
      for (let i = 0; i < a.rank.length; i++) if (a.rank[i] !== b.rank[i]) return a.rank[i]! - b.rank[i]!;
      return 0;
    });
    this.matcher = new RouteMatcher(entries.map((e) => e.compiled));
  }

  get size(): number {
    return this.routes.length;
  }

  /** The call's route, applied; undefined: no GRPCRoute matches (the call goes where it would without the file). */
  match(req: GrpcRouteRequest): GrpcRouteAnswer | undefined {
    const hit = this.matcher.match(req.path, { host: hostOf(req.authority), headers: req.headers });
    if (!hit) return undefined;
    const { route, rule } = hit.target;
    const backend = pickBackend(rule.backendRefs, this.random);
    const at = { route: route.name, rule: rule.name };
    if (!backend) return { kind: 'unavailable', ...at, message: `route ${route.name}: ${rule.backendRefs.length === 0 ? 'the rule has no backendRefs' : 'every backendRef of the rule weighs 0'}` };
    if (backend.unresolved) return { kind: 'unavailable', ...at, message: `route ${route.name}: ${backend.unresolved}` };
    const requestMods = [rule.filters.requestHeaders, backend.filters?.requestHeaders].filter((m) => m !== undefined);
    const responseMods = [rule.filters.responseHeaders, backend.filters?.responseHeaders].filter((m) => m !== undefined);
    return {
      kind: 'backend',
      ...at,
      service: backend.name,
      version: backend.version,
      requestHeaders: requestMods.length === 0 ? req.headers : (modifyHeaderObject(req.headers, requestMods) as IncomingHttpHeaders),
      responseHeaders: responseMods.length === 0 ? undefined : (headers) => replaceHeaders(headers, modifyHeaderObject(headers, responseMods)),
      mirrors: rule.filters.mirrors,
    };
  }
}

function refineOf(match: GrpcMatchSpec): ((c: CallContext) => boolean) | undefined {
  if (match.headers.length === 0) return undefined;
  const tests = match.headers.map(valueTest);
  return (c) => headersMatch(tests, c.headers);
}

type HeaderObject = Record<string, string | string[] | number | undefined>;

/**
 * A copy of an HTTP/2 header object with modifiers applied in order (./effects.ts modifyHeaders:
 * `remove`, `set`, then `add` one more value). Pseudo-headers are kept as they are; a name given
 * several values is sent with them joined by `, `.
 */
export function modifyHeaderObject(headers: Readonly<HeaderObject>, mods: readonly HeaderModifierSpec[]): HeaderObject {
  const out: HeaderObject = {};
  let flat: string[] = [];
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    if (name.startsWith(':')) out[name] = value;
    else for (const v of Array.isArray(value) ? value : [value]) flat.push(name, String(v));
  }
  for (const mod of mods) flat = modifyHeaders(flat, mod);
  for (let i = 0; i < flat.length; i += 2) {
    const name = flat[i]!.toLowerCase();
    const before = out[name];
    out[name] = before === undefined ? flat[i + 1]! : name === 'set-cookie' ? [...(Array.isArray(before) ? before : [String(before)]), flat[i + 1]!] : `${String(before)}, ${flat[i + 1]!}`;
  }
  return out;
}

/** Replaces an object's headers with others, in place. */
function replaceHeaders(target: OutgoingHttpHeaders, next: HeaderObject): void {
  for (const name of Object.keys(target)) delete target[name];
  Object.assign(target, next);
}
