/**
 * The framework client: every outbound RPC goes resolver → client → cluster manager → transport.
 * Owns the call budget (--client_request_timeout, shortened by an inbound Mesh-Timeout), the
 * budget of each try (--client_per_try_timeout), retries (--client_retries) with backoff on
 * connect failure, reset, 502, 503 and per-try timeout only, hedging of idempotent calls
 * (--client_hedge_delay), and maps failures to the error JSON of the RPC protocol.
 */
import { randomUUID } from 'node:crypto';
import type pino from 'pino';
import { ERROR_IDS, MeshError, flagged, parseErrorBody, toMeshError } from '../errors.js';
import type { UpstreamInfo } from '../http/access-log.js';
import { codecFor, JSON_CODEC, mediaType, type CodecSet } from '../codec/codec.js';
import { sendRpc, TransportError, type RpcControl, type RpcRequest, type RpcResponse } from '../transport/rpc.js';
import type { AcquireOptions, AttemptOutcome, UpstreamLease, UpstreamSelector, UpstreamTarget } from '../upstream/types.js';
import type { Type } from 'protobufjs';
import { ContextStore, type CallContext } from '../util/call-context.js';
import { formatTraceparent, parseTraceparent, TRACEPARENT, TRACESTATE, type TraceContext } from '../util/trace-context.js';
import { failSpan, SpanKind, traceOf, type Span, type Tracer } from '../tracing/tracer.js';
import type { StatsStore } from '../stats/store.js';
import { openStream, streamTimeout, type StreamCall, type StreamOpener, type StreamOpenOptions } from './stream.js';
import { budgetLeft } from './budget.js';

export interface ClientOptions {
  selector: UpstreamSelector;
  requestTimeoutMs: number;
  retries: number;
  /**
   * Budget of one try (--client_per_try_timeout); 0: each try may use all that is left of the
   * call's budget. A try that runs out of it counts as a timeout of its host and the call is
   * retried on another host while retries and budget remain.
   */
  perTryTimeoutMs?: number;
  /**
   * Hedging of idempotent calls (--client_hedge_delay): when a try has not answered after this
   * long, a second try goes to another host; the first answer wins. 0 (the default): no hedging.
   */
  hedgeDelayMs?: number;
  logger?: pino.Logger;
  /** Largest response body accepted from a backend. */
  maxResponseBytes?: number;
  /** Codecs of callValue() besides JSON and protobuf (the `codecs` option). */
  codecs?: CodecSet;
  /**
   * The process's call context (the runtime's): a call made while serving one inherits its
   * remaining deadline, Mesh-Id, metadata and trace. Default: a store of the client's own.
   */
  context?: ContextStore;
  /** Records a client span per call (--tracing=otlp). */
  tracer?: Tracer;
  /** Where the per-cluster stream stats are kept (cluster.<service>.upstream_rq_stream_*). */
  stats?: StatsStore;
  /** Largest stream message accepted from a backend (--max_body_size). */
  maxMessageBytes?: number;
  /**
   * The transport of a node that does not speak the mesh wire (`protocol=grpc`:
   * src/transport/grpc/); undefined for a node sendRpc serves on the host's pool.
   */
  senderFor?: (target: UpstreamTarget) => ((request: RpcRequest, control: RpcControl) => Promise<RpcResponse>) | undefined;
  /** The same for streams: opens a stream on such a node; undefined for a mesh wire node. */
  streamFor?: (target: UpstreamTarget) => StreamOpener | undefined;
}

