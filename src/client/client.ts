/**
 * The framework client: every outbound RPC goes resolver → client → cluster manager → transport.
 * Owns the call budget (--client_request_timeout, shortened by an inbound Mesh-Timeout), retries
 * (--client_retries) with backoff on connect failure, 502, 503 and timeout only, and maps failures
 * to the error JSON of DESIGN section 5.
 */
import { randomUUID } from 'node:crypto';
import type pino from 'pino';
import { MeshError, parseErrorBody, toMeshError } from '../errors.js';
import { codecFor, JSON_CODEC, mediaType } from '../codec/codec.js';
import { sendRpc, TransportError, type RpcResponse } from '../transport/rpc.js';
import type { AttemptOutcome, UpstreamSelector, UpstreamTarget } from '../upstream/types.js';
import type { Type } from 'protobufjs';

export interface ClientOptions {
  selector: UpstreamSelector;
  requestTimeoutMs: number;
  retries: number;
  logger?: pino.Logger;
  /** Largest response body accepted from a backend. */
  maxResponseBytes?: number;
}

export interface CallOptions {
  contentType?: string;
  /** End-to-end metadata forwarded as headers. */
  metadata?: Record<string, string>;
  /** Shortens the budget (an inbound Mesh-Timeout, or a per-call value); never lengthens it. */
  timeoutMs?: number;
  /** Request id (Mesh-Id); generated when absent. */
  id?: string;
  /** Call this node (host:port) directly instead of load balancing. */
  address?: string;
  /** Overrides the client's retry count for this call. */
  retries?: number;
  /**
   * Encodes the request for the chosen node (e.g. protobuf for a node whose metadata asks for
   * it); overrides `body` and `contentType` of call().
   */
  encodeFor?: (target: UpstreamTarget) => { contentType: string; body: Uint8Array };
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

  constructor(private readonly options: ClientOptions) {}

  get requestTimeoutMs(): number {
    return this.options.requestTimeoutMs;
  }

  /** Sends raw bytes; resolves with the backend's 2xx answer, rejects with a MeshError. */
  async call(service: string, endpoint: string, body: Uint8Array, opts: CallOptions = {}): Promise<CallResult> {
    const started = Date.now();
    const budget = Math.min(this.options.requestTimeoutMs, opts.timeoutMs ?? Infinity);
    const deadline = started + budget;
    const retries = opts.retries ?? this.options.retries;
    const id = opts.id ?? `${this.idPrefix}-${(this.idCounter = (this.idCounter + 1) % Number.MAX_SAFE_INTEGER)}`;
    const contentType = opts.contentType ?? JSON_CODEC.contentType;
    // Hosts already tried; only a retry needs it.
    let tried: Set<string> | undefined;
    let lastError: MeshError | undefined;

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
      const acquireOptions = { exclude: tried, retry: attempt > 0, address: opts.address };
      const lease = selector.acquireNow?.(service, acquireOptions) ?? (await selector.acquire(service, acquireOptions));
      if (retries > 0) (tried ??= new Set()).add(lease.target.key);
      const attemptStart = Date.now();
      let response: RpcResponse;
      try {
        const encoded = opts.encodeFor?.(lease.target);
        response = await sendRpc(lease.target.dispatcher, {
          service,
          endpoint,
          id,
          contentType: encoded?.contentType ?? contentType,
          body: encoded?.body ?? body,
          metadata: opts.metadata,
          timeoutMs: remaining,
          maxResponseBytes: this.options.maxResponseBytes,
        });
      } catch (err) {
        const failure = err instanceof TransportError ? err : new TransportError({ kind: 'reset' }, String(err));
        lease.release(failure.outcome, Date.now() - attemptStart);
        lastError = transportToMeshError(failure, service, lease.target.key, budget);
        // Not sent at all (a metadata value the HTTP client refuses): no other host would take it either.
        if (failure.outcome.kind === 'cancelled') throw lastError;
        this.options.logger?.debug({ service, endpoint, host: lease.target.key, attempt, err: failure.message }, 'attempt failed');
        // A timeout spends the whole budget; connect failures and resets may be retried.
        if (failure.outcome.kind === 'timeout' && Date.now() >= deadline) break;
        continue;
      }
      const outcome: AttemptOutcome = { kind: 'response', status: response.status };
      lease.release(outcome, Date.now() - attemptStart);
      if (response.status >= 200 && response.status < 300) return response;
      lastError = parseErrorBody(response.status, response.body.toString('utf8'));
      if (!RETRIABLE_STATUS.has(response.status)) throw lastError;
    }
    throw lastError ?? new MeshError('go.mesh.client', 504, `call ${service}.${endpoint}: timeout after ${budget}ms`);
  }

  /** Encodes a value with the codec of contentType (JSON by default), calls, decodes the answer. */
  async callValue<T = unknown>(
    service: string,
    endpoint: string,
    request: unknown,
    opts: CallOptions & { requestType?: Type; responseType?: Type } = {},
  ): Promise<T> {
    const codec = codecFor(opts.contentType) ?? JSON_CODEC;
    let body: Uint8Array;
    try {
      body = codec.encode(request, opts.requestType);
    } catch (err) {
      throw new MeshError('go.mesh.client', 400, `encoding request: ${(err as Error).message}`);
    }
    const res = await this.call(service, endpoint, body, { ...opts, contentType: codec.contentType });
    const resCodec = codecFor(res.contentType || codec.contentType);
    if (!resCodec) throw new MeshError('go.mesh.client', 502, `unsupported response content type ${mediaType(res.contentType)}`);
    try {
      return resCodec.decode(res.body, opts.responseType) as T;
    } catch (err) {
      throw toMeshError(new MeshError('go.mesh.client', 502, `decoding response: ${(err as Error).message}`));
    }
  }
}

function transportToMeshError(err: TransportError, service: string, host: string, budget: number): MeshError {
  switch (err.outcome.kind) {
    case 'timeout':
      return new MeshError('go.mesh.client', 504, `call ${service} on ${host}: timeout after ${budget}ms`);
    case 'connect_failure':
      return new MeshError('go.mesh.client', 502, `call ${service} on ${host}: connection failed: ${err.message}`);
    case 'reset':
      return new MeshError('go.mesh.client', 502, `call ${service} on ${host}: connection reset: ${err.message}`);
    case 'cancelled':
      return new MeshError('go.mesh.client', 400, `call ${service}: ${err.message}`);
  }
}

/** 10 ms, 20 ms, 40 ms ... with jitter, capped at 1 s. */
function backoffMs(attempt: number): number {
  const base = Math.min(1000, 10 * 2 ** (attempt - 1));
  return Math.round(base / 2 + Math.random() * (base / 2));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
