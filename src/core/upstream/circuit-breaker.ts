/**
 * Circuit breakers per priority (default, high), after Envoy. Limits are cluster-wide:
 *
 * - max_requests: active requests of the priority; checked when a host is acquired.
 * - max_retries: active retry attempts of the priority; checked when a retry is acquired.
 * - retry_budget: active retries as a share of the priority's active requests, with a floor
 *   (retry-budget.ts); checked after max_retries, which stays an absolute ceiling.
 * - max_pending_requests: requests waiting for a connection. A host's pool has
 *   max_connections connections carrying one request each, so a host with more leases than
 *   connections has the excess waiting; the cluster keeps the sum and refuses a request that would
 *   wait when the sum is at the limit.
 * - max_connections: the size of every host's pool (the default priority's value; enforced per
 *   host by undici, where Envoy counts it cluster-wide). `cx_open` reports when the cluster's
 *   active connections reach it.
 *
 * Gauges `cluster.<name>.circuit_breakers.<priority>.{cx_open,rq_pending_open,rq_open,rq_retry_open}`
 * are 1 while the breaker is at its limit; `remaining_retries` is how many more retries may start
 * now (the lower of max_retries's and the budget's room), as Envoy's with track_remaining.
 */
import { declareStats, type Gauge, type StatsScope } from '../../base/stats/store.js';
import type { CircuitBreakerThresholds, Priority } from './types.js';
import { RetryBudget, type RetryBudgetConfig } from './retry-budget.js';

/** `cluster.<name>.circuit_breakers.<priority>.*` */
export const CIRCUIT_BREAKER_STATS = {
  gauges: { cxOpen: 'cx_open', rqPendingOpen: 'rq_pending_open', rqOpen: 'rq_open', rqRetryOpen: 'rq_retry_open', remainingRetries: 'remaining_retries' },
} as const;

export type BreakerLimit = 'max_requests' | 'max_retries' | 'retry_budget' | 'max_pending_requests';

interface PriorityState {
  thresholds: CircuitBreakerThresholds;
  budget: RetryBudget;
  requests: number;
  retries: number;
  cxOpen: Gauge;
  rqPendingOpen: Gauge;
  rqOpen: Gauge;
  rqRetryOpen: Gauge;
  remainingRetries: Gauge;
}

export const PRIORITIES: readonly Priority[] = ['default', 'high'];

/**
 * Retries allowed at once with `active` requests in flight: the lower of max_retries and the retry
 * budget's limit (max_retries alone with the budget off). What admin /clusters shows as max_retries.
 */
export function retryLimit(maxRetries: number, budget: RetryBudget, active: number): number {
  return Math.min(maxRetries, budget.limit(active));
}

function retryLimitOf(s: PriorityState): number {
  return retryLimit(s.thresholds.maxRetries, s.budget, s.requests);
}

export class CircuitBreakers {
  private readonly state: Record<Priority, PriorityState>;
  /** Requests waiting for a connection, cluster-wide (estimated from leases per host). */
  pending = 0;

  /** `stats`: the cluster's scope (`cluster.<name>.`). */
  constructor(thresholds: Record<Priority, CircuitBreakerThresholds>, budgets: Record<Priority, RetryBudgetConfig>, stats: StatsScope) {
    const make = (p: Priority): PriorityState => ({
      thresholds: thresholds[p],
      budget: new RetryBudget(budgets[p]),
      requests: 0,
      retries: 0,
      ...declareStats(stats.scope(`circuit_breakers.${p}.`), CIRCUIT_BREAKER_STATS),
    });
    this.state = { default: make('default'), high: make('high') };
    for (const p of PRIORITIES) this.refresh(this.state[p]);
  }

  thresholds(priority: Priority): CircuitBreakerThresholds {
    return this.state[priority].thresholds;
  }

  /**
   * Retries allowed at once now: the lower of max_retries and the retry budget's limit at the
   * requests in flight (max_retries alone with the budget off). Admin /clusters shows it as the
   * priority's max_retries, as Envoy shows a budget's current ceiling: 3 (the budget's minimum)
   * on an idle cluster with the defaults.
   */
  retryLimit(priority: Priority): number {
    return retryLimitOf(this.state[priority]);
  }

  /** Connections per host pool. */
  poolSize(): number {
    return this.state.default.thresholds.maxConnections;
  }

  /**
   * The limit a new request would break, if any. `wouldWait`: the chosen host has no free
   * connection. `budget`: a retry budget that replaces the priority's for this retry (a route's).
   */
  check(priority: Priority, retry: boolean, wouldWait: boolean, budget?: RetryBudget): BreakerLimit | undefined {
    const s = this.state[priority];
    if (retry) {
      if (s.retries >= s.thresholds.maxRetries) return 'max_retries';
      // Worked out from the requests in flight now, before this retry joins them.
      if (!(budget ?? s.budget).admits(s.requests, s.retries)) return 'retry_budget';
    }
    if (s.requests >= s.thresholds.maxRequests) return 'max_requests';
    if (wouldWait && this.pending >= s.thresholds.maxPendingRequests) return 'max_pending_requests';
    return undefined;
  }

  start(priority: Priority, retry: boolean, waits: boolean): void {
    const s = this.state[priority];
    s.requests++;
    if (retry) s.retries++;
    if (waits) this.pending++;
    this.refresh(s);
  }

  end(priority: Priority, retry: boolean, waited: boolean): void {
    const s = this.state[priority];
    s.requests = Math.max(0, s.requests - 1);
    if (retry) s.retries = Math.max(0, s.retries - 1);
    if (waited) this.pending = Math.max(0, this.pending - 1);
    this.refresh(s);
  }

  /** The cluster's active connection count changed. */
  connections(active: number): void {
    for (const p of PRIORITIES) {
      const s = this.state[p];
      const open = active >= s.thresholds.maxConnections ? 1 : 0;
      if (s.cxOpen.value !== open) s.cxOpen.set(open);
    }
  }

  private refresh(s: PriorityState): void {
    const rqOpen = s.requests >= s.thresholds.maxRequests ? 1 : 0;
    if (s.rqOpen.value !== rqOpen) s.rqOpen.set(rqOpen);
    const retryLimit = retryLimitOf(s);
    const retryOpen = s.retries >= retryLimit ? 1 : 0;
    if (s.rqRetryOpen.value !== retryOpen) s.rqRetryOpen.set(retryOpen);
    const remaining = Math.max(0, retryLimit - s.retries);
    if (s.remainingRetries.value !== remaining) s.remainingRetries.set(remaining);
    for (const p of PRIORITIES) {
      const st = this.state[p];
      const pendingOpen = this.pending >= st.thresholds.maxPendingRequests ? 1 : 0;
      if (st.rqPendingOpen.value !== pendingOpen) st.rqPendingOpen.set(pendingOpen);
    }
  }
}
