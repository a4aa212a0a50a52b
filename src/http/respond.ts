/** Small helpers to answer HTTP requests with the project's formats. */
import type { ServerResponse } from 'node:http';
import { MeshError, toMeshError } from '../errors.js';
import { requestInfo } from './access-log.js';

export function sendError(res: ServerResponse, err: unknown, id = 'go.mesh.server'): void {
  const e = err instanceof MeshError ? err : toMeshError(err, id);
  if (e.responseFlag !== undefined) requestInfo(res.req)?.addFlag(e.responseFlag);
  const body = e.toBody();
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(e.code, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown, extraHeaders: Record<string, string> = {}): void {
  const body = typeof value === 'string' ? value : JSON.stringify(value);
  res.writeHead(status, {
    ...extraHeaders,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

export function sendBytes(res: ServerResponse, status: number, contentType: string, body: Uint8Array | string): void {
  res.writeHead(status, {
    'content-type': contentType,
    'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength,
  });
  res.end(body);
}

/**
 * An error JSON answer as raw HTTP/1.1 bytes that close the connection, for a socket with no
 * ServerResponse (a refused upgrade, a request Node could not read). `headers` (lower-case names,
 * values without CR or LF) go between Content-Length and Connection: a challenge, Retry-After.
 */
export function rawErrorResponse(err: MeshError, headers: Record<string, string> = {}): string {
  const body = err.toBody();
  let extra = '';
  for (const [name, value] of Object.entries(headers)) extra += `${name}: ${value}\r\n`;
  return `HTTP/1.1 ${err.code} ${err.statusText}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`;
}

/**
 * Resolves on the response's next 'drain', or its close: for a writer that waits after write()
 * returned false (a stream's answers). No listener is left behind.
 */
export function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
