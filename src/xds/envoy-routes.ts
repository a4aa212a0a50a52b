/**
 * A route file (src/edge/routes/file.ts: Gateway API HTTPRoute documents) as Envoy resources: an
 * HTTP Listener whose HttpConnectionManager holds the RouteConfiguration (or, with `rds`, takes
 * it over ADS by name), and that RouteConfiguration. `mesh envoy bootstrap --routes` puts the
 * listener in the bootstrap; the clusters and endpoints it names come from mesh xds. Pure: plain objects in the shape of Envoy v3 messages, as
 * resources.ts builds them (field names of Envoy's .proto files, Anys with "@type").
 *
 * Matching as mesh's own table matches (src/edge/routes/table.ts, `inOrder()`): Envoy picks a
 * virtual host by the Host (exact domains, then wildcards, the longest first, then `*`) and then
 * takes its first route that matches. So each hostname of the file is one virtual host holding,
 * in mesh's precedence order, its own rules, then those of the wildcards that cover it, then those
 * of the routes without hostnames; `*` holds the routes without hostnames. The port of the Host is
 * ignored (`strip_any_host_port`), as mesh ignores it, and paths are matched in their normal form
 * (dot segments removed, escaped slashes refused), as mesh matches them.
 *
 * Each rule and match becomes a Route:
 *   path Exact → `path`; PathPrefix → `path_separated_prefix` (element by element, `/` → `prefix`);
 *   RegularExpression → `safe_regex` (RE2, the whole path, as mesh); method → a `:method` header
 *   match; headers and query parameters → `headers` and `query_parameters` (exact or safe_regex);
 *   backendRefs → `cluster` (one backend, no version) or `weighted_clusters` (the weights as
 *   written; a backend's `version` as the `metadata_match` `envoy.lb` `version`, which Envoy's
 *   subset load balancer matches on the endpoints' metadata: resources.ts VERSION_SUBSETS); every weight 0 → a 500 answer, as mesh;
 *   `timeouts.request` → `timeout`; `timeouts.backendRequest` → `retry_policy.per_try_timeout`;
 *   `retry` → `retry_policy` (`attempts` → `num_retries`, `codes` → `retriable_status_codes`,
 *   `backoff` → `retry_back_off`; connect failures and resets are always retried);
 *   filters: header modifiers → `request_headers_to_*` / `response_headers_to_*`, URLRewrite →
 *   `host_rewrite_literal` and `prefix_rewrite` / `regex_rewrite`, RequestRedirect → `redirect`,
 *   RequestMirror → `request_mirror_policies`, a backend's header modifiers → its weighted cluster's (the
 *   route configuration then has `most_specific_header_mutations_wins`: the backend's last, as mesh);
 *   mesh's `fault` → the fault filter's per-route
 *   HTTPFault (the listener then has the fault filter before the router).
 * Envoy forwards HTTP: a route whose handler is `api` or `rpc` (mesh's own HTTP → RPC mapping)
 * refuses the file, as `mesh proxy` does; so do the CORS filter, a rule's sessionPersistence and a
 * backend's URLRewrite or RequestRedirect, and GRPCRoute documents (not translated). What Envoy does differently is said in `warnings`: a
 * retry `budget` (Envoy's is the cluster's circuit breaker, resources.ts), and a backend's
 * `version` when the clusters have no version subsets (`versionSubsets: false`; mesh xds's have).
 */
import type { HostPort } from '../base/util/address.js';
import { escapeRegExp } from '../base/util/regex.js';
import { RouteFileError, type FiltersSpec, type MatchSpec, type RedirectStatus, type RouteFile, type RouteSpec, type RuleSpec, type ValueMatchSpec } from '../edge/routes/file.js';
import { CompiledRoutes } from '../edge/routes/table.js';
import { ADS_CONFIG_SOURCE, duration, endpointVersionMetadata, HTTP_CONNECTION_MANAGER_TYPE_URL, ROUTER_TYPE_URL, type Message } from './resources.js';

const FAULT_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault';
const FAULT_FILTER = 'envoy.filters.http.fault';
const ADS = ADS_CONFIG_SOURCE;

export interface EnvoyRoutesOptions {
  /** Where Envoy listens for HTTP. */
  address: HostPort;
  /** The Listener's name; default `mesh_http`. */
  listenerName?: string;
  /** The RouteConfiguration's name; default `mesh_routes`. */
  routeConfigName?: string;
  /**
   * True when the clusters have subsets by version (resources.ts VERSION_SUBSETS, as mesh xds
   * serves them), so that a backend's version is honoured; false says so in `warnings`.
   */
  versionSubsets?: boolean;
  /** Take the routes over RDS (ADS) instead of inline in the listener; default false. */
  rds?: boolean;
  /**
   * `object` (default): durations as {seconds, nanos} and wrappers as {value}, as resources.ts
   * builds what mesh xds encodes; `json`: proto3 JSON ("2.5s", plain numbers), as a bootstrap
   * file has them (Envoy refuses the object form there).
   */
  form?: 'object' | 'json';
}

