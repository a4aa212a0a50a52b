/**
 * The client side of streaming RPC (docs/protocol.md "Streams"): one `POST /` with `Mesh-Stream`,
 * both bodies framed (src/core/transport/frames.ts), on one connection of the host's pool for the whole
 * stream. Raw payloads in and out: the codec is the caller's (Mesh.stream, the edge handlers).
 *
 * Backpressure both ways: send() resolves once the frame is handed to the connection below its
 * high-water mark; the response body is read only as fast as the consumer pulls messages (undici
 * stops reading the socket when its body buffer is full). Cancel (or breaking out of the
 * iteration, or the AbortSignal) aborts the request: the connection is closed, which is how the
 * server learns of it. Streams are not retried and not hedged.
 */
import { once } from 'node:events';
import { PassThrough } from 'node:stream';
import type { Dispatcher } from 'undici';
import { badGateway, clientClosed, ERROR_IDS, flagged, gatewayTimeout, MeshError, parseErrorBody, serverStreamSend, streamRequestClosed } from '../../base/errors.js';
import type { UpstreamInfo } from '../../base/http/access-log.js';
import { declareStats, type FamilyStats, type StatsStore } from '../../base/stats/store.js';
import { clusterStatPrefix } from '../upstream/cluster.js';
import { END_OK, encodeFrame, FLAG_END, FLAG_MESSAGE, FrameDecoder, type StreamKind } from '../transport/frames.js';
import { HEADER_ENDPOINT, HEADER_ID, HEADER_SERVICE, HEADER_STREAM, HEADER_TIMEOUT } from '../transport/headers.js';
import type { AttemptOutcome, UpstreamLease, UpstreamSelector, UpstreamTarget } from '../upstream/types.js';
import { MTLS_REFUSED } from '../../base/mtls/connector.js';
import { budgetLeft, leaseWithin } from './budget.js';

const CLIENT_ID = ERROR_IDS.client;
/** Bytes of request frames queued for the connection before send() waits (a sidecar stream's socket too). */
export const SEND_HIGH_WATER = 64 * 1024;
/** Bytes of response read ahead of the consumer (undici's body buffer; the read-ahead of gRPC and sidecar streams too). */
export const RECEIVE_HIGH_WATER = 64 * 1024;
/** Largest message accepted from the server unless StreamOpenOptions.maxMessageBytes says otherwise. */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** Largest error body read from a refused stream. */
const MAX_ERROR_BODY = 64 * 1024;

export interface StreamOpenOptions {
  kind: StreamKind;
  /** Codec of the messages (each frame's payload). Default application/json. */
  contentType?: string;
  /** For a server stream: the one request message, already encoded. */
  request?: Uint8Array;
  metadata?: Record<string, string>;
  /** The stream's deadline in ms from now; absent or 0: none (the unary budget does not apply). */
  timeoutMs?: number;
  id?: string;
  /** Call this node (host:port) directly. */
  address?: string;
  signal?: AbortSignal;
  /** Largest message accepted from the server (default 4 MiB). */
  maxMessageBytes?: number;
  info?: UpstreamInfo;
}

/** The per-cluster stream stats (Envoy-style names under cluster.<service>.). */
export const STREAM_STATS = {
  gauges: { active: 'upstream_rq_stream_active' },
  counters: { total: 'upstream_rq_stream_total', sent: 'upstream_rq_stream_msgs_sent', received: 'upstream_rq_stream_msgs_received' },
} as const;

export type StreamStats = FamilyStats<typeof STREAM_STATS>;

export function streamStats(stats: StatsStore, service: string): StreamStats {
  return declareStats(stats.scope(clusterStatPrefix(service)), STREAM_STATS);
}

/** A stream whose deadline passed: `ms` from its open, or undefined: the call it was opened in had none left. */
export function streamTimeout(service: string, endpoint: string, ms: number | undefined): MeshError {
  const what = ms === undefined ? 'the deadline of the call being served passed before it was opened' : `deadline of ${ms}ms exceeded`;
  return flagged(gatewayTimeout(CLIENT_ID, `stream ${service}.${endpoint}: ${what}`), 'UT');
}

/** The error a consumer sees when the stream was cancelled on its side. */
export function cancelledError(id: string = CLIENT_ID, detail = 'stream cancelled'): MeshError {
  return clientClosed(id, detail);
}

