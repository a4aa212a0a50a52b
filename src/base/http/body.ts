/** Reading request bodies with a size limit (413 beyond it) and a deadline. */
import { isHttp2Request, isHttp2Response, type FrontRequest, type FrontResponse } from './front-types.js';
import { constants as h2constants, type Http2ServerRequest } from 'node:http2';
import { badRequest, bodyTooLarge } from '../errors.js';

export const DEFAULT_MAX_BODY = 4 * 1024 * 1024;

export function readBody(req: FrontRequest, limit: number, errorId: string): Promise<Buffer> {
  return new Promise((resolve, reject) => readBodyThen(req, limit, errorId, (err, body) => (err ? reject(err) : resolve(body!))));
}

/**
 * readBody with a callback instead of a promise, for a path that counts its promises (each one
 * costs a hook call per step while an AsyncLocalStorage is in use): `done` is called once, with
 * the error (a MeshError: 413, 400) or the body. Never synchronously.
 */
export function readBodyThen(req: FrontRequest, limit: number, errorId: string, done: (err: Error | undefined, body?: Buffer) => void): void {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    process.nextTick(done, bodyTooLarge(errorId, limit));
    return;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  let finished = false;
  const finish = (err?: Error) => {
    if (finished) return;
    finished = true;
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('error', onError);
    req.off('aborted', onAborted);
    if (err) done(err);
    else done(undefined, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
  };
  const onData = (chunk: Buffer) => {
    size += chunk.length;
    if (size > limit) {
      req.resume();
      finish(bodyTooLarge(errorId, limit));
      return;
    }
    chunks.push(chunk);
  };
  const onEnd = () => finish();
  const onError = (err: Error) => finish(badRequest(errorId, `reading request body: ${err.message}`));
  const onAborted = () => finish(badRequest(errorId, 'request aborted'));
  req.on('data', onData);
  req.on('end', onEnd);
  req.on('error', onError);
  req.on('aborted', onAborted);
}

/** How long, at most, the rest of a refused request body (or what a refused raw connection still sends) is read and dropped. */
export const LINGER_MS = 2_000;
/** And how many bytes at most (or 4 × the body limit, when that is more): whichever comes first. */
export const LINGER_BYTES = 16 * 1024 * 1024;

/**
 * Called before answering a request whose body is still arriving (a 413, or any early error): a
 * lingering close. The rest of the body is read and dropped, and the answer keeps the connection
 * open even when the client asked for `Connection: close`: Node would otherwise close the socket
 * right after the answer, and a socket closed on unread data is reset by the kernel, which can
 * discard the answer before the client reads it. Bounded: after LINGER_MS, or past
 * max(4 × limit, LINGER_BYTES) dropped bytes, the connection is closed anyway. `keepOpen: false`
 * (a draining server) leaves the answer's Connection header as it is.
 */
export function lingerOnRest(req: FrontRequest, res: FrontResponse, limit: number, keepOpen = true): void {
  if (req.complete || req.destroyed) return;
  if (isHttp2Request(req)) {
    // HTTP/2: what still comes is dropped; once the answer is out, lingerOnStream bounds it.
    req.resume();
    return;
  }
  if (keepOpen && !res.headersSent && !isHttp2Response(res)) res.shouldKeepAlive = true;
  const cap = Math.max(4 * limit, LINGER_BYTES);
  let dropped = 0;
  const close = () => {
    done();
    req.socket?.destroy();
  };
  const timer = setTimeout(close, LINGER_MS);
  timer.unref();
  const onData = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > cap) close();
  };
  const done = () => {
    clearTimeout(timer);
    req.off('data', onData);
  };
  req.on('data', onData);
  req.once('end', done);
  req.once('close', done);
  req.resume();
}

/**
 * The lingering close of an HTTP/2 stream (the front server, on every HTTP/2 request): an answer
 * sent in full while the client is still sending its request (a 404 before the body was read, a
 * 413, a 408) leaves the stream open, holding one of the connection's concurrent streams, for as
 * long as the client keeps its body unfinished. So, as lingerOnRest on HTTP/1.1, what still comes
 * is read and dropped (the client's upload completes, and clients that take a reset as a failure
 * see none), bounded: after LINGER_MS, or past max(4 × limit, LINGER_BYTES) dropped bytes, the
 * stream is reset with NO_ERROR (RFC 9113 8.1: stop sending, the answer stands). A request the
 * client ended (END_STREAM came) closes with its answer: nothing to do.
 */
export function lingerOnStream(req: Http2ServerRequest, limit: number): void {
  const stream = req.stream;
  if (stream.endAfterHeaders) return;
  // The stream's own 'finish' (its side is sent); the compatibility response's comes with 'close'.
  stream.once('finish', () => {
    if (stream.destroyed || stream.closed || stream.state.remoteClose === 1) return;
    const cap = Math.max(4 * limit, LINGER_BYTES);
    let dropped = 0;
    const reset = () => {
      clearTimeout(timer);
      if (!stream.destroyed && !stream.closed) stream.close(h2constants.NGHTTP2_NO_ERROR);
    };
    const timer = setTimeout(reset, LINGER_MS);
    timer.unref();
    stream.once('close', () => clearTimeout(timer));
    req.on('data', (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped > cap) reset();
    });
    req.resume();
  });
}
