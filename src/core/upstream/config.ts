/**
 * Configuration of the data-plane core: clusters, circuit breakers, outlier detection and active
 * health checking, with Envoy's defaults unless noted. All times are milliseconds.
 */
import type { CircuitBreakerThresholds, LbPolicy, Priority } from './types.js';
import { LB_POLICIES } from '../../base/options/schema.js';
import { checkRetryBudget, DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from './retry-budget.js';

/**
 * Envoy's circuit-breaker defaults, 1024 connections, pending and requests, but for max_retries:
 * Envoy's 3 is a fixed limit for a cluster without a retry budget. mesh gives every cluster a
 * budget (20 %, at least 3: retry-budget.ts) and keeps max_retries as a ceiling above it, as high
 * as max_requests, so that by default the budget decides.
 */
export const DEFAULT_CIRCUIT_BREAKERS: Readonly<CircuitBreakerThresholds> = Object.freeze({
  maxConnections: 1024,
  maxPendingRequests: 1024,
  maxRequests: 1024,
  maxRetries: 1024,
});

/** One priority's breakers as configured: the thresholds and the retry budget, each field optional. */
export type PriorityBreakersConfig = Partial<CircuitBreakerThresholds> & { retryBudget?: Partial<RetryBudgetConfig> };

export type CircuitBreakersConfig = Partial<Record<Priority, PriorityBreakersConfig>>;

export interface OutlierDetectionConfig {
  /** How often success rates are computed and ejected hosts are checked for return. Default 10s. */
  intervalMs: number;
  /** A host is ejected for baseEjectionTimeMs × (number of times it was ejected). Default 30s. */
  baseEjectionTimeMs: number;
  /** Upper bound of one ejection. Default 300s. */
  maxEjectionTimeMs: number;
  /**
   * Most hosts of a cluster that may be ejected at once, in percent. Default 10. As in current
   * Envoy, at least one host may always be ejected when this is above 0 (so a 2-host cluster can
   * eject one); 0 disables ejection.
   */
  maxEjectionPercent: number;
  /**
   * Consecutive 5xx answers that eject a host. Without splitExternalLocalOriginErrors, the
   * host's local-origin errors count as 5xx too (connect failure and reset as 503, timeout as
   * 504). Default 5; 0 disables.
   */
  consecutive5xx: number;
  /** Chance (percent) that a consecutive-5xx detection ejects. Default 100. */
  enforcingConsecutive5xx: number;
  /**
   * Consecutive gateway failures (502, 503, 504 answers; without splitExternalLocalOriginErrors
   * also connect failures, resets and timeouts) that eject a host. Default 5; 0 disables.
   * Checked before consecutive5xx, so a run of gateway failures is reported under this name.
   */
  consecutiveGatewayFailure: number;
  /** Chance (percent) that a consecutive-gateway-failure detection ejects. Default 100 (Envoy: 0). */
  enforcingConsecutiveGatewayFailure: number;
  /**
   * Envoy's split_external_local_origin_errors. Default false: local-origin errors (connect
   * failure, reset, timeout, per-try timeout) count as 503/504 answers. True: they count only
   * towards consecutiveLocalOriginFailure, and the 5xx, gateway-failure and success-rate detectors
   * see only the answers the host sent.
   */
  splitExternalLocalOriginErrors: boolean;
  /** With splitExternalLocalOriginErrors: consecutive local-origin errors that eject a host. Default 5; 0 disables. */
  consecutiveLocalOriginFailure: number;
  /** Chance (percent) that a consecutive-local-origin-failure detection ejects. Default 100. */
  enforcingConsecutiveLocalOriginFailure: number;
  /** Success-rate detection needs at least this many hosts with enough volume. Default 5. */
  successRateMinimumHosts: number;
  /** A host needs this many requests in the interval for its success rate to count. Default 100. */
  successRateRequestVolume: number;
  /** Ejection threshold = mean − factor × stdev of the success rates. Default 1.9 (Envoy's 1900/1000). */
  successRateStdevFactor: number;
  /** Chance (percent) that a success-rate detection ejects. Default 100; 0 disables. */
  enforcingSuccessRate: number;
}

export const DEFAULT_OUTLIER_DETECTION: Readonly<OutlierDetectionConfig> = Object.freeze({
  intervalMs: 10_000,
  baseEjectionTimeMs: 30_000,
  maxEjectionTimeMs: 300_000,
  maxEjectionPercent: 10,
  consecutive5xx: 5,
  enforcingConsecutive5xx: 100,
  consecutiveGatewayFailure: 5,
  enforcingConsecutiveGatewayFailure: 100,
  splitExternalLocalOriginErrors: false,
  consecutiveLocalOriginFailure: 5,
  enforcingConsecutiveLocalOriginFailure: 100,
  successRateMinimumHosts: 5,
  successRateRequestVolume: 100,
  successRateStdevFactor: 1.9,
  enforcingSuccessRate: 100,
});

export interface HealthCheckConfig {
  /**
   * Path to GET. For a registry cluster, a node's metadata `health_check_path` overrides it; a host
   * with neither is not actively checked.
   */
  path?: string;
  /** Default 10s. */
  intervalMs: number;
  /** Default 2s: no answer within it is a failure. */
  timeoutMs: number;
  /** Consecutive failures that mark a healthy host failed_active_hc. Default 3. */
  unhealthyThreshold: number;
  /** Consecutive successes that bring a failed host back. Default 2. */
  healthyThreshold: number;
  /** Statuses that pass, as [start, end) ranges. Default [[200, 201]] (only 200, as Envoy). */
  expectedStatuses: Array<[number, number]>;
  /** Host header; default the host's address:port. */
  host?: string;
}

export const DEFAULT_HEALTH_CHECK: Readonly<Omit<HealthCheckConfig, 'path' | 'host'>> = Object.freeze({
  intervalMs: 10_000,
  timeoutMs: 2_000,
  unhealthyThreshold: 3,
  healthyThreshold: 2,
  expectedStatuses: [[200, 201]] as Array<[number, number]>,
});

/** Settings shared by every kind of cluster. */
export interface ClusterSettings {
  lbPolicy?: LbPolicy;
  circuitBreakers?: CircuitBreakersConfig;
  /** `false` (or absent on a static cluster) disables outlier detection. */
  outlierDetection?: Partial<OutlierDetectionConfig> | false;
  /** Active health checking; absent or `false`: only nodes whose metadata names `health_check_path`. */
  healthCheck?: Partial<HealthCheckConfig> | false;
  /**
   * Envoy's panic threshold (percent): when fewer than this share of the hosts are healthy, the
   * load balancer balances over all hosts, healthy or not. Default 50; 0 disables panic mode (then
   * a cluster with no healthy host answers 503).
   */
  panicThresholdPercent?: number;
  /** TCP connect timeout of the host pools. Default 5s (Envoy's connect_timeout). */
  connectTimeoutMs?: number;
  /** Idle keep-alive time of a pooled connection. Default 4s (undici's default; servers' hints win). */
  keepAliveTimeoutMs?: number;
}

export interface StaticHostConfig {
  address: string;
  port: number;
  weight?: number;
  zone?: string;
  region?: string;
  canary?: boolean;
  hostname?: string;
  metadata?: Record<string, string>;
}

export interface StaticClusterConfig extends ClusterSettings {
  name: string;
  /** `host:port` strings (IPv6 as `[::1]:80`) or host objects. */
  hosts: Array<string | StaticHostConfig>;
}

export interface ClusterManagerDefaults extends ClusterSettings {}

/** Fully resolved settings of one cluster. */
export interface ResolvedClusterSettings {
  lbPolicy: LbPolicy;
  circuitBreakers: Record<Priority, CircuitBreakerThresholds>;
  retryBudgets: Record<Priority, RetryBudgetConfig>;
  outlierDetection?: OutlierDetectionConfig;
  healthCheck: HealthCheckConfig;
  /** True when the cluster configured health checking itself (path given). */
  healthCheckConfigured: boolean;
  panicThresholdPercent: number;
  connectTimeoutMs: number;
  keepAliveTimeoutMs: number;
}

function positiveInt(value: unknown, fallback: number, what: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new Error(`${what}: must be a non-negative number`);
  return Math.floor(value);
}

function resolveThresholds(input: Partial<CircuitBreakerThresholds> | undefined, base: CircuitBreakerThresholds, what: string): CircuitBreakerThresholds {
  return {
    maxConnections: Math.max(1, positiveInt(input?.maxConnections, base.maxConnections, `${what}.maxConnections`)),
    maxPendingRequests: positiveInt(input?.maxPendingRequests, base.maxPendingRequests, `${what}.maxPendingRequests`),
    maxRequests: positiveInt(input?.maxRequests, base.maxRequests, `${what}.maxRequests`),
    maxRetries: positiveInt(input?.maxRetries, base.maxRetries, `${what}.maxRetries`),
  };
}

/**
 * Merges a cluster's own settings over the manager defaults over the built-in defaults.
 * `outlierDefaultOn`: registry clusters detect outliers unless told not to; static ones only when asked.
 */
export function resolveSettings(
  own: ClusterSettings | undefined,
  defaults: ClusterManagerDefaults | undefined,
  fallbackLb: LbPolicy,
  outlierDefaultOn: boolean,
): ResolvedClusterSettings {
  const lbPolicy = own?.lbPolicy ?? defaults?.lbPolicy ?? fallbackLb;
  if (!(LB_POLICIES as readonly string[]).includes(lbPolicy))
    throw new Error(`lb_policy: unknown policy "${String(lbPolicy)}" (use ${LB_POLICIES.join(', ')})`);

  const cbDefault = resolveThresholds(
    { ...defaults?.circuitBreakers?.default, ...own?.circuitBreakers?.default },
    DEFAULT_CIRCUIT_BREAKERS,
    'circuitBreakers.default',
  );
  const cbHigh = resolveThresholds(
    { ...defaults?.circuitBreakers?.high, ...own?.circuitBreakers?.high },
    DEFAULT_CIRCUIT_BREAKERS,
    'circuitBreakers.high',
  );
  const budget = (p: Priority): RetryBudgetConfig =>
    checkRetryBudget(
      { ...DEFAULT_RETRY_BUDGET, ...defaults?.circuitBreakers?.[p]?.retryBudget, ...own?.circuitBreakers?.[p]?.retryBudget },
      `circuitBreakers.${p}.retryBudget`,
    );

  let outlierDetection: OutlierDetectionConfig | undefined;
  const ownOd = own?.outlierDetection;
  const defOd = defaults?.outlierDetection;
  // Static clusters detect outliers only when they ask for it; registry clusters unless told not to.
  const enabled = ownOd === false ? false : ownOd !== undefined ? true : outlierDefaultOn && defOd !== false;
  if (enabled) {
    const merged = { ...DEFAULT_OUTLIER_DETECTION, ...(defOd || {}), ...(ownOd || {}) };
    for (const [k, v] of Object.entries(merged)) {
      if (k === 'splitExternalLocalOriginErrors') {
        if (typeof v !== 'boolean') throw new Error(`outlierDetection.${k}: must be true or false`);
        continue;
      }
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new Error(`outlierDetection.${k}: must be a non-negative number`);
    }
    if (merged.intervalMs <= 0) throw new Error('outlierDetection.intervalMs: must be above 0');
    outlierDetection = merged;
  }

  const ownHc = own?.healthCheck;
  const defHc = defaults?.healthCheck;
  const healthCheck: HealthCheckConfig = {
    ...DEFAULT_HEALTH_CHECK,
    expectedStatuses: [...DEFAULT_HEALTH_CHECK.expectedStatuses],
    ...(defHc || {}),
    ...(ownHc || {}),
  };
  // `healthCheck: false` on the cluster: no cluster-wide path (node metadata may still name one).
  if (ownHc === false || (defHc === false && ownHc === undefined)) delete healthCheck.path;
  if (healthCheck.intervalMs <= 0) throw new Error('healthCheck.intervalMs: must be above 0');
  if (healthCheck.timeoutMs <= 0) throw new Error('healthCheck.timeoutMs: must be above 0');
  healthCheck.unhealthyThreshold = Math.max(1, Math.floor(healthCheck.unhealthyThreshold));
  healthCheck.healthyThreshold = Math.max(1, Math.floor(healthCheck.healthyThreshold));
  if (healthCheck.path !== undefined && !healthCheck.path.startsWith('/')) healthCheck.path = `/${healthCheck.path}`;

  return {
    lbPolicy,
    circuitBreakers: { default: cbDefault, high: cbHigh },
    retryBudgets: { default: budget('default'), high: budget('high') },
    outlierDetection,
    healthCheck,
    healthCheckConfigured: healthCheck.path !== undefined,
    panicThresholdPercent: Math.min(100, positiveInt(own?.panicThresholdPercent ?? defaults?.panicThresholdPercent, 50, 'panicThresholdPercent')),
    connectTimeoutMs: positiveInt(own?.connectTimeoutMs ?? defaults?.connectTimeoutMs, 5_000, 'connectTimeoutMs') || 5_000,
    keepAliveTimeoutMs: positiveInt(own?.keepAliveTimeoutMs ?? defaults?.keepAliveTimeoutMs, 4_000, 'keepAliveTimeoutMs') || 4_000,
  };
}

/** Manager defaults that give every cluster's priorities this retry budget (--retry_budget_percent, --retry_budget_min). */
export function retryBudgetDefaults(percent: number, minConcurrency: number): ClusterManagerDefaults {
  const retryBudget = { percent, minConcurrency };
  return { circuitBreakers: { default: { retryBudget }, high: { retryBudget } } };
}