/**
 * One open stream, whatever carries it (the mesh wire below, or gRPC for a node with
 * `protocol=grpc`: src/core/transport/grpc/stream.ts). Iterate it for the server's messages (raw
 * payloads of `contentType`); the iteration ends with the stream and throws a MeshError for the
 * server's error, a timeout (504), a reset (502) or a cancel (499).
 */
export interface StreamCall extends AsyncIterable<Buffer> {
  readonly service: string;
  readonly endpoint: string;
  /** Resolves once the server accepted the stream; rejects with its refusal or the failure. */
  readonly opened: Promise<void>;
  /** The Content-Type of the messages, once opened. */
  contentType: string;
  /** Sends one message (client and bidi streams); resolves once the transport takes more. */
  send(payload: Uint8Array): Promise<void>;
  /** Ends the request side (half-close). */
  end(): void;
  /** Gives the stream up; the server is told. */
  cancel(reason?: string): void;
  /** @internal run once the stream is over (drops the listener on the caller's signal). */
  onFinish?: () => void;
}

/** What a transport other than the mesh wire is given to open a stream on the host it was leased. */
export interface StreamOpenRequest {
  service: string;
  endpoint: string;
  id: string;
  kind: StreamKind;
  contentType: string;
  /** A server stream's one request. */
  request?: Uint8Array;
  /** End-to-end metadata, the trace context (traceparent, tracestate) included. */
  metadata: Record<string, string>;
  /** ms from now; 0: no deadline. What is left of the stream's deadline once the host was chosen. */
  timeoutMs: number;
  /** The stream's deadline as it was given (ms from its open; 0: none), for the timeout's message (streamTimeout). */
  givenTimeoutMs: number;
  maxMessageBytes: number;
  lease: UpstreamLease;
  /** Counted by the stream: sent, received, and active.dec() once it is over (openStream counted total and active). */
  stats?: StreamStats;
}

/** Opens a stream on a leased host; the call releases the lease once it is over. */
export type StreamOpener = (request: StreamOpenRequest) => StreamCall;

/** The mesh wire's stream. */
class WireStreamCall implements StreamCall {
  private ended = false;
  private outcome?: AttemptOutcome;
  private released = false;
  private failure?: MeshError;
  private readonly started = Date.now();
  private timer?: NodeJS.Timeout;
  private body?: AsyncIterable<Buffer>;
  /** Resolves once the server accepted the stream (200); rejects with its refusal or the failure. */
  readonly opened: Promise<void>;
  private resolveOpened!: () => void;
  private rejectOpened!: (err: MeshError) => void;
  /** The Content-Type of the answer, once opened. */
  contentType: string;
  onFinish?: () => void;

  constructor(
    readonly service: string,
    readonly endpoint: string,
    contentType: string,
    private readonly requestBody: PassThrough | undefined,
    private readonly abort: AbortController,
    private readonly lease: UpstreamLease,
    private readonly stats: StreamStats | undefined,
    private readonly maxMessageBytes: number,
  ) {
    this.contentType = contentType;
    this.opened = new Promise<void>((resolve, reject) => {
      this.resolveOpened = resolve;
      this.rejectOpened = reject;
    });
    this.opened.catch(() => {});
  }

  /** @internal the answer's head arrived, or the request failed. */
  async start(response: Promise<Dispatcher.ResponseData>, timer: NodeJS.Timeout | undefined): Promise<void> {
    this.timer = timer;
    let data: Dispatcher.ResponseData;
    try {
      data = await response;
    } catch (err) {
      if (!this.failure) {
        const e = err as { code?: string; message?: string };
        const connect = e.code === 'ECONNREFUSED' || e.code === 'UND_ERR_CONNECT_TIMEOUT' || e.code === MTLS_REFUSED;
        this.outcome = connect ? { kind: 'connect_failure' } : { kind: 'reset' };
        this.failure = flagged(
          badGateway(CLIENT_ID, `stream ${this.service} on ${this.lease.target.key}: ${connect ? 'connection failed' : 'connection reset'}: ${e.message ?? String(err)}`),
          connect ? 'UF' : 'UC',
        );
      }
      this.finish();
      this.rejectOpened(this.failure!);
      return;
    }
    if (data.statusCode !== 200) {
      let text = '';
      try {
        for await (const chunk of data.body) {
          text += (chunk as Buffer).toString('utf8');
          if (text.length > MAX_ERROR_BODY) break;
        }
      } catch {
        // the error body is best effort
      }
      data.body.destroy();
      const err = parseErrorBody(data.statusCode, text);
      this.outcome ??= { kind: 'response', status: data.statusCode };
      this.failure ??= err;
      this.finish();
      this.rejectOpened(this.failure);
      return;
    }
    const type = data.headers['content-type'];
    if (typeof type === 'string') this.contentType = type;
    this.body = data.body;
    this.resolveOpened();
  }

