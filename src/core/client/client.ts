/**
 * The framework client: every outbound RPC goes resolver → client → cluster manager → transport.
 * Owns the call budget (--client_request_timeout, shortened by an inbound Mesh-Timeout) and maps
 * failures to the error JSON of the RPC protocol. Its call policies are interceptors composed
 * once per client (./interceptors/): tracing, retries (--client_retries), the choice of host,
 * hedging of idempotent calls (--client_hedge_delay), outcome reporting to the cluster manager,
 * and the budget of each try (--client_per_try_timeout), around the send of one try.
 */
import { randomUUID } from 'node:crypto';
import type pino from 'pino';
import { badGateway, badRequest, ERROR_IDS, toMeshError } from '../../base/errors.js';
import type { UpstreamInfo } from '../../base/http/access-log.js';
import { codecFor, JSON_CODEC, mediaType, type CodecSet } from '../../base/codec/codec.js';
import type { RpcControl, RpcRequest, RpcResponse } from '../transport/rpc.js';
import type { UpstreamSelector, UpstreamTarget } from '../upstream/types.js';
import type { Type } from 'protobufjs';
import { ContextStore, type CallContext } from '../../base/util/call-context.js';
import { formatTraceparent, parseTraceparent, TRACEPARENT, TRACESTATE } from '../../base/util/trace-context.js';
import type { Tracer } from '../../base/tracing/tracer.js';
import type { StatsStore } from '../../base/stats/store.js';
import { openStream, streamTimeout, type StreamCall, type StreamOpener, type StreamOpenOptions } from './stream.js';
import { callError, newAttempt, type ClientInterceptor, type ClientSend, type RetryRules, type UnaryCall } from './interceptors/call.js';
import { compose } from './interceptors/compose.js';
import { clientRetry } from './interceptors/client-retry.js';
import { pickHost } from './interceptors/pick-host.js';
import { hedging } from './interceptors/hedging.js';
import { reportOutcome } from './interceptors/report-outcome.js';
import { perTryTimeout } from './interceptors/per-try-timeout.js';
import { sendTry } from './interceptors/send-try.js';
import { tracing } from './interceptors/tracing.js';

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
   * src/core/transport/grpc/); undefined for a node sendRpc serves on the host's pool.
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
  /** Replaces the client's request timeout (--client_request_timeout) for this call; timeoutMs still shortens it. */
  budgetMs?: number;
  /** Request id (Mesh-Id); default the id of the call being served, else a new one. */
  id?: string;
  /** Call this node (host:port) directly instead of load balancing. */
  address?: string;
  /** Only the nodes of this registry Version of the service (a route's backend); none: 503. */
  version?: string;
  /** Overrides the client's retry count for this call. */
  retries?: number;
  /** A route's retry rules: the statuses retried, the pause, the retry budget, counters. */
  retryRules?: RetryRules;
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

export class Client {
  /** Request ids are this client's random prefix plus a counter: unique, and cheap per call. */
  private readonly idPrefix = randomUUID();
  private idCounter = 0;
  private readonly context: ContextStore;

  /** The call policies around a try, composed once (./interceptors/). */
  private readonly send: ClientSend;

  constructor(private readonly options: ClientOptions) {
    this.context = options.context ?? new ContextStore();
    const policies: ClientInterceptor[] = [clientRetry(options.logger), pickHost(options.selector), hedging(options.selector), reportOutcome, perTryTimeout];
    if (options.tracer) policies.unshift(tracing(options.tracer));
    this.send = compose(sendTry({ maxResponseBytes: options.maxResponseBytes, senderFor: options.senderFor }), policies);
  }

  get requestTimeoutMs(): number {
    return this.options.requestTimeoutMs;
  }

  private nextId(): string {
    return `${this.idPrefix}-${(this.idCounter = (this.idCounter + 1) % Number.MAX_SAFE_INTEGER)}`;
  }

  /**
   * Opens a stream (src/core/client/stream.ts): resolves once the backend accepted it; iterate the
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
    // The parent: this hop's own span; outside any, a traceparent of the metadata.
    const parent = ctx?.trace ?? (metadata?.[TRACEPARENT] !== undefined ? parseTraceparent(metadata[TRACEPARENT], metadata[TRACESTATE]) : undefined);
    const budget = Math.min(opts.budgetMs ?? this.options.requestTimeoutMs, timeoutMs ?? Infinity);
    const call: UnaryCall = {
      service,
      endpoint,
      body,
      address: opts.address,
      version: opts.version,
      encodeFor: opts.encodeFor,
      info: opts.info,
      logTrace: opts.context?.trace,
      contentType: opts.contentType ?? JSON_CODEC.contentType,
      id: opts.id ?? ctx?.id ?? this.nextId(),
      metadata,
      parent,
      // With tracing, the call's span (set by the tracing interceptor). Without: this hop's id is
      // the parent of what it sends; a call outside any hop is a hop of its own.
      trace: this.options.tracer ? undefined : (ctx?.trace ?? this.context.hop(parent)),
      traceparent: undefined,
      budget,
      deadline: Date.now() + budget,
      retries: opts.retries ?? this.options.retries,
      retryRules: opts.retryRules,
      perTry: opts.perTryTimeoutMs ?? this.options.perTryTimeoutMs ?? 0,
      // A call to a given node has nowhere else to go: no hedge.
      hedgeDelay: opts.idempotent === true && opts.address === undefined ? (opts.hedgeDelayMs ?? this.options.hedgeDelayMs ?? 0) : 0,
      tried: undefined,
      lastOutcome: undefined,
      hedged: false,
    };
    return this.send(call, newAttempt(0)).then((r) => {
      if (r.kind === 'response' && r.response.status >= 200 && r.response.status < 300) return r.response;
      throw callError(r, call);
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
      throw badRequest(ERROR_IDS.client, `encoding request: ${(err as Error).message}`);
    }
    const res = await this.call(service, endpoint, body, { ...opts, contentType: codec.contentType });
    const resCodec = codecOf(res.contentType || codec.contentType);
    if (!resCodec) throw badGateway(ERROR_IDS.client, `unsupported response content type ${mediaType(res.contentType)}`);
    try {
      return resCodec.decode(res.body, opts.responseType) as T;
    } catch (err) {
      throw toMeshError(badGateway(ERROR_IDS.client, `decoding response: ${(err as Error).message}`));
    }
  }
}
