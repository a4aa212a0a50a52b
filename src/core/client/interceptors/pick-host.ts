/**
 * Chooses the host of a try (the cluster manager's lease): another host than those tried, any
 * host after a connect failure, the given node with `address`. Acquire errors (404 unknown
 * service, 503 no host or circuit open) are final: the call rejects with them, except a retry
 * that max_retries or the retry budget refuses: that retry is not made (an `overflow` result),
 * and the call answers with the try before it. The choice waits no longer than the call's budget
 * (building a cluster can wait for the registry): a call whose budget it spent is not sent
 * (EXPIRED, the caller's 504), whether the host comes later or not at all.
 */
import type { AcquireOptions, UpstreamLease, UpstreamSelector } from '../../upstream/types.js';
import { isRetryOverflow } from '../../upstream/retry-budget.js';
import { budgetLeft, leaseWithin } from '../budget.js';
import { EXPIRED, type Attempt, type ClientInterceptor, type ClientSend, type TryResult, type UnaryCall } from './call.js';

export function pickHost(selector: UpstreamSelector): ClientInterceptor {
  return (next) => (call, attempt) => {
    const rules = call.retryRules;
    const options: AcquireOptions = { exclude: call.tried, retry: attempt.retry > 0, address: call.address, version: call.version, afterConnectFailure: call.lastOutcome === 'connect_failure', retryBudget: rules?.budget };
    let lease: UpstreamLease | undefined;
    try {
      lease = selector.acquireNow?.(call.service, options);
    } catch (err) {
      return notPicked(err, call);
    }
    if (lease) return sendOn(next, call, attempt, lease);
    // The wait for a host (a service's first registry lookup) ends with the call's budget.
    return leaseWithin(selector.acquire(call.service, options), call.deadline).then(
      (l) => (l ? sendOn(next, call, attempt, l) : EXPIRED),
      (err: unknown) => notPicked(err, call),
    );
  };
}

/** A refused retry is an `overflow` result; any other acquire error rejects the call. */
function notPicked(err: unknown, call: UnaryCall): Promise<TryResult> {
  if (!isRetryOverflow(err)) return Promise.reject(err);
  call.retryRules?.overflowed?.();
  return Promise.resolve({ kind: 'overflow', error: err });
}

function sendOn(next: ClientSend, call: UnaryCall, attempt: Attempt, lease: UpstreamLease): Promise<TryResult> {
  if (call.info) {
    call.info.upstreamCluster = call.service;
    call.info.upstreamHost = lease.target.key;
  }
  if (call.retries > 0 || call.hedgeDelay > 0) (call.tried ??= new Set()).add(lease.target.key);
  if (attempt.retry > 0) call.retryRules?.retried?.();
  // What is left once a host is chosen: the try's budget. None left: not sent, the host is not
  // charged, the caller gets its timeout.
  const left = budgetLeft(lease, call.deadline);
  if (left === undefined) return Promise.resolve(EXPIRED);
  attempt.lease = lease;
  attempt.left = left;
  return next(call, attempt);
}
