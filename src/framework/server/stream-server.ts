/**
 * The server side of streaming RPC (docs/protocol.md "Streams"): runs a streaming endpoint's
 * handler for one `POST /` carrying `Mesh-Stream`.
 *
 * - Requests (client and bidi streams) reach the handler as an async iterable, decoded as it pulls
 *   them: a handler that does not pull leaves the request body unread (TCP backpressure).
 * - Answers are written one frame at a time; when the connection's buffer is full the handler's
 *   iterable is not pulled again until it drains.
 * - The caller closing the connection, or the stream's deadline (Mesh-Timeout), aborts
 *   `ctx.signal`, ends the iterable of requests, and the handler's iterable is given up (return()).
 * - Errors before the handler runs are a plain error answer; after it started, the end frame
 *   carries the error JSON.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { drained } from '../../base/http/respond.js';
import { keepPastRequestTimeout } from '../../base/http/long-request.js';
import type pino from 'pino';
import { badRequest, clientClosed, gatewayTimeout, internalError, MeshError, notAsyncIterable, toMeshError } from '../../base/errors.js';
import type { Codec } from '../../base/codec/codec.js';
import { JsonSyntaxError } from '../../base/codec/json.js';
import { END_OK, encodeFrame, FLAG_END, FLAG_MESSAGE, FrameDecoder, type StreamKind } from '../../core/transport/frames.js';
import { endToEndHeaders, HEADER_ID, HEADER_STREAM, meshTimeoutOf } from '../../core/transport/headers.js';
import type { EndpointDefinition, HandlerContext } from './endpoint.js';
import type { TraceContext } from '../../base/util/trace-context.js';

/** What a streaming handler gets besides its request(s). */
export interface StreamContext extends HandlerContext {
  kind: StreamKind;
  /** Aborted when the caller goes away or the deadline passes; the reason is a MeshError (499, 504). */
  signal: AbortSignal;
}