export interface CallOptions {
  contentType?: string;
  /**
   * End-to-end metadata forwarded as headers; merged over the metadata of the call being served
   * (its keys win). `traceparent` and `tracestate` here name the parent when no call is being served.
   */
  metadata?: Record<string, string>;
  /**
   * Shortens the budget (an inbound Mesh-Timeout, or a per-call value); never lengthens it. Default:
   * what remains of the deadline of the call being served, if any.
   */
  timeoutMs?: number;
  /** Request id (Mesh-Id); default the id of the call being served, else a new one. */
  id?: string;
  /** Call this node (host:port) directly instead of load balancing. */
  address?: string;
  /** Overrides the client's retry count for this call. */
  retries?: number;
  /** Overrides the client's per-try budget for this call (0: a try may use the whole budget). */
  perTryTimeoutMs?: number;
  /**
   * The call may safely run twice (reads, or writes the backend deduplicates by Mesh-Id): only
   * such calls are hedged. Default false.
   */
  idempotent?: boolean;
  /** Overrides the client's hedge delay for this call (0: no hedging). Needs `idempotent`. */
  hedgeDelayMs?: number;
  /**
   * Encodes the request for the chosen node (e.g. protobuf for a node whose metadata asks for
   * it); overrides `body` and `contentType` of call().
   */
  encodeFor?: (target: UpstreamTarget) => { contentType: string; body: Uint8Array };
  /** The access log's record of the inbound request: told the cluster and the host of each try. */
  info?: UpstreamInfo;
  /**
   * The call being served, given explicitly (a front end passes its request's): used instead of
   * the ambient one of the ContextStore, and its trace is named on this call's log lines. A front
   * end that passes it needs no AsyncLocalStorage entered for the request.
   */
  context?: CallContext;
}

export interface CallResult {
  status: number;
  contentType: string;
  body: Buffer;
}

const RETRIABLE_STATUS = new Set([502, 503]);

export class Client {
  /** Request ids are this client's random prefix plus a counter: unique, and cheap per call. */
  private readonly idPrefix = randomUUID();
  private idCounter = 0;
  private readonly context: ContextStore;

  constructor(private readonly options: ClientOptions) {
    this.context = options.context ?? new ContextStore();
  }

  get requestTimeoutMs(): number {
    return this.options.requestTimeoutMs;
  }

  private nextId(): string {
    return `${this.idPrefix}-${(this.idCounter = (this.idCounter + 1) % Number.MAX_SAFE_INTEGER)}`;
  }

  /**
   * Opens a stream (src/client/stream.ts): resolves once the backend accepted it; iterate the
   * result for its messages. Not retried, not hedged; no deadline unless `timeoutMs` is given.
   */
  stream(service: string, endpoint: string, opts: StreamOpenOptions): Promise<StreamCall> {
    // As a unary call does: inside a call being served, the stream carries its Mesh-Id, metadata
    // and trace (its deadline too, when the stream has none of its own).
    const ctx = this.context.current;
    let metadata = opts.metadata;
    if (ctx?.metadata) metadata = metadata ? { ...ctx.metadata, ...metadata } : ctx.metadata;
    const parent = ctx?.trace ?? (metadata?.[TRACEPARENT] !== undefined ? parseTraceparent(metadata[TRACEPARENT], metadata[TRACESTATE]) : undefined);
    const trace = ctx?.trace ?? this.context.hop(parent);
    const { [TRACEPARENT]: _p, [TRACESTATE]: _s, ...rest } = metadata ?? {};
    const headers: Record<string, string> = { ...rest, [TRACEPARENT]: formatTraceparent(trace) };
    if (trace.state) headers[TRACESTATE] = trace.state;
    let timeoutMs = opts.timeoutMs;
    if (timeoutMs === undefined && ctx?.deadline !== undefined && Number.isFinite(ctx.deadline)) {
      timeoutMs = ctx.deadline - Date.now();
      // The call being served has no time left: nothing is opened.
      if (timeoutMs <= 0) return Promise.reject(streamTimeout(service, endpoint, undefined));
    }
    const id = opts.id ?? ctx?.id ?? this.nextId();
    return openStream(this.options.selector, this.options.stats, service, endpoint, id, { maxMessageBytes: this.options.maxMessageBytes, ...opts, metadata: headers, timeoutMs }, this.options.streamFor);
  }

