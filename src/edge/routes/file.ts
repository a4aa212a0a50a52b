/**
 * The route file (`--routes=FILE`): Kubernetes Gateway API `HTTPRoute` documents, YAML or JSON,
 * several documents per file (docs/routing.md). This module parses and validates a file's text
 * into plain route objects; src/edge/routes/table.ts compiles them and matches requests.
 *
 * - Every field of HTTPRoute (gateway.networking.k8s.io/v1) is known. Fields that mean nothing
 *   to mesh (`parentRefs`, `status`, most of `metadata`, a backend's `group`, `namespace`, `port`)
 *   are accepted and ignored; a field the Gateway API does not have is refused. Mesh's own
 *   fields: `spec.handler`, a backend's `version`, a rule's `fault` and its `retry.budget`.
 *   A rule's `sessionPersistence` is parsed here (SessionSpec) and served by ./session.ts.
 * - Every error is a RouteFileError naming the file, the line, and the route and rule
 *   (`routes.yaml line 12: HTTPRoute canary rules[0].backendRefs[1].weight: ...`).
 */
import { createHash } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { normalizePath } from '../../base/http/path.js';
import { compilePathRegex } from '../../base/util/regex.js';
import { serviceNameProblem, versionProblem } from '../../engines/registry/validate.js';
import { foldHeaderName } from '../../base/http/header-name.js';
import { isEdgeSetHeader, isHopByHop, isMeshHeaderName } from '../../core/transport/headers.js';
import type { Node, Pair } from 'yaml';
import { isMap, isScalar, isSeq } from '../../base/util/lazy-packages.js';
import { corsOriginPattern, type CorsOriginPattern, type RouteCorsSpec } from '../../base/http/cors.js';
import { ConfigFileError, MAX_CONFIG_FILE_BYTES, parseConfigAll, readConfigFile, type ConfigDoc, type ConfigErrorStyle } from '../../base/config/reader.js';

export type RouteHandler = 'api' | 'rpc' | 'proxy';
export const ROUTE_HANDLERS: readonly RouteHandler[] = ['api', 'rpc', 'proxy'];

export type PathMatchType = 'Exact' | 'PathPrefix' | 'RegularExpression';
export type ValueMatchType = 'Exact' | 'RegularExpression';

export interface PathMatchSpec {
  type: PathMatchType;
  value: string;
}

export interface ValueMatchSpec {
  type: ValueMatchType;
  /** A header's name in lower case; a query parameter's as written. */
  name: string;
  value: string;
}

export interface MatchSpec {
  path: PathMatchSpec;
  /** Upper case; undefined: any method. */
  method?: string;
  headers: ValueMatchSpec[];
  queryParams: ValueMatchSpec[];
}

export interface BackendRefSpec {
  /** A mesh service's registry name. */
  name: string;
  /** The registry's Version of the nodes to send to; undefined: any node of the service. */
  version?: string;
  /** 0 to 1,000,000; default 1. */
  weight: number;
  /**
   * Why this backendRef cannot be sent to (another `group` or `kind` than a mesh service): the route
   * stays and the requests it would take get 500 with this reason, as the Gateway API says.
   */
  unresolved?: string;
  /**
   * The backend's own `filters`, applied after the rule's when this backend is picked:
   * RequestHeaderModifier, ResponseHeaderModifier, URLRewrite, RequestRedirect.
   */
  filters?: FiltersSpec;
}

export interface RuleSpec {
  /** The rule's stats name: its `name`, else `<route>-<index>`. */
  name: string;
  index: number;
  line: number;
  /** At least one (an absent `matches` is one match of every path). */
  matches: MatchSpec[];
  backendRefs: BackendRefSpec[];
  /** `timeouts.request` in ms; undefined or 0: no bound of the route's own. */
  requestTimeoutMs?: number;
  /** `timeouts.backendRequest` in ms: each try. */
  backendRequestTimeoutMs?: number;
  /** `retry`: the route's own retries (and mesh's retry budget). */
  retry?: RetrySpec;
  /** Mesh's `fault`: delays and aborts injected for testing. */
  fault?: FaultSpec;
  /** `filters`, by kind (each kind at most once, as the Gateway API says; mirrors several). */
  filters: FiltersSpec;
  /** `sessionPersistence`: a session's requests go to the node its first one went to (./session.ts). */
  session?: SessionSpec;
}

/** A rule's `sessionPersistence`, defaults applied. */
export interface SessionSpec {
  /** The cookie's name (type Cookie) or the header's, in lower case (type Header); default `session-<rule>`. */
  name: string;
  type: 'Cookie' | 'Header';
  /** `cookieConfig.lifetimeType` (Cookie only; default Session): Permanent gives the cookie a Max-Age. */
  lifetime: 'Session' | 'Permanent';
  /** `absoluteTimeout` (ms): the session ends that long after its first request. */
  absoluteTimeoutMs?: number;
  /** `idleTimeout` (ms): the session ends when no request of it came for that long. */
  idleTimeoutMs?: number;
}

export interface RetrySpec {
  /** Retries after the first try (the Gateway API's `attempts`). */
  attempts: number;
  /** Answer statuses that are retried (proxy routes); empty: only failures to connect. */
  codes: number[];
  /** Pause before each retry (ms); undefined: the handler's own (none on a proxy route, the client's backoff on rpc and api routes). */
  backoffMs?: number;
  /** Mesh's `budget`: at most `percent` % of the active requests to the service may be retries, at least `min` at once. */
  budget?: { percent: number; minConcurrency: number };
}

export interface FaultSpec {
  delay?: { ms: number; percentage: number };
  abort?: { status: number; percentage: number };
}

export interface HeaderModifierSpec {
  /** Names in lower case. */
  set: Array<[string, string]>;
  add: Array<[string, string]>;
  remove: string[];
}

export interface RewriteSpec {
  hostname?: string;
  path?: { type: 'ReplacePrefixMatch' | 'ReplaceFullPath'; value: string };
}

export interface RedirectSpec {
  scheme?: 'http' | 'https';
  hostname?: string;
  port?: number;
  path?: { type: 'ReplacePrefixMatch' | 'ReplaceFullPath'; value: string };
  statusCode: RedirectStatus;
}

/** The redirect statuses of the Gateway API (default 302). */
export type RedirectStatus = 301 | 302 | 303 | 307 | 308;
export const REDIRECT_STATUSES: readonly RedirectStatus[] = [301, 302, 303, 307, 308];

export interface MirrorSpec {
  /** The service that gets the copies. */
  service: string;
  /** The share of requests copied (`percent` is n/100); undefined: every request. */
  fraction?: { numerator: number; denominator: number };
}

export interface FiltersSpec {
  requestHeaders?: HeaderModifierSpec;
  responseHeaders?: HeaderModifierSpec;
  rewrite?: RewriteSpec;
  redirect?: RedirectSpec;
  /** Services that get a copy of each request (or of a share of them). */
  mirrors: MirrorSpec[];
  /** `CORS`: preflights answered by mesh, the CORS headers of the answers (src/base/http/cors.ts). */
  cors?: RouteCorsSpec;
}

/**
 * A route's `parentRefs` entry: the Gateway (and listener) it attaches to. Read only when the file
 * holds Gateway documents (src/edge/routes/listeners.ts); otherwise ignored, as before.
 */
export interface ParentRefSpec {
  name: string;
  /** Default `gateway.networking.k8s.io` / `Gateway`: another kind attaches to nothing mesh serves. */
  group: string;
  kind: string;
  sectionName?: string;
  port?: number;
}

export type ListenerProtocol = 'HTTP' | 'HTTPS';

/** A listener of a Gateway document: where mesh api listens besides --address. */
export interface ListenerSpec {
  name: string;
  line: number;
  /** The port as the Gateway writes it (--gateway_ports may bind another). */
  port: number;
  protocol: ListenerProtocol;
  /** Lower case; `*.example.com` a wildcard; undefined: any host. */
  hostname?: string;
  /** HTTPS: the certificate and key files (absolute: relative paths are read from the route file's directory). */
  tls?: { certFile: string; keyFile: string };
  /** The route kinds the listener allows (`allowedRoutes.kinds`); default HTTPRoute and GRPCRoute. */
  kinds: string[];
}

export interface GatewaySpec {
  name: string;
  line: number;
  listeners: ListenerSpec[];
}

export interface RouteSpec {
  name: string;
  /** metadata.namespace as written (not used to find services). */
  namespace?: string;
  line: number;
  /** Lower case; empty: any host. `*.example.com` matches any host under example.com. */
  hostnames: string[];
  /** Mesh's `spec.handler`; undefined: the front end's default. */
  handler?: RouteHandler;
  rules: RuleSpec[];
  /** `spec.parentRefs` as written (used only with Gateway documents in the file). */
  parentRefs: ParentRefSpec[];
}