/** How durations and wrapped numbers are written (EnvoyRoutesOptions.form). */
interface Shape {
  form: 'object' | 'json';
  duration(ms: number): unknown;
  u32(n: number): unknown;
  bool(b: boolean): unknown;
}

const OBJECT_SHAPE: Shape = { form: 'object', duration, u32: (n) => ({ value: n }), bool: (b) => ({ value: b }) };
const JSON_SHAPE: Shape = { form: 'json', duration: durationJson, u32: (n) => n, bool: (b) => b };

/** Milliseconds as a proto3 JSON Duration: 2500 → "2.5s", 100 → "0.1s". */
export function durationJson(ms: number): string {
  const ns = BigInt(Math.round(ms * 1e6));
  const seconds = ns / 1_000_000_000n;
  const frac = (ns % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '');
  return `${seconds}${frac ? `.${frac}` : ''}s`;
}

export interface EnvoyRoutes {
  listener: Message;
  routeConfiguration: Message;
  /** What Envoy does differently from mesh with this file, one line each (route and rule named). */
  warnings: string[];
}

export function envoyRoutes(file: RouteFile, o: EnvoyRoutesOptions): EnvoyRoutes {
  const listenerName = o.listenerName ?? 'mesh_http';
  const routeConfigName = o.routeConfigName ?? 'mesh_routes';
  const warnings: string[] = [];
  const shape = o.form === 'json' ? JSON_SHAPE : OBJECT_SHAPE;
  const grpc = file.grpcRoutes[0];
  if (grpc) throw new RouteFileError(file.file, grpc.line, 'is not translated for Envoy (mesh api, mesh sidecar and mesh proxy serve GRPCRoute documents)', `GRPCRoute ${grpc.name}`);
  for (const r of file.routes) {
    if (r.handler !== undefined && r.handler !== 'proxy') throw new RouteFileError(file.file, r.line, `HTTPRoute ${r.name} spec.handler: Envoy forwards HTTP only: use proxy (or leave it out), not ${r.handler}`);
    for (const rule of r.rules) {
      const untranslated = rule.filters.cors
        ? 'filters: CORS'
        : rule.session
          ? 'sessionPersistence'
          : rule.backendRefs.map((b, i) => (b.filters?.rewrite || b.filters?.redirect ? `backendRefs[${i}].filters: a backend's ${b.filters.rewrite ? 'URLRewrite' : 'RequestRedirect'}` : undefined)).find((w) => w);
      if (untranslated) throw new RouteFileError(file.file, rule.line, `HTTPRoute ${r.name} spec.rules[${rule.index}].${untranslated} is not translated for Envoy (mesh api, mesh sidecar and mesh proxy serve it)`);
      if (rule.retry?.budget) warnings.push(`HTTPRoute ${r.name} rule ${rule.name}: retry.budget is not per route in Envoy (its retry budget is the cluster's, from mesh's cluster settings)`);
      const versioned = rule.backendRefs.filter((b) => b.version !== undefined);
      if (versioned.length > 0 && !o.versionSubsets) warnings.push(`HTTPRoute ${r.name} rule ${rule.name}: backendRefs name versions (${versioned.map((b) => `${b.name} ${b.version}`).join(', ')}), but the clusters have no version subsets: Envoy sends to any node of the service`);
    }
  }
  const entries = new CompiledRoutes(file).inOrder();
  const hostnames = [...new Set(entries.map((e) => e.hostname).filter((h): h is string => h !== undefined))];
  const virtualHosts = [...hostnames, undefined].map((domain) => {
    // A rule listed under several hostnames that cover this one is tried once, at its first place.
    const seen = new Set<MatchSpec>();
    const covered = entries.filter((e) => covers(e.hostname, domain) && !seen.has(e.match) && seen.add(e.match));
    return { name: domain ?? 'any', domains: [domain ?? '*'], routes: covered.map((e) => route(e.route, e.rule, e.match, shape)) };
  });
  const routeConfiguration: Message = { name: routeConfigName, virtual_hosts: virtualHosts.filter((v) => v.routes.length > 0 || v.domains[0] === '*') };
  // A backend's header modifiers apply after its rule's, as mesh applies them (Envoy's default is the route's last).
  if (file.routes.some((r) => r.rules.some((rule) => rule.backendRefs.some((b) => b.filters)))) routeConfiguration.most_specific_header_mutations_wins = true;
  const faults = entries.some((e) => e.rule.fault);
  const httpFilters: Message[] = [];
  if (faults) httpFilters.push({ name: FAULT_FILTER, typed_config: { '@type': FAULT_TYPE_URL } });
  httpFilters.push({ name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER_TYPE_URL } });
  const listener: Message = {
    name: listenerName,
    address: { socket_address: { address: o.address.host, port_value: o.address.port } },
    filter_chains: [
      {
        filters: [
          {
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': HTTP_CONNECTION_MANAGER_TYPE_URL,
              stat_prefix: listenerName,
              strip_any_host_port: true,
              // Paths as mesh matches them: dot segments removed, escaped slashes refused (mesh refuses `//` too; Envoy merges it).
              normalize_path: shape.bool(true),
              merge_slashes: true,
              path_with_escaped_slashes_action: 'REJECT_REQUEST',
              ...(o.rds ? { rds: { config_source: ADS, route_config_name: routeConfigName } } : { route_config: routeConfiguration }),
              http_filters: httpFilters,
            },
          },
        ],
      },
    ],
  };
  return { listener, routeConfiguration, warnings };
}

