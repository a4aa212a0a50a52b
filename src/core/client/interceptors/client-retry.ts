/**
 * The framework client's retry policy (--client_retries): connect failures, resets, per-try
 * timeouts and 502/503 answers are retried on another host, with backoff (10 ms, 20 ms, 40 ms ...
 * with jitter, capped at 1 s), while the call's budget lasts; a call with retry rules of its own
 * (a route's: CallOptions.retryRules) retries its statuses with its pause instead. Anything else is final. A retry
 * that max_retries or the cluster's retry budget refuses is not made: the call answers with the
 * try before it.
 */
import type pino from 'pino';
import { retry, type RetryPolicy } from './retry.js';
import { EXPIRED, newAttempt, RETRIABLE_STATUS, type Attempt, type ClientInterceptor, type TryResult, type UnaryCall } from './call.js';

export function clientRetry(logger: pino.Logger | undefined): ClientInterceptor {
  const policy: RetryPolicy<UnaryCall, Attempt, TryResult> = {
    retries: (call) => call.retries,
    attempt: (_call, n) => newAttempt(n),
    deadline: (call) => call.deadline,
    backoff: (n, call) => call.retryRules?.backoffMs ?? backoffMs(n),
    exhausted: () => EXPIRED,
    decide(r, call, n) {
      switch (r.kind) {
        case 'refused':
          return 'done';
        case 'expired':
        case 'overflow':
          return 'stop';
        case 'error': {
          const failure = r.error;
          call.lastOutcome = failure.outcome.kind;
          // Not sent at all (a metadata value the HTTP client refuses): no other host would take it either.
          if (failure.outcome.kind === 'cancelled') return 'done';
          const hop = call.logTrace;
          // An explicit context is not the ambient one the log's mixin reads: name its trace here.
          if (hop) logger?.debug({ service: call.service, endpoint: call.endpoint, host: r.host, attempt: n, err: failure.message, trace_id: hop.traceId, span_id: hop.spanId }, 'attempt failed');
          else logger?.debug({ service: call.service, endpoint: call.endpoint, host: r.host, attempt: n, err: failure.message }, 'attempt failed');
          // The call's own budget is spent; a per-try timeout, connect failure or reset may be retried.
          return Date.now() >= call.deadline ? 'done' : 'retry';
        }
        case 'response': {
          call.lastOutcome = 'response';
          const status = r.response.status;
          if (status >= 200 && status < 300) return 'done';
          const codes = call.retryRules?.codes;
          return (codes ? codes.includes(status) : RETRIABLE_STATUS.has(status)) ? 'retry' : 'done';
        }
      }
    },
  };
  return retry(policy);
}

/** 10 ms, 20 ms, 40 ms ... with jitter, capped at 1 s. */
function backoffMs(attempt: number): number {
  const base = Math.min(1000, 10 * 2 ** (attempt - 1));
  return Math.round(base / 2 + Math.random() * (base / 2));
}