  /** @internal the reason the stream is being given up (timeout, cancel), set before aborting. */
  fail(err: MeshError, outcome: AttemptOutcome): void {
    if (this.failure || this.ended) return;
    this.failure = err;
    this.outcome = outcome;
    this.abort.abort(err);
    this.finish();
  }

  /**
   * Sends one message (client and bidi streams). Resolves once the frame is queued below the
   * high-water mark; rejects when the stream is over.
   */
  async send(payload: Uint8Array): Promise<void> {
    const body = this.requestBody;
    if (!body) throw serverStreamSend(CLIENT_ID);
    if (this.failure) throw this.failure;
    if (body.writableEnded || body.destroyed) throw streamRequestClosed(CLIENT_ID);
    this.stats?.sent.inc();
    if (!body.write(encodeFrame(FLAG_MESSAGE, payload))) {
      try {
        await once(body, 'drain', { signal: this.abort.signal });
      } catch {
        throw this.failure ?? cancelledError();
      }
    }
  }

  /** Ends the request side (half-close): the server's iterable of requests ends. */
  end(): void {
    const body = this.requestBody;
    if (body && !body.writableEnded && !body.destroyed) body.end(END_OK);
  }

  /** Gives the stream up: the connection is closed, the server's handler is told. */
  cancel(reason = 'stream cancelled'): void {
    this.fail(cancelledError(CLIENT_ID, reason), { kind: 'cancelled' });
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    const decoder = new FrameDecoder(this.maxMessageBytes, CLIENT_ID);
    try {
      await this.opened;
      let end: Buffer | undefined;
      for await (const chunk of this.body!) {
        if (end) continue; // the rest of the body after the end frame: read to its end, so the connection is kept
        for (const frame of decoder.push(chunk as Buffer)) {
          if (frame.flags === FLAG_END) {
            end = frame.payload;
            break;
          }
          this.stats?.received.inc();
          yield frame.payload;
          if (this.failure) throw this.failure;
        }
        if (!end && decoder.failure) throw decoder.failure;
      }
      if (end) {
        this.ended = true;
        if (end.length === 0) {
          this.outcome = { kind: 'response', status: 200 };
          return;
        }
        const err = parseErrorBody(502, end.toString('utf8'));
        this.outcome = { kind: 'response', status: err.code };
        throw err;
      }
      throw flagged(badGateway(CLIENT_ID, `stream ${this.service}.${this.endpoint}: the backend closed the stream without an end frame`), 'UC');
    } catch (err) {
      if (this.failure) throw this.failure;
      if (err instanceof MeshError) {
        if (!this.ended) {
          // A frame over the limit or with bad flags: give the stream up.
          this.outcome = { kind: 'reset' };
          this.abort.abort(err);
        }
        throw err;
      }
      this.outcome = { kind: 'reset' };
      throw flagged(badGateway(CLIENT_ID, `stream ${this.service}.${this.endpoint}: connection reset: ${(err as Error).message}`), 'UC');
    } finally {
      // Left early (break, return, throw in the loop body): the server must hear of it.
      if (!this.ended && !this.failure) this.cancel('the consumer stopped reading');
      this.finish();
    }
  }

  private finish(): void {
    if (this.released) return;
    this.released = true;
    clearTimeout(this.timer);
    this.requestBody?.destroy();
    this.stats?.active.dec();
    this.lease.release(this.outcome ?? { kind: 'cancelled' }, Date.now() - this.started);
    this.onFinish?.();
  }
}

/**
 * Opens a stream: picks a host and sends the request (a server stream's one request with it).
 * Resolves once the request is under way: `opened` tells when the server accepted it, and the
 * iteration throws its refusal (unknown endpoint, bad request). No host rejects at once.
 */