  /**
   * Sends raw bytes; resolves with the backend's 2xx answer, rejects with a MeshError. Inside a
   * call being served (a service handler, a front end's request) the options default to its
   * remaining deadline, Mesh-Id and metadata, and the call continues its trace.
   */
  call(service: string, endpoint: string, body: Uint8Array, opts: CallOptions = {}): Promise<CallResult> {
    const ctx = opts.context ?? this.context.current;
    let timeoutMs = opts.timeoutMs;
    if (timeoutMs === undefined && ctx?.deadline !== undefined) timeoutMs = Math.max(0, ctx.deadline - Date.now());
    let metadata = opts.metadata;
    if (ctx?.metadata) metadata = metadata ? { ...ctx.metadata, ...metadata } : ctx.metadata;
    const id = opts.id ?? ctx?.id;
    // The parent: this hop's own span; outside any, a traceparent of the metadata.
    const parent = ctx?.trace ?? (metadata?.[TRACEPARENT] !== undefined ? parseTraceparent(metadata[TRACEPARENT], metadata[TRACESTATE]) : undefined);
    const tracer = this.options.tracer;
    if (tracer) {
      const span = tracer.startSpan(`${service}/${endpoint}`, SpanKind.CLIENT, parent, { 'rpc.system': 'mesh', 'rpc.service': service, 'rpc.method': endpoint });
      return this.traced(span, this.send(service, endpoint, body, opts, timeoutMs, metadata, id, traceOf(span)));
    }
    // No span: this hop's id is the parent of what it sends; a call outside any hop is a hop of its own.
    const trace = ctx?.trace ?? this.context.hop(parent);
    return this.send(service, endpoint, body, opts, timeoutMs, metadata, id, trace);
  }

  private async traced(span: Span, call: Promise<CallResult>): Promise<CallResult> {
    try {
      return await call;
    } catch (err) {
      const e = toMeshError(err);
      span.setAttribute('rpc.response.status_code', e.code);
      failSpan(span, e.detail, String(e.code));
      throw err;
    } finally {
      span.end();
    }
  }

