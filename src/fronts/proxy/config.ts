/**
 * The configuration file of `mesh proxy -c FILE` (docs/proxy.md): listeners with ordered routes,
 * and static clusters. YAML 1.2 (so JSON too). Everything is checked at start-up; a problem is a
 * ProxyConfigError naming the file, the line and column when known, and the field
 * (`listeners[0].routes[1].cluster`). Unknown keys are errors, never ignored.
 */
import { dirname, resolve } from 'node:path';
import { ConfigFileError, fieldName, parseConfig, readConfigFile, type ConfigErrorStyle } from '../../base/config/reader.js';
import { parseDuration } from '../../base/util/duration.js';
import { formatAddress, parseAddress, tryParseAddress } from '../../base/util/address.js';
import { parseAdminAddress } from '../../admin/server.js';
import {
  resolveSettings,
  type CircuitBreakersConfig,
  type HealthCheckConfig,
  type PriorityBreakersConfig,
  type OutlierDetectionConfig,
  type StaticClusterConfig,
  type StaticHostConfig,
} from '../../core/upstream/config.js';
import type { CircuitBreakerThresholds, LbPolicy } from '../../core/upstream/types.js';
import { LB_POLICIES, OPTIONS } from '../../base/options/schema.js';
import { compilePathRegex } from '../../base/util/regex.js';
import { exactPath, prefixPath, regexPath, type PathMatch } from '../../edge/routes/match.js';
import type { RetryBudgetConfig } from '../../core/upstream/retry-budget.js';

/** The admin interface of `mesh proxy` unless the file or --admin_address says otherwise. */
export const PROXY_ADMIN_ADDRESS = '127.0.0.1:9903';

export type MatchKind = 'prefix' | 'path' | 'regex';

export interface RouteConfig {
  match: { kind: MatchKind; value: string };
  /** A static cluster of the file; exactly one of cluster and service is set. */
  cluster?: string;
  /** A registry service (dynamic discovery). */
  service?: string;
  /** Replaces the matched prefix (prefix match) or the whole path (path match). */
  prefixRewrite?: string;
  /** The path compiled in the edge's one route model (src/edge/routes/match.ts): what the listener's RouteMatcher indexes and tests. */
  path: PathMatch;
  /** True when the route matches this path (the URL path without the query): `path.test`. */
  matches: (path: string) => boolean;
  /** The route as admin /routes shows it: the file's own keys. */
  dump: Record<string, unknown>;
}

export interface ListenerConfig {
  name: string;
  address: string;
  routes: RouteConfig[];
  /**
   * `route_file`: a file of Gateway API HTTPRoute documents (src/edge/routes/), as an absolute path
   * (the file's own is relative to the configuration's directory); matched before `routes`.
   */
  routeFile?: string;
  /** True when a route of this listener names a registry service. */
  usesRegistry: boolean;
  /** `http2: true`: the listener serves HTTP/2 as well as HTTP/1.1 (h2c by prior knowledge). */
  http2: boolean;
}

export interface ProxyConfig {
  file: string;
  /** admin.address of the file; --admin_address wins. */
  adminAddress?: string;
  listeners: ListenerConfig[];
  clusters: StaticClusterConfig[];
  /** True when any route names a registry service: the cluster manager then watches the registry. */
  usesRegistry: boolean;
  /** The file's text as read (what a reload compares). */
  text?: string;
}

type Path = Array<string | number>;

/** How the errors of a proxy config are written (src/base/config/reader.ts): `proxy config <file>[:line:col]: <field>: <problem>`. */
export const PROXY_CONFIG_ERRORS: ConfigErrorStyle = {
  name: 'ProxyConfigError',
  prefix: 'proxy config ',
  withFile: true,
  position: 'line-col',
  syntaxPrefix: 'invalid YAML: ',
  create: (p) => new ProxyConfigError(p.file, p.field ?? '', p.problem, p.line === undefined ? undefined : { line: p.line, col: p.col ?? 1 }, p.code),
};

/** A configuration problem: the config reader's one error type, by its name here. */
export class ProxyConfigError extends ConfigFileError {
  constructor(
    file: string,
    field: string,
    problem: string,
    readonly position?: { line: number; col: number },
    code?: string,
  ) {
    super(PROXY_CONFIG_ERRORS, { file, field, problem, line: position?.line, col: position?.col, code });
  }
}