/** A GRPCRoute match's `method`: Exact (service and method names) or RegularExpression (RE2, each whole). */
export interface GrpcMethodMatchSpec {
  type: ValueMatchType;
  /** The gRPC service (`helloworld.Greeter`); undefined: any. */
  service?: string;
  /** The method (`SayHello`); undefined: any. */
  method?: string;
}

export interface GrpcMatchSpec {
  /** undefined: any service and method. */
  method?: GrpcMethodMatchSpec;
  headers: ValueMatchSpec[];
}

export interface GrpcRuleSpec {
  /** Its `name`, else `<route>-<index>`. */
  name: string;
  index: number;
  line: number;
  /** At least one (an absent `matches` is one match of every call). */
  matches: GrpcMatchSpec[];
  backendRefs: BackendRefSpec[];
  /** RequestHeaderModifier, ResponseHeaderModifier, RequestMirror only. */
  filters: FiltersSpec;
}

/** A GRPCRoute document: native gRPC calls (src/edge/routes/grpc-route.ts). */
export interface GrpcRouteSpec {
  name: string;
  namespace?: string;
  line: number;
  /** Lower case; empty: any host. */
  hostnames: string[];
  rules: GrpcRuleSpec[];
  /** `spec.parentRefs` as written (used only with Gateway documents in the file). */
  parentRefs: ParentRefSpec[];
}

export interface RouteFile {
  file: string;
  /** A hash of the file's content: what admin /config_dump shows as the routes' version. */
  version: string;
  routes: RouteSpec[];
  /** The file's GRPCRoute documents (native gRPC calls at the gateway and the sidecar). */
  grpcRoutes: GrpcRouteSpec[];
  /** The file's Gateway documents (served by mesh api only: src/edge/routes/listeners.ts). */
  gateways: GatewaySpec[];
}

/** How a route file's errors are written (src/base/config/reader.ts): `routes.yaml line 12: <field>: <problem>`. */
export const ROUTE_FILE_ERRORS: ConfigErrorStyle = {
  name: 'RouteFileError',
  withFile: true,
  position: 'line',
  create: (p) => new RouteFileError(p.file, p.line, p.problem, p.field, p.code),
};

/** A problem of a route file: the config reader's one error type, by its name here. */
export class RouteFileError extends ConfigFileError {
  /** The message after the file and line: the field path (the route and rule) and the problem. */
  readonly why: string;

  constructor(file: string, line: number | undefined, problem: string, field?: string, code?: string) {
    super(ROUTE_FILE_ERRORS, { file, line, problem, field, code });
    this.why = field ? `${field}: ${problem}` : problem;
  }
}

/** Bounds of the Gateway API's own schema (and of a file). */
export const LIMITS = { routes: 1000, hostnames: 16, rules: 16, matches: 64, backendRefs: 16, headers: 16, queryParams: 16, text: 4096, weight: 1_000_000, filters: 16, mirrors: 4, retryAttempts: 10, retryBackoffMs: 10_000, faultDelayMs: 60_000, fractionDenominator: 1_000_000, sessionName: 128, corsOrigins: 64, corsMethods: 9, corsHeaders: 64, corsMaxAgeSec: 86_400, parentRefs: 32, gateways: 16, listeners: 64 } as const;

/** The kinds of document a route file holds. */
const DOCUMENT_KINDS = ['HTTPRoute', 'GRPCRoute', 'Gateway'];
const API_VERSIONS = new Set(['gateway.networking.k8s.io/v1', 'gateway.networking.k8s.io/v1beta1']);
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH']);
const TOP = new Set(['apiVersion', 'kind', 'metadata', 'spec', 'status']);
const METADATA = new Set(['name', 'namespace', 'labels', 'annotations', 'uid', 'resourceVersion', 'generation', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'finalizers', 'ownerReferences', 'managedFields', 'generateName', 'selfLink']);
const SPEC = new Set(['parentRefs', 'hostnames', 'rules', 'handler']);
const PARENT_REF = new Set(['group', 'kind', 'namespace', 'name', 'sectionName', 'port']);
const GATEWAY_SPEC = new Set(['gatewayClassName', 'listeners', 'addresses', 'infrastructure', 'backendTLS', 'allowedListeners']);
const LISTENER = new Set(['name', 'hostname', 'port', 'protocol', 'tls', 'allowedRoutes']);
const LISTENER_TLS = new Set(['mode', 'certificateRefs', 'options', 'frontendValidation']);
const ALLOWED_ROUTES = new Set(['namespaces', 'kinds']);
const ROUTE_GROUP_KIND = new Set(['group', 'kind']);
/** `tls.options` of an HTTPS listener: the PEM files, as a Secret's `tls.crt` and `tls.key`. */
export const LISTENER_CERT_OPTION = 'mesh-platform.dev/cert-file';
export const LISTENER_KEY_OPTION = 'mesh-platform.dev/key-file';
const GATEWAY_GROUP = 'gateway.networking.k8s.io';
const RULE = new Set(['name', 'matches', 'filters', 'backendRefs', 'timeouts', 'retry', 'sessionPersistence', 'fault']);
const SESSION = new Set(['sessionName', 'absoluteTimeout', 'idleTimeout', 'type', 'cookieConfig']);
const COOKIE_CONFIG = new Set(['lifetimeType']);
const MATCH = new Set(['path', 'headers', 'queryParams', 'method']);
const PATH = new Set(['type', 'value']);
const VALUE_MATCH = new Set(['type', 'name', 'value']);
const BACKEND = new Set(['group', 'kind', 'name', 'namespace', 'port', 'weight', 'filters', 'version']);
const TIMEOUTS = new Set(['request', 'backendRequest']);
const RETRY = new Set(['attempts', 'codes', 'backoff', 'budget']);
const BUDGET = new Set(['percent', 'min']);
const FAULT = new Set(['delay', 'abort']);
const FAULT_DELAY = new Set(['fixedDelay', 'percentage']);
const FAULT_ABORT = new Set(['httpStatus', 'percentage']);
const FILTER = new Set(['type', 'requestHeaderModifier', 'responseHeaderModifier', 'urlRewrite', 'requestRedirect', 'requestMirror', 'extensionRef', 'cors', 'externalAuth']);
const FILTER_FIELD: Record<string, string> = {
  RequestHeaderModifier: 'requestHeaderModifier',
  ResponseHeaderModifier: 'responseHeaderModifier',
  URLRewrite: 'urlRewrite',
  RequestRedirect: 'requestRedirect',
  RequestMirror: 'requestMirror',
  CORS: 'cors',
};
/** The filters a backendRef may have (the rest go on the rule). */
const BACKEND_FILTER_TYPES = new Set(['RequestHeaderModifier', 'ResponseHeaderModifier', 'URLRewrite', 'RequestRedirect']);

/** What a route kind's filters may be: the fields of a filter, its types (type → field) and those a backendRef may have. */
interface FilterGrammar {
  what: string;
  fields: ReadonlySet<string>;
  types: Record<string, string>;
  backendTypes: ReadonlySet<string>;
}
const HTTP_FILTERS: FilterGrammar = { what: 'an HTTPRouteFilter', fields: FILTER, types: FILTER_FIELD, backendTypes: BACKEND_FILTER_TYPES };
const GRPC_FILTERS: FilterGrammar = {
  what: 'a GRPCRouteFilter',
  fields: new Set(['type', 'requestHeaderModifier', 'responseHeaderModifier', 'requestMirror', 'extensionRef']),
  types: { RequestHeaderModifier: 'requestHeaderModifier', ResponseHeaderModifier: 'responseHeaderModifier', RequestMirror: 'requestMirror' },
  backendTypes: new Set(['RequestHeaderModifier', 'ResponseHeaderModifier']),
};
const GRPC_SPEC = new Set(['parentRefs', 'hostnames', 'rules']);
const GRPC_RULE = new Set(['name', 'matches', 'filters', 'backendRefs', 'sessionPersistence']);
const GRPC_MATCH = new Set(['method', 'headers']);
const GRPC_METHOD = new Set(['type', 'service', 'method']);
/** The Gateway API's checks of an Exact GRPCMethodMatch. */
const GRPC_SERVICE_NAME = /^\.?[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_][A-Za-z_0-9]*)*$/;
const GRPC_METHOD_NAME = /^[A-Za-z_][A-Za-z_0-9]*$/;
const CORS_FIELDS = new Set(['allowOrigins', 'allowMethods', 'allowHeaders', 'exposeHeaders', 'allowCredentials', 'maxAge']);
const HEADER_MODIFIER = new Set(['set', 'add', 'remove']);
const HEADER_VALUE = new Set(['name', 'value']);
const REWRITE = new Set(['hostname', 'path']);
const REDIRECT = new Set(['scheme', 'hostname', 'path', 'port', 'statusCode']);
const PATH_MODIFIER = new Set(['type', 'replaceFullPath', 'replacePrefixMatch']);
const MIRROR = new Set(['backendRef', 'percent', 'fraction']);
const MIRROR_REF = new Set(['group', 'kind', 'name', 'namespace', 'port', 'version']);
const FRACTION = new Set(['numerator', 'denominator']);

