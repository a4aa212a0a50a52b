/**
 * What the framework client needs from the data-plane core: pick a host of a service for one
 * attempt, then report how the attempt went. The cluster manager (src/core/upstream/cluster-manager.ts)
 * implements it; every outbound call of the gateway, the sidecar and the framework goes through it.
 */

import type { buildConnector, Dispatcher } from 'undici';
import type { LB_POLICIES } from '../../base/options/schema.js';
import type { RetryBudget } from './retry-budget.js';

/** A load-balancing policy: one of the schema's LB_POLICIES. */
export type LbPolicy = (typeof LB_POLICIES)[number];

export type Priority = 'default' | 'high';

/** How one attempt ended, as the transport saw it. */
export type AttemptOutcome =
  | { kind: 'response'; status: number }
  | { kind: 'connect_failure' } // refused, unreachable, DNS: nothing was sent
  | { kind: 'reset' } // connection dropped mid-request
  // No answer in time. perTry: the try's own budget (--client_per_try_timeout) ran out, not the
  // call's; counted as upstream_rq_per_try_timeout instead of upstream_rq_timeout.
  | { kind: 'timeout'; perTry?: boolean }
  // Given up for a reason that is not the host's (the client went away, a request undici refused
  // to send): not an error of the host, not fed to outlier detection.
  | { kind: 'cancelled' };

export interface UpstreamTarget {
  /** host:port key of the host, as admin /clusters prints it. */
  readonly key: string;
  readonly address: string;
  readonly port: number;
  readonly nodeId: string;
  readonly metadata: Readonly<Record<string, string>>;
  /**
   * The host's keep-alive connection pool (undici). The transport sends through it, so the
   * host's cx_* stats and the max_connections circuit breaker see every connection.
   */
  readonly dispatcher: Dispatcher;
  /**
   * How the pool connects when it is not plain (mutual TLS to a node that serves it, with its
   * identity checked; in strict mode a plain node is refused): a connection made outside the pool
   * (a proxied upgrade's) goes through it too. Undefined: plain.
   */
  readonly connector?: buildConnector.connector;
  /**
   * Connections made outside the pool (a gRPC channel's) report here, so the host's cx_* stats
   * and its cluster's upstream_cx_* count them like the pool's.
   */
  connectionOpened?(): void;
  connectionClosed?(): void;
  connectionFailed?(): void;
  /**
   * Runs `close` once when the host leaves its cluster or the cluster closes. Returns what
   * forgets it (the thing was closed some other way), or undefined, not keeping it, when the host
   * was already closed.
   */
  onClose?(close: () => void): (() => void) | undefined;
}

export interface UpstreamLease {
  readonly target: UpstreamTarget;
  /** Must be called exactly once per lease. */
  release(outcome: AttemptOutcome, durationMs: number): void;
}

export interface AcquireOptions {
  /** Host keys already tried in this call; avoided when another host is available. */
  exclude?: ReadonlySet<string>;
  priority?: Priority;
  /** True when this attempt is a retry (counts against max_retries). */
  retry?: boolean;
  /**
   * True when this attempt is a hedge: a second try sent while the first still waits. Set with
   * `retry` (it counts against max_retries), but counted as upstream_rq_hedged, not upstream_rq_retry.
   */
  hedge?: boolean;
  /**
   * The call's previous try was never sent (connect_failure: refused, unreachable). A retry then
   * costs the service nothing, so it is counted as upstream_rq_retry but not against max_retries:
   * a node that dies under load does not turn its refused connections into breaker overflows.
   */
  afterConnectFailure?: boolean;
  /**
   * A retry budget of the caller's own (a route's) that replaces the cluster's for this retry;
   * checked against the cluster's active requests and retries, under max_retries as always.
   */
  retryBudget?: RetryBudget;
  /** Call this exact node (host:port) instead of load balancing (/rpc `address`). */
  address?: string;
  /**
   * Only the hosts of this registry Version of the service (a route's backendRef `version`): the
   * load balancer picks among them, and none is a 503. Ignored with `address`.
   */
  version?: string;
  /**
   * The host a route's session is pinned to (its key and node id, src/edge/routes/session.ts):
   * taken when it is one of this call's candidates (of `version`, healthy, not in `exclude`),
   * else the load balancer picks as usual. Never a way to reach a host the cluster does not hold.
   */
  prefer?: { key: string; nodeId: string };
}

export interface UpstreamSelector {
  /**
   * Resolves a host for one attempt. Rejects with a MeshError:
   * 404 when the service is unknown, 503 when no healthy host or a circuit breaker is open.
   */
  acquire(service: string, options?: AcquireOptions): Promise<UpstreamLease>;
  /**
   * The same without a promise when the service's hosts are already known (the common case on a
   * hot path); undefined when acquire() has work to wait for. Throws what acquire() rejects with.
   */
  acquireNow?(service: string, options?: AcquireOptions): UpstreamLease | undefined;
}

// ---- Read-only view for admin /clusters (rendered by src/admin, produced by src/core/upstream) ----

export interface HostStatsSnapshot {
  cx_active: number;
  cx_connect_fail: number;
  cx_total: number;
  rq_active: number;
  rq_error: number;
  rq_success: number;
  rq_timeout: number;
  rq_total: number;
}

export interface HostSnapshot {
  address: string;
  port: number;
  hostname: string;
  stats: HostStatsSnapshot;
  failedActiveHc: boolean;
  failedOutlierCheck: boolean;
  weight: number;
  region: string;
  zone: string;
  canary: boolean;
  /** 0..100, or -1 when the last interval had too little data. */
  successRate: number;
  /** The registry Version of the service this host serves (`v1`, `v2` of a canary); '' or absent for a static host. */
  version?: string;
  /** The node serves mutual TLS (says mtls=true): a process with --mtls calls it over mutual TLS. */
  mtls?: boolean;
}

export interface CircuitBreakerThresholds {
  maxConnections: number;
  maxPendingRequests: number;
  maxRequests: number;
  maxRetries: number;
}

export interface ClusterSnapshot {
  name: string;
  addedViaApi: boolean;
  /** Present only when outlier detection is enabled; -1 values when too little data. */
  outlier?: { successRateAverage: number; successRateEjectionThreshold: number };
  circuitBreakers: { default: CircuitBreakerThresholds; high: CircuitBreakerThresholds };
  hosts: HostSnapshot[];
}

export interface ClusterManagerView {
  /** `static` without dynamic discovery, else the registry revision last applied. */
  versionInfo(): string;
  /** Clusters in a stable order (by name). */
  clusters(): ClusterSnapshot[];
}
