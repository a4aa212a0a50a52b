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

export async function sendRpc(dispatcher: Dispatcher, request: RpcRequest): Promise<RpcResponse> {
  const headers: Record<string, string> = {
    ...request.metadata,
    'content-type': request.contentType,
    [HEADER_SERVICE]: request.service,
    [HEADER_ENDPOINT]: request.endpoint,
    [HEADER_ID]: request.id,
    [HEADER_TIMEOUT]: String(Math.max(1, Math.floor(request.timeoutMs))),
  };
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, request.timeoutMs);
  try {
    const res = await dispatcher.request({
      path: '/',
      method: 'POST',
      headers,
      body: request.body.byteLength ? Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength) : '',
      signal: controller.signal,
    });
    const limit = request.maxResponseBytes ?? 64 * 1024 * 1024;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        res.body.destroy();
        throw new TransportError({ kind: 'reset' }, `response larger than ${limit} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    const ct = res.headers['content-type'];
    return {
      status: res.statusCode,
      contentType: (Array.isArray(ct) ? ct[0] : ct) ?? '',
      body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size),
    };
  } catch (err) {
    throw classifyError(err, timedOut);
  } finally {
    clearTimeout(timer);
  }
}