/** True when a request for `domain` (a virtual host's; undefined: `*`) may match an entry of `hostname`. */
function covers(hostname: string | undefined, domain: string | undefined): boolean {
  if (hostname === undefined) return true;
  if (domain === undefined) return false;
  if (hostname === domain) return true;
  if (!hostname.startsWith('*.')) return false;
  const suffix = hostname.slice(1);
  const name = domain.startsWith('*.') ? domain.slice(1) : domain;
  return name.length > suffix.length && name.endsWith(suffix);
}

/** A rule's (or a backend's: a ClusterWeight's) header modifiers, on `out`. */
function headerModifiers(f: FiltersSpec, out: Message): Message {
  if (f.requestHeaders) {
    const add = headersToAdd(f.requestHeaders.set, f.requestHeaders.add);
    if (add.length) out.request_headers_to_add = add;
    if (f.requestHeaders.remove.length) out.request_headers_to_remove = f.requestHeaders.remove;
  }
  if (f.responseHeaders) {
    const add = headersToAdd(f.responseHeaders.set, f.responseHeaders.add);
    if (add.length) out.response_headers_to_add = add;
    if (f.responseHeaders.remove.length) out.response_headers_to_remove = f.responseHeaders.remove;
  }
  return out;
}

function route(r: RouteSpec, rule: RuleSpec, m: MatchSpec, shape: Shape): Message {
  const out: Message = { name: `${r.name}/${rule.name}`, match: routeMatch(m) };
  const f = rule.filters;
  headerModifiers(f, out);
  if (rule.fault) out.typed_per_filter_config = { [FAULT_FILTER]: fault(rule, shape) };
  if (f.redirect) {
    const d = f.redirect;
    const redirect: Message = { response_code: REDIRECT_CODES[d.statusCode] };
    if (d.scheme) redirect.scheme_redirect = d.scheme;
    if (d.hostname) redirect.host_redirect = d.hostname;
    if (d.port !== undefined) redirect.port_redirect = d.port;
    if (d.path) Object.assign(redirect, pathRewrite(d.path, m, 'path_redirect'));
    out.redirect = redirect;
    return out;
  }
  const live = rule.backendRefs.filter((b) => b.weight > 0);
  if (live.length === 0) {
    out.direct_response = { status: 500 };
    return out;
  }
  const action: Message = {};
  if (rule.backendRefs.length === 1 && rule.backendRefs[0]!.version === undefined && !rule.backendRefs[0]!.filters) action.cluster = rule.backendRefs[0]!.name;
  else {
    action.weighted_clusters = {
      clusters: live.map((b) => ({
        name: b.name,
        weight: shape.u32(b.weight),
        ...(b.version !== undefined ? { metadata_match: endpointVersionMetadata(b.version, shape.form) } : {}),
        // A backend's own header modifiers, after the route's (Envoy applies a cluster's first, then the route's: the same when they touch other names).
        ...(b.filters ? headerModifiers(b.filters, {}) : {}),
      })),
      // Deprecated in v3 (recent Envoys sum the weights), but older ones take 100 when it is unset
      // and refuse weights that do not add up to it.
      total_weight: shape.u32(live.reduce((sum, b) => sum + b.weight, 0)),
    };
  }
  if (rule.requestTimeoutMs !== undefined) action.timeout = shape.duration(rule.requestTimeoutMs);
  const retry = retryPolicy(rule, shape);
  if (retry) action.retry_policy = retry;
  if (f.mirrors.length) {
    action.request_mirror_policies = f.mirrors.map((m) =>
      m.fraction
        ? { cluster: m.service, runtime_fraction: { default_value: { numerator: Math.round((m.fraction.numerator / m.fraction.denominator) * 1_000_000), denominator: 'MILLION' } } }
        : { cluster: m.service },
    );
  }
  if (f.rewrite?.hostname) action.host_rewrite_literal = f.rewrite.hostname;
  if (f.rewrite?.path) Object.assign(action, pathRewrite(f.rewrite.path, m, undefined));
  out.route = action;
  return out;
}

