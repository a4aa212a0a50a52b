/**
 * `--rate_limit` of a front end (src/base/http/rate-limit.ts): a token taken per request (from the
 * process's buckets, its primary's, or a shared store's), keyed by the client's address, a header
 * or the subject the auth step found (then the filter runs after `auth`). Every answer carries the
 * RateLimit fields; over the limit 429 error JSON with Retry-After, or 503 when the shared store is
 * down and the failure mode is closed. Counted in `http.<prefix>.ratelimit.ok`, `over_limit` (the
 * 429s) and `error` (the requests the shared store could not decide).
 */
import type { FrontRequest } from '../../base/http/front-types.js';
import type { MeshError } from '../../base/errors.js';
import { rateLimited, rateLimitStoreDown } from '../../base/errors.js';
import { describePolicy, rateLimitHeaders, rateLimitKey, type FrontRateLimit, type RateDecision } from '../../base/http/rate-limit.js';
import { HTTP_RATE_LIMIT_STATS } from '../../base/http/stats.js';
import { declareStats, type Counter, type StatsScope } from '../../base/stats/store.js';
import type { EdgeFilter } from './filter.js';

/** A front end's own limit, with its counters: one per front end, shared by its request and upgrade chains. */
export class FrontLimiter {
  private readonly ok: Counter;
  private readonly over: Counter;
  private readonly error: Counter;

  constructor(
    readonly limit: FrontRateLimit & { policy: NonNullable<FrontRateLimit['policy']> },
    scope: StatsScope,
    private readonly errorId: string,
  ) {
    const s = declareStats(scope, HTTP_RATE_LIMIT_STATS);
    this.ok = s.ok;
    this.over = s.overLimit;
    this.error = s.error;
  }

  /** Takes a token for `req`: the decision, or a promise of it when a shared store is asked. */
  take(req: FrontRequest): RateDecision | Promise<RateDecision> {
    const rl = this.limit;
    return rl.store.take(rateLimitKey(req, rl.key), rl.policy, rl.key);
  }

  /**
   * Counts a decision: true when the request goes on. A decision of the failure mode (the shared
   * store down) is an `error`; a refused one is not `over_limit`.
   */
  counted(decision: RateDecision): boolean {
    if (decision.storeDown) this.error.inc();
    if (decision.allowed) {
      this.ok.inc();
      return true;
    }
    if (!decision.storeDown) this.over.inc();
    return false;
  }

  /** The error of a refused decision: 429, or 503 when the shared store is down (failure mode closed). */
  refusal(decision: RateDecision): MeshError {
    return decision.storeDown ? rateLimitStoreDown(this.errorId) : rateLimited(this.errorId, describePolicy(decision.policy), decision.retryAfterSec);
  }
}

export function rateLimit<R>(limiter: FrontLimiter): EdgeFilter<R> {
  return (next) => (ex) => {
    const answer = (decision: RateDecision): void => {
      const res = ex.res;
      // A shared store's answer may come after the request was answered otherwise (a timeout, a closed connection).
      if (res && !res.headersSent) for (const [k, v] of Object.entries(rateLimitHeaders(decision))) res.setHeader(k, v);
      if (limiter.counted(decision)) return next(ex);
      ex.refuse(limiter.refusal(decision), res ? undefined : rateLimitHeaders(decision));
    };
    const decision = limiter.take(ex.req);
    if (decision instanceof Promise) void decision.then(answer);
    else answer(decision);
  };
}
