/**
 * What the framework client's interceptors share: the unary call (one object per call, built by
 * Client.call), its attempts (one object per try) and a try's result; and what a result means
 * for the caller (callError).
 */
import { badGateway, badRequest, ERROR_IDS, flagged, gatewayTimeout, MeshError, parseErrorBody } from '../../../base/errors.js';
import type { RpcControl, RpcResponse, TransportError } from '../../transport/rpc.js';
import type { AttemptOutcome, UpstreamLease, UpstreamTarget } from '../../upstream/types.js';
import type { RetryBudget } from '../../upstream/retry-budget.js';
import type { TraceContext } from '../../../base/util/trace-context.js';
import type { UpstreamInfo } from '../../../base/http/access-log.js';
import type { CallInterceptor, Send } from './compose.js';

/**
 * A caller's own retry rules for a call (a route file's `retry`): which answer statuses are
 * retried, the pause before each retry, the retry budget that replaces the cluster's, and
 * counters of the retries made and refused.
 */
export interface RetryRules {
  /** Statuses retried, in place of 502 and 503. */
  readonly codes: readonly number[];
  /** Pause before each retry (ms), in place of the client's backoff; undefined: the client's. */
  readonly backoffMs: number | undefined;
  readonly budget: RetryBudget | undefined;
  /** Counts a retry sent to a host. */
  readonly retried?: () => void;
  /** Counts a retry the budget or max_retries refused. */
  readonly overflowed?: () => void;
}

export interface UnaryCall {
  readonly service: string;
  readonly endpoint: string;
  readonly body: Uint8Array;
  /** Call this node (host:port) only. */
  readonly address: string | undefined;
  /** Only the nodes of this registry Version (CallOptions.version). */
  readonly version: string | undefined;
  /** Encodes the request for the chosen node (CallOptions.encodeFor). */
  readonly encodeFor: ((target: UpstreamTarget) => { contentType: string; body: Uint8Array }) | undefined;
  /** The access log's record of the inbound request: told the cluster and the host of each try. */
  readonly info: UpstreamInfo | undefined;
  /** The trace of an explicit CallOptions.context, named on the retry's log lines. */
  readonly logTrace: TraceContext | undefined;
  readonly contentType: string;
  readonly id: string;
  readonly metadata: Record<string, string> | undefined;
  /** The trace the call's span (tracing interceptor) or, without one, the hop continues. */
  readonly parent: TraceContext | undefined;
  /**
   * The trace the request carries: the call's span when traced (set by the tracing interceptor),
   * else the hop's (set by the client). Set before the first try.
   */
  trace: TraceContext | undefined;
  /** `trace` as the traceparent header, worked out at the first try. */
  traceparent: string | undefined;
  /** The call's budget (ms) and its end (epoch ms). */
  readonly budget: number;
  readonly deadline: number;
  readonly retries: number;
  /** A route's own retry rules (CallOptions.retryRules); undefined: the client's. */
  readonly retryRules: RetryRules | undefined;
  /** The budget of one try (0: what is left of the call's). */
  readonly perTry: number;
  /** 0: not hedged. */
  readonly hedgeDelay: number;
  /** Hosts already tried; kept only when a retry or a hedge may need it. */
  tried: Set<string> | undefined;
  /** The previous try's outcome (a retry after a connect failure may go to any host). */
  lastOutcome: AttemptOutcome['kind'] | undefined;
  /** A hedge was sent (at most one per call). */
  hedged: boolean;
}

/** One try on one host. */
export interface Attempt {
  /** 0: the first try; n: the nth retry. */
  readonly retry: number;
  /** A hedge (the second try of a hedged attempt). */
  readonly hedge: boolean;
  /** The host (pickHost, or hedging for a hedge). */
  lease: UpstreamLease | undefined;
  /** What was left of the call's budget once the host was chosen (ms). */
  left: number;
  /** The try's own budget (perTryTimeout). */
  timeoutMs: number;
  /** The try's budget is shorter than what is left of the call's: a timeout is a per-try timeout. */
  perTryLimited: boolean;
  readonly control: RpcControl;
}

export function newAttempt(retry: number, hedge = false): Attempt {
  return { retry, hedge, lease: undefined, left: 0, timeoutMs: 0, perTryLimited: false, control: {} };
}

export type TryResult =
  | { kind: 'response'; response: RpcResponse; host: string }
  | { kind: 'error'; error: TransportError; host: string }
  /** The node's transport refused the call before sending it: final, not the host's fault. */
  | { kind: 'refused'; error: MeshError; host: string }
  /** Not sent: the call's budget was spent before it could be. */
  | { kind: 'expired' }
  /**
   * A retry not made: max_retries or the cluster's retry budget refused it. The call answers with
   * its previous try's result.
   */
  | { kind: 'overflow'; error: MeshError };

export const EXPIRED: TryResult = { kind: 'expired' };

/** Answers the service may give again on another host. */
export const RETRIABLE_STATUS = new Set([502, 503]);

export const succeeded = (r: TryResult): boolean => r.kind === 'response' && r.response.status >= 200 && r.response.status < 300;

/** The error a call that ended with `r` (not a 2xx answer) fails with. */
export function callError(r: TryResult, call: UnaryCall): MeshError {
  switch (r.kind) {
    case 'response':
      return parseErrorBody(r.response.status, r.response.body.toString('utf8'));
    case 'refused':
    case 'overflow':
      return r.error;
    case 'error':
      return transportToMeshError(r.error, call.service, r.host, call.budget);
    case 'expired':
      return flagged(gatewayTimeout(ERROR_IDS.client, `call ${call.service}.${call.endpoint}: timeout after ${call.budget}ms`), 'UT');
  }
}

function transportToMeshError(err: TransportError, service: string, host: string, budget: number): MeshError {
  switch (err.outcome.kind) {
    case 'timeout':
      if (err.outcome.perTry) return flagged(gatewayTimeout(ERROR_IDS.client, `call ${service} on ${host}: ${err.message}`), 'UT');
      return flagged(gatewayTimeout(ERROR_IDS.client, `call ${service} on ${host}: timeout after ${budget}ms`), 'UT');
    case 'connect_failure':
      return flagged(badGateway(ERROR_IDS.client, `call ${service} on ${host}: connection failed: ${err.message}`), 'UF');
    case 'reset':
      return flagged(badGateway(ERROR_IDS.client, `call ${service} on ${host}: connection reset: ${err.message}`), 'UC');
    case 'cancelled':
      return badRequest(ERROR_IDS.client, `call ${service}: ${err.message}`);
  }
}

/** An interceptor of the client's chain, and the chain. */
export type ClientInterceptor = CallInterceptor<UnaryCall, Attempt, TryResult>;
export type ClientSend = Send<UnaryCall, Attempt, TryResult>;
