/**
 * The per-try timeout (--client_per_try_timeout): a try may use min(per-try budget, what is left
 * of the call's). A timeout of the try's own budget, when it is the shorter one, is a per-try
 * timeout (its host is charged a timeout and the call may be retried on another host).
 */
import { TransportError } from '../../transport/rpc.js';
import type { ClientInterceptor, TryResult } from './call.js';

export const perTryTimeout: ClientInterceptor = (next) => (call, attempt) => {
  const left = attempt.left;
  const perTry = call.perTry;
  const timeoutMs = perTry > 0 && perTry < left ? perTry : left;
  attempt.timeoutMs = timeoutMs;
  attempt.perTryLimited = timeoutMs < left;
  if (!attempt.perTryLimited) return next(call, attempt);
  return next(call, attempt).then(
    (r): TryResult =>
      r.kind === 'error' && r.error.outcome.kind === 'timeout' ? { kind: 'error', error: new TransportError({ kind: 'timeout', perTry: true }, `per-try timeout after ${timeoutMs}ms`), host: r.host } : r,
  );
};