/** Raised inside validation; turned into a ProxyConfigError with the file and the position. */
class FieldError extends Error {
  constructor(
    readonly path: Path,
    readonly problem: string,
    /** Point at the key (an unknown field) rather than at its value. */
    readonly atKey = false,
  ) {
    super(problem);
  }
}

/** `listeners[0].routes[1].cluster` (the config reader's). */
export { fieldName };

// ---- loading ------------------------------------------------------------------------------

/** Reads and checks the file. Throws ProxyConfigError. */
export function loadProxyConfig(file: string): ProxyConfig {
  return parseProxyConfig(readConfigFile(file, PROXY_CONFIG_ERRORS), file);
}

/** Parses and checks configuration text (YAML 1.2 or JSON); `file` names it in errors. */
export function parseProxyConfig(text: string, file: string): ProxyConfig {
  const doc = parseConfig(text, { file, style: PROXY_CONFIG_ERRORS });
  const value = doc.toJS();
  try {
    return { ...validate(value, file), text };
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    const at = doc.positionAt(err.path, err.atKey);
    throw new ProxyConfigError(file, fieldName(err.path), err.problem, at && { line: at.line, col: at.col });
  }
}

// ---- checking -----------------------------------------------------------------------------

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a map';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value)}`;
  return `${typeof value} ${String(value)}`;
}

/** A map with only the allowed keys. */
function map(value: unknown, path: Path, allowed: readonly string[], required: readonly string[] = []): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value) || value instanceof Map || value instanceof Set) {
    throw new FieldError(path, `must be a map, not ${describe(value)}`);
  }
  const obj = value as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) throw new FieldError([...path, key], `unknown field (allowed: ${allowed.join(', ')})`, true);
  }
  for (const key of required) {
    if (obj[key] === undefined || obj[key] === null) throw new FieldError([...path, key], 'required');
  }
  return obj;
}

function list(value: unknown, path: Path, nonEmpty: boolean): unknown[] {
  if (!Array.isArray(value)) throw new FieldError(path, `must be a list, not ${describe(value)}`);
  if (nonEmpty && value.length === 0) throw new FieldError(path, 'must not be empty');
  return value;
}

function str(value: unknown, path: Path): string {
  if (typeof value !== 'string') throw new FieldError(path, `must be a string, not ${describe(value)}`);
  if (value === '') throw new FieldError(path, 'must not be empty');
  return value;
}

function int(value: unknown, path: Path, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new FieldError(path, `must be an integer, not ${describe(value)}`);
  if (value < min || value > max) throw new FieldError(path, `must be from ${min} to ${max}, not ${value}`);
  return value;
}

function num(value: unknown, path: Path, min: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new FieldError(path, `must be a number, not ${describe(value)}`);
  if (value < min) throw new FieldError(path, `must be at least ${min}, not ${value}`);
  return value;
}

function bool(value: unknown, path: Path): boolean {
  if (typeof value !== 'boolean') throw new FieldError(path, `must be true or false, not ${describe(value)}`);
  return value;
}

/** A Go duration string (`300ms`, `1m30s`) in milliseconds; `positive` refuses 0. */
function duration(value: unknown, path: Path, positive: boolean): number {
  if (value === 0) {
    if (positive) throw new FieldError(path, 'must be above 0');
    return 0;
  }
  if (typeof value !== 'string') throw new FieldError(path, `must be a duration like "5s" or "300ms", not ${describe(value)}`);
  let ms: number;
  try {
    ms = parseDuration(value);
  } catch (err) {
    throw new FieldError(path, `${(err as Error).message} (use Go syntax: 300ms, 5s, 1m30s)`);
  }
  if (positive && ms <= 0) throw new FieldError(path, 'must be above 0');
  return ms;
}

const NAME = /^[A-Za-z0-9_][A-Za-z0-9_-]*$/;
const CLUSTER_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