function routeMatch(m: MatchSpec): Message {
  const out: Message = {};
  const { type, value } = m.path;
  if (type === 'Exact') out.path = value;
  else if (type === 'RegularExpression') out.safe_regex = { regex: value };
  else {
    const prefix = value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
    if (prefix === '/') out.prefix = '/';
    else out.path_separated_prefix = prefix;
  }
  const headers = m.headers.map((h) => ({ name: h.name, string_match: stringMatch(h) }));
  if (m.method) headers.unshift({ name: ':method', string_match: { exact: m.method } });
  if (headers.length) out.headers = headers;
  if (m.queryParams.length) out.query_parameters = m.queryParams.map((q) => ({ name: q.name, string_match: stringMatch(q) }));
  return out;
}

function stringMatch(v: ValueMatchSpec): Message {
  return v.type === 'Exact' ? { exact: v.value } : { safe_regex: { regex: v.value } };
}

function headersToAdd(set: Array<[string, string]>, add: Array<[string, string]>): Message[] {
  return [
    ...set.map(([key, value]) => ({ header: { key, value }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' })),
    ...add.map(([key, value]) => ({ header: { key, value }, append_action: 'APPEND_IF_EXISTS_OR_ADD' })),
  ];
}

/** Envoy's RedirectAction.response_code of each Gateway API redirect status. */
const REDIRECT_CODES: Record<RedirectStatus, string> = { 301: 'MOVED_PERMANENTLY', 302: 'FOUND', 303: 'SEE_OTHER', 307: 'TEMPORARY_REDIRECT', 308: 'PERMANENT_REDIRECT' };

/**
 * A URLRewrite or redirect path: ReplaceFullPath replaces the whole path; ReplacePrefixMatch
 * replaces the matched prefix element by element (`/old` → `/new`: /old/x → /new/x; → `/`:
 * /old/x → /x), which Envoy's prefix_rewrite does except when the new prefix is `/`.
 */
function pathRewrite(p: { type: 'ReplacePrefixMatch' | 'ReplaceFullPath'; value: string }, m: MatchSpec, fullField: 'path_redirect' | undefined): Message {
  if (p.type === 'ReplaceFullPath') return fullField ? { [fullField]: p.value } : { regex_rewrite: { pattern: { regex: '^.*$' }, substitution: p.value } };
  const matched = m.path.type === 'PathPrefix' ? m.path.value.replace(/(.)\/$/, '$1') : m.path.value;
  if (p.value === '/' && matched !== '/') return { regex_rewrite: { pattern: { regex: `^${escapeRegExp(matched)}/*` }, substitution: '/' } };
  return { prefix_rewrite: p.value };
}

function retryPolicy(rule: RuleSpec, shape: Shape): Message | undefined {
  const r = rule.retry;
  if (!r && rule.backendRequestTimeoutMs === undefined) return undefined;
  const policy: Message = {};
  if (r) {
    policy.retry_on = ['connect-failure', 'refused-stream', 'reset', ...(r.codes.length ? ['retriable-status-codes'] : [])].join(',');
    policy.num_retries = shape.u32(r.attempts);
    if (r.codes.length) policy.retriable_status_codes = r.codes;
    if (r.backoffMs !== undefined && r.backoffMs > 0) policy.retry_back_off = { base_interval: shape.duration(r.backoffMs) };
  } else policy.num_retries = shape.u32(0);
  if (rule.backendRequestTimeoutMs !== undefined && rule.backendRequestTimeoutMs > 0) policy.per_try_timeout = shape.duration(rule.backendRequestTimeoutMs);
  return policy;
}

function fault(rule: RuleSpec, shape: Shape): Message {
  const f = rule.fault!;
  const out: Message = { '@type': FAULT_TYPE_URL };
  if (f.delay && f.delay.ms > 0) out.delay = { fixed_delay: shape.duration(f.delay.ms), percentage: percent(f.delay.percentage) };
  if (f.abort) out.abort = { http_status: f.abort.status, percentage: percent(f.abort.percentage) };
  return out;
}

/** A percentage (0 to 100, fractions allowed) as a FractionalPercent per million. */
function percent(p: number): Message {
  return { numerator: Math.round(p * 10_000), denominator: 'MILLION' };
}
