/**
 * One cluster: the hosts of one backend service (or of one static cluster), its load balancer,
 * circuit breakers, outlier detector and health checker, and its `cluster.<name>.*` stats.
 */
import type { Dispatcher, buildConnector } from 'undici';
import type { Logger } from 'pino';
import { ERROR_IDS, badRequest, flagged, notFound, serviceUnavailable } from '../../base/errors.js';
import { declareStats, type Counter, type FamilyStats, type Histogram, type StatsScope, type StatsStore } from '../../base/stats/store.js';
import { CircuitBreakers } from './circuit-breaker.js';
import { retryOverflow } from './retry-budget.js';
import type { ResolvedClusterSettings } from './config.js';
import { HealthChecker } from './health-check.js';
import { Host, hostKey, type HostConnectionListener, type HostSpec } from './host.js';
import { tryParseAddress } from '../../base/util/address.js';
import { candidates, createBalancer, type LoadBalancer } from './load-balancer.js';
import { OutlierDetector } from './outlier.js';
import { mtlsClientStats, mtlsConnector, servesMtls, type MtlsClientStats } from '../../base/mtls/connector.js';
import { spiffeIdOf, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { AcquireOptions, AttemptOutcome, ClusterSnapshot, Priority, UpstreamLease } from './types.js';

export const ERROR_ID = ERROR_IDS.client;


/** A host as the cluster is told about it, plus the health-check path it should get (if any). */
export interface HostEntry {
  spec: HostSpec;
  healthCheckPath?: string;
}

export interface ClusterOptions {
  name: string;
  addedViaApi: boolean;
  settings: ResolvedClusterSettings;
  stats: StatsStore;
  log: Logger;
  hcLog: Logger;
  /** Dispatcher for health-check requests (shared; not the hosts' pools). */
  hcDispatcher: Dispatcher;
  /** Called when the cluster has no hosts left and no active request (a registry cluster may go). */
  onIdleEmpty?: (cluster: Cluster) => void;
  random?: () => number;
  now?: () => number;
  /**
   * This process's workload certificate (--mtls permissive or strict), read when a host's pool is
   * made: hosts whose node serves mutual TLS are called with it, and must present the cluster's
   * service identity (src/base/mtls/connector.ts).
   */
  workloadTls?: () => WorkloadTls | undefined;
}

/**
 * `cluster.<name>.*` (the upstream_rq_<N>xx counters are made per class, rqClassStat). Outlier
 * detection, health checks and circuit breakers declare theirs below this scope.
 */
export const CLUSTER_STATS = {
  counters: {
    rqTotal: 'upstream_rq_total',
    rqCompleted: 'upstream_rq_completed',
    rqTimeout: 'upstream_rq_timeout',
    rqPerTryTimeout: 'upstream_rq_per_try_timeout',
    rqHedged: 'upstream_rq_hedged',
    rqRetry: 'upstream_rq_retry',
    rqRetryOverflow: 'upstream_rq_retry_overflow',
    rqPendingOverflow: 'upstream_rq_pending_overflow',
    rqRxReset: 'upstream_rq_rx_reset',
    rqCancelled: 'upstream_rq_cancelled',
    cxTotal: 'upstream_cx_total',
    cxConnectFail: 'upstream_cx_connect_fail',
    cxDestroy: 'upstream_cx_destroy',
    cxNoneHealthy: 'upstream_cx_none_healthy',
    membershipChange: 'membership_change',
    lbHealthyPanic: 'lb_healthy_panic',
  },
  gauges: {
    rqActive: 'upstream_rq_active',
    rqPendingActive: 'upstream_rq_pending_active',
    cxActive: 'upstream_cx_active',
    membershipTotal: 'membership_total',
    membershipHealthy: 'membership_healthy',
    /** Hosts whose node serves mutual TLS (says mtls=true): a process with --mtls calls them over it. */
    membershipMtls: 'membership_mtls',
  },
} as const;

/** `cluster.<name>.upstream_rq_<cls>xx` */
const rqClassStat = (cls: number): string => `upstream_rq_${cls}xx`;

/** A cluster's stats scope: `cluster.<name>.` */
export const clusterStatPrefix = (name: string): string => `cluster.${name}.`;

type ClusterStats = FamilyStats<typeof CLUSTER_STATS> & { rqClass: Map<number, Counter> };

export class Cluster {
  readonly name: string;
  readonly addedViaApi: boolean;
  readonly settings: ResolvedClusterSettings;
  /** `cluster.<name>.` */
  readonly statScope: StatsScope;
  readonly breakers: CircuitBreakers;
  readonly outlier?: OutlierDetector;
  /** Created when the first host needs active checking. */
  healthChecker?: HealthChecker;
  /**
   * Attempt latency (ms). Kept here, not in the process stats store, so that a dropped cluster
   * leaves nothing behind (the store cannot remove histograms).
   */
  readonly rqTime: Histogram;
  /** Active requests (leases not yet released), all priorities. */
  rqActive = 0;
  lastUsed: number;
  closed = false;

  private hostList: Host[] = [];
  /** The healthy hosts of hostList, kept by updateMembership() on every health or host change. */
  private healthyList: Host[] = [];
  private readonly hostMap = new Map<string, Host>();
  private readonly lb: LoadBalancer<Host>;
  private readonly s: ClusterStats;
  private readonly log: Logger;
  private readonly hcLog: Logger;
  private readonly hcDispatcher: Dispatcher;
  private readonly onIdleEmpty?: (cluster: Cluster) => void;
  private readonly now: () => number;
  private readonly listener: HostConnectionListener;
  private readonly workloadTls?: () => WorkloadTls | undefined;
  /** The ssl.* stats, made with the first host that may speak TLS. */
  private tlsStats?: MtlsClientStats;
  private closing: Promise<void> | undefined;

  constructor(options: ClusterOptions) {
    this.name = options.name;
    this.addedViaApi = options.addedViaApi;
    this.settings = options.settings;
    this.log = options.log;
    this.hcLog = options.hcLog;
    this.hcDispatcher = options.hcDispatcher;
    this.onIdleEmpty = options.onIdleEmpty;
    this.now = options.now ?? Date.now;
    this.workloadTls = options.workloadTls;
    this.lastUsed = this.now();
    const st = (this.statScope = options.stats.scope(clusterStatPrefix(this.name)));
    this.s = {
      ...declareStats(st, CLUSTER_STATS),
      rqClass: new Map([2, 3, 4, 5].map((c) => [c, st.counter(rqClassStat(c))] as const)),
    };
    // Fine buckets: admin /traffic reads them (mesh stat's percentiles).
    this.rqTime = st.histogram('upstream_rq_time', { fine: true });
    this.breakers = new CircuitBreakers(this.settings.circuitBreakers, this.settings.retryBudgets, st);
    this.lb = createBalancer<Host>(this.settings.lbPolicy, options.random);
    if (this.settings.outlierDetection) {
      this.outlier = new OutlierDetector({
        config: this.settings.outlierDetection,
        stats: st,
        cluster: this.name,
        hosts: () => this.hostList,
        onChange: () => this.updateMembership(),
        log: this.log,
        now: this.now,
        random: options.random,
      });
      this.outlier.start();
    }
    this.listener = {
      connect: () => {
        this.s.cxTotal.inc();
        this.s.cxActive.inc();
        this.breakers.connections(this.s.cxActive.value);
      },
      disconnect: () => {
        if (this.s.cxActive.value > 0) this.s.cxActive.dec();
        this.s.cxDestroy.inc();
        this.breakers.connections(this.s.cxActive.value);
      },
      connectFailure: () => {
        this.s.cxConnectFail.inc();
      },
    };
  }

  hosts(): readonly Host[] {
    return this.hostList;
  }

  host(key: string): Host | undefined {
    return this.hostMap.get(key);
  }

  /**
   * Makes the host set equal to `entries` (in that order; duplicates of a host:port keep the
   * first). Kept hosts are updated in place (stats and health survive), new hosts get a pool
   * (and a first health check), removed hosts have their pool closed gracefully.
   * Resolves when the first health checks of new hosts are done.
   */
  setHosts(entries: readonly HostEntry[]): Promise<void> {
    if (this.closed) return Promise.resolve();
    const next: Host[] = [];
    const seen = new Map<string, Host>();
    const checks: Promise<void>[] = [];
    let changed = false;
    for (const entry of entries) {
      const key = hostKey(entry.spec.address, entry.spec.port);
      if (seen.has(key)) continue;
      let host = this.hostMap.get(key);
      if (host) host.update(entry.spec);
      else {
        try {
          host = this.createHost(entry.spec);
        } catch (err) {
          // An address no URL can hold (the registry refuses those; a custom source might not).
          this.log.warn({ cluster: this.name, host: key, err: (err as Error).message }, 'host skipped: invalid address');
          continue;
        }
        this.hostMap.set(key, host);
        changed = true;
        this.log.debug({ cluster: this.name, host: key }, 'host added');
      }
      seen.set(key, host);
      next.push(host);
      const path = entry.healthCheckPath ?? (this.settings.healthCheckConfigured ? this.settings.healthCheck.path : undefined);
      if (path !== undefined) checks.push(this.checker().set(host, path));
      else if (this.healthChecker?.isChecked(host)) this.healthChecker.remove(host);
    }
    for (const [key, host] of [...this.hostMap]) {
      if (seen.has(key)) continue;
      this.hostMap.delete(key);
      this.retireHost(host);
      changed = true;
      this.log.debug({ cluster: this.name, host: key }, 'host removed');
    }
    this.hostList = next;
    if (changed) this.s.membershipChange.inc();
    this.updateMembership();
    if (next.length === 0 && this.rqActive === 0) this.onIdleEmpty?.(this);
    return Promise.all(checks).then(() => undefined);
  }

  private checker(): HealthChecker {
    if (!this.healthChecker) {
      this.healthChecker = new HealthChecker({
        config: this.settings.healthCheck,
        cluster: this.name,
        stats: this.statScope,
        dispatcher: this.hcDispatcher,
        // A node that serves mutual TLS is checked over mutual TLS, its identity checked too.
        dispatcherFor: this.workloadTls ? (host) => (servesMtls(host.metadata) && this.workloadTls?.() ? host.checkDispatcher(() => this.mtlsConnector(host)) : undefined) : undefined,
        onChange: () => this.updateMembership(),
        log: this.hcLog,
      });
    }
    return this.healthChecker;
  }

  private createHost(spec: HostSpec): Host {
    return new Host(
      spec,
      {
        connections: this.breakers.poolSize(),
        connectTimeoutMs: this.settings.connectTimeoutMs,
        keepAliveTimeoutMs: this.settings.keepAliveTimeoutMs,
        connector: this.workloadTls ? (host) => this.mtlsConnector(host) : undefined,
      },
      this.listener,
    );
  }

  /** The connector of a host's pool under --mtls (the identity it must present is this cluster's service's), or undefined: plain. */
  private mtlsConnector(host: Host): buildConnector.connector | undefined {
    const workload = this.workloadTls?.();
    if (!workload || workload.mode === 'off') return undefined;
    this.tlsStats ??= mtlsClientStats(this.statScope);
    return mtlsConnector({
      workload,
      expected: spiffeIdOf(workload.trustDomain, this.name),
      // A static cluster's hosts are not mesh nodes unless they say so.
      strictApplies: this.addedViaApi,
      metadata: () => host.metadata,
      key: host.key,
      connectTimeoutMs: this.settings.connectTimeoutMs,
      stats: this.tlsStats,
      log: this.log,
    });
  }

  private retireHost(host: Host): void {
    host.removed = true;
    this.healthChecker?.remove(host);
    this.outlier?.hostRemoved(host);
    this.lb.forget?.(host);
    void host.close();
  }

  updateMembership(): void {
    this.healthyList = this.hostList.filter((h) => h.healthy());
    this.s.membershipTotal.set(this.hostList.length);
    this.s.membershipHealthy.set(this.healthyList.length);
    this.s.membershipMtls.set(this.hostList.filter((h) => servesMtls(h.metadata)).length);
  }

  /**
   * Picks a host and opens a lease, or throws a MeshError: 503 when no host can be used or a
   * circuit breaker is open, 400 for a malformed `address`.
   */
  acquire(service: string, options: AcquireOptions = {}): UpstreamLease {
    if (this.closed) throw serviceUnavailable(ERROR_ID, `service ${service}: cluster closed`);
    const priority: Priority = options.priority === 'high' ? 'high' : 'default';
    const retry = options.retry === true;
    // What counts against max_retries: not a retry of a try that was never sent.
    const budgeted = retry && options.afterConnectFailure !== true;
    let host: Host | undefined;
    if (options.address !== undefined) {
      const hp = tryParseAddress(options.address, { target: true });
      if (!hp) throw badRequest(ERROR_ID, `address ${options.address}: must be host:port`);
      host = this.hostMap.get(hostKey(hp.host, hp.port));
      // Only a node of the service: a public front end must not become a way to reach any host.
      if (!host) throw notFound(ERROR_ID, `service ${service}: no node at ${options.address}`);
    } else {
      const version = options.version;
      // A version (a route's backend): the hosts of that version only, with their own panic threshold.
      const all = version === undefined ? this.hostList : this.hostList.filter((h) => h.version === version);
      const healthy = version === undefined ? this.healthyList : this.healthyList.filter((h) => h.version === version);
      const set = candidates(all, this.settings.panicThresholdPercent, options.exclude, healthy);
      if (set.panic) this.s.lbHealthyPanic.inc();
      const prefer = options.prefer;
      host = (prefer && set.hosts.find((h) => h.key === prefer.key && h.nodeId === prefer.nodeId && h.healthy() && !options.exclude?.has(h.key))) || this.lb.pick(set.hosts);
      if (!host) {
        this.s.cxNoneHealthy.inc();
        if (version !== undefined && all.length === 0) throw flagged(serviceUnavailable(ERROR_ID, `service ${service}: no host of version ${version}`), 'UH');
        throw flagged(serviceUnavailable(ERROR_ID, `service ${service}: no healthy upstream`), 'UH');
      }
      // A hedge goes to another host or not at all.
      if (options.hedge && options.exclude?.has(host.key)) throw flagged(serviceUnavailable(ERROR_ID, `service ${service}: no other host for a hedged try`), 'UH');
    }
    const target = host;
    const poolSize = this.breakers.poolSize();
    const waits = target.stats.rq_active >= poolSize;
    const broken = this.breakers.check(priority, budgeted, waits, options.retryBudget);
    if (broken) {
      if (broken === 'max_retries' || broken === 'retry_budget') {
        // Not made: the caller answers with the previous try's result (isRetryOverflow).
        this.s.rqRetryOverflow.inc();
        throw retryOverflow(ERROR_ID, broken);
      }
      this.s.rqPendingOverflow.inc();
      throw flagged(serviceUnavailable(ERROR_ID, `circuit breaker open: ${broken}`), 'UO');
    }
    this.breakers.start(priority, budgeted, waits);
    if (waits) this.s.rqPendingActive.set(this.breakers.pending);
    target.stats.rq_total++;
    target.stats.rq_active++;
    this.rqActive++;
    this.s.rqTotal.inc();
    this.s.rqActive.inc();
    if (options.hedge) this.s.rqHedged.inc();
    else if (retry) this.s.rqRetry.inc();
    this.lastUsed = this.now();

    let released = false;
    return {
      target,
      release: (outcome: AttemptOutcome, durationMs: number) => {
        if (released) return;
        released = true;
        this.finish(target, priority, budgeted, outcome, durationMs);
      },
    };
  }

  private finish(
    host: Host,
    priority: Priority,
    budgeted: boolean,
    outcome: AttemptOutcome,
    durationMs: number,
  ): void {
    const waited = host.stats.rq_active > this.breakers.poolSize();
    this.breakers.end(priority, budgeted, waited);
    if (waited) this.s.rqPendingActive.set(this.breakers.pending);
    if (host.stats.rq_active > 0) host.stats.rq_active--;
    if (this.rqActive > 0) this.rqActive--;
    if (this.s.rqActive.value > 0) this.s.rqActive.dec();
    this.s.rqCompleted.inc();
    if (Number.isFinite(durationMs) && durationMs >= 0) this.rqTime.record(durationMs);

    switch (outcome.kind) {
      case 'response': {
        const cls = Math.floor(outcome.status / 100);
        if (outcome.status >= 500) host.stats.rq_error++;
        else host.stats.rq_success++;
        if (cls >= 1 && cls <= 5) {
          let c = this.s.rqClass.get(cls);
          if (!c) this.s.rqClass.set(cls, (c = this.statScope.counter(rqClassStat(cls))));
          c.inc();
        }
        break;
      }
      case 'timeout':
        host.stats.rq_timeout++;
        host.stats.rq_error++;
        // A per-try timeout (the call may go on on another host) is Envoy's upstream_rq_per_try_timeout.
        if (outcome.perTry) this.s.rqPerTryTimeout.inc();
        else this.s.rqTimeout.inc();
        this.s.rqClass.get(5)!.inc(); // charged as 504, as Envoy does
        break;
      case 'reset':
        host.stats.rq_error++;
        this.s.rqRxReset.inc();
        this.s.rqClass.get(5)!.inc(); // charged as 503
        break;
      case 'connect_failure':
        host.stats.rq_error++;
        this.s.rqClass.get(5)!.inc(); // charged as 503
        break;
      case 'cancelled':
        // Not the host's doing: neither success nor failure, not seen by outlier detection.
        this.s.rqCancelled.inc();
        break;
    }
    if (outcome.kind !== 'cancelled' && !host.removed) this.outlier?.record(host, outcome);
    this.lastUsed = this.now();
    if (this.rqActive === 0 && this.hostList.length === 0 && !this.closed) this.onIdleEmpty?.(this);
  }

  snapshot(): ClusterSnapshot {
    const snap: ClusterSnapshot = {
      name: this.name,
      addedViaApi: this.addedViaApi,
      circuitBreakers: {
        // max_retries as the retries allowed now (the retry budget's ceiling under max_retries), as Envoy's /clusters.
        default: { ...this.breakers.thresholds('default'), maxRetries: this.breakers.retryLimit('default') },
        high: { ...this.breakers.thresholds('high'), maxRetries: this.breakers.retryLimit('high') },
      },
      hosts: this.hostList.map((h) => h.snapshot()),
    };
    if (this.outlier) {
      snap.outlier = {
        successRateAverage: this.outlier.successRateAverage,
        successRateEjectionThreshold: this.outlier.successRateEjectionThreshold,
      };
    }
    return snap;
  }

  /** Stops timers and checks, closes every pool (in-flight requests get up to graceMs). */
  close(graceMs = 5_000): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.outlier?.stop();
    this.healthChecker?.close();
    const pools: Promise<void>[] = [];
    for (const h of this.hostList) {
      h.removed = true;
      pools.push(h.close(graceMs));
    }
    this.closing = Promise.all(pools).then(() => undefined);
    return this.closing;
  }
}