export interface StreamServeOptions {
  service: string;
  maxMessageBytes: number;
  logger?: pino.Logger;
  /** The stream's hop of its trace (the caller runs serveStream inside the call's context). */
  trace: TraceContext;
  /** The caller's workload identity (ctx.peer). */
  peer?: string;
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function isAsyncIterable(v: unknown): v is AsyncIterable<unknown> {
  return v !== null && typeof v === 'object' && typeof (v as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function';
}

/**
 * Settles as `work` does, or rejects with the signal's reason once it aborts. The listener goes
 * with the settlement: nothing accumulates over the messages of a long stream.
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

export async function serveStream(o: StreamServeOptions, def: EndpointDefinition, codec: Codec, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const id = o.service;
  const kind = def.stream!;
  const given = headerValue(req, HEADER_STREAM);
  if (given !== kind) {
    req.resume();
    throw badRequest(
      id,
      given === undefined ? `endpoint ${def.name} is a ${kind} stream: call it with Mesh-Stream: ${kind}` : `Mesh-Stream: ${given} does not match endpoint ${def.name}, a ${kind} stream`,
    );
  }
  let budget: number;
  try {
    budget = meshTimeoutOf(req.headers) ?? 0;
  } catch (err) {
    req.resume();
    throw badRequest(id, (err as Error).message);
  }
  // The request body lasts as long as the stream: the whole-request timeout (--request_timeout)
  // must not cut it off.
  if (kind !== 'server') keepPastRequestTimeout(req, res);
  const abort = new AbortController();
  const signal = abort.signal;
  let done = false;
  res.on('close', () => {
    if (!done) abort.abort(clientClosed(id, 'the caller closed the stream'));
  });
  const timer = budget > 0 ? setTimeout(() => abort.abort(gatewayTimeout(id, `stream deadline of ${budget}ms exceeded`)), budget) : undefined;
  const decoder = new FrameDecoder(o.maxMessageBytes, id);
  const decode = (payload: Buffer): unknown => {
    try {
      return codec.decode(payload, def.requestType);
    } catch (err) {
      const what = err instanceof JsonSyntaxError || err instanceof SyntaxError ? 'malformed JSON' : 'malformed request';
      throw badRequest(id, `${what}: ${(err as Error).message}`);
    }
  };
  // The request body, read only as the handler pulls (no destroy on return: the answer still goes out).
  const chunks = req.iterator({ destroyOnReturn: false });
  async function* requests(): AsyncGenerator<unknown> {
    let ended = false;
    try {
      for await (const chunk of chunks) {
        for (const frame of decoder.push(chunk as Buffer)) {
          if (frame.flags === FLAG_END) {
            ended = true;
            return;
          }
          yield decode(frame.payload);
        }
        if (decoder.failure) throw decoder.failure;
      }
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if (err instanceof MeshError) {
        abort.abort(err);
        throw err;
      }
      throw clientClosed(id, `the caller closed the stream: ${(err as Error).message}`);
    }
    if (!ended) {
      if (signal.aborted) throw signal.reason;
      throw clientClosed(id, 'the caller closed the stream before its end frame');
    }
  }
  const ctx: StreamContext = {
    id: headerValue(req, HEADER_ID) ?? '',
    service: id,
    endpoint: def.name,
    metadata: endToEndHeaders(req.headers),
    deadline: budget > 0 ? Date.now() + budget : Infinity,
    kind,
    signal,
    traceId: o.trace.traceId,
    spanId: o.trace.spanId,
    peer: o.peer,
  };
  let input: unknown;
  try {
    if (kind === 'server') {
      const it = requests();
      const first = await untilAborted(it.next(), signal);
      if (first.done) throw badRequest(id, `a server stream takes one request message: none was sent`);
      input = first.value;
      // The end frame and anything after it are read and dropped; a cancel still reaches `signal`.
      void (async () => {
        try {
          while (!(await it.next()).done);
        } catch {
          // the caller closed: res 'close' aborts
        }
      })();
    } else input = requests();
  } catch (err) {
    done = true;
    clearTimeout(timer);
    if (!res.destroyed) throw toMeshError(err, id);
    return;
  }

  res.writeHead(200, { 'content-type': codec.contentType, [HEADER_STREAM]: kind });
  res.flushHeaders();
  const encode = (value: unknown): Buffer => {
    try {
      return encodeFrame(FLAG_MESSAGE, codec.encode(value ?? {}, def.responseType));
    } catch (err) {
      throw internalError(id, `encoding response: ${(err as Error).message}`);
    }
  };
  const write = async (frame: Buffer): Promise<void> => {
    if (signal.aborted) throw signal.reason;
    if (!res.write(frame)) await untilAborted(drained(res), signal);
  };
  let trailer: Buffer = END_OK;
  try {
    const out = def.handler(input, ctx);
    if (kind === 'client') {
      await write(encode(await untilAborted(Promise.resolve(out), signal)));
    } else {
      if (!isAsyncIterable(out)) throw notAsyncIterable(id, def.name, kind);
      const it = out[Symbol.asyncIterator]();
      let finished = false;
      try {
        for (;;) {
          const next = await untilAborted(it.next(), signal);
          if (next.done) {
            finished = true;
            break;
          }
          await write(encode(next.value));
        }
      } finally {
        // Given up early (cancel, deadline, a write error): the handler's finally blocks run.
        if (!finished) void Promise.resolve(it.return?.()).catch(() => {});
      }
    }
  } catch (err) {
    const e = signal.aborted ? toMeshError(signal.reason, id) : toMeshError(err, id);
    if (e.code >= 500 && e.code !== 504) o.logger?.warn({ endpoint: def.name, err: e.detail }, 'stream handler failed');
    trailer = encodeFrame(FLAG_END, e.toBody());
  }
  done = true;
  clearTimeout(timer);
  if (res.destroyed) return;
  res.end(trailer);
}
