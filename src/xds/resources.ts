/**
 * What mesh serves over xDS, as plain objects in the shape of Envoy v3 messages (field names as
 * in Envoy's .proto files; `google.protobuf.Any` fields as objects with an `@type`): pure
 * functions from the registry's services and the registry clusters' settings. Encoding is
 * protos.ts's job; serving, server.ts's.
 *
 * Per service `S` (all its versions together, as mesh's own clusters see them):
 * - a Cluster `S` of type EDS (endpoints over ADS), with the load-balancing policy, circuit
 *   breakers, outlier detection, active health check and panic threshold of mesh's clusters, and
 *   subsets by version (VERSION_SUBSETS: what an Envoy route to one version of S needs);
 * - a ClusterLoadAssignment `S`: one locality per region/zone of its nodes, each node an endpoint
 *   with its weight, health and version (its metadata); a locality weighs the sum of its endpoints' weights;
 * - an API Listener `S` for proxyless gRPC clients (`xds:///S`): an HttpConnectionManager that
 *   takes its routes over ADS (RDS) and ends in the router filter;
 * - a RouteConfiguration `S`: one virtual host for the domain `S`, every request to cluster `S`.
 */
import type { Node, Service } from '../engines/registry/registry.js';
import type { ResolvedClusterSettings } from '../core/upstream/config.js';
import { isIP } from 'node:net';
import { specFromNode } from '../core/upstream/host.js';
import { HEALTH_CHECK_PATH_KEY } from '../core/upstream/cluster-manager.js';
import { byNodeId } from '../engines/registry/records.js';

const PREFIX = 'type.googleapis.com/';
export const TYPE_URLS = {
  cluster: `${PREFIX}envoy.config.cluster.v3.Cluster`,
  endpoint: `${PREFIX}envoy.config.endpoint.v3.ClusterLoadAssignment`,
  listener: `${PREFIX}envoy.config.listener.v3.Listener`,
  route: `${PREFIX}envoy.config.route.v3.RouteConfiguration`,
} as const;
export const HTTP_CONNECTION_MANAGER_TYPE_URL = `${PREFIX}envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`;
export const ROUTER_TYPE_URL = `${PREFIX}envoy.extensions.filters.http.router.v3.Router`;

/** The four kinds of resource, by the names the stats and snapshots use. */
export type ResourceKind = keyof typeof TYPE_URLS;
export const RESOURCE_KINDS = Object.keys(TYPE_URLS) as ResourceKind[];

/** The kind a type URL names, or undefined for a type mesh does not serve. */
export function kindOfTypeUrl(typeUrl: string): ResourceKind | undefined {
  return RESOURCE_KINDS.find((k) => TYPE_URLS[k] === typeUrl);
}

/** An Envoy message as a plain object (snake_case fields, enums by name, Any as `{ '@type', ... }`). */
export type Message = Record<string, unknown>;

export interface XdsInput {
  /** Every live version of every service (a name may appear once per version). */
  services: readonly Service[];
  /** The settings of mesh's registry clusters (src/core/upstream/config.ts resolveSettings). */
  settings: ResolvedClusterSettings;
}

export interface XdsSnapshot {
  clusters: Map<string, Message>;
  endpoints: Map<string, Message>;
  listeners: Map<string, Message>;
  routes: Map<string, Message>;
}

/** Snapshot field of each kind. */
export const SNAPSHOT_FIELD: Record<ResourceKind, keyof XdsSnapshot> = {
  cluster: 'clusters',
  endpoint: 'endpoints',
  listener: 'listeners',
  route: 'routes',
};

/** A node's `health` metadata → Envoy's HealthStatus; a node without one is HEALTHY (it is live in the registry). */
const HEALTH: Record<string, string> = { healthy: 'HEALTHY', unhealthy: 'UNHEALTHY', draining: 'DRAINING', degraded: 'DEGRADED' };
export const HEALTH_METADATA_KEY = 'health';

const LB_POLICY: Record<string, string> = { round_robin: 'ROUND_ROBIN', least_request: 'LEAST_REQUEST', random: 'RANDOM' };

