/**
 * The cluster manager: one cluster per backend service, built from the registry on first use and
 * kept current by one registry watch, plus static clusters from configuration. Every outbound
 * attempt of the process acquires a host here and releases it with the outcome; admin /clusters
 * reads `clusters()` and `versionInfo()`.
 *
 * Decisions:
 * - A registry cluster is created on the first acquire for a name the registry knows (all
 *   versions' nodes become hosts); a name it does not know is a 404 and creates nothing.
 * - A registry cluster whose last host goes away is dropped (with its stats) once it has no
 *   active request; its next use asks the registry again.
 * - At most `maxClusters` (default 10,000) registry clusters exist; at the limit the least
 *   recently used idle one is dropped, and with none idle the acquire gets a 503.
 * - A static cluster wins over a registry service of the same name.
 * - `address` (the /rpc field) picks that node of the service; an address that is not a node of
 *   the service is a 404, so a public gateway cannot be used to reach arbitrary hosts.
 */
import { isListedService } from '../../engines/registry/validate.js';
import { Agent } from '../../base/http/undici.js';
import type { Logger } from 'pino';
import { flagged, serviceNotFound, serviceUnavailable, toMeshError } from '../../base/errors.js';
import type { Node, Registry, Service, WatchEvent, Watcher } from '../../engines/registry/registry.js';
import { StatsStore, declareStats, type FamilyStats } from '../../base/stats/store.js';
import type { Logging } from '../../base/util/log.js';
import { escapeRegExp } from '../../base/util/regex.js';
import { Cluster, clusterStatPrefix, ERROR_ID, type HostEntry } from './cluster.js';
import {
  resolveSettings,
  type ClusterManagerDefaults,
  type StaticClusterConfig,
  type StaticHostConfig,
} from './config.js';
import { hostKey, parseWeight, specFromNode, type HostSpec } from './host.js';
import { tryParseAddress } from '../../base/util/address.js';
import { SelfGuard, selfRefusingConnector, type SelfLookup } from './self-guard.js';
import type { WorkloadTls } from '../../base/mtls/workload-tls.js';
import type {
  AcquireOptions,
  ClusterManagerView,
  ClusterSnapshot,
  LbPolicy,
  UpstreamLease,
  UpstreamSelector,
} from './types.js';

export const DEFAULT_MAX_CLUSTERS = 10_000;

/**
 * New hosts added per turn of the event loop when a registry change brings many at once (a
 * service of thousands of nodes appearing): the rest follow after setImmediate, so requests and
 * timers keep running meanwhile.
 */
export const HOST_APPLY_CHUNK = 500;

/** Node metadata key naming the path active health checks GET. */
export const HEALTH_CHECK_PATH_KEY = 'health_check_path';

export interface ClusterManagerOptions {
  /** Dynamic discovery. Without it there are only static clusters and version_info is `static`. */
  registry?: Registry;
  stats: StatsStore;
  logging: Logging;
  /** Default load-balancing policy (--lb_policy). */
  lbPolicy: LbPolicy;
  staticClusters?: StaticClusterConfig[];
  /** Settings of registry clusters, and defaults under the static clusters' own. */
  defaults?: ClusterManagerDefaults;
  /** Most registry clusters kept at once. Default 10,000. */
  maxClusters?: number;
  /** How long close() lets in-flight requests finish before destroying connections. Default 5s. */
  closeGraceMs?: number;
  /** For tests: the random source of the balancers and outlier enforcement. */
  random?: () => number;
  /** The process's own listening addresses: never forwarded to (self-guard.ts). */
  self?: SelfLookup;
  /**
   * This process's workload certificate, read when a host's pool is made (the process opens it at
   * start): mutual TLS to the nodes that serve it (src/base/mtls/connector.ts). Undefined: plain, as with --mtls=off.
   */
  workloadTls?: () => WorkloadTls | undefined;
}

/** `cluster_manager.*` */
export const CLUSTER_MANAGER_STATS = {
  gauges: { active: 'active_clusters', warming: 'warming_clusters' },
  counters: { added: 'cluster_added', removed: 'cluster_removed' },
} as const;

export class ClusterManager implements UpstreamSelector, ClusterManagerView {
  private readonly registry?: Registry;
  private readonly store: StatsStore;
  private readonly log: Logger;
  private readonly hcLog: Logger;
  private readonly lbPolicy: LbPolicy;
  private readonly defaults?: ClusterManagerDefaults;
  private readonly maxClusters: number;
  private readonly closeGraceMs: number;
  private readonly random?: () => number;
  private readonly hcDispatcher: Agent;
  private readonly guard?: SelfGuard;
  private readonly workloadTls?: () => WorkloadTls | undefined;