/** metadata.name and a rule's name: a DNS subdomain (RFC 1123), as Kubernetes checks them. */
const DNS_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
/** A hostname of `hostnames`: RFC 1123 labels, optionally `*.` first. */
const HOSTNAME = /^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;
/** The Gateway API's Duration: up to four number+unit parts, `1h30m`, `500ms`, `0s`. */
const DURATION = /^([0-9]{1,5}(h|m|s|ms)){1,4}$/;
const UNIT_MS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 };

/** The Gateway API's Duration in ms; undefined when the text is not one. */
export function parseGatewayDuration(text: string): number | undefined {
  if (!DURATION.test(text)) return undefined;
  let ms = 0;
  for (const m of text.matchAll(/([0-9]+)(ms|h|m|s)/g)) ms += Number(m[1]) * UNIT_MS[m[2]!]!;
  return ms;
}

/** Where the walk is: the route and the field path, for messages. */
class At {
  constructor(
    private readonly doc: ConfigDoc,
    readonly route: string,
    readonly path: string,
    readonly node: Node | null | undefined,
    private readonly fallbackLine: number | undefined,
  ) {}

  get line(): number | undefined {
    return this.doc.lineOf(this.node) ?? this.fallbackLine;
  }

  /** The same place under another field. */
  child(key: string | number, node: Node | null | undefined, keyNode?: Node | null): At {
    const path = typeof key === 'number' ? `${this.path}[${key}]` : this.path === '' ? key : `${this.path}.${key}`;
    const anchor = node ?? keyNode;
    return new At(this.doc, this.route, path, node, this.doc.lineOf(anchor) ?? this.line);
  }

  named(route: string): At {
    return new At(this.doc, route, this.path, this.node, this.line);
  }

  error(why: string): RouteFileError {
    const where = [this.route, this.path].filter((s) => s !== '').join(' ');
    return new RouteFileError(this.doc.file, this.line, why, where);
  }
}

/** The fields of a mapping, each known to `allowed`; anything else is an error. */
function fields(at: At, allowed: ReadonlySet<string>, what: string): Map<string, { at: At; node: Node | null }> {
  const node = at.node;
  if (!isMap(node)) throw at.error(`must be a mapping (${what})`);
  const out = new Map<string, { at: At; node: Node | null }>();
  for (const pair of node.items as Pair<Node, Node | null>[]) {
    const keyNode = pair.key;
    const key = isScalar(keyNode) ? keyNode.value : undefined;
    if (typeof key !== 'string') throw at.child('', keyNode).error('a key must be a string');
    const child = at.child(key, pair.value, keyNode);
    if (!allowed.has(key)) throw child.error(`unknown field "${key}" (${what} has no such field)`);
    out.set(key, { at: child, node: pair.value });
  }
  return out;
}

function text(at: At, max: number = LIMITS.text): string {
  const node = at.node;
  if (!isScalar(node) || typeof node.value !== 'string') throw at.error('must be a string');
  const value = node.value;
  if (value === '') throw at.error('must not be empty');
  if (value.length > max) throw at.error(`longer than ${max} characters`);
  return value;
}

function list(at: At, max: number): At[] {
  const node = at.node;
  if (node === null || node === undefined || (isScalar(node) && node.value === null)) return [];
  if (!isSeq(node)) throw at.error('must be a list');
  if (node.items.length > max) throw at.error(`more than ${max} entries`);
  return (node.items as (Node | null)[]).map((item, i) => at.child(i, item));
}

function integer(at: At, min: number, max: number): number {
  const node = at.node;
  if (!isScalar(node) || typeof node.value !== 'number' || !Number.isInteger(node.value) || node.value < min || node.value > max) {
    throw at.error(`must be an integer from ${min} to ${max}`);
  }
  return node.value;
}

/** A regular expression the table will compile (RE2, bounded): refused here, with its line. */
function regex(at: At, source: string): void {
  try {
    compilePathRegex(source);
  } catch (err) {
    throw at.error((err as Error).message);
  }
}

