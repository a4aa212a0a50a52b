/**
 * The one writer of answers in the project's formats: error JSON on a FrontResponse
 * (`sendError`) and on a raw socket with no FrontResponse (`refuseSocket`: a refused upgrade;
 * `rawErrorResponse`: its bytes), JSON and bytes, and the lingering close of a raw connection.
 */
import type { FrontResponse } from './front-types.js';
import type { Duplex } from 'node:stream';
import { ERROR_IDS, MeshError, toMeshError } from '../errors.js';
import { requestInfo } from './access-log.js';
import { LINGER_BYTES, LINGER_MS } from './body.js';

export function sendError(res: FrontResponse, err: unknown, id: string = ERROR_IDS.server): void {
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

export function sendJson(res: FrontResponse, status: number, value: unknown, extraHeaders: Record<string, string> = {}): void {
  const body = typeof value === 'string' ? value : JSON.stringify(value);
  res.writeHead(status, {
    ...extraHeaders,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

export function sendBytes(res: FrontResponse, status: number, contentType: string, body: Uint8Array | string): void {
  res.writeHead(status, {
    'content-type': contentType,
    'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength,
  });
  res.end(body);
}

/**
 * An error JSON answer as raw HTTP/1.1 bytes that close the connection, for a socket with no
 * FrontResponse (a refused upgrade, a request Node could not read). `headers` (lower-case names,
 * values without CR or LF) go between Content-Length and Connection: a challenge, Retry-After.
 */
export function rawErrorResponse(err: MeshError, headers: Record<string, string> = {}): string {
  const body = err.toBody();
  let extra = '';
  for (const [name, value] of Object.entries(headers)) extra += `${name}: ${value}\r\n`;
  // An auth refusal's challenge (src/edge/auth: AuthError), as a response gets it from the auth step.
  const challenge = (err as { challenge?: unknown }).challenge;
  if (typeof challenge === 'string' && challenge !== '' && headers['www-authenticate'] === undefined) extra += `www-authenticate: ${challenge}\r\n`;
  return `HTTP/1.1 ${err.code} ${err.statusText}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`;
}

export interface RefuseSocketOptions {
  /** Header fields of the answer (lower-case names): Allow, Retry-After and the RateLimit fields. */
  headers?: Record<string, string>;
  /**
   * True: a lingering close (endRawLingering: what the client still sends is read and dropped);
   * false: the socket is just ended after the answer (a handler that read nothing more). Default true.
   */
  linger?: boolean;
}

/**
 * Refuses a raw connection (an Upgrade request: nothing was read from the socket yet, and there is
 * no FrontResponse) with error JSON that closes it. `err` not a MeshError: a 500 with `id`.
 */
export function refuseSocket(socket: Duplex, err: unknown, id: string, options: RefuseSocketOptions = {}): void {
  const answer = rawErrorResponse(err instanceof MeshError ? err : toMeshError(err, id), options.headers);
  if (options.linger === false) socket.end(answer);
  else endRawLingering(socket, answer);
}

/**
 * Ends a raw connection (an upgrade socket, no FrontResponse) after `answer`, with a lingering
 * close: whatever the client still sends (pipelined requests) is read and dropped, never parsed or
 * forwarded, so the kernel does not reset the connection and discard the answer before the client
 * reads it. Bounded like lingerOnRest (src/base/http/body.ts): the connection is destroyed once the
 * client closes its side, after LINGER_MS, or past LINGER_BYTES dropped bytes.
 */
export function endRawLingering(socket: Duplex, answer?: string | Buffer): void {
  let dropped = 0;
  const close = () => {
    clearTimeout(timer);
    socket.destroy();
  };
  const timer = setTimeout(close, LINGER_MS);
  timer.unref();
  socket.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > LINGER_BYTES) close();
  });
  // The client closed its side: done once the answer is out.
  socket.once('end', () => (socket.writableFinished ? close() : socket.once('finish', close)));
  socket.once('close', () => clearTimeout(timer));
  if (answer === undefined) socket.end();
  else socket.end(answer);
}

/**
 * Resolves on the response's next 'drain', or its close: for a writer that waits after write()
 * returned false (a stream's answers). No listener is left behind.
 */
export function drained(res: FrontResponse): Promise<void> {
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