  private readonly staticClusters = new Map<string, Cluster>();
  /** Each static cluster's configuration as JSON: what replaceStatic compares. */
  private readonly staticConfigs = new Map<string, string>();
  /** Static clusters whose first health checks are still running. */
  private readonly staticWarming = new Map<string, Promise<void>>();
  private readonly dynamic = new Map<string, Cluster>();
  /** Per registry cluster: its nodes per service version, as the registry last said. */
  private readonly versions = new Map<string, Map<string, Node[]>>();
  private readonly loading = new Map<string, Promise<Cluster>>();
  /** Names with a registry event while their cluster was loading. */
  private readonly dirty = new Set<string>();
  /** Per registry cluster: bumped by every host-set change, so a chunked one stops when overtaken. */
  private readonly applyGeneration = new Map<string, number>();
  private watcher?: Watcher;
  private revision: string;
  private closed = false;

  private readonly s: FamilyStats<typeof CLUSTER_MANAGER_STATS>;

  constructor(options: ClusterManagerOptions) {
    this.registry = options.registry;
    this.store = options.stats;
    this.log = options.logging.get('upstream');
    this.hcLog = options.logging.get('hc');
    this.lbPolicy = options.lbPolicy;
    this.defaults = options.defaults;
    this.maxClusters = Math.max(1, options.maxClusters ?? DEFAULT_MAX_CLUSTERS);
    this.closeGraceMs = options.closeGraceMs ?? 5_000;
    this.random = options.random;
    this.workloadTls = options.workloadTls;
    // Validate the defaults once, so a bad configuration fails at start, not at first call.
    resolveSettings(undefined, this.defaults, this.lbPolicy, true);
    this.hcDispatcher = new Agent({
      keepAliveTimeout: 4_000,
      connections: 1,
      pipelining: 1,
      ...(options.self ? { connect: selfRefusingConnector(options.self) } : {}),
    });
    if (options.self) this.guard = new SelfGuard(options.self);

    this.s = declareStats(this.store.scope('cluster_manager.'), CLUSTER_MANAGER_STATS);

    for (const config of options.staticClusters ?? []) this.addStatic(config);

    this.revision = this.registry ? this.registry.revision() : 'static';
    if (this.registry) {
      this.watcher = this.registry.watch((event) => this.onEvent(event));
    }
  }

  // ---- ClusterManagerView -------------------------------------------------------------------

  versionInfo(): string {
    return this.registry ? this.revision : 'static';
  }

  clusters(): ClusterSnapshot[] {
    const out: ClusterSnapshot[] = [];
    for (const c of this.staticClusters.values()) out.push(c.snapshot());
    for (const [name, c] of this.dynamic) if (!this.staticClusters.has(name) && !this.loading.has(name)) out.push(c.snapshot());
    out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return out;
  }

  /** The live cluster of that name (static or registry), if any. */
  cluster(name: string): Cluster | undefined {
    return this.staticClusters.get(name) ?? this.dynamic.get(name);
  }

  // ---- UpstreamSelector ---------------------------------------------------------------------

  async acquire(service: string, options: AcquireOptions = {}): Promise<UpstreamLease> {
    if (this.closed) throw serviceUnavailable(ERROR_ID, `service ${service}: cluster manager closed`);
    if (typeof service !== 'string' || service === '') throw flagged(serviceNotFound(ERROR_ID, String(service)), 'NC');
    const fixed = this.staticClusters.get(service);
    if (fixed) {
      const warming = this.staticWarming.get(service);
      if (warming) await warming;
      return this.pick(fixed, service, options);
    }

    let cluster: Cluster | undefined = this.loading.has(service) ? undefined : this.dynamic.get(service);
    if (!cluster) {
      cluster = await this.load(service);
    }
    if (this.closed) throw serviceUnavailable(ERROR_ID, `service ${service}: cluster manager closed`);
    if (cluster.closed || cluster.hosts().length === 0) {
      throw flagged(serviceNotFound(ERROR_ID, service), 'NC');
    }
    return this.pick(cluster, service, options);
  }

  acquireNow(service: string, options: AcquireOptions = {}): UpstreamLease | undefined {
    if (this.closed) return undefined;
    const fixed = this.staticClusters.get(service);
    if (fixed) return this.staticWarming.has(service) ? undefined : this.pick(fixed, service, options);
    if (this.loading.has(service)) return undefined;
    const cluster = this.dynamic.get(service);
    if (!cluster || cluster.closed || cluster.hosts().length === 0) return undefined;
    return this.pick(cluster, service, options);
  }