function parsePath(at: At): PathMatchSpec {
  const f = fields(at, PATH, 'an HTTPPathMatch');
  const type = f.has('type') ? text(f.get('type')!.at) : 'PathPrefix';
  if (type !== 'Exact' && type !== 'PathPrefix' && type !== 'RegularExpression') throw f.get('type')!.at.error(`must be Exact, PathPrefix or RegularExpression, not ${JSON.stringify(type)}`);
  const value = f.has('value') ? text(f.get('value')!.at) : '/';
  const vAt = f.get('value')?.at ?? at;
  if (type !== 'RegularExpression') {
    if (!value.startsWith('/')) throw vAt.error('must start with /');
    if (/[\s?#]/.test(value) || value.includes('//') || /(^|\/)\.\.?(\/|$)/.test(value)) throw vAt.error('must be a path in normal form (no white space, ?, #, //, . or .. segments)');
  } else regex(vAt, value);
  return { type, value };
}

function parseValueMatches(at: At, max: number, header: boolean, what = header ? 'an HTTPHeaderMatch' : 'an HTTPQueryParamMatch'): ValueMatchSpec[] {
  const out: ValueMatchSpec[] = [];
  const seen = new Set<string>();
  for (const item of list(at, max)) {
    const f = fields(item, VALUE_MATCH, what);
    const type = f.has('type') ? text(f.get('type')!.at) : 'Exact';
    if (type !== 'Exact' && type !== 'RegularExpression') throw f.get('type')!.at.error(`must be Exact or RegularExpression, not ${JSON.stringify(type)}`);
    if (!f.has('name')) throw item.error('name is required');
    if (!f.has('value')) throw item.error('value is required');
    const nameAt = f.get('name')!.at;
    let name = text(nameAt, 256);
    if (!HEADER_NAME.test(name)) throw nameAt.error(`${JSON.stringify(name)} is not a valid ${header ? 'header' : 'parameter'} name`);
    if (header) name = name.toLowerCase();
    if (seen.has(name)) throw nameAt.error(`${JSON.stringify(name)} is matched twice`);
    seen.add(name);
    const vAt = f.get('value')!.at;
    const value = text(vAt);
    if (type === 'RegularExpression') regex(vAt, value);
    out.push({ type, name, value });
  }
  return out;
}

function parseMatch(at: At): MatchSpec {
  const f = fields(at, MATCH, 'an HTTPRouteMatch');
  const match: MatchSpec = {
    path: f.has('path') ? parsePath(f.get('path')!.at) : { type: 'PathPrefix', value: '/' },
    headers: f.has('headers') ? parseValueMatches(f.get('headers')!.at, LIMITS.headers, true) : [],
    queryParams: f.has('queryParams') ? parseValueMatches(f.get('queryParams')!.at, LIMITS.queryParams, false) : [],
  };
  if (f.has('method')) {
    const mAt = f.get('method')!.at;
    const method = text(mAt, 16);
    if (!METHODS.has(method)) throw mAt.error(`must be one of ${[...METHODS].join(', ')}, not ${JSON.stringify(method)}`);
    match.method = method;
  }
  return match;
}

/** A `group` field: absent, `dflt`; the core group is "" (or `core`), the one text that may be empty. */
function apiGroup(entry: { at: At; node: Node | null } | undefined, dflt: string): string {
  if (!entry) return dflt;
  return isScalar(entry.node) && entry.node.value === '' ? '' : text(entry.at, 253);
}

function parseBackend(at: At, grammar: FilterGrammar = HTTP_FILTERS): BackendRefSpec {
  const f = fields(at, BACKEND, grammar === HTTP_FILTERS ? 'an HTTPBackendRef' : 'a GRPCBackendRef');
  const group = apiGroup(f.get('group'), '');
  const kind = f.has('kind') ? text(f.get('kind')!.at, 63) : 'Service';
  if (f.has('port')) integer(f.get('port')!.at, 1, 65535);
  if (f.has('namespace')) text(f.get('namespace')!.at, 253);
  if (!f.has('name')) throw at.error('name is required (a mesh service)');
  const nameAt = f.get('name')!.at;
  const weight = f.has('weight') ? integer(f.get('weight')!.at, 0, LIMITS.weight) : 1;
  if ((group !== '' && group !== 'core') || kind !== 'Service') {
    // Not a mesh service: the route stays, the share of requests it would take gets 500.
    const name = text(nameAt, 253);
    return { name, weight, unresolved: `backend ${JSON.stringify(name.slice(0, 100))} is a ${JSON.stringify(kind.slice(0, 63))} of group ${JSON.stringify(group.slice(0, 100))}, not a mesh service` };
  }
  const ref: BackendRefSpec = { name: text(nameAt, 253), weight };
  const own = f.get('filters');
  if (own && !(isSeq(own.node) && own.node.items.length === 0)) ref.filters = parseFilters(own.at, true, grammar);
  const bad = serviceNameProblem(ref.name);
  if (bad) throw nameAt.error(`not a mesh service name: ${bad}`);
  if (f.has('version')) {
    const vAt = f.get('version')!.at;
    ref.version = text(vAt, 256);
    const badVersion = versionProblem(ref.version);
    if (badVersion) throw vAt.error(`not a registry version: ${badVersion}`);
  }
  return ref;
}

function duration(at: At): number {
  const node = at.node;
  const raw = isScalar(node) && typeof node.value === 'string' ? node.value : undefined;
  const ms = raw === undefined ? undefined : parseGatewayDuration(raw);
  if (ms === undefined) throw at.error('must be a Gateway API duration such as 500ms, 10s or 1m30s');
  return ms;
}

/** A rule's `name`: a DNS subdomain. */
function ruleName(at: At): string {
  const name = text(at, 253);
  if (!DNS_NAME.test(name)) throw at.error(`${JSON.stringify(name)} is not a valid name (lower case letters, digits, - and .)`);
  return name;
}

function parseRule(at: At, route: string, index: number, line: number): RuleSpec {
  const f = fields(at, RULE, 'an HTTPRouteRule');
  const name = f.has('name') ? ruleName(f.get('name')!.at) : `${route}-${index}`;
  const matchList = f.has('matches') ? list(f.get('matches')!.at, LIMITS.matches).map(parseMatch) : [];
  const matches = matchList.length > 0 ? matchList : [{ path: { type: 'PathPrefix' as const, value: '/' }, headers: [], queryParams: [] }];
  const backendAts = f.has('backendRefs') ? list(f.get('backendRefs')!.at, LIMITS.backendRefs) : [];
  const backendRefs = backendAts.map((b) => parseBackend(b));
  const filters = f.has('filters') ? parseFilters(f.get('filters')!.at) : { mirrors: [] };
  const prefixed = (s: FiltersSpec) => s.rewrite?.path?.type === 'ReplacePrefixMatch' || s.redirect?.path?.type === 'ReplacePrefixMatch';
  const notPrefix = matches.some((m) => m.path.type !== 'PathPrefix');
  if (prefixed(filters) && notPrefix) throw f.get('filters')!.at.error('ReplacePrefixMatch needs every match of the rule to be a PathPrefix');
  backendRefs.forEach((b, i) => {
    if (!b.filters) return;
    const bAt = fields(backendAts[i]!, BACKEND, 'an HTTPBackendRef').get('filters')!.at;
    if (prefixed(b.filters) && notPrefix) throw bAt.error('ReplacePrefixMatch needs every match of the rule to be a PathPrefix');
    if (b.filters.rewrite?.path && filters.rewrite?.path) throw bAt.error("a URLRewrite's path is given on the rule too: give it on one of them");
    if (b.filters.redirect && filters.mirrors.length > 0) throw bAt.error('RequestRedirect answers the request itself: it cannot go with the rule\'s RequestMirror');
  });
  const rule: RuleSpec = { name, index, line, matches, backendRefs, filters };
  if (f.has('retry')) rule.retry = parseRetry(f.get('retry')!.at);
  if (f.has('fault')) rule.fault = parseFault(f.get('fault')!.at);
  if (f.has('sessionPersistence')) rule.session = parseSession(f.get('sessionPersistence')!.at, name);
  if (f.has('timeouts')) {
    const t = fields(f.get('timeouts')!.at, TIMEOUTS, 'HTTPRouteTimeouts');
    if (t.has('request')) rule.requestTimeoutMs = duration(t.get('request')!.at);
    if (t.has('backendRequest')) {
      const bAt = t.get('backendRequest')!.at;
      rule.backendRequestTimeoutMs = duration(bAt);
      if (rule.requestTimeoutMs && rule.backendRequestTimeoutMs > rule.requestTimeoutMs) throw bAt.error('must not be longer than timeouts.request');
    }
  }
  return rule;
}

/** A duration above 0s. */
function positiveDuration(at: At): number {
  const ms = duration(at);
  if (ms === 0) throw at.error('must be longer than 0s');
  return ms;
}

function parseSession(at: At, rule: string): SessionSpec {
  const f = fields(at, SESSION, 'a SessionPersistence');
  let type: SessionSpec['type'] = 'Cookie';
  if (f.has('type')) {
    const tAt = f.get('type')!.at;
    const t = text(tAt, 16);
    if (t !== 'Cookie' && t !== 'Header') throw tAt.error(`must be Cookie or Header, not ${JSON.stringify(t)}`);
    type = t;
  }
  const session: SessionSpec = { name: `session-${rule}`, type, lifetime: 'Session' };
  if (f.has('sessionName')) {
    const nAt = f.get('sessionName')!.at;
    const name = text(nAt, LIMITS.sessionName);
    if (!HEADER_NAME.test(name)) throw nAt.error(`${JSON.stringify(name)} is not a valid ${type === 'Cookie' ? 'cookie' : 'header'} name (letters, digits and !#$%&'*+-.^_\`|~)`);
    session.name = type === 'Header' ? sessionHeader(nAt, name) : name;
  }
  if (f.has('absoluteTimeout')) session.absoluteTimeoutMs = positiveDuration(f.get('absoluteTimeout')!.at);
  if (f.has('idleTimeout')) session.idleTimeoutMs = positiveDuration(f.get('idleTimeout')!.at);
  if (f.has('cookieConfig')) {
    const cAt = f.get('cookieConfig')!.at;
    if (type === 'Header') throw cAt.error('cookieConfig does not go with type Header');
    const c = fields(cAt, COOKIE_CONFIG, 'a CookieConfig');
    if (c.has('lifetimeType')) {
      const lAt = c.get('lifetimeType')!.at;
      const lifetime = text(lAt, 16);
      if (lifetime !== 'Session' && lifetime !== 'Permanent') throw lAt.error(`must be Session or Permanent, not ${JSON.stringify(lifetime)}`);
      session.lifetime = lifetime;
    }
    if (session.lifetime === 'Permanent' && session.absoluteTimeoutMs === undefined) throw cAt.error('absoluteTimeout is required with lifetimeType Permanent (it is the cookie\'s Max-Age)');
  }
  return session;
}

/** A Header session's name, lower case: a header the client may send and the answer may carry. */
function sessionHeader(at: At, name: string): string {
  const lower = name.toLowerCase();
  if (isHopByHop(lower) || ['host', 'content-length', 'cookie', 'set-cookie', 'content-type'].includes(lower)) throw at.error(`${name} cannot be a session header (a header of the request's framing or the connection, or a cookie header)`);
  const folded = foldHeaderName(lower);
  if (isEdgeSetHeader(folded) || isMeshHeaderName(folded)) throw at.error(`${name} cannot be a session header (a header the mesh sets or reads)`);
  return lower;
}

function percentage(at: At): number {
  const node = at.node;
  if (!isScalar(node) || typeof node.value !== 'number' || !Number.isFinite(node.value) || node.value < 0 || node.value > 100) throw at.error('must be a number from 0 to 100');
  return node.value;
}

function parseRetry(at: At): RetrySpec {
  const f = fields(at, RETRY, 'an HTTPRouteRetry');
  const retry: RetrySpec = { attempts: f.has('attempts') ? integer(f.get('attempts')!.at, 0, LIMITS.retryAttempts) : 1, codes: [] };
  if (f.has('codes')) {
    for (const c of list(f.get('codes')!.at, 32)) {
      const code = integer(c, 400, 599);
      if (!retry.codes.includes(code)) retry.codes.push(code);
    }
  }
  if (f.has('backoff')) {
    const bAt = f.get('backoff')!.at;
    const backoffMs = (retry.backoffMs = duration(bAt));
    if (backoffMs > LIMITS.retryBackoffMs) throw bAt.error(`must be at most ${LIMITS.retryBackoffMs / 1000}s`);
  }
  if (f.has('budget')) {
    const b = fields(f.get('budget')!.at, BUDGET, "mesh's retry budget");
    retry.budget = {
      percent: b.has('percent') ? percentage(b.get('percent')!.at) : 20,
      minConcurrency: b.has('min') ? integer(b.get('min')!.at, 0, 1_000_000) : 3,
    };
  }
  return retry;
}

function parseFault(at: At): FaultSpec {
  const f = fields(at, FAULT, "mesh's fault");
  const fault: FaultSpec = {};
  if (f.has('delay')) {
    const dAt = f.get('delay')!.at;
    const d = fields(dAt, FAULT_DELAY, 'a fault delay');
    if (!d.has('fixedDelay')) throw dAt.error('fixedDelay is required');
    if (!d.has('percentage')) throw dAt.error('percentage is required');
    const ms = duration(d.get('fixedDelay')!.at);
    if (ms > LIMITS.faultDelayMs) throw d.get('fixedDelay')!.at.error(`must be at most ${LIMITS.faultDelayMs / 1000}s`);
    fault.delay = { ms, percentage: percentage(d.get('percentage')!.at) };
  }
  if (f.has('abort')) {
    const aAt = f.get('abort')!.at;
    const a = fields(aAt, FAULT_ABORT, 'a fault abort');
    if (!a.has('httpStatus')) throw aAt.error('httpStatus is required');
    if (!a.has('percentage')) throw aAt.error('percentage is required');
    fault.abort = { status: integer(a.get('httpStatus')!.at, 400, 599), percentage: percentage(a.get('percentage')!.at) };
  }
  return fault;
}

/** A header a modifier may touch: not hop-by-hop (the connection's), not one only a mesh edge sets. */
function modifiableHeader(at: At): string {
  const name = text(at, 256);
  if (!HEADER_NAME.test(name)) throw at.error(`${JSON.stringify(name)} is not a valid header name`);
  const lower = name.toLowerCase();
  if (isHopByHop(lower) || lower === 'host' || lower === 'content-length') throw at.error(`${name} cannot be modified (a hop-by-hop header, or the request's framing; URLRewrite sets the host)`);
  // Compared as CGI-style backends read names (`_` as `-`): Mesh_Auth_Subject is Mesh-Auth-Subject to them.
  const folded = foldHeaderName(lower);
  if (isEdgeSetHeader(folded)) throw at.error(`${name} cannot be modified (only the mesh edge sets it)`);
  if (folded !== lower && isMeshHeaderName(folded)) throw at.error(`${name} cannot be modified (backends read it as ${folded}, a header the mesh sets or reads)`);
  return lower;
}

function headerValues(at: At): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const item of list(at, LIMITS.headers)) {
    const f = fields(item, HEADER_VALUE, 'an HTTPHeader');
    if (!f.has('name')) throw item.error('name is required');
    if (!f.has('value')) throw item.error('value is required');
    const name = modifiableHeader(f.get('name')!.at);
    const vAt = f.get('value')!.at;
    const value = isScalar(vAt.node) && vAt.node.value === '' ? '' : text(vAt);
    if (/[\r\n\0]/.test(value)) throw vAt.error('must not hold a line break or NUL');
    if (out.some(([n]) => n === name)) throw f.get('name')!.at.error(`${name} is named twice`);
    out.push([name, value]);
  }
  return out;
}