function validate(root: unknown, file: string): ProxyConfig {
  if (root === null || root === undefined) throw new FieldError([], 'the file is empty: listeners is required');
  const top = map(root, [], ['admin', 'listeners', 'clusters'], ['listeners']);

  let adminAddress: string | undefined;
  if (top.admin !== undefined) {
    const admin = map(top.admin, ['admin'], ['address']);
    if (admin.address !== undefined) {
      adminAddress = str(admin.address, ['admin', 'address']);
      if (adminAddress !== 'off') {
        try {
          parseAdminAddress(adminAddress);
        } catch (err) {
          throw new FieldError(['admin', 'address'], `${(err as Error).message} (or off)`);
        }
      }
    }
  }

  const clusters: StaticClusterConfig[] = [];
  const clusterNames = new Set<string>();
  if (top.clusters !== undefined) {
    list(top.clusters, ['clusters'], false).forEach((c, i) => {
      const cluster = checkCluster(c, ['clusters', i]);
      if (clusterNames.has(cluster.name)) throw new FieldError(['clusters', i, 'name'], `cluster "${cluster.name}" is defined twice`);
      clusterNames.add(cluster.name);
      clusters.push(cluster);
    });
  }

  const listeners: ListenerConfig[] = [];
  const listenerNames = new Set<string>();
  const addresses = new Map<string, string>();
  list(top.listeners, ['listeners'], true).forEach((l, i) => {
    const path: Path = ['listeners', i];
    const obj = map(l, path, ['name', 'address', 'routes', 'route_file', 'http2'], ['name', 'address']);
    if (obj.routes === undefined && obj.route_file === undefined) throw new FieldError([...path, 'routes'], 'required (or route_file)');
    const name = str(obj.name, [...path, 'name']);
    if (!NAME.test(name)) throw new FieldError([...path, 'name'], `"${name}": use letters, digits, _ and - (it names the stats http.<name>.*)`);
    if (listenerNames.has(name)) throw new FieldError([...path, 'name'], `listener "${name}" is defined twice`);
    listenerNames.add(name);
    const addr = str(obj.address, [...path, 'address']);
    const bound = address(addr, [...path, 'address']);
    const key = formatAddress(bound.host, bound.port);
    if (bound.port !== 0 && addresses.has(key)) throw new FieldError([...path, 'address'], `${addr} is also the address of listener "${addresses.get(key)}"`);
    addresses.set(key, name);
    const routes = obj.routes === undefined ? [] : list(obj.routes, [...path, 'routes'], true).map((r, j) => checkRoute(r, [...path, 'routes', j], clusterNames));
    // A route file's backend that is not a cluster of this file is a registry service (and a reload may add one).
    const routeFile = obj.route_file === undefined ? undefined : resolve(dirname(file), str(obj.route_file, [...path, 'route_file']));
    const http2 = obj.http2 === undefined ? false : bool(obj.http2, [...path, 'http2']);
    listeners.push({ name, address: addr, routes, routeFile, http2, usesRegistry: routeFile !== undefined || routes.some((r) => r.service !== undefined) });
  });

  return { file, adminAddress, listeners, clusters, usesRegistry: listeners.some((l) => l.usesRegistry) };
}

/** `host:port` or `:port` (all interfaces); a bare port is refused, so the interface is always explicit. */
function address(value: string, path: Path): { host: string; port: number } {
  try {
    return parseAddress(value);
  } catch (err) {
    throw new FieldError(path, (err as Error).message);
  }
}

