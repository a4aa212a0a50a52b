/**
 * The client side of the RPC wire protocol: one `POST /` on a host's keep-alive pool.
 * Classifies failures into the outcomes the cluster manager accounts for.
 */
import type { Dispatcher } from 'undici';
import type { AttemptOutcome } from '../upstream/types.js';
import { HEADER_ENDPOINT, HEADER_ID, HEADER_SERVICE, HEADER_TIMEOUT } from './headers.js';

export interface RpcRequest {
  service: string;
  endpoint: string;
  id: string;
  contentType: string;
  body: Uint8Array;
  /** End-to-end metadata forwarded as headers. */
  metadata?: Record<string, string>;
  timeoutMs: number;
  /** Largest response body accepted; beyond it the attempt fails. */
  maxResponseBytes?: number;
}

export interface RpcResponse {
  status: number;
  contentType: string;
  body: Buffer;
}

export class TransportError extends Error {
  constructor(
    readonly outcome: Exclude<AttemptOutcome, { kind: 'response' }>,
    message: string,
  ) {
    super(message);
    this.name = 'TransportError';
  }
}

const CONNECT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT', 'EADDRNOTAVAIL']);

function errorCode(err: unknown): string {
  const e = err as { code?: string; cause?: { code?: string } };
  return e?.code ?? e?.cause?.code ?? '';
}

export function classifyError(err: unknown, timedOut: boolean): TransportError {
  if (err instanceof TransportError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (timedOut) return new TransportError({ kind: 'timeout' }, 'request timed out');
  const code = errorCode(err);
  if (CONNECT_CODES.has(code)) return new TransportError({ kind: 'connect_failure' }, `${code.toLowerCase()}: ${message}`);
  return new TransportError({ kind: 'reset' }, `${code ? code + ': ' : ''}${message}`);
}

/**
 * Sends one call on the host's pool. Uses undici's dispatch API directly (no response stream, no
 * AbortSignal): this is the hot path of every gateway and sidecar request.
 */
export function sendRpc(dispatcher: Dispatcher, request: RpcRequest): Promise<RpcResponse> {
  const headers: Record<string, string> = {
    ...request.metadata,
    'content-type': request.contentType,
    [HEADER_SERVICE]: request.service,
    [HEADER_ENDPOINT]: request.endpoint,
    [HEADER_ID]: request.id,
    [HEADER_TIMEOUT]: String(Math.max(1, Math.floor(request.timeoutMs))),
  };
  const limit = request.maxResponseBytes ?? 64 * 1024 * 1024;
  const body = request.body;
  return new Promise<RpcResponse>((resolve, reject) => {
    let controller: Dispatcher.DispatchController | undefined;
    let timedOut = false;
    let settled = false;
    let status = 0;
    let contentType = '';
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => {
      timedOut = true;
      controller?.abort(new TransportError({ kind: 'timeout' }, 'request timed out'));
    }, request.timeoutMs);
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(classifyError(err, timedOut));
    };
    try {
      dispatcher.dispatch(
        {
          path: '/',
          method: 'POST',
          headers,
          body: body.byteLength ? Buffer.from(body.buffer, body.byteOffset, body.byteLength) : '',
        },
        {
          onRequestStart(c) {
            controller = c;
            if (timedOut) c.abort(new TransportError({ kind: 'timeout' }, 'request timed out'));
          },
          onResponseStart(_c, statusCode, responseHeaders) {
            status = statusCode;
            const ct = responseHeaders['content-type'];
            contentType = (Array.isArray(ct) ? ct[0] : ct) ?? '';
          },
          onResponseData(c, chunk) {
            size += chunk.length;
            if (size > limit) {
              c.abort(new TransportError({ kind: 'reset' }, `response larger than ${limit} bytes`));
              return;
            }
            chunks.push(chunk);
          },
          onResponseEnd() {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            resolve({ status, contentType, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
          },
          onResponseError(_c, err) {
            fail(err);
          },
        },
      );
    } catch (err) {
      fail(err);
    }
  });
}