/** Milliseconds as a google.protobuf.Duration. */
export function duration(ms: number): { seconds: number; nanos: number } {
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** The endpoint metadata namespace and key a versioned backend is matched on. */
export const VERSION_METADATA = { filter: 'envoy.lb', key: 'version' } as const;
/**
 * What a cluster needs for versioned backends to reach only their version: subsets by `version`
 * (Cluster.lb_subset_config), with each endpoint's version in its metadata (`endpointVersionMetadata`).
 * A route without a version (no metadata_match) takes any endpoint (the top-level ANY_ENDPOINT);
 * a route to a version no endpoint has gets none (the selector's NO_FALLBACK: Envoy answers 503).
 */
export const VERSION_SUBSETS: Message = { fallback_policy: 'ANY_ENDPOINT', subset_selectors: [{ keys: [VERSION_METADATA.key], fallback_policy: 'NO_FALLBACK' }] };

/**
 * An endpoint's LbEndpoint.metadata (or a route's metadata_match) for a version: `object` (default),
 * the google.protobuf.Struct as protobufjs encodes it (its bundled Struct names fields in camelCase); `json`, as a bootstrap file has it.
 */
export function endpointVersionMetadata(version: string, form: 'object' | 'json' = 'object'): Message {
  const struct = form === 'json' ? { [VERSION_METADATA.key]: version } : { fields: { [VERSION_METADATA.key]: { stringValue: version } } };
  return { filter_metadata: { [VERSION_METADATA.filter]: struct } };
}

const u32 = (value: number) => ({ value: Math.max(0, Math.min(0xffffffff, Math.floor(value))) });
/** The ConfigSource of a resource taken over the same ADS stream (v3). */
export const ADS_CONFIG_SOURCE: Readonly<Message> = Object.freeze({ ads: Object.freeze({}), resource_api_version: 'V3' });
const ADS = ADS_CONFIG_SOURCE;

/**
 * What building a service's resources says about its nodes: a node left out (its address is not an
 * IP address: Envoy and gRPC take IPs only in endpoints, and reject the whole set for one that is
 * not), or a metadata value corrected (a weight out of range).
 */
export interface BuildNotes {
  skipped(node: VersionedNode, reason: string): void;
  warn(message: string): void;
}

export function buildSnapshot(input: XdsInput, notes?: BuildNotes): XdsSnapshot {
  const byName = new Map<string, Service[]>();
  for (const s of input.services) byName.set(s.name, [...(byName.get(s.name) ?? []), s]);
  const snapshot: XdsSnapshot = { clusters: new Map(), endpoints: new Map(), listeners: new Map(), routes: new Map() };
  for (const name of [...byName.keys()].sort()) {
    const built = buildServiceResources(name, byName.get(name)!, input.settings, notes);
    if (!built) continue;
    for (const kind of RESOURCE_KINDS) snapshot[SNAPSHOT_FIELD[kind]].set(name, built[kind]);
  }
  return snapshot;
}

/**
 * The four resources of one service from its live versions; undefined when it has no node with an
 * IP address (a node registered by host name is left out and told to `notes`).
 */
export function buildServiceResources(
  name: string,
  versions: readonly Service[],
  settings: ResolvedClusterSettings,
  notes?: BuildNotes,
): Record<ResourceKind, Message> | undefined {
  const nodes = dedupe(versions.flatMap((v) => v.nodes.map((n) => ({ ...n, version: v.version })))).filter((n) => {
    if (isIP(n.address) !== 0) return true;
    notes?.skipped(n, `its address ${n.address} is not an IP address (Envoy and gRPC clients take IP addresses only in endpoints)`);
    return false;
  });
  if (nodes.length === 0) return undefined;
  return {
    cluster: buildCluster(name, nodes, settings),
    endpoint: buildLoadAssignment(name, nodes, notes),
    listener: buildApiListener(name),
    route: buildRouteConfiguration(name),
  };
}

/** A node with the version of the service it was registered with. */
export type VersionedNode = Node & { version?: string };

/** Nodes by id, one per address:port (two versions may list the same process; a client refuses duplicates). */
function dedupe(nodes: VersionedNode[]): VersionedNode[] {
  const seen = new Set<string>();
  return [...nodes].sort(byNodeId).filter((n) => {
    const key = `${n.address}\n${n.port}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

export function buildCluster(name: string, nodes: readonly Node[], settings: ResolvedClusterSettings): Message {
  const cluster: Message = {
    name,
    type: 'EDS',
    eds_cluster_config: { eds_config: ADS, service_name: name },
    connect_timeout: duration(settings.connectTimeoutMs),
    lb_policy: LB_POLICY[settings.lbPolicy] ?? 'ROUND_ROBIN',
    circuit_breakers: {
      thresholds: (['default', 'high'] as const).map((p) => {
        const t = settings.circuitBreakers[p];
        const budget = settings.retryBudgets[p];
        return {
          priority: p === 'default' ? 'DEFAULT' : 'HIGH',
          max_connections: u32(t.maxConnections),
          max_pending_requests: u32(t.maxPendingRequests),
          max_requests: u32(t.maxRequests),
          max_retries: u32(t.maxRetries),
          ...(budget.percent > 0 ? { retry_budget: { budget_percent: { value: budget.percent }, min_retry_concurrency: u32(budget.minConcurrency) } } : {}),
        };
      }),
    },
    common_lb_config: { healthy_panic_threshold: { value: settings.panicThresholdPercent } },
    lb_subset_config: VERSION_SUBSETS,
  };
  const od = settings.outlierDetection;
  if (od) {
    cluster.outlier_detection = {
      consecutive_5xx: u32(od.consecutive5xx),
      interval: duration(od.intervalMs),
      base_ejection_time: duration(od.baseEjectionTimeMs),
      max_ejection_percent: u32(Math.min(100, od.maxEjectionPercent)),
      enforcing_consecutive_5xx: u32(Math.min(100, od.enforcingConsecutive5xx)),
      enforcing_success_rate: u32(Math.min(100, od.enforcingSuccessRate)),
      success_rate_minimum_hosts: u32(od.successRateMinimumHosts),
      success_rate_request_volume: u32(od.successRateRequestVolume),
      success_rate_stdev_factor: u32(Math.round(od.successRateStdevFactor * 1000)),
      consecutive_gateway_failure: u32(od.consecutiveGatewayFailure),
      enforcing_consecutive_gateway_failure: u32(Math.min(100, od.enforcingConsecutiveGatewayFailure)),
      split_external_local_origin_errors: od.splitExternalLocalOriginErrors,
      consecutive_local_origin_failure: u32(od.consecutiveLocalOriginFailure),
      enforcing_consecutive_local_origin_failure: u32(Math.min(100, od.enforcingConsecutiveLocalOriginFailure)),
      max_ejection_time: duration(od.maxEjectionTimeMs),
    };
  }
  const path = healthCheckPath(nodes, settings);
  if (path !== undefined) {
    const hc = settings.healthCheck;
    cluster.health_checks = [
      {
        timeout: duration(hc.timeoutMs),
        interval: duration(hc.intervalMs),
        unhealthy_threshold: u32(hc.unhealthyThreshold),
        healthy_threshold: u32(hc.healthyThreshold),
        http_health_check: {
          path,
          ...(hc.host ? { host: hc.host } : {}),
          expected_statuses: hc.expectedStatuses.map(([start, end]) => ({ start, end })),
        },
      },
    ];
  }
  return cluster;
}

/**
 * The path the cluster's active health check GETs: the one every node is checked at (its
 * `health_check_path` metadata, else the settings' path), when they all agree. Envoy checks a
 * cluster with one path; mesh's own clusters check each node at its own path and leave a node
 * with none unchecked, so nodes that disagree, or one with no path, get no health check.
 */
function healthCheckPath(nodes: readonly Node[], settings: ResolvedClusterSettings): string | undefined {
  const paths = new Set(
    nodes.map((n) => {
      const p = n.metadata?.[HEALTH_CHECK_PATH_KEY] || settings.healthCheck.path || '';
      return p && !p.startsWith('/') ? `/${p}` : p;
    }),
  );
  const [p] = paths;
  return paths.size === 1 && p ? p : undefined;
}

export function buildLoadAssignment(name: string, nodes: readonly VersionedNode[], notes?: Pick<BuildNotes, 'warn'>): Message {
  const localities = new Map<string, { region: string; zone: string; endpoints: Message[]; weight: number }>();
  for (const n of nodes) {
    // Weight, zone, region and hostname as mesh's own clusters read them.
    const spec = specFromNode(n, (m) => notes?.warn(`service ${name}: ${m}`));
    const { region, zone, weight } = spec;
    const key = `${region}\n${zone}`;
    let locality = localities.get(key);
    if (!locality) localities.set(key, (locality = { region, zone, endpoints: [], weight: 0 }));
    locality.weight += weight;
    const health = n.metadata?.[HEALTH_METADATA_KEY];
    locality.endpoints.push({
      endpoint: { address: { socket_address: { address: n.address, port_value: n.port } }, hostname: spec.hostname },
      health_status: health === undefined ? 'HEALTHY' : (HEALTH[health] ?? 'UNKNOWN'),
      load_balancing_weight: u32(weight),
      ...(n.version ? { metadata: endpointVersionMetadata(n.version) } : {}),
    });
  }
  const keys = [...localities.keys()].sort();
  return {
    cluster_name: name,
    endpoints: keys.map((k) => {
      const l = localities.get(k)!;
      return {
        locality: { region: l.region, zone: l.zone },
        lb_endpoints: l.endpoints,
        load_balancing_weight: u32(l.weight),
      };
    }),
  };
}

export function buildApiListener(name: string): Message {
  return {
    name,
    api_listener: {
      api_listener: {
        '@type': HTTP_CONNECTION_MANAGER_TYPE_URL,
        stat_prefix: name,
        rds: { config_source: ADS, route_config_name: name },
        http_filters: [{ name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER_TYPE_URL } }],
      },
    },
  };
}

export function buildRouteConfiguration(name: string): Message {
  return {
    name,
    virtual_hosts: [{ name, domains: [name], routes: [{ name: 'default', match: { prefix: '' }, route: { cluster: name } }] }],
  };
}