  private async send(
    service: string,
    endpoint: string,
    body: Uint8Array,
    opts: CallOptions,
    timeoutMs: number | undefined,
    metadata: Record<string, string> | undefined,
    givenId: string | undefined,
    trace: TraceContext,
  ): Promise<CallResult> {
    const started = Date.now();
    const budget = Math.min(this.options.requestTimeoutMs, timeoutMs ?? Infinity);
    const deadline = started + budget;
    const traceparent = formatTraceparent(trace);
    const retries = opts.retries ?? this.options.retries;
    const perTry = opts.perTryTimeoutMs ?? this.options.perTryTimeoutMs ?? 0;
    // A call to a given node has nowhere else to go: no hedge.
    const hedgeDelay = opts.idempotent === true && opts.address === undefined ? (opts.hedgeDelayMs ?? this.options.hedgeDelayMs ?? 0) : 0;
    const id = givenId ?? this.nextId();
    const contentType = opts.contentType ?? JSON_CODEC.contentType;
    // Hosts already tried; only a retry or a hedge needs it.
    let tried: Set<string> | undefined;
    let hedged = false;
    let lastError: MeshError | undefined;
    let lastOutcome: AttemptOutcome['kind'] | undefined;
    const request = (target: UpstreamTarget, timeoutMs: number): RpcRequest => {
      const encoded = opts.encodeFor?.(target);
      return {
        service,
        endpoint,
        id,
        contentType: encoded?.contentType ?? contentType,
        body: encoded?.body ?? body,
        metadata,
        traceparent,
        tracestate: trace.state,
        timeoutMs,
        maxResponseBytes: this.options.maxResponseBytes,
      };
    };

    for (let attempt = 0; attempt <= retries; attempt++) {
      if (attempt > 0) {
        const pause = backoffMs(attempt);
        if (Date.now() + pause >= deadline) break;
        await sleep(pause);
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      // Acquire errors (404 unknown service, 503 no host / circuit open) are final.
      const selector = this.options.selector;
      const acquireOptions: AcquireOptions = { exclude: tried, retry: attempt > 0, address: opts.address, afterConnectFailure: lastOutcome === 'connect_failure' };
      const lease = selector.acquireNow?.(service, acquireOptions) ?? (await selector.acquire(service, acquireOptions));
      if (opts.info) {
        opts.info.upstreamCluster = service;
        opts.info.upstreamHost = lease.target.key;
      }
      if (retries > 0 || hedgeDelay > 0) (tried ??= new Set()).add(lease.target.key);
      // What is left once a host is chosen (building a cluster can wait for the registry): the
      // try's budget. None left: not sent, the host is not charged, the caller gets its timeout.
      const left = budgetLeft(lease, deadline);
      if (left === undefined) break;
      const first = startTry(lease, request, left, perTry, this.options.senderFor);
      let result: TryResult;
      if (hedgeDelay > 0 && !hedged && hedgeDelay < left) {
        result = await this.hedge(first, service, tried!, hedgeDelay, deadline, perTry, request, () => (hedged = true));
      } else result = await first.result;

      if (result.kind === 'refused') throw result.error;
      if (result.kind === 'error') {
        const failure = result.error;
        lastError = transportToMeshError(failure, service, result.host, budget);
        lastOutcome = failure.outcome.kind;
        // Not sent at all (a metadata value the HTTP client refuses): no other host would take it either.
        if (failure.outcome.kind === 'cancelled') throw lastError;
        const hop = opts.context?.trace;
        // An explicit context is not the ambient one the log's mixin reads: name its trace here.
        if (hop) this.options.logger?.debug({ service, endpoint, host: result.host, attempt, err: failure.message, trace_id: hop.traceId, span_id: hop.spanId }, 'attempt failed');
        else this.options.logger?.debug({ service, endpoint, host: result.host, attempt, err: failure.message }, 'attempt failed');
        // The call's own budget is spent; a per-try timeout, connect failure or reset may be retried.
        if (Date.now() >= deadline) break;
        continue;
      }
      const response = result.response;
      lastOutcome = 'response';
      if (response.status >= 200 && response.status < 300) return response;
      lastError = parseErrorBody(response.status, response.body.toString('utf8'));
      if (!RETRIABLE_STATUS.has(response.status)) throw lastError;
    }
    throw lastError ?? flagged(new MeshError(ERROR_IDS.client, 504, `call ${service}.${endpoint}: timeout after ${budget}ms`), 'UT');
  }

  /**
   * Waits for the first try; if it has not answered after `delay`, sends a second try to another
   * host. The first usable result (an answer that is not 502/503) wins and the other try is
   * cancelled; when both fail, the later failure is the result.
   */
  private async hedge(
    first: Try,
    service: string,
    tried: Set<string>,
    delay: number,
    deadline: number,
    perTry: number,
    request: (target: UpstreamTarget, timeoutMs: number) => RpcRequest,
    markHedged: () => void,
  ): Promise<TryResult> {
    let timer: NodeJS.Timeout | undefined;
    const early = await Promise.race([
      first.result,
      new Promise<undefined>((r) => {
        timer = setTimeout(() => r(undefined), delay);
      }),
    ]);
    clearTimeout(timer);
    if (early) return early;
    if (deadline - Date.now() <= 0) return first.result;
    let lease: UpstreamLease;
    try {
      const options: AcquireOptions = { exclude: tried, retry: true, hedge: true };
      lease = this.options.selector.acquireNow?.(service, options) ?? (await this.options.selector.acquire(service, options));
    } catch {
      return first.result; // no other host, or the retry budget is spent: keep waiting on the first
    }
    const remaining = budgetLeft(lease, deadline);
    if (remaining === undefined) return first.result;
    markHedged();
    tried.add(lease.target.key);
    const second = startTry(lease, request, remaining, perTry, this.options.senderFor);
    const usable = (r: TryResult) => r.kind === 'response' && !RETRIABLE_STATUS.has(r.response.status);
    return new Promise<TryResult>((resolve) => {
      let pending = 2;
      const settle = (r: TryResult, other: Try) => {
        pending--;
        if (usable(r)) {
          other.cancel('another try answered first');
          resolve(r);
        } else if (pending === 0) resolve(r);
      };
      void first.result.then((r) => settle(r, second));
      void second.result.then((r) => settle(r, first));
    });
  }

  /** Encodes a value with the codec of contentType (JSON by default), calls, decodes the answer. */
  async callValue<T = unknown>(
    service: string,
    endpoint: string,
    request: unknown,
    opts: CallOptions & { requestType?: Type; responseType?: Type } = {},
  ): Promise<T> {
    const codecOf = (type: string | undefined) => (this.options.codecs ? this.options.codecs.for(type) : codecFor(type));
    const codec = codecOf(opts.contentType) ?? JSON_CODEC;
    let body: Uint8Array;
    try {
      body = codec.encode(request, opts.requestType);
    } catch (err) {
      throw new MeshError(ERROR_IDS.client, 400, `encoding request: ${(err as Error).message}`);
    }
    const res = await this.call(service, endpoint, body, { ...opts, contentType: codec.contentType });
    const resCodec = codecOf(res.contentType || codec.contentType);
    if (!resCodec) throw new MeshError(ERROR_IDS.client, 502, `unsupported response content type ${mediaType(res.contentType)}`);
    try {
      return resCodec.decode(res.body, opts.responseType) as T;
    } catch (err) {
      throw toMeshError(new MeshError(ERROR_IDS.client, 502, `decoding response: ${(err as Error).message}`));
    }
  }
}

type TryResult =
  | { kind: 'response'; response: RpcResponse; host: string }
  | { kind: 'error'; error: TransportError; host: string }
  | { kind: 'refused'; error: MeshError; host: string };

/** One try in flight on one host; it settles once and never rejects. */
interface Try {
  readonly result: Promise<TryResult>;
  cancel(reason: string): void;
}

/**
 * Sends one try within min(perTry, remaining) and releases its lease with the outcome: a timeout
 * of the try's own budget (shorter than what is left of the call's) is a per-try timeout.
 */
function startTry(
  lease: UpstreamLease,
  request: (target: UpstreamTarget, timeoutMs: number) => RpcRequest,
  remaining: number,
  perTry: number,
  senderFor: ClientOptions['senderFor'],
): Try {
  const timeoutMs = perTry > 0 && perTry < remaining ? perTry : remaining;
  const perTryLimited = timeoutMs < remaining;
  const control: RpcControl = {};
  const host = lease.target.key;
  const started = Date.now();
  let result: Promise<TryResult>;
  try {
    const req = request(lease.target, timeoutMs);
    const send = senderFor?.(lease.target);
    result = (send ? send(req, control) : sendRpc(lease.target.dispatcher, req, control)).then(
      (response): TryResult => {
        const outcome: AttemptOutcome = { kind: 'response', status: response.status };
        lease.release(outcome, Date.now() - started);
        return { kind: 'response', response, host };
      },
      (err: unknown): TryResult => {
        // The node's transport refused the call before sending it (src/transport/grpc/): final, not the host's fault.
        if (err instanceof MeshError) {
          lease.release({ kind: 'cancelled' }, Date.now() - started);
          return { kind: 'refused', error: err, host };
        }
        let error = err instanceof TransportError ? err : new TransportError({ kind: 'reset' }, String(err));
        if (error.outcome.kind === 'timeout' && perTryLimited) error = new TransportError({ kind: 'timeout', perTry: true }, `per-try timeout after ${timeoutMs}ms`);
        lease.release(error.outcome, Date.now() - started);
        return { kind: 'error', error, host };
      },
    );
  } catch (err) {
    // encodeFor or the node's transport threw (a request it cannot send): nothing was sent.
    lease.release({ kind: 'cancelled' }, 0);
    throw err;
  }
  return { result, cancel: (reason) => control.cancel?.(reason) };
}

function transportToMeshError(err: TransportError, service: string, host: string, budget: number): MeshError {
  switch (err.outcome.kind) {
    case 'timeout':
      if (err.outcome.perTry) return flagged(new MeshError(ERROR_IDS.client, 504, `call ${service} on ${host}: ${err.message}`), 'UT');
      return flagged(new MeshError(ERROR_IDS.client, 504, `call ${service} on ${host}: timeout after ${budget}ms`), 'UT');
    case 'connect_failure':
      return flagged(new MeshError(ERROR_IDS.client, 502, `call ${service} on ${host}: connection failed: ${err.message}`), 'UF');
    case 'reset':
      return flagged(new MeshError(ERROR_IDS.client, 502, `call ${service} on ${host}: connection reset: ${err.message}`), 'UC');
    case 'cancelled':
      return new MeshError(ERROR_IDS.client, 400, `call ${service}: ${err.message}`);
  }
}

/** 10 ms, 20 ms, 40 ms ... with jitter, capped at 1 s. */
function backoffMs(attempt: number): number {
  const base = Math.min(1000, 10 * 2 ** (attempt - 1));
  return Math.round(base / 2 + Math.random() * (base / 2));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