function parseHeaderModifier(at: At): HeaderModifierSpec {
  const f = fields(at, HEADER_MODIFIER, 'an HTTPHeaderFilter');
  return {
    set: f.has('set') ? headerValues(f.get('set')!.at) : [],
    add: f.has('add') ? headerValues(f.get('add')!.at) : [],
    remove: f.has('remove') ? list(f.get('remove')!.at, LIMITS.headers).map(modifiableHeader) : [],
  };
}

function parsePathModifier(at: At): { type: 'ReplacePrefixMatch' | 'ReplaceFullPath'; value: string } {
  const f = fields(at, PATH_MODIFIER, 'an HTTPPathModifier');
  if (!f.has('type')) throw at.error('type is required (ReplaceFullPath or ReplacePrefixMatch)');
  const tAt = f.get('type')!.at;
  const type = text(tAt);
  if (type !== 'ReplaceFullPath' && type !== 'ReplacePrefixMatch') throw tAt.error(`must be ReplaceFullPath or ReplacePrefixMatch, not ${JSON.stringify(type)}`);
  const key = type === 'ReplaceFullPath' ? 'replaceFullPath' : 'replacePrefixMatch';
  for (const k of f.keys()) if (k !== 'type' && k !== key) throw f.get(k)!.at.error(`${k} does not go with type ${type}`);
  if (!f.has(key)) throw at.error(`${key} is required`);
  const vAt = f.get(key)!.at;
  const value = text(vAt, 1024);
  if (!value.startsWith('/') || /[\s?#]/.test(value)) throw vAt.error('must be a path starting with / (no white space, ? or #)');
  const normal = normalizePath(value);
  if ('refused' in normal) throw vAt.error(`must be a path in normal form: ${normal.refused.replace(/^invalid path: /, '')}`);
  if (normal.path !== value) throw vAt.error(`must be a path in normal form: write ${JSON.stringify(normal.path)}`);
  return { type, value };
}

function hostnameField(at: At): string {
  const host = text(at, 253);
  if (!HOSTNAME.test(host) || host.startsWith('*')) throw at.error(`${JSON.stringify(host)} is not a hostname (lower case, no port)`);
  return host;
}

/** A list of strings of CORS (each at most `max` characters), `*` alone or not at all. */
function corsList(at: At, max: number, what: string, each: (item: At, value: string) => string): string[] | '*' {
  const out: string[] = [];
  const items = list(at, max);
  for (const item of items) {
    const value = text(item, 256);
    if (value === '*') {
      if (items.length > 1) throw item.error(`* allows every ${what}: give it alone, or list them`);
      return '*';
    }
    const v = each(item, value);
    if (out.includes(v)) throw item.error(`${JSON.stringify(value)} is listed twice`);
    out.push(v);
  }
  return out;
}

function corsHeaderName(item: At, value: string): string {
  if (!HEADER_NAME.test(value)) throw item.error(`${JSON.stringify(value)} is not a valid header name`);
  return value.toLowerCase();
}

function parseCors(at: At): RouteCorsSpec {
  const f = fields(at, CORS_FIELDS, 'an HTTPCORSFilter');
  const spec: RouteCorsSpec = { origins: [], credentials: false, methods: [], headers: [], expose: [], maxAgeSec: 5 };
  if (f.has('allowCredentials')) {
    const cAt = f.get('allowCredentials')!.at;
    if (!isScalar(cAt.node) || typeof cAt.node.value !== 'boolean') throw cAt.error('must be true or false');
    spec.credentials = cAt.node.value;
  }
  if (f.has('allowOrigins')) {
    const oAt = f.get('allowOrigins')!.at;
    const patterns: CorsOriginPattern[] = [];
    const origins = corsList(oAt, LIMITS.corsOrigins, 'origin', (item, value) => {
      const p = corsOriginPattern(value);
      if (!p) throw item.error(`${JSON.stringify(value)} is not an origin: use scheme://host[:port] (http or https, the host in lower case, optionally *. first), or * alone for any`);
      patterns.push(p);
      return value;
    });
    if (origins === '*' && spec.credentials) throw oAt.error('* with allowCredentials: true would let every site read answers made with its users\' cookies: list the origins');
    spec.origins = origins === '*' ? '*' : patterns;
  }
  if (f.has('allowMethods')) {
    spec.methods = corsList(f.get('allowMethods')!.at, LIMITS.corsMethods, 'method', (item, value) => {
      if (!METHODS.has(value)) throw item.error(`must be one of ${[...METHODS].join(', ')} or *, not ${JSON.stringify(value)}`);
      return value;
    });
  }
  if (f.has('allowHeaders')) spec.headers = corsList(f.get('allowHeaders')!.at, LIMITS.corsHeaders, 'header', corsHeaderName);
  if (f.has('exposeHeaders')) {
    const eAt = f.get('exposeHeaders')!.at;
    spec.expose = corsList(eAt, LIMITS.corsHeaders, 'header', corsHeaderName);
    if (spec.expose === '*' && spec.credentials) throw eAt.error('* cannot go with allowCredentials: true (browsers then read it as a header named *): list the headers');
  }
  if (f.has('maxAge')) spec.maxAgeSec = integer(f.get('maxAge')!.at, 1, LIMITS.corsMaxAgeSec);
  return spec;
}

function parseFilters(at: At, onBackend = false, grammar: FilterGrammar = HTTP_FILTERS): FiltersSpec {
  const out: FiltersSpec = { mirrors: [] };
  const seen = new Set<string>();
  for (const item of list(at, LIMITS.filters)) {
    const f = fields(item, grammar.fields, grammar.what);
    if (!f.has('type')) throw item.error('type is required');
    const tAt = f.get('type')!.at;
    const type = text(tAt, 64);
    const key = grammar.types[type];
    if (type === 'ExtensionRef' || type === 'ExternalAuth') throw tAt.error(`${type} is not supported`);
    if (onBackend && key && !grammar.backendTypes.has(type)) throw tAt.error(`${type} is not supported on a backendRef (put it on the rule)`);
    if (!key) throw tAt.error(`must be one of ${Object.keys(grammar.types).join(', ')}, not ${JSON.stringify(type)}`);
    for (const k of f.keys()) if (k !== 'type' && k !== key) throw f.get(k)!.at.error(`${k} does not go with type ${type}`);
    if (!f.has(key)) throw item.error(`${key} is required with type ${type}`);
    if (type !== 'RequestMirror' && seen.has(type)) throw tAt.error(`${type} is given twice`);
    seen.add(type);
    const vAt = f.get(key)!.at;
    switch (type) {
      case 'RequestHeaderModifier':
        out.requestHeaders = parseHeaderModifier(vAt);
        break;
      case 'ResponseHeaderModifier':
        out.responseHeaders = parseHeaderModifier(vAt);
        break;
      case 'URLRewrite': {
        const r = fields(vAt, REWRITE, 'an HTTPURLRewriteFilter');
        out.rewrite = {};
        if (r.has('hostname')) out.rewrite.hostname = hostnameField(r.get('hostname')!.at);
        if (r.has('path')) out.rewrite.path = parsePathModifier(r.get('path')!.at);
        break;
      }
      case 'RequestRedirect': {
        const r = fields(vAt, REDIRECT, 'an HTTPRequestRedirectFilter');
        const redirect: RedirectSpec = { statusCode: 302 };
        if (r.has('scheme')) {
          const sAt = r.get('scheme')!.at;
          const scheme = text(sAt, 8);
          if (scheme !== 'http' && scheme !== 'https') throw sAt.error(`must be http or https, not ${JSON.stringify(scheme)}`);
          redirect.scheme = scheme;
        }
        if (r.has('hostname')) redirect.hostname = hostnameField(r.get('hostname')!.at);
        if (r.has('port')) redirect.port = integer(r.get('port')!.at, 1, 65535);
        if (r.has('path')) redirect.path = parsePathModifier(r.get('path')!.at);
        if (r.has('statusCode')) {
          const sAt = r.get('statusCode')!.at;
          const code = integer(sAt, 300, 399);
          if (!(REDIRECT_STATUSES as readonly number[]).includes(code)) throw sAt.error(`must be ${REDIRECT_STATUSES.join(', ')}`);
          redirect.statusCode = code as RedirectStatus;
        }
        out.redirect = redirect;
        break;
      }
      case 'CORS':
        out.cors = parseCors(vAt);
        break;
      case 'RequestMirror': {
        const m = fields(vAt, MIRROR, 'an HTTPRequestMirrorFilter');
        if (!m.has('backendRef')) throw vAt.error('backendRef is required');
        if (m.has('percent') && m.has('fraction')) throw m.get('fraction')!.at.error('percent and fraction cannot both be given (one share of the requests)');
        const ref = fields(m.get('backendRef')!.at, MIRROR_REF, 'a BackendObjectReference');
        if (ref.has('version')) throw ref.get('version')!.at.error('a mirror goes to any node of the service (version is not supported here)');
        if (!ref.has('name')) throw m.get('backendRef')!.at.error('name is required (a mesh service)');
        const nAt = ref.get('name')!.at;
        const name = text(nAt, 253);
        const bad = serviceNameProblem(name);
        if (bad) throw nAt.error(`not a mesh service name: ${bad}`);
        if (out.mirrors.length >= LIMITS.mirrors) throw item.error(`more than ${LIMITS.mirrors} mirrors`);
        const mirror: MirrorSpec = { service: name };
        if (m.has('percent')) mirror.fraction = { numerator: integer(m.get('percent')!.at, 0, 100), denominator: 100 };
        if (m.has('fraction')) mirror.fraction = parseFraction(m.get('fraction')!.at);
        out.mirrors.push(mirror);
        break;
      }
    }
  }
  if (out.redirect && (out.rewrite || out.mirrors.length > 0 || out.requestHeaders)) throw at.error('RequestRedirect answers the request itself: it cannot go with URLRewrite, RequestHeaderModifier or RequestMirror');
  return out;
}

/** A mirror's `fraction`: numerator ≤ denominator, denominator above 0 (default 100). */
function parseFraction(at: At): { numerator: number; denominator: number } {
  const f = fields(at, FRACTION, 'a Fraction');
  if (!f.has('numerator')) throw at.error('numerator is required');
  const denominator = f.has('denominator') ? integer(f.get('denominator')!.at, 1, LIMITS.fractionDenominator) : 100;
  const nAt = f.get('numerator')!.at;
  const numerator = integer(nAt, 0, LIMITS.fractionDenominator);
  if (numerator > denominator) throw nAt.error(`must not be more than the denominator (${denominator})`);
  return { numerator, denominator };
}

/** metadata.name when it is a plain string, so that errors before it is checked can name the route. */
function peekName(node: Node | null | undefined): string | undefined {
  if (!isMap(node)) return undefined;
  const meta = node.get('metadata', true);
  const name = isMap(meta) ? meta.get('name') : undefined;
  return typeof name === 'string' && DNS_NAME.test(name) ? name : undefined;
}

/** The document's `apiVersion`, `kind` and `metadata.name`, checked; `kind` must be one of `kinds`. */
function header(bare: At, kinds: readonly string[]): { top: Map<string, { at: At; node: Node | null }>; name: string; m: Map<string, { at: At; node: Node | null }>; doc: At } {
  const peeked = peekName(bare.node);
  const peekedKind = peekKind(bare.node);
  const what = peekedKind === 'Gateway' || peekedKind === 'GRPCRoute' ? peekedKind : 'HTTPRoute';
  const doc = peeked === undefined ? bare : bare.named(`${what} ${peeked}`);
  const top = fields(doc, TOP, what === 'HTTPRoute' ? 'an HTTPRoute' : `a ${what}`);
  const apiVersion = top.get('apiVersion');
  if (!apiVersion) throw doc.error('apiVersion is required (gateway.networking.k8s.io/v1)');
  const version = text(apiVersion.at);
  // GRPCRoute was never v1beta1.
  if (!API_VERSIONS.has(version) || (what === 'GRPCRoute' && version !== 'gateway.networking.k8s.io/v1')) throw apiVersion.at.error(`must be gateway.networking.k8s.io/v1, not ${JSON.stringify(version)}`);
  const kind = top.get('kind');
  if (!kind) throw doc.error(`kind is required (${kinds.slice(0, -1).join(', ')} or ${kinds.at(-1)})`);
  const kindText = text(kind.at);
  if (!kinds.includes(kindText)) throw kind.at.error(`must be ${kinds.slice(0, -1).join(', ')} or ${kinds.at(-1)}, not ${JSON.stringify(kindText)}`);
  const meta = top.get('metadata');
  if (!meta) throw doc.error('metadata.name is required');
  const m = fields(meta.at, METADATA, 'ObjectMeta');
  if (!m.has('name')) throw meta.at.error('name is required');
  const nAt = m.get('name')!.at;
  const name = text(nAt, 253);
  if (!DNS_NAME.test(name)) throw nAt.error(`${JSON.stringify(name)} is not a valid name (lower case letters, digits, - and .)`);
  return { top, name, m, doc };
}

function peekKind(node: Node | null | undefined): string | undefined {
  if (!isMap(node)) return undefined;
  const kind = node.get('kind');
  return typeof kind === 'string' ? kind : undefined;
}

/** A hostname of `hostnames` or a listener's `hostname`. */
function hostname(h: At): string {
  const host = text(h, 253);
  if (!HOSTNAME.test(host)) throw h.error(`${JSON.stringify(host)} is not a hostname (lower case, optionally *. first; no port, no IP address)`);
  return host;
}

function parseParentRef(at: At): ParentRefSpec {
  const f = fields(at, PARENT_REF, 'a ParentReference');
  if (!f.has('name')) throw at.error('name is required (a Gateway of the file)');
  const ref: ParentRefSpec = {
    name: text(f.get('name')!.at, 253),
    group: apiGroup(f.get('group'), GATEWAY_GROUP),
    kind: f.has('kind') ? text(f.get('kind')!.at, 63) : 'Gateway',
  };
  if (f.has('namespace')) text(f.get('namespace')!.at, 63);
  if (f.has('sectionName')) {
    const sAt = f.get('sectionName')!.at;
    ref.sectionName = text(sAt, 253);
    if (!DNS_NAME.test(ref.sectionName)) throw sAt.error(`${JSON.stringify(ref.sectionName)} is not a valid listener name`);
  }
  if (f.has('port')) ref.port = integer(f.get('port')!.at, 1, 65535);
  return ref;
}

function parseRoute(bare: At): RouteSpec {
  const { top, name, m, doc } = header(bare, DOCUMENT_KINDS);
  const at = bare.named(`HTTPRoute ${name}`);
  const route: RouteSpec = { name, line: doc.line ?? 1, hostnames: [], rules: [], parentRefs: [] };
  if (m.has('namespace')) route.namespace = text(m.get('namespace')!.at, 63);
  const specEntry = top.get('spec');
  if (!specEntry) throw at.error('spec is required');
  const spec = fields(specEntry.at.named(at.route), SPEC, 'an HTTPRouteSpec');
  if (spec.has('hostnames')) for (const h of list(spec.get('hostnames')!.at, LIMITS.hostnames)) route.hostnames.push(hostname(h));
  if (spec.has('parentRefs')) route.parentRefs = list(spec.get('parentRefs')!.at, LIMITS.parentRefs).map(parseParentRef);
  if (spec.has('handler')) {
    const hAt = spec.get('handler')!.at;
    const handler = text(hAt, 16);
    if (!(ROUTE_HANDLERS as readonly string[]).includes(handler)) throw hAt.error(`must be ${ROUTE_HANDLERS.join(', ')}, not ${JSON.stringify(handler)}`);
    route.handler = handler as RouteHandler;
  }
  route.rules = parseRules(spec, at, name, route.line, parseRule);
  return route;
}

/** `spec.rules`: at least one, each parsed by `parse`, their names unique. */
function parseRules<R extends { name: string }>(spec: Map<string, { at: At }>, at: At, route: string, line: number, parse: (at: At, route: string, index: number, line: number) => R): R[] {
  const rules = spec.has('rules') ? list(spec.get('rules')!.at, LIMITS.rules) : [];
  if (rules.length === 0) throw (spec.get('rules')?.at ?? at).error('rules: at least one rule is needed');
  const names = new Set<string>();
  return rules.map((r, i) => {
    const rule = parse(r, route, i, r.line ?? line);
    if (names.has(rule.name)) throw r.error(`rule name ${JSON.stringify(rule.name)} is used twice`);
    names.add(rule.name);
    return rule;
  });
}

function parseGrpcMethod(at: At): GrpcMethodMatchSpec {
  const f = fields(at, GRPC_METHOD, 'a GRPCMethodMatch');
  const type = f.has('type') ? text(f.get('type')!.at) : 'Exact';
  if (type !== 'Exact' && type !== 'RegularExpression') throw f.get('type')!.at.error(`must be Exact or RegularExpression, not ${JSON.stringify(type)}`);
  if (!f.has('service') && !f.has('method')) throw at.error('service or method is required (one or both)');
  const out: GrpcMethodMatchSpec = { type };
  for (const key of ['service', 'method'] as const) {
    const entry = f.get(key);
    if (!entry) continue;
    const value = text(entry.at, 1024);
    if (type === 'RegularExpression') regex(entry.at, value);
    else if (!(key === 'service' ? GRPC_SERVICE_NAME : GRPC_METHOD_NAME).test(value)) {
      throw entry.at.error(`${JSON.stringify(value)} is not a gRPC ${key} name (${key === 'service' ? 'package.Service: letters, digits and _, parts joined by .' : 'letters, digits and _, not a digit first'})`);
    }
    out[key] = value;
  }
  return out;
}

function parseGrpcMatch(at: At): GrpcMatchSpec {
  const f = fields(at, GRPC_MATCH, 'a GRPCRouteMatch');
  const match: GrpcMatchSpec = { headers: f.has('headers') ? parseValueMatches(f.get('headers')!.at, LIMITS.headers, true, 'a GRPCHeaderMatch') : [] };
  if (f.has('method')) match.method = parseGrpcMethod(f.get('method')!.at);
  return match;
}

function parseGrpcRule(at: At, route: string, index: number, line: number): GrpcRuleSpec {
  const f = fields(at, GRPC_RULE, 'a GRPCRouteRule');
  if (f.has('sessionPersistence')) throw f.get('sessionPersistence')!.at.error('is not supported on a GRPCRoute (each call is balanced on its own)');
  const name = f.has('name') ? ruleName(f.get('name')!.at) : `${route}-${index}`;
  const matchList = f.has('matches') ? list(f.get('matches')!.at, LIMITS.matches).map(parseGrpcMatch) : [];
  const backendRefs = f.has('backendRefs') ? list(f.get('backendRefs')!.at, LIMITS.backendRefs).map((b) => parseBackend(b, GRPC_FILTERS)) : [];
  const filters = f.has('filters') ? parseFilters(f.get('filters')!.at, false, GRPC_FILTERS) : { mirrors: [] };
  return { name, index, line, matches: matchList.length > 0 ? matchList : [{ headers: [] }], backendRefs, filters };
}

function parseGrpcRoute(bare: At): GrpcRouteSpec {
  const { top, name, m, doc } = header(bare, DOCUMENT_KINDS);
  const at = bare.named(`GRPCRoute ${name}`);
  const route: GrpcRouteSpec = { name, line: doc.line ?? 1, hostnames: [], rules: [], parentRefs: [] };
  if (m.has('namespace')) route.namespace = text(m.get('namespace')!.at, 63);
  const specEntry = top.get('spec');
  if (!specEntry) throw at.error('spec is required');
  const spec = fields(specEntry.at.named(at.route), GRPC_SPEC, 'a GRPCRouteSpec');
  if (spec.has('hostnames')) for (const h of list(spec.get('hostnames')!.at, LIMITS.hostnames)) route.hostnames.push(hostname(h));
  if (spec.has('parentRefs')) route.parentRefs = list(spec.get('parentRefs')!.at, LIMITS.parentRefs).map(parseParentRef);
  route.rules = parseRules(spec, at, name, route.line, parseGrpcRule);
  return route;
}

/** A listener's `tls`: Terminate with the PEM files of `options` (a Secret cannot be read off-cluster). */
function parseListenerTls(at: At, file: string): { certFile: string; keyFile: string } {
  const f = fields(at, LISTENER_TLS, 'a GatewayTLSConfig');
  if (f.has('mode')) {
    const mAt = f.get('mode')!.at;
    const mode = text(mAt, 32);
    if (mode !== 'Terminate') throw mAt.error(`${JSON.stringify(mode)} is not served: mesh terminates TLS (Terminate)`);
  }
  const refs = f.get('certificateRefs');
  if (refs && !(isSeq(refs.node) && refs.node.items.length === 0)) {
    throw refs.at.error(`a certificateRef names a Kubernetes Secret, which mesh cannot read: give the PEM files in tls.options ${LISTENER_CERT_OPTION} and ${LISTENER_KEY_OPTION}`);
  }
  if (f.has('frontendValidation')) throw f.get('frontendValidation')!.at.error('client certificate validation is not supported yet');
  const optionsAt = f.get('options')?.at;
  const options = optionsAt ? fields(optionsAt, new Set([LISTENER_CERT_OPTION, LISTENER_KEY_OPTION]), 'tls.options (mesh reads its two file options)') : new Map();
  const path = (key: string): string => {
    const entry = options.get(key);
    if (!entry) throw (optionsAt ?? at).error(`an HTTPS listener needs tls.options ${LISTENER_CERT_OPTION} and ${LISTENER_KEY_OPTION} (PEM files)`);
    return resolve(dirname(file), text(entry.at));
  };
  return { certFile: path(LISTENER_CERT_OPTION), keyFile: path(LISTENER_KEY_OPTION) };
}

function parseListener(at: At, file: string): ListenerSpec {
  const f = fields(at, LISTENER, 'a Listener');
  for (const required of ['name', 'port', 'protocol']) if (!f.has(required)) throw at.error(`${required} is required`);
  const nAt = f.get('name')!.at;
  const name = text(nAt, 253);
  if (!DNS_NAME.test(name)) throw nAt.error(`${JSON.stringify(name)} is not a valid name (lower case letters, digits, - and .)`);
  const pAt = f.get('protocol')!.at;
  const protocol = text(pAt, 64);
  if (protocol !== 'HTTP' && protocol !== 'HTTPS') throw pAt.error(`${JSON.stringify(protocol)} is not served: mesh api serves HTTP and HTTPS listeners`);
  const listener: ListenerSpec = { name, line: at.line ?? 1, port: integer(f.get('port')!.at, 1, 65535), protocol, kinds: ['HTTPRoute', 'GRPCRoute'] };
  if (f.has('hostname')) listener.hostname = hostname(f.get('hostname')!.at);
  const tls = f.get('tls');
  if (protocol === 'HTTPS') {
    if (!tls) throw at.error(`an HTTPS listener needs tls (with options ${LISTENER_CERT_OPTION} and ${LISTENER_KEY_OPTION})`);
    listener.tls = parseListenerTls(tls.at, file);
  } else if (tls) throw tls.at.error('an HTTP listener has no tls (protocol HTTPS terminates TLS)');
  const allowed = f.get('allowedRoutes');
  if (allowed) {
    const a = fields(allowed.at, ALLOWED_ROUTES, 'AllowedRoutes');
    const kinds = a.get('kinds');
    if (kinds && !(isSeq(kinds.node) && kinds.node.items.length === 0)) {
      listener.kinds = list(kinds.at, 8).map((k) => {
        const g = fields(k, ROUTE_GROUP_KIND, 'a RouteGroupKind');
        if (!g.has('kind')) throw k.error('kind is required');
        const g2 = apiGroup(g.get('group'), GATEWAY_GROUP);
        const kind = text(g.get('kind')!.at, 63);
        return g2 === GATEWAY_GROUP ? kind : `${g2}/${kind}`;
      });
    }
  }
  return listener;
}

function parseGateway(bare: At, file: string): GatewaySpec {
  const { top, name, doc } = header(bare, DOCUMENT_KINDS);
  const at = bare.named(`Gateway ${name}`);
  const specEntry = top.get('spec');
  if (!specEntry) throw at.error('spec is required');
  const spec = fields(specEntry.at.named(at.route), GATEWAY_SPEC, 'a GatewaySpec');
  const listenerAts = spec.has('listeners') ? list(spec.get('listeners')!.at, LIMITS.listeners) : [];
  if (listenerAts.length === 0) throw (spec.get('listeners')?.at ?? at).error('listeners: at least one listener is needed');
  const listeners: ListenerSpec[] = [];
  for (const lAt of listenerAts) {
    const listener = parseListener(lAt, file);
    if (listeners.some((l) => l.name === listener.name)) throw lAt.error(`listener name ${JSON.stringify(listener.name)} is used twice`);
    listeners.push(listener);
  }
  return { name, line: doc.line ?? 1, listeners };
}

/**
 * Listeners of every Gateway of the file that share a port share its server: they must agree on
 * the protocol, and no two may serve the same hostname (or both none) there.
 */
function checkListenerPorts(file: string, gateways: readonly GatewaySpec[]): void {
  const byPort = new Map<number, Array<{ gateway: string; listener: ListenerSpec }>>();
  for (const gateway of gateways) {
    for (const listener of gateway.listeners) {
      const same = byPort.get(listener.port) ?? [];
      const where = `Gateway ${gateway.name} listener ${listener.name}`;
      for (const other of same) {
        const them = `Gateway ${other.gateway} listener ${other.listener.name}`;
        if (other.listener.protocol !== listener.protocol) throw new RouteFileError(file, listener.line, `port ${listener.port} is ${other.listener.protocol} for ${them} (line ${other.listener.line}): listeners on one port share one protocol`, where);
        if (other.listener.hostname === listener.hostname) throw new RouteFileError(file, listener.line, `port ${listener.port} and ${listener.hostname === undefined ? 'no hostname' : `hostname ${listener.hostname}`} are served by ${them} already (line ${other.listener.line})`, where);
      }
      same.push({ gateway: gateway.name, listener });
      byPort.set(listener.port, same);
    }
  }
}

/** Parses a route file's text; throws a RouteFileError naming the file and line. */
export function parseRouteFile(textContent: string, file: string): RouteFile {
  const docs = parseConfigAll(textContent, { file, style: ROUTE_FILE_ERRORS, maxBytes: MAX_ROUTE_FILE_BYTES });
  const routes: RouteSpec[] = [];
  const gateways: GatewaySpec[] = [];
  const grpcRoutes: GrpcRouteSpec[] = [];
  const seen = new Map<string, number>();
  for (const doc of docs) {
    const contents = doc.contents;
    if (contents === null || (isScalar(contents) && contents.value === null)) continue; // an empty document (`---` at the end)
    if (peekKind(contents) === 'Gateway') {
      if (gateways.length >= LIMITS.gateways) throw new RouteFileError(file, undefined, `more than ${LIMITS.gateways} Gateways`);
      const gateway = parseGateway(new At(doc, '', '', contents, 1), file);
      const before = gateways.find((g) => g.name === gateway.name);
      if (before) throw new RouteFileError(file, gateway.line, `Gateway ${gateway.name}: the name is used twice (first at line ${before.line})`);
      gateways.push(gateway);
      continue;
    }
    if (routes.length + grpcRoutes.length >= LIMITS.routes) throw new RouteFileError(file, undefined, `more than ${LIMITS.routes} routes`);
    if (peekKind(contents) === 'GRPCRoute') {
      const route = parseGrpcRoute(new At(doc, '', '', contents, 1));
      const before = grpcRoutes.find((r) => r.name === route.name);
      if (before) throw new RouteFileError(file, route.line, `GRPCRoute ${route.name}: the name is used twice (first at line ${before.line})`);
      grpcRoutes.push(route);
      continue;
    }
    const route = parseRoute(new At(doc, '', '', contents, 1));
    const before = seen.get(route.name);
    if (before !== undefined) throw new RouteFileError(file, route.line, `HTTPRoute ${route.name}: the name is used twice (first at line ${before})`);
    seen.set(route.name, route.line);
    routes.push(route);
  }
  checkListenerPorts(file, gateways);
  return { file, version: createHash('sha256').update(textContent).digest('hex').slice(0, 16), routes, grpcRoutes, gateways };
}

/**
 * What only a proxy route does: answer header changes, a new Host, mirrors, sessions (the rpc and
 * api handlers call methods through the framework client, whose answers and hosts are its own). Throws a RouteFileError for the first rule of a route whose
 * handler (its own, else `defaultHandler`) is not proxy and that asks for one of these.
 */
export function checkHandlers(parsed: RouteFile, defaultHandler: RouteHandler): void {
  for (const route of parsed.routes) {
    const handler = route.handler ?? defaultHandler;
    if (handler === 'proxy') continue;
    for (const rule of route.rules) {
      if (rule.session) {
        throw new RouteFileError(
          parsed.file,
          rule.line,
          `HTTPRoute ${route.name} spec.rules[${rule.index}].sessionPersistence needs a proxy route (handler: proxy); this route's handler is ${handler}, whose calls go through the framework client: it picks a node per call and gives no answer header for the session's token`,
        );
      }
      const proxyOnly = (f: FiltersSpec, where: string) =>
        f.responseHeaders ? `${where}filters: a ResponseHeaderModifier` : f.rewrite?.hostname ? `${where}filters: a URLRewrite's hostname` : f.mirrors.length > 0 ? `${where}filters: a RequestMirror` : undefined;
      let what = proxyOnly(rule.filters, '');
      rule.backendRefs.forEach((b, i) => (what ??= b.filters && proxyOnly(b.filters, `backendRefs[${i}].`)));
      if (what) throw new RouteFileError(parsed.file, rule.line, `HTTPRoute ${route.name} spec.rules[${rule.index}].${what} needs a proxy route (handler: proxy); this route's handler is ${handler}`);
    }
  }
}

/** Largest route file read (the config reader's bound). */
export const MAX_ROUTE_FILE_BYTES = MAX_CONFIG_FILE_BYTES;

/** Reads and parses a route file; throws a RouteFileError (a file that cannot be read included). */
export function loadRouteFile(file: string): RouteFile {
  return parseRouteFile(readConfigFile(file, ROUTE_FILE_ERRORS, MAX_ROUTE_FILE_BYTES), file);
}
