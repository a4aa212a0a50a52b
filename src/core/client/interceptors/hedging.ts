/**
 * Hedging of idempotent calls (--client_hedge_delay): when a try has not answered after the
 * delay, a second try goes to another host; the first usable result (an answer that is not
 * 502/503) wins and the other try is cancelled; when both fail, the later failure is the result.
 * At most one hedge per call; none when the delay is not shorter than what is left.
 */
import type { AcquireOptions, UpstreamLease, UpstreamSelector } from '../../upstream/types.js';
import { budgetLeft } from '../budget.js';
import { newAttempt, RETRIABLE_STATUS, type Attempt, type ClientInterceptor, type ClientSend, type TryResult, type UnaryCall } from './call.js';

export function hedging(selector: UpstreamSelector): ClientInterceptor {
  return (next) => (call, attempt) => {
    const delay = call.hedgeDelay;
    if (delay > 0 && !call.hedged && delay < attempt.left) return hedge(next, selector, call, attempt, delay);
    return next(call, attempt);
  };
}

async function hedge(next: ClientSend, selector: UpstreamSelector, call: UnaryCall, attempt: Attempt, delay: number): Promise<TryResult> {
  const first = next(call, attempt);
  let timer: NodeJS.Timeout | undefined;
  const early = await Promise.race([
    first,
    new Promise<undefined>((r) => {
      timer = setTimeout(() => r(undefined), delay);
    }),
  ]);
  clearTimeout(timer);
  if (early) return early;
  if (call.deadline - Date.now() <= 0) return first;
  let lease: UpstreamLease;
  try {
    const options: AcquireOptions = { exclude: call.tried, retry: true, hedge: true, version: call.version };
    lease = selector.acquireNow?.(call.service, options) ?? (await selector.acquire(call.service, options));
  } catch {
    return first; // no other host, or the retry budget is spent: keep waiting on the first
  }
  const remaining = budgetLeft(lease, call.deadline);
  if (remaining === undefined) return first;
  call.hedged = true;
  call.tried!.add(lease.target.key);
  const other = newAttempt(attempt.retry, true);
  other.lease = lease;
  other.left = remaining;
  const second = next(call, other);
  const usable = (r: TryResult) => r.kind === 'response' && !RETRIABLE_STATUS.has(r.response.status);
  return new Promise<TryResult>((resolve) => {
    let pending = 2;
    const settle = (r: TryResult, loser: Attempt) => {
      pending--;
      if (usable(r)) {
        loser.control.cancel?.('another try answered first');
        resolve(r);
      } else if (pending === 0) resolve(r);
    };
    void first.then((r) => settle(r, other));
    void second.then((r) => settle(r, attempt));
  });
}
