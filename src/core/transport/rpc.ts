/**
 * The client side of the RPC wire protocol: one `POST /` on a host's keep-alive pool.
 * Classifies failures into the outcomes the cluster manager accounts for.
 */
import type { Dispatcher } from 'undici';
import type { AttemptOutcome } from '../upstream/types.js';
import { HEADER_ENDPOINT, HEADER_ID, HEADER_SERVICE, HEADER_TIMEOUT, rawNameIs } from './headers.js';
import { TRACEPARENT, TRACESTATE } from '../../base/util/trace-context.js';
import { MTLS_REFUSED } from '../../base/mtls/connector.js';

export interface RpcRequest {
  service: string;
  endpoint: string;
  id: string;
  contentType: string;
  body: Uint8Array;
  /** End-to-end metadata forwarded as headers. */
  metadata?: Record<string, string>;
  /** W3C trace context of the call (the caller's trace id, the caller's span id); replaces any in the metadata. */
  traceparent?: string;
  tracestate?: string;
  timeoutMs: number;
  /** Largest response body accepted; beyond it the attempt fails. */
  maxResponseBytes?: number;
}

export interface RpcResponse {
  status: number;
  contentType: string;
  body: Buffer;
}

const DEFAULT_MAX_RESPONSE = 64 * 1024 * 1024;

export class TransportError extends Error {
  constructor(
    readonly outcome: Exclude<AttemptOutcome, { kind: 'response' }>,
    message: string,
  ) {
    super(message);
    this.name = 'TransportError';
  }
}

const CONNECT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT', 'EADDRNOTAVAIL', MTLS_REFUSED]);

function errorCode(err: unknown): string {
  const e = err as { code?: string; cause?: { code?: string } };
  return e?.code ?? e?.cause?.code ?? '';
}

export function classifyError(err: unknown, timedOut: boolean): TransportError {
  if (err instanceof TransportError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (timedOut) return new TransportError({ kind: 'timeout' }, 'request timed out');
  const code = errorCode(err);
  // undici refused to send it (a header value it does not accept): nothing reached the host.
  if (code === 'UND_ERR_INVALID_ARG') return new TransportError({ kind: 'cancelled' }, `request not sent: ${message}`);
  if (CONNECT_CODES.has(code)) return new TransportError({ kind: 'connect_failure' }, `${code.toLowerCase()}: ${message}`);
  return new TransportError({ kind: 'reset' }, `${code ? code + ': ' : ''}${message}`);
}

/** Filled in by sendRpc: gives up the call (a hedged try that lost); it fails with outcome `cancelled`. */
export interface RpcControl {
  cancel?: (reason: string) => void;
}

/**
 * Sends one call on the host's pool through undici's dispatch API: no response stream and no
 * AbortSignal, because this is the hot path of every gateway and sidecar request.
 *
 * The handler uses undici's raw callbacks (onConnect/onHeaders/onData/onComplete/onError). undici's
 * HTTP/1.1 client speaks them natively; the newer onRequestStart/onResponseStart form is adapted
 * onto them and parses every response header into an object first, while only Content-Type is
 * needed here.
 */
export function sendRpc(dispatcher: Dispatcher, request: RpcRequest, control?: RpcControl): Promise<RpcResponse> {
  return new Promise<RpcResponse>((resolve, reject) => {
    const call = new RpcCall(request, resolve, reject);
    if (control) control.cancel = (reason) => call.cancel(reason);
    try {
      dispatcher.dispatch({ path: '/', method: 'POST', headers: requestHeaders(request), body: bodyOf(request.body) }, call);
    } catch (err) {
      call.onError(err as Error);
    }
  });
}

function bodyOf(body: Uint8Array): Buffer | string {
  if (body.byteLength === 0) return '';
  return Buffer.isBuffer(body) ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/** Header names the protocol sets itself: metadata of the same name (any case) is left out. */
const PROTOCOL_HEADERS = new Set(['content-type', HEADER_SERVICE, HEADER_ENDPOINT, HEADER_ID, HEADER_TIMEOUT, TRACEPARENT, TRACESTATE]);

/** The request's headers as undici's flat [name, value, ...] list: metadata first, then the protocol's own. */
function requestHeaders(request: RpcRequest): string[] {
  const headers: string[] = [];
  const metadata = request.metadata;
  if (metadata) {
    for (const name in metadata) {
      if (PROTOCOL_HEADERS.has(name.toLowerCase())) continue;
      headers.push(name, metadata[name]!);
    }
  }
  headers.push(
    'content-type',
    request.contentType,
    HEADER_SERVICE,
    request.service,
    HEADER_ENDPOINT,
    request.endpoint,
    HEADER_ID,
    request.id,
    HEADER_TIMEOUT,
    String(Math.max(1, Math.floor(request.timeoutMs))),
  );
  if (request.traceparent !== undefined) {
    headers.push(TRACEPARENT, request.traceparent);
    if (request.tracestate !== undefined) headers.push(TRACESTATE, request.tracestate);
  }
  return headers;
}


/** One call in flight: collects the answer, bounds it in time and size, settles the promise once. */
class RpcCall implements Dispatcher.DispatchHandler {
  private abort?: (err?: Error) => void;
  private readonly timer: NodeJS.Timeout;
  private timedOut = false;
  private cancelled?: TransportError;
  private settled = false;
  private status = 0;
  private contentType = '';
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private readonly limit: number;

  constructor(
    request: RpcRequest,
    private readonly resolve: (response: RpcResponse) => void,
    private readonly reject: (err: TransportError) => void,
  ) {
    this.limit = request.maxResponseBytes ?? DEFAULT_MAX_RESPONSE;
    this.timer = setTimeout(() => this.onTimeout(), request.timeoutMs);
  }

  private onTimeout(): void {
    this.timedOut = true;
    const err = new TransportError({ kind: 'timeout' }, 'request timed out');
    // Still waiting for a connection: settle now; onConnect drops the request when it gets one.
    if (this.abort) this.abort(err);
    else this.onError(err);
  }

  /** Gives the call up; the connection is closed (undici cannot take back a request it sent). */
  cancel(reason: string): void {
    if (this.settled) return;
    this.cancelled = new TransportError({ kind: 'cancelled' }, reason);
    if (this.abort) this.abort(this.cancelled);
    else this.onError(this.cancelled);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.cancelled) abort(this.cancelled);
    else if (this.timedOut) abort(new TransportError({ kind: 'timeout' }, 'request timed out'));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    if (statusCode < 200) return true; // an interim answer: the final one follows
    this.status = statusCode;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      if (rawNameIs(rawHeaders[i]!, 'content-type')) {
        this.contentType = rawHeaders[i + 1]!.toString('latin1');
        break;
      }
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.abort?.(new TransportError({ kind: 'reset' }, `response larger than ${this.limit} bytes`));
      return false;
    }
    this.chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    const chunks = this.chunks;
    this.resolve({ status: this.status, contentType: this.contentType, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.size) });
  }

  onError(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.reject(this.cancelled ?? classifyError(err, this.timedOut));
  }
}