  /** The cluster's pick, through the self-forwarding guard when the process has one. */
  private pick(cluster: Cluster, service: string, options: AcquireOptions): UpstreamLease {
    return this.guard ? this.guard.acquire(cluster, service, options) : cluster.acquire(service, options);
  }

  // ---- lifecycle ----------------------------------------------------------------------------

  /** Stops the watch, every timer and health check, and closes every pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.watcher?.stop();
    this.watcher = undefined;
    const all = [...this.staticClusters.values(), ...this.dynamic.values()];
    await Promise.all(all.map((c) => c.close(this.closeGraceMs)));
    // Health checks are disposable: do not wait for one that hangs.
    await this.hcDispatcher.destroy().catch(() => {});
  }

  /**
   * Replaces the static clusters (`mesh proxy`'s reload): a cluster whose configuration is the
   * same stays as it is (its hosts, health and stats); a changed one is built anew under the same
   * name and the old one closes once its requests are done (up to the close grace); a cluster
   * no longer configured closes the same way and its stats go. Requests acquire from the new
   * set as soon as this returns.
   */
  replaceStatic(configs: readonly StaticClusterConfig[]): void {
    const wanted = new Map(configs.map((c) => [c.name, c]));
    for (const [name, old] of [...this.staticClusters]) {
      const next = wanted.get(name);
      if (next && JSON.stringify(next) === this.staticConfigs.get(name)) continue;
      this.staticClusters.delete(name);
      this.staticConfigs.delete(name);
      this.staticWarming.delete(name);
      void old.close(this.closeGraceMs);
      if (!next) {
        this.removeStats(name);
        this.s.removed.inc();
      }
    }
    for (const config of configs) if (!this.staticClusters.has(config.name)) this.addStatic(config);
    this.s.active.set(this.activeCount());
  }

  // ---- internals ----------------------------------------------------------------------------

  private newCluster(name: string, addedViaApi: boolean, config: StaticClusterConfig | undefined, stats: StatsStore): Cluster {
    const settings = resolveSettings(config, this.defaults, this.lbPolicy, addedViaApi);
    return new Cluster({
      name,
      addedViaApi,
      settings,
      stats,
      log: this.log,
      hcLog: this.hcLog,
      hcDispatcher: this.hcDispatcher,
      random: this.random,
      onIdleEmpty: addedViaApi ? (c) => this.dropIfIdle(c) : undefined,
      workloadTls: this.workloadTls,
    });
  }

  private addStatic(config: StaticClusterConfig): void {
    if (!config || typeof config.name !== 'string' || config.name === '') throw new Error('static cluster: name required');
    if (this.staticClusters.has(config.name)) throw new Error(`static cluster ${config.name}: defined twice`);
    if (!Array.isArray(config.hosts)) throw new Error(`static cluster ${config.name}: hosts must be a list`);
    const entries = config.hosts.map((h, i) => staticEntry(config.name, i, h, (m) => this.log.warn({ cluster: config.name }, m)));
    const cluster = this.newCluster(config.name, false, config, this.store);
    this.staticClusters.set(config.name, cluster);
    this.staticConfigs.set(config.name, JSON.stringify(config));
    this.s.added.inc();
    this.s.active.set(this.activeCount());
    const warming = cluster.setHosts(entries).finally(() => this.staticWarming.delete(config.name));
    this.staticWarming.set(config.name, warming);
  }

  private activeCount(): number {
    return this.staticClusters.size + this.dynamic.size;
  }

  private load(name: string): Promise<Cluster> {
    let p = this.loading.get(name);
    if (p) return p;
    p = this.create(name).finally(() => {
      this.loading.delete(name);
      this.s.warming.set(this.loading.size);
      const c = this.dynamic.get(name);
      if (c && c.hosts().length === 0 && c.rqActive === 0) this.drop(c);
    });
    this.loading.set(name, p);
    this.s.warming.set(this.loading.size);
    return p;
  }

