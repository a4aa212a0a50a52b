/**
 * Outcome reporting: gives a try's host back to the cluster manager with what the try came to
 * (lease.release), which keeps its stats, circuit breakers and outlier detection. An answer is
 * the status; a transport failure its outcome (connect failure, reset, timeout, per-try timeout);
 * a try the node's transport refused, or that could not be sent, is `cancelled` (no host charged).
 */
import type { AttemptOutcome } from '../../upstream/types.js';
import type { ClientInterceptor, TryResult } from './call.js';

export const reportOutcome: ClientInterceptor = (next) => (call, attempt) => {
  const lease = attempt.lease!;
  const started = Date.now();
  let result: Promise<TryResult>;
  try {
    result = next(call, attempt);
  } catch (err) {
    // encodeFor or the node's transport threw (a request it cannot send): nothing was sent.
    lease.release({ kind: 'cancelled' }, 0);
    throw err;
  }
  // The steps below settle with a result and never reject once the try is sent (sendTry).
  return result.then((r) => {
    lease.release(outcomeOf(r), Date.now() - started);
    return r;
  });
};

function outcomeOf(r: TryResult): AttemptOutcome {
  switch (r.kind) {
    case 'response':
      return { kind: 'response', status: r.response.status };
    case 'error':
      return r.error.outcome;
    default:
      return { kind: 'cancelled' };
  }
}