export async function openStream(
  selector: UpstreamSelector,
  stats: StatsStore | undefined,
  service: string,
  endpoint: string,
  id: string,
  opts: StreamOpenOptions,
  streamFor?: (target: UpstreamTarget) => StreamOpener | undefined,
): Promise<StreamCall> {
  if (opts.signal?.aborted) throw cancelledError();
  const contentType = opts.contentType ?? 'application/json';
  const given = opts.timeoutMs && opts.timeoutMs > 0 ? opts.timeoutMs : 0;
  const deadline = given > 0 ? Date.now() + given : 0;
  // The deadline counts from the open: a wait for a host (the registry) spends it, and ends with it.
  // None left: not opened, the host is not charged.
  const pending = selector.acquireNow?.(service, { address: opts.address }) ?? selector.acquire(service, { address: opts.address });
  const lease = pending instanceof Promise ? await (deadline > 0 ? leaseWithin(pending, deadline) : pending) : pending;
  if (!lease) throw streamTimeout(service, endpoint, given);
  let timeoutMs = 0;
  if (deadline > 0) {
    const left = budgetLeft(lease, deadline);
    if (left === undefined) throw streamTimeout(service, endpoint, given);
    timeoutMs = left;
  }
  if (opts.info) {
    opts.info.upstreamCluster = service;
    opts.info.upstreamHost = lease.target.key;
  }
  const st = stats ? streamStats(stats, service) : undefined;
  st?.active.inc();
  st?.total.inc();
  const abort = new AbortController();
  const headers: Record<string, string> = {};
  if (opts.metadata) {
    for (const name in opts.metadata) {
      const lower = name.toLowerCase();
      if (lower === 'content-type' || lower === HEADER_SERVICE || lower === HEADER_ENDPOINT || lower === HEADER_ID || lower === HEADER_TIMEOUT || lower === HEADER_STREAM) continue;
      headers[name] = opts.metadata[name]!;
    }
  }
  headers['content-type'] = contentType;
  headers[HEADER_SERVICE] = service;
  headers[HEADER_ENDPOINT] = endpoint;
  headers[HEADER_ID] = id;
  headers[HEADER_STREAM] = opts.kind;
  const maxMessageBytes = opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  // A node that does not speak the mesh wire (protocol=grpc) opens the stream its own way.
  let opener: StreamOpener | undefined;
  try {
    opener = streamFor?.(lease.target);
  } catch (err) {
    st?.active.dec();
    lease.release({ kind: 'cancelled' }, 0);
    throw err;
  }
  if (opener) {
    const other = opener({ service, endpoint, id, kind: opts.kind, contentType, request: opts.request, metadata: opts.metadata ?? {}, timeoutMs, givenTimeoutMs: given, maxMessageBytes, lease, stats: st });
    watchSignal(other, opts.signal);
    return other;
  }
  if (timeoutMs > 0) headers[HEADER_TIMEOUT] = String(Math.max(1, Math.floor(timeoutMs)));
  let requestBody: PassThrough | undefined;
  let body: Buffer | PassThrough;
  if (opts.kind === 'server') {
    body = Buffer.concat([encodeFrame(FLAG_MESSAGE, opts.request ?? new Uint8Array(0)), END_OK]);
    st?.sent.inc();
  } else {
    requestBody = new PassThrough({ highWaterMark: SEND_HIGH_WATER });
    body = requestBody;
  }
  const call = new WireStreamCall(service, endpoint, contentType, requestBody, abort, lease, st, maxMessageBytes);
  const timer =
    timeoutMs > 0 ? setTimeout(() => call.fail(streamTimeout(service, endpoint, given), { kind: 'timeout' }), timeoutMs) : undefined;
  watchSignal(call, opts.signal);
  let response: Promise<Dispatcher.ResponseData>;
  try {
    response = lease.target.dispatcher.request({ path: '/', method: 'POST', headers, body, signal: abort.signal, highWaterMark: RECEIVE_HIGH_WATER });
  } catch (err) {
    response = Promise.reject(err);
  }
  void call.start(response, timer);
  return call;
}

/** The caller's signal cancels the stream; the listener is dropped with the stream (the signal may outlive many). */
function watchSignal(call: StreamCall, signal: AbortSignal | undefined): void {
  if (!signal) return;
  const onSignal = () => call.cancel();
  signal.addEventListener('abort', onSignal, { once: true });
  call.onFinish = () => signal.removeEventListener('abort', onSignal);
}