  private async create(name: string): Promise<Cluster> {
    const registry = this.registry;
    // A reserved name (mesh's own records: the processes' admin addresses) is never a destination.
    if (!registry || !isListedService(name)) throw flagged(serviceNotFound(ERROR_ID, name), 'NC');
    this.dirty.delete(name);
    const found = await this.fetch(name);
    if (found.length === 0 || found.every((s) => s.nodes.length === 0)) throw flagged(serviceNotFound(ERROR_ID, name), 'NC');
    if (this.closed) throw serviceUnavailable(ERROR_ID, `service ${name}: cluster manager closed`);
    if (!this.dynamic.has(name)) this.makeRoom(name);
    const cluster = this.newCluster(name, true, undefined, this.store);
    this.dynamic.set(name, cluster);
    this.s.added.inc();
    this.s.active.set(this.activeCount());
    this.log.debug({ cluster: name }, 'cluster added');
    const versions = new Map<string, Node[]>();
    for (const s of found) if (s.nodes.length > 0) versions.set(s.version, s.nodes);
    this.versions.set(name, versions);
    // Warm up: the first health checks of checked hosts finish before the first pick.
    await this.applyHosts(cluster, versions);
    // Registry changes seen while loading: read the service again.
    while (this.dirty.has(name) && !cluster.closed && !this.closed) {
      this.dirty.delete(name);
      const again = await this.fetch(name);
      const v = new Map<string, Node[]>();
      for (const s of again) if (s.nodes.length > 0) v.set(s.version, s.nodes);
      this.versions.set(name, v);
      await this.applyHosts(cluster, v);
    }
    return cluster;
  }

  private async fetch(name: string): Promise<Service[]> {
    try {
      return await this.registry!.getService(name);
    } catch (err) {
      const e = toMeshError(err, ERROR_ID);
      this.log.warn({ service: name, err: e.message }, 'registry lookup failed');
      throw serviceUnavailable(ERROR_ID, `service ${name}: registry unavailable: ${e.message}`);
    }
  }

  /** Keeps the number of registry clusters under the bound by dropping the least recently used idle one. */
  private makeRoom(name: string): void {
    if (this.dynamic.size < this.maxClusters) return;
    let victim: Cluster | undefined;
    for (const c of this.dynamic.values()) {
      if (c.rqActive > 0 || this.loading.has(c.name)) continue;
      if (!victim || c.lastUsed < victim.lastUsed) victim = c;
    }
    if (!victim) throw serviceUnavailable(ERROR_ID, `service ${name}: too many clusters (${this.maxClusters})`);
    this.log.info({ cluster: victim.name }, 'cluster dropped: cluster limit reached');
    this.drop(victim);
  }

  private entries(name: string, versions: Map<string, Node[]>): HostEntry[] {
    const out: HostEntry[] = [];
    const order = [...versions.keys()].sort();
    for (const v of order) {
      for (const node of versions.get(v)!) {
        const spec = specFromNode(node, (m) => this.log.warn({ cluster: name }, m));
        spec.version = v;
        const path = node.metadata?.[HEALTH_CHECK_PATH_KEY];
        out.push({ spec, healthCheckPath: path ? path : undefined });
      }
    }
    return out;
  }

  private onEvent(event: WatchEvent): void {
    if (this.closed) return;
    this.revision = event.revision;
    const name = event.service?.name;
    if (!name || this.staticClusters.has(name)) return;
    if (this.loading.has(name)) {
      this.dirty.add(name);
      if (!this.dynamic.has(name)) return;
    }
    const cluster = this.dynamic.get(name);
    if (!cluster) return;
    let versions = this.versions.get(name);
    if (!versions) this.versions.set(name, (versions = new Map()));
    const version = event.service.version ?? '';
    const before = versions.get(version);
    if (event.action === 'delete' || !Array.isArray(event.service.nodes) || event.service.nodes.length === 0) {
      if (!before) return;
      versions.delete(version);
    } else {
      // Service metadata or endpoints changed, the nodes did not: nothing to do for the hosts.
      if (before && sameNodes(before, event.service.nodes)) return;
      versions.set(version, event.service.nodes);
    }
    void this.applyHosts(cluster, versions);
  }

  /**
   * Makes the cluster's hosts those of `versions`. Hosts that exist are updated in place and gone
   * ones removed at once; new hosts are added HOST_APPLY_CHUNK per turn of the event loop, so
   * a change of thousands of nodes never blocks the process for long. A later change for the
   * same cluster takes over from one still being applied. Resolves when the hosts are in place
   * and the first health checks of new hosts are done.
   */
  private async applyHosts(cluster: Cluster, versions: Map<string, Node[]>): Promise<void> {
    const name = cluster.name;
    const generation = (this.applyGeneration.get(name) ?? 0) + 1;
    this.applyGeneration.set(name, generation);
    const entries = this.entries(name, versions);
    const fresh: HostEntry[] = [];
    const kept: HostEntry[] = [];
    for (const e of entries) (cluster.host(hostKey(e.spec.address, e.spec.port)) ? kept : fresh).push(e);
    if (fresh.length > HOST_APPLY_CHUNK) {
      for (let added = 0; added < fresh.length - HOST_APPLY_CHUNK; ) {
        added += HOST_APPLY_CHUNK;
        void cluster.setHosts(kept.concat(fresh.slice(0, added)));
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (this.applyGeneration.get(name) !== generation || cluster.closed || this.closed) return;
      }
    }
    await cluster.setHosts(entries);
  }