function checkRoute(value: unknown, path: Path, clusters: Set<string>): RouteConfig {
  const obj = map(value, path, ['match', 'cluster', 'service', 'prefix_rewrite'], ['match']);
  const m = map(obj.match, [...path, 'match'], ['prefix', 'path', 'regex']);
  const kinds = (['prefix', 'path', 'regex'] as const).filter((k) => m[k] !== undefined);
  if (kinds.length !== 1) throw new FieldError([...path, 'match'], 'needs exactly one of prefix, path, regex');
  const kind = kinds[0]!;
  const matchValue = str(m[kind], [...path, 'match', kind]);
  const compiled = compileMatch(kind, matchValue, [...path, 'match', kind]);

  if ((obj.cluster === undefined) === (obj.service === undefined)) throw new FieldError(path, 'needs exactly one of cluster (a static cluster) and service (a registry service)');
  let cluster: string | undefined;
  let service: string | undefined;
  if (obj.cluster !== undefined) {
    cluster = str(obj.cluster, [...path, 'cluster']);
    if (!clusters.has(cluster)) {
      const known = [...clusters];
      throw new FieldError([...path, 'cluster'], `unknown cluster "${cluster}" (${known.length ? `clusters: ${known.join(', ')}` : 'the file defines no clusters'})`);
    }
  } else {
    service = str(obj.service, [...path, 'service']);
    if (/\s/.test(service)) throw new FieldError([...path, 'service'], `"${service}": a service name has no white space`);
    // A static cluster wins over a registry service of the same name: say which one is meant.
    if (clusters.has(service)) throw new FieldError([...path, 'service'], `"${service}" is a static cluster of this file: use cluster: ${service}`);
  }

  let prefixRewrite: string | undefined;
  if (obj.prefix_rewrite !== undefined) {
    prefixRewrite = str(obj.prefix_rewrite, [...path, 'prefix_rewrite']);
    if (kind === 'regex') throw new FieldError([...path, 'prefix_rewrite'], 'needs a prefix or path match, not regex');
    if (!prefixRewrite.startsWith('/')) throw new FieldError([...path, 'prefix_rewrite'], `"${prefixRewrite}": must start with /`);
    if (/[\s?#]/.test(prefixRewrite)) throw new FieldError([...path, 'prefix_rewrite'], `"${prefixRewrite}": no white space, ? or #`);
  }

  const dump: Record<string, unknown> = { match: { [kind]: matchValue } };
  if (cluster !== undefined) dump.cluster = cluster;
  if (service !== undefined) dump.service = service;
  if (prefixRewrite !== undefined) dump.prefix_rewrite = prefixRewrite;
  return { match: { kind, value: matchValue }, cluster, service, prefixRewrite, path: compiled, matches: compiled.test, dump };
}

/** The path of one route, against the URL path without the query; case-sensitive. */
function compileMatch(kind: MatchKind, value: string, path: Path): PathMatch {
  if (kind === 'regex') {
    // RE2 syntax (as Envoy's safe_regex), linear time; matches the whole path: `^/v[0-9]+/.*` for
    // everything under /v1/. A path longer than MAX_REGEX_PATH_LENGTH does not match.
    try {
      return regexPath(value, { compiled: compilePathRegex(value) });
    } catch (err) {
      throw new FieldError(path, (err as Error).message);
    }
  }
  if (!value.startsWith('/')) throw new FieldError(path, `"${value}": must start with /`);
  if (/[\s?#]/.test(value)) throw new FieldError(path, `"${value}": no white space, ? or # (the query is not matched)`);
  // A prefix is a string prefix (`/api` matches /apix too), as Envoy's.
  return kind === 'prefix' ? prefixPath(value, false) : exactPath(value);
}

function checkCluster(value: unknown, path: Path): StaticClusterConfig {
  const obj = map(
    value,
    path,
    ['name', 'hosts', 'lb_policy', 'circuit_breakers', 'outlier_detection', 'health_check', 'panic_threshold', 'connect_timeout'],
    ['name', 'hosts'],
  );
  const name = str(obj.name, [...path, 'name']);
  if (!CLUSTER_NAME.test(name)) throw new FieldError([...path, 'name'], `"${name}": use letters, digits, _, - and . (it names the stats cluster.<name>.*)`);
  const cluster: StaticClusterConfig = { name, hosts: [] };

  const seen = new Set<string>();
  list(obj.hosts, [...path, 'hosts'], true).forEach((h, i) => {
    const hp: Path = [...path, 'hosts', i];
    let host: string | StaticHostConfig;
    let key: string;
    if (typeof h === 'string') {
      const parsed = tryParseAddress(h, { target: true });
      if (!parsed) throw new FieldError(hp, `"${h}" is not host:port (IPv6 as [::1]:80; port 1 to 65535)`);
      host = h.trim();
      key = formatAddress(parsed.host, parsed.port);
    } else {
      const o = map(h, hp, ['address', 'port', 'weight', 'zone', 'region', 'canary'], ['address', 'port']);
      const spec: StaticHostConfig = { address: str(o.address, [...hp, 'address']), port: int(o.port, [...hp, 'port'], 1, 65535) };
      if (/[\s/]/.test(spec.address) || spec.address.startsWith('[')) throw new FieldError([...hp, 'address'], `"${spec.address}": a host name or IP address (IPv6 without brackets)`);
      if (o.weight !== undefined) spec.weight = int(o.weight, [...hp, 'weight'], 1, 100);
      if (o.zone !== undefined) spec.zone = str(o.zone, [...hp, 'zone']);
      if (o.region !== undefined) spec.region = str(o.region, [...hp, 'region']);
      if (o.canary !== undefined) spec.canary = bool(o.canary, [...hp, 'canary']);
      host = spec;
      key = formatAddress(spec.address, spec.port);
    }
    if (seen.has(key)) throw new FieldError(hp, `${key} is listed twice`);
    seen.add(key);
    cluster.hosts.push(host);
  });

  if (obj.lb_policy !== undefined) {
    const lb = str(obj.lb_policy, [...path, 'lb_policy']);
    if (!(LB_POLICIES as readonly string[]).includes(lb)) throw new FieldError([...path, 'lb_policy'], `"${lb}": use ${LB_POLICIES.join(', ')}`);
    cluster.lbPolicy = lb as LbPolicy;
  }
  if (obj.circuit_breakers !== undefined) cluster.circuitBreakers = checkBreakers(obj.circuit_breakers, [...path, 'circuit_breakers']);
  if (obj.outlier_detection !== undefined) {
    cluster.outlierDetection = obj.outlier_detection === false ? false : checkOutlier(obj.outlier_detection, [...path, 'outlier_detection']);
  }
  if (obj.health_check !== undefined) {
    cluster.healthCheck = obj.health_check === false ? false : checkHealthCheck(obj.health_check, [...path, 'health_check']);
  }
  if (obj.panic_threshold !== undefined) cluster.panicThresholdPercent = int(obj.panic_threshold, [...path, 'panic_threshold'], 0, 100);
  if (obj.connect_timeout !== undefined) cluster.connectTimeoutMs = duration(obj.connect_timeout, [...path, 'connect_timeout'], true);

  // The cluster manager's own checks, so that nothing it would refuse gets past here.
  try {
    resolveSettings(cluster, undefined, cluster.lbPolicy ?? OPTIONS.lb_policy.default, false);
  } catch (err) {
    throw new FieldError(path, (err as Error).message);
  }
  return cluster;
}

const BREAKER_KEYS: ReadonlyArray<[string, keyof CircuitBreakerThresholds, number]> = [
  ['max_connections', 'maxConnections', 1],
  ['max_pending_requests', 'maxPendingRequests', 0],
  ['max_requests', 'maxRequests', 0],
  ['max_retries', 'maxRetries', 0],
];

function checkBreakers(value: unknown, path: Path): CircuitBreakersConfig {
  const obj = map(value, path, ['default', 'high']);
  const out: CircuitBreakersConfig = {};
  for (const priority of ['default', 'high'] as const) {
    if (obj[priority] === undefined) continue;
    const p = map(obj[priority], [...path, priority], [...BREAKER_KEYS.map(([k]) => k), 'retry_budget']);
    const t: PriorityBreakersConfig = {};
    for (const [key, field, min] of BREAKER_KEYS) {
      if (p[key] !== undefined) t[field] = int(p[key], [...path, priority, key], min, 1_000_000_000);
    }
    if (p.retry_budget !== undefined) t.retryBudget = checkRetryBudget(p.retry_budget, [...path, priority, 'retry_budget']);
    out[priority] = t;
  }
  return out;
}

/** Envoy's retry_budget, with budget_percent a plain number: `{ budget_percent: 20, min_retry_concurrency: 3 }`. */
function checkRetryBudget(value: unknown, path: Path): Partial<RetryBudgetConfig> {
  const obj = map(value, path, ['budget_percent', 'min_retry_concurrency']);
  const out: Partial<RetryBudgetConfig> = {};
  if (obj.budget_percent !== undefined) {
    out.percent = num(obj.budget_percent, [...path, 'budget_percent'], 0);
    if (out.percent > 100) throw new FieldError([...path, 'budget_percent'], `must be from 0 to 100, not ${out.percent}`);
  }
  if (obj.min_retry_concurrency !== undefined) out.minConcurrency = int(obj.min_retry_concurrency, [...path, 'min_retry_concurrency'], 0, 1_000_000_000);
  return out;
}

type NumericOutlierKey = { [K in keyof OutlierDetectionConfig]: OutlierDetectionConfig[K] extends number ? K : never }[keyof OutlierDetectionConfig];

function checkOutlier(value: unknown, path: Path): Partial<OutlierDetectionConfig> {
  const durations: Array<[string, NumericOutlierKey]> = [
    ['interval', 'intervalMs'],
    ['base_ejection_time', 'baseEjectionTimeMs'],
    ['max_ejection_time', 'maxEjectionTimeMs'],
  ];
  const percents: Array<[string, NumericOutlierKey]> = [
    ['max_ejection_percent', 'maxEjectionPercent'],
    ['enforcing_consecutive_5xx', 'enforcingConsecutive5xx'],
    ['enforcing_consecutive_gateway_failure', 'enforcingConsecutiveGatewayFailure'],
    ['enforcing_consecutive_local_origin_failure', 'enforcingConsecutiveLocalOriginFailure'],
    ['enforcing_success_rate', 'enforcingSuccessRate'],
  ];
  const counts: Array<[string, NumericOutlierKey]> = [
    ['consecutive_5xx', 'consecutive5xx'],
    ['consecutive_gateway_failure', 'consecutiveGatewayFailure'],
    ['consecutive_local_origin_failure', 'consecutiveLocalOriginFailure'],
    ['success_rate_minimum_hosts', 'successRateMinimumHosts'],
    ['success_rate_request_volume', 'successRateRequestVolume'],
  ];
  const allowed = [...durations, ...percents, ...counts].map(([k]) => k).concat('success_rate_stdev_factor', 'split_external_local_origin_errors');
  // `outlier_detection: {}` (or an empty key in YAML) turns detection on with the defaults.
  const obj = value === null ? {} : map(value, path, allowed);
  const out: Partial<OutlierDetectionConfig> = {};
  for (const [key, field] of durations) if (obj[key] !== undefined) out[field] = duration(obj[key], [...path, key], true);
  for (const [key, field] of percents) if (obj[key] !== undefined) out[field] = int(obj[key], [...path, key], 0, 100);
  for (const [key, field] of counts) if (obj[key] !== undefined) out[field] = int(obj[key], [...path, key], 0, 1_000_000_000);
  if (obj.success_rate_stdev_factor !== undefined) out.successRateStdevFactor = num(obj.success_rate_stdev_factor, [...path, 'success_rate_stdev_factor'], 0);
  if (obj.split_external_local_origin_errors !== undefined)
    out.splitExternalLocalOriginErrors = bool(obj.split_external_local_origin_errors, [...path, 'split_external_local_origin_errors']);
  return out;
}

function checkHealthCheck(value: unknown, path: Path): Partial<HealthCheckConfig> {
  const obj = map(value, path, ['path', 'interval', 'timeout', 'unhealthy_threshold', 'healthy_threshold', 'expected_statuses', 'host'], ['path']);
  const hcPath = str(obj.path, [...path, 'path']);
  if (!hcPath.startsWith('/') || /\s/.test(hcPath)) throw new FieldError([...path, 'path'], `"${hcPath}": must start with / and have no white space`);
  const out: Partial<HealthCheckConfig> = { path: hcPath };
  if (obj.interval !== undefined) out.intervalMs = duration(obj.interval, [...path, 'interval'], true);
  if (obj.timeout !== undefined) out.timeoutMs = duration(obj.timeout, [...path, 'timeout'], true);
  if (obj.unhealthy_threshold !== undefined) out.unhealthyThreshold = int(obj.unhealthy_threshold, [...path, 'unhealthy_threshold'], 1, 1000);
  if (obj.healthy_threshold !== undefined) out.healthyThreshold = int(obj.healthy_threshold, [...path, 'healthy_threshold'], 1, 1000);
  if (obj.expected_statuses !== undefined) {
    out.expectedStatuses = list(obj.expected_statuses, [...path, 'expected_statuses'], true).map((s, i) => {
      const code = int(s, [...path, 'expected_statuses', i], 100, 599);
      return [code, code + 1] as [number, number];
    });
  }
  if (obj.host !== undefined) out.host = str(obj.host, [...path, 'host']);
  return out;
}
