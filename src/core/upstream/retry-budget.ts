/**
 * The retry budget, after Envoy's `retry_budget`: at most `percent` % of the active requests may
 * be retries, and at least `minConcurrency` retries are allowed at once whatever the load. The
 * limit is worked out from the active requests (retries included) at the moment a retry is asked
 * for, so it follows the load: 3 retries at once when 10 requests are in flight, 200 when 1,000
 * are (at 20 %).
 *
 * This unit holds only the rule; whoever owns the counts asks it. A cluster's circuit breakers
 * (circuit-breaker.ts) ask it for every retry and hedge of the cluster, per priority, with their
 * own counts of active requests and retries. A caller with a budget of its own (a route's) passes
 * it in AcquireOptions.retryBudget: it replaces the cluster's for that retry, against the same
 * counts.
 *
 * Unlike Envoy, which ignores max_retries once a budget is set, mesh applies both: the budget
 * scales with the load, and max_retries stays an absolute ceiling on retries at once, so a burst
 * of traffic cannot buy an unbounded number of retries (its default, 1024, is max_requests's).
 */
import { MeshError, flagged } from '../../base/errors.js';

export interface RetryBudgetConfig {
  /** Retries allowed as a share of the active requests, 0 to 100; 0 turns the budget off. */
  percent: number;
  /** Retries allowed at once whatever the load (when the budget is on). */
  minConcurrency: number;
}

/** Envoy's defaults: 20 %, at least 3. */
export const DEFAULT_RETRY_BUDGET: Readonly<RetryBudgetConfig> = Object.freeze({ percent: 20, minConcurrency: 3 });

export class RetryBudget {
  readonly percent: number;
  readonly minConcurrency: number;

  constructor(config: RetryBudgetConfig) {
    this.percent = config.percent;
    this.minConcurrency = config.minConcurrency;
  }

  /** False when percent is 0: no limit of its own. */
  get enabled(): boolean {
    return this.percent > 0;
  }

  /** Retries allowed at once while `active` requests (retries included) are in flight; Infinity when off. */
  limit(active: number): number {
    if (this.percent <= 0) return Infinity;
    return Math.max(this.minConcurrency, Math.floor((active * this.percent) / 100));
  }

  /** Whether one more retry may start while `active` requests, `retries` of them retries, are in flight. */
  admits(active: number, retries: number): boolean {
    return retries < this.limit(active);
  }

  /** Retries that may still start (Envoy's remaining_retries); Infinity when off. */
  remaining(active: number, retries: number): number {
    return Math.max(0, this.limit(active) - retries);
  }
}

/** A retry that a limit refused: it is not made, and the call answers with its previous try's result. */
export class RetryOverflowError extends MeshError {}

/** What is thrown for a retry over max_retries or over the retry budget (response flag UO, 503). */
export function retryOverflow(errorId: string, limit: 'max_retries' | 'retry_budget'): MeshError {
  return flagged(new RetryOverflowError(errorId, 503, `circuit breaker open: ${limit}`), 'UO');
}

/** True for the error of a refused retry (retryOverflow). */
export const isRetryOverflow = (err: unknown): err is RetryOverflowError => err instanceof RetryOverflowError;

/** Checks a budget's settings; throws naming `what` when one is out of range. */
export function checkRetryBudget(config: RetryBudgetConfig, what: string): RetryBudgetConfig {
  const { percent, minConcurrency } = config;
  if (typeof percent !== 'number' || !Number.isFinite(percent) || percent < 0 || percent > 100) throw new Error(`${what}.percent: must be a number from 0 to 100`);
  if (typeof minConcurrency !== 'number' || !Number.isInteger(minConcurrency) || minConcurrency < 0)
    throw new Error(`${what}.minConcurrency: must be a non-negative integer`);
  return { percent, minConcurrency };
}
