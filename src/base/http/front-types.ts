/**
 * The request and response a front end answers: node:http's (HTTP/1.1) or node:http2's
 * compatibility objects (an HTTP/2 stream, h2 by ALPN or h2c by prior knowledge). They agree on
 * what the edge reads and writes (headers, url, method, body as a stream, writeHead/setHeader/end)
 * and differ on the connection: an HTTP/2 request has no connection of its own (its `socket` is a
 * proxy of the session's, shared by every stream, whose `destroy` resets the stream only, and
 * which forgets the session's addresses once the stream closed), no keep-alive to turn off, and
 * its answer carries no connection-specific header (Connection, Keep-Alive,
 * Transfer-Encoding, Upgrade, Proxy-Connection; RFC 9113 8.2.2). The helpers below are the one
 * place that tells the two apart.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';

export type FrontRequest = IncomingMessage | Http2ServerRequest;
export type FrontResponse = ServerResponse | Http2ServerResponse;

/** True for a request that came over HTTP/2 (its compatibility object carries the stream). */
export function isHttp2Request(req: FrontRequest): req is Http2ServerRequest {
  return 'stream' in req && (req as Http2ServerRequest).stream !== undefined;
}

/** True for the answer of an HTTP/2 stream. */
export function isHttp2Response(res: FrontResponse): res is Http2ServerResponse {
  return 'stream' in res && (res as Http2ServerResponse).stream !== undefined;
}

/**
 * The connection of an HTTP/1.1 request closes after its answer. On HTTP/2 there is nothing to
 * do: the stream ends with its answer, and the session goes on serving its other streams.
 */
export function closeAfterAnswer(res: FrontResponse): void {
  if (!isHttp2Response(res)) res.shouldKeepAlive = false;
}

/**
 * Ends a request that will not be answered normally (its body is cut off, a read that cannot go
 * on): the HTTP/1.1 connection is destroyed; on HTTP/2 only the stream is reset (RST_STREAM), the
 * session's other streams go on.
 */
export function abortRequest(req: FrontRequest, err?: Error): void {
  if (isHttp2Request(req)) {
    if (!req.stream.destroyed) req.stream.close(0x8 /* CANCEL */);
    return;
  }
  req.socket?.destroy(err);
}

/** Header names that are connection-specific (RFC 9113 8.2.2): never in an HTTP/2 answer (node throws on them). */
export const CONNECTION_SPECIFIC: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'http2-settings']);

/**
 * Writes an answer's head from a flat [name, value, ...] list (a name repeated for each of its
 * values), as node:http takes it. On HTTP/2 the connection-specific headers are left out (a
 * node's answer may carry them: they describe its own connection) and the list is given as an
 * object, a repeated name as an array of its values.
 */
export function writeHeadFlat(res: FrontResponse, status: number, flat: readonly string[]): void {
  if (!isHttp2Response(res)) {
    res.writeHead(status, flat as string[]);
    return;
  }
  const headers: OutgoingHttpHeaders = {};
  for (let i = 0; i < flat.length; i += 2) {
    const name = flat[i]!.toLowerCase();
    if (CONNECTION_SPECIFIC.has(name)) continue;
    const value = flat[i + 1]!;
    const prior = headers[name];
    headers[name] = prior === undefined ? value : Array.isArray(prior) ? [...prior, value] : [String(prior), value];
  }
  res.writeHead(status, headers);
}

/** Sends the head now (an event stream's, before its first event). */
export function flushHead(res: FrontResponse): void {
  if (!isHttp2Response(res)) return res.flushHeaders();
  // node's compatibility response has flushHeaders (it responds on the stream); @types/node 20 leaves it out.
  (res as Http2ServerResponse & { flushHeaders(): void }).flushHeaders();
}

/** Runs `listener` once on the answer's next 'drain' (the two kinds of response type `once` apart). */
export function onceDrain(res: FrontResponse, listener: () => void): void {
  (res as NodeJS.EventEmitter).once('drain', listener);
}

/** Writes a chunk of the answer's body: false when the caller should wait for 'drain'. */
export function writeChunk(res: FrontResponse, chunk: Buffer | string): boolean {
  return isHttp2Response(res) ? res.write(chunk) : res.write(chunk);
}

/**
 * A request body whose length no Content-Length gives: HTTP/1.1 chunked (Transfer-Encoding), or
 * an HTTP/2 stream without Content-Length whose HEADERS did not end it (its DATA frames are the
 * body). Such a body is counted against the limit as it comes.
 */
export function bodyOfUnknownLength(req: FrontRequest): boolean {
  if (isHttp2Request(req)) return req.headers['content-length'] === undefined && !req.stream.endAfterHeaders;
  return req.headers['transfer-encoding'] !== undefined;
}
