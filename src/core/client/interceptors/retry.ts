/**
 * The retry interceptor: sends a call's tries one after the other until one is final, the
 * retries are spent, or the call's deadline is near. What is retried, how many times and with
 * which pause is the policy's: the framework client retries connect failures, resets, 502, 503
 * and per-try timeouts with backoff (src/core/client/interceptors/client-policies.ts); the proxy
 * handler only connect failures, at once, and never a streamed body (src/edge/handlers/proxy.ts).
 */
import type { CallInterceptor } from './compose.js';

/**
 * What the retry interceptor does after a try: `done` answers with this result, `retry` makes
 * another try (when retries and time remain, else answers with this result), `stop` answers
 * with the previous try's result (this try was not made, e.g. its budget was spent before it
 * was sent), or with this one when it was the first.
 */
export type RetryDecision = 'done' | 'retry' | 'stop';

export interface RetryPolicy<C, A, R> {
  /** Tries allowed after the first (0: none). */
  retries(call: C): number;
  /** The attempt of retry n (n ≥ 1; the first try's attempt is the one the call was sent with). */
  attempt(call: C, n: number): A;
  decide(result: R, call: C, n: number): RetryDecision;
  /** The result when no try was made (the deadline had passed). */
  exhausted(call: C): R;
  /** The pause before retry n (n ≥ 1), ms; none or 0: retries go at once. */
  backoff?(n: number, call: C): number;
  /** Epoch ms after which no try starts and no pause ends; none: no deadline. */
  deadline?(call: C): number;
}

export function retry<C, A, R>(policy: RetryPolicy<C, A, R>): CallInterceptor<C, A, R> {
  const backoff = policy.backoff;
  return (next) => (call, first) => {
    const retries = policy.retries(call);
    const deadline = policy.deadline ? policy.deadline(call) : Infinity;
    if (deadline - Date.now() <= 0) return Promise.resolve(policy.exhausted(call));
    // The first try is sent in this turn, with no promise of the interceptor's own around it:
    // the later tries (rare) chain from its result.
    const decided = (result: R, n: number, last: R | undefined): R | Promise<R> => {
      const decision = policy.decide(result, call, n);
      if (decision === 'stop') return last ?? result;
      if (decision === 'done' || n >= retries) return result;
      return again(n + 1, result);
    };
    const again = async (n: number, last: R): Promise<R> => {
      if (backoff) {
        const pause = backoff(n, call);
        if (pause > 0) {
          if (Date.now() + pause >= deadline) return last;
          await sleep(pause);
        }
      }
      if (deadline - Date.now() <= 0) return last;
      return decided(await next(call, policy.attempt(call, n)), n, last);
    };
    return next(call, first).then((result) => decided(result, 0, undefined));
  };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