  private dropIfIdle(cluster: Cluster): void {
    // Called synchronously from inside the cluster; drop on the next tick so it finishes first.
    queueMicrotask(() => {
      if (this.dynamic.get(cluster.name) !== cluster || this.loading.has(cluster.name)) return;
      if (cluster.rqActive > 0 || cluster.hosts().length > 0) return;
      this.log.debug({ cluster: cluster.name }, 'cluster dropped: no hosts left');
      this.drop(cluster);
    });
  }

  private drop(cluster: Cluster): void {
    if (this.dynamic.get(cluster.name) !== cluster) return;
    this.dynamic.delete(cluster.name);
    this.versions.delete(cluster.name);
    this.applyGeneration.delete(cluster.name);
    void cluster.close(this.closeGraceMs);
    this.removeStats(cluster.name);
    this.s.removed.inc();
    this.s.active.set(this.activeCount());
  }

  /**
   * Removes `cluster.<name>.*` stats. A cluster named `a` must not take `cluster.a.b.*` of a
   * live cluster `a.b` with it, so when such a cluster exists only the names of `a`'s own stat
   * families go.
   */
  private removeStats(name: string): void {
    const prefix = clusterStatPrefix(name);
    let nested = false;
    for (const other of [...this.staticClusters.keys(), ...this.dynamic.keys()]) {
      if (other.startsWith(`${name}.`)) {
        nested = true;
        break;
      }
    }
    if (!nested) {
      this.store.removePrefix(prefix);
      return;
    }
    const own = new RegExp(`^${escapeRegExp(prefix)}(?:upstream_|membership_|outlier_detection\\.|health_check\\.|circuit_breakers\\.|lb_|ssl\\.)`);
    for (const stat of this.store.list({ filter: own })) this.store.removePrefix(stat.name);
    for (const h of this.store.listHistograms({ filter: own })) this.store.removePrefix(h.name);
  }
}

/** True when both lists hold the same nodes (id, address, port, metadata), in any order. */
function sameNodes(a: readonly Node[], b: readonly Node[]): boolean {
  if (a.length !== b.length) return false;
  const byId = new Map(a.map((n) => [n.id, n]));
  if (byId.size !== a.length) return false;
  for (const n of b) {
    const o = byId.get(n.id);
    if (!o || o.address !== n.address || o.port !== n.port) return false;
    const om = o.metadata ?? {};
    const nm = n.metadata ?? {};
    const keys = Object.keys(nm);
    if (keys.length !== Object.keys(om).length || keys.some((k) => om[k] !== nm[k])) return false;
  }
  return true;
}


function staticEntry(cluster: string, index: number, h: string | StaticHostConfig, warn: (m: string) => void): HostEntry {
  const where = `static cluster ${cluster}: hosts[${index}]`;
  if (typeof h === 'string') {
    const hp = tryParseAddress(h, { target: true });
    if (!hp) throw new Error(`${where}: "${h}" is not host:port`);
    return {
      spec: { address: hp.host, port: hp.port, nodeId: h, hostname: hp.host, metadata: {}, weight: 1, zone: '', region: '', canary: false },
    };
  }
  if (!h || typeof h !== 'object') throw new Error(`${where}: must be "host:port" or an object`);
  if (typeof h.address !== 'string' || h.address === '') throw new Error(`${where}.address: required`);
  if (!Number.isInteger(h.port) || h.port < 1 || h.port > 65535) throw new Error(`${where}.port: must be an integer from 1 to 65535`);
  const metadata = { ...(h.metadata ?? {}) };
  const spec: HostSpec = {
    address: h.address,
    port: h.port,
    nodeId: `${h.address}:${h.port}`,
    hostname: h.hostname ?? h.address,
    metadata,
    weight: parseWeight(h.weight ?? metadata.weight, (m) => warn(`${where}: ${m}`)),
    zone: h.zone ?? metadata.zone ?? '',
    region: h.region ?? metadata.region ?? '',
    canary: h.canary ?? metadata.canary === 'true',
  };
  const path = metadata[HEALTH_CHECK_PATH_KEY];
  return { spec, healthCheckPath: path ? path : undefined };
}
