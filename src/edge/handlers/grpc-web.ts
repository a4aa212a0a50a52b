/**
 * gRPC-Web at a front end (docs/grpc.md, "gRPC-Web: browsers calling gRPC services through the
 * gateway"): a POST of content type `application/grpc-web` (`+proto`, `+json`) or
 * `application/grpc-web-text` (base64) at `/<package.Service>/<Method>`, over HTTP/1.1 or HTTP/2, is
 * a gRPC call made by a browser. It is served as a native call (./grpc-native.ts: the same service
 * names, auth rules, balancing, stats and access log) on a GrpcWebStream, which acts as the call's
 * HTTP/2 stream: the request's message goes to the node as it came (decoded from base64 for -text),
 * the node's messages come back as they arrive (each chunk base64-encoded on its own for -text),
 * and its trailers as the last frame (flag 0x80, `name:value\r\n` lines). An answer that is only a
 * status (an error) is sent as headers. Every refusal is a gRPC status, never error JSON.
 *
 * The request body is read whole first (gRPC-Web has no client streaming: one message), bounded by
 * --max_body_size as a native call's message is.
 */
import { Duplex } from 'node:stream';
import { constants as h2constants, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerStreamResponseOptions } from 'node:http2';
import { abortRequest, flushHead, onceDrain, writeChunk, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import { readBody } from '../../base/http/body.js';
import { requestInfo } from '../../base/http/access-log.js';
import { MeshError } from '../../base/errors.js';
import type { CallContext } from '../../base/util/call-context.js';
import { grpcCodeOfHttp } from '../../core/transport/grpc/status.js';
import { GRPC_CODES, grpcMethodOf, refuseGrpc } from './grpc-pass.js';
import type { NativeGrpc } from './grpc-native.js';
import type { GrpcRouteAnswer } from '../routes/grpc-route.js';

const { NGHTTP2_CANCEL } = h2constants;

/** The flag of a gRPC-Web frame that carries the trailers (the status) instead of a message. */
export const TRAILERS_FLAG = 0x80;

/** A gRPC-Web call the route phase found. */
export interface GrpcWebCall {
  kind: 'grpc-web';
  grpcService: string;
  method: string;
  /** `application/grpc-web-text`: both bodies are base64. */
  text: boolean;
  /** The message format after `+` (`proto` when none is named). */
  format: string;
  /** The auth step's refusal of the request's path, answered by the handler as a gRPC status. */
  refused?: unknown;
  /** The GRPCRoute the route phase matched already (`mesh proxy`). */
  routed?: GrpcRouteAnswer;
}

/** What a gRPC-Web content type says: its text mode and message format; undefined for any other type. */
export function grpcWebModeOf(type: string | undefined): { text: boolean; format: string } | undefined {
  if (!type) return undefined;
  const m = /^application\/grpc-web(-text)?(?:\+([a-z0-9._-]+))?\s*(?:;.*)?$/.exec(type.toLowerCase());
  return m ? { text: m[1] !== undefined, format: m[2] ?? 'proto' } : undefined;
}

/** A gRPC-Web frame: the flag, the length (32 bits, big-endian), the payload. */
export function grpcWebFrame(flag: number, payload: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(5 + payload.length);
  frame[0] = flag;
  frame.writeUInt32BE(payload.length, 1);
  frame.set(payload, 5);
  return frame;
}

/** The trailers frame: each trailer a `name:value\r\n` line (names in lower case, a repeated one a line per value). */
export function trailersFrame(trailers: OutgoingHttpHeaders): Buffer {
  let block = '';
  for (const [name, value] of Object.entries(trailers)) {
    if (value === undefined || name.startsWith(':')) continue;
    for (const v of Array.isArray(value) ? value : [value]) block += `${name.toLowerCase()}:${String(v)}\r\n`;
  }
  return grpcWebFrame(TRAILERS_FLAG, Buffer.from(block, 'latin1'));
}

/** A call the gateway answers with a gRPC status before any node is asked. */
export class GrpcWebRefusal extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const BASE64_GROUP = /^(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)$/;

/**
 * Decodes a `-text` body: base64 in groups of 4 characters, each decoded on its own, so a body made
 * of chunks that were each encoded (and padded) separately decodes as their concatenation. Throws a
 * GrpcWebRefusal (INVALID_ARGUMENT) naming the offset of the first group that is not base64.
 */
export function decodeGrpcWebText(text: string): Buffer {
  if (text.length % 4 !== 0) throw new GrpcWebRefusal(GRPC_CODES.invalidArgument, `the request body is not base64 (application/grpc-web-text): ${text.length} characters, not a multiple of 4`);
  const parts: Buffer[] = [];
  // Runs of unpadded groups decode at once; a padded group ends a chunk.
  let start = 0;
  for (let at = 0; at < text.length; at += 4) {
    const group = text.slice(at, at + 4);
    if (!BASE64_GROUP.test(group)) throw new GrpcWebRefusal(GRPC_CODES.invalidArgument, `the request body is not base64 (application/grpc-web-text): ${JSON.stringify(group)} at offset ${at}`);
    if (group.endsWith('=')) {
      parts.push(Buffer.from(text.slice(start, at + 4), 'base64'));
      start = at + 4;
    }
  }
  if (start < text.length) parts.push(Buffer.from(text.slice(start), 'base64'));
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

/** The frames of a body, each its flag and payload; throws a GrpcWebRefusal for a frame cut short. */
export function grpcWebFrames(body: Buffer): Array<{ flag: number; payload: Buffer }> {
  const frames: Array<{ flag: number; payload: Buffer }> = [];
  let at = 0;
  while (at < body.length) {
    if (body.length - at < 5) throw new GrpcWebRefusal(GRPC_CODES.invalidArgument, `the request body ends inside a message's 5-byte prefix (at byte ${at})`);
    const size = body.readUInt32BE(at + 1);
    if (body.length - at - 5 < size) throw new GrpcWebRefusal(GRPC_CODES.invalidArgument, `the request body ends inside a message of ${size} bytes (at byte ${at})`);
    frames.push({ flag: body[at]!, payload: body.subarray(at + 5, at + 5 + size) });
    at += 5 + size;
  }
  return frames;
}

/**
 * Checks a request body (decoded): whole frames, each a message (flag 0 or 1, compressed) of at most
 * `maxMessage` bytes (else RESOURCE_EXHAUSTED, as a native call's message past --max_body_size).
 */
export function checkGrpcWebRequest(body: Buffer, maxMessage: number): void {
  let at = 0;
  // The prefixes are read before the frames are cut, so a message too large is named as such even when the body is cut short.
  while (body.length - at >= 5) {
    const size = body.readUInt32BE(at + 1);
    if (size > maxMessage) throw new GrpcWebRefusal(GRPC_CODES.resourceExhausted, `a request message of ${size} bytes is larger than ${maxMessage} bytes (--max_body_size)`);
    at += 5 + size;
  }
  for (const frame of grpcWebFrames(body)) {
    if (frame.flag & ~1) throw new GrpcWebRefusal(GRPC_CODES.invalidArgument, `a request frame with flag 0x${frame.flag.toString(16)} (only messages, 0x00 or 0x01, are sent by a client)`);
  }
}

/** Reads and decodes a gRPC-Web request body; throws a GrpcWebRefusal. */
async function readGrpcWebBody(req: FrontRequest, call: GrpcWebCall, maxMessage: number, errorId: string): Promise<Buffer> {
  // One message and its prefix; base64 is 4 characters for 3 bytes (and a chunk's padding).
  // Twice that, so that a message just too large is named as one (by its prefix).
  const limit = 2 * (call.text ? Math.ceil((maxMessage + 5) / 3) * 4 + 1024 : maxMessage + 5);
  let raw: Buffer;
  try {
    raw = await readBody(req, limit, errorId);
  } catch (err) {
    const e = err instanceof MeshError ? err : undefined;
    if (e?.code === 413) throw new GrpcWebRefusal(GRPC_CODES.resourceExhausted, `the request body is larger than ${limit} bytes (--max_body_size is ${maxMessage} bytes a message)`);
    throw new GrpcWebRefusal(GRPC_CODES.cancelled, e?.detail ?? (err as Error).message);
  }
  const body = call.text ? decodeGrpcWebText(raw.toString('latin1')) : raw;
  checkGrpcWebRequest(body, maxMessage);
  return body;
}

/** Request headers that are the browser's HTTP, not the call's metadata. */
const NOT_METADATA: ReadonlySet<string> = new Set(['content-type', 'content-length', 'accept', 'accept-encoding', 'x-grpc-web', 'host']);

/** The headers of the call for the node: the request's metadata, a gRPC content type, the path and authority of the call. */
export function grpcHeadersOf(req: FrontRequest, call: GrpcWebCall): IncomingHttpHeaders {
  const headers = req.headers;
  const out: IncomingHttpHeaders = {
    ':path': `/${call.grpcService}/${call.method}`,
    ':authority': (headers[':authority'] as string | undefined) ?? headers.host,
    'content-type': `application/grpc+${call.format}`,
    te: 'trailers',
  };
  for (const name in headers) {
    if (name.startsWith(':') || NOT_METADATA.has(name)) continue;
    out[name] = headers[name];
  }
  return out;
}

/**
 * A gRPC-Web exchange as the HTTP/2 stream of a native call (GrpcDownstream): its readable side is
 * the request's message (decoded), its writable side the node's messages, written to the response
 * as they come; `respond` writes the head, `sendTrailers` the trailers frame. It closes when the
 * response closed: `rstCode` 0 when the answer was complete, CANCEL when the client went away
 * first (the node's stream is then reset); `close` (a node that reset, a deadline past the head)
 * cuts the exchange off (the HTTP/1.1 connection, or the HTTP/2 stream).
 */
export class GrpcWebStream extends Duplex {
  headersSent = false;
  rstCode = 0;
  /** The `_final` callback held until the trailers are written (`waitForTrailers`). */
  private finalCallback?: (err?: Error | null) => void;
  private wantsTrailers = false;
  /** The node's stream (piped here). */
  private upstream?: NodeJS.ReadableStream & { closed?: boolean; destroyed?: boolean };

  constructor(
    private readonly req: FrontRequest,
    private readonly res: FrontResponse,
    private readonly call: GrpcWebCall,
    body: Buffer,
  ) {
    super();
    // A write after the exchange closed (the node's last bytes, a client gone): nothing left to answer.
    this.on('error', () => {});
    this.on('pipe', (source: NodeJS.ReadableStream) => (this.upstream = source));
    if (body.length > 0) this.push(body);
    this.push(null);
    if (res.destroyed) {
      // The client went away while the request was read.
      this.rstCode = NGHTTP2_CANCEL;
      process.nextTick(() => this.destroy());
      return;
    }
    res.once('close', () => {
      if (this.destroyed) return;
      if (!res.writableFinished) {
        this.rstCode = NGHTTP2_CANCEL;
        this.destroy();
        return;
      }
      const done = () => this.destroy();
      if (this.writableFinished) return done();
      this.once('finish', done);
      if (!this.writableEnded) this.end();
    });
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    if (this.res.writableEnded || this.res.destroyed) return callback();
    if (this.send(chunk)) callback();
    else onceDrain(this.res, () => callback());
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.wantsTrailers || this.res.writableEnded) return callback();
    this.finalCallback = callback;
    this.emit('wantTrailers');
  }

  /** The content type of the answer: the node's gRPC one as gRPC-Web's, in the call's mode. */
  private webType(type: string | undefined): string {
    const format = /^application\/grpc\+([a-z0-9._-]+)/i.exec(type ?? '')?.[1] ?? this.call.format;
    return `application/grpc-web${this.call.text ? '-text' : ''}+${format}`;
  }

  /** Writes bytes of the body, base64 for -text (each write on its own, padded); false when the response wants a 'drain' first. */
  private send(bytes: Buffer): boolean {
    return writeChunk(this.res, this.call.text ? bytes.toString('base64') : bytes);
  }

  /**
   * Ends the answer once the node's stream closed (at once when there is none), so the call's
   * status is recorded (stats, the access log's %GRPC_STATUS% and %UPSTREAM_HOST%) before the
   * answer's access log line is written.
   */
  private endAnswer(): void {
    const up = this.upstream;
    if (!up || up.closed || up.destroyed) this.res.end();
    else up.once('close', () => this.res.end());
  }

  respond(headers?: OutgoingHttpHeaders, options?: ServerStreamResponseOptions): void {
    this.headersSent = true;
    const res = this.res;
    const out: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers ?? {})) {
      if (name.startsWith(':') || name === 'content-length' || value === undefined) continue;
      out[name] = name === 'content-type' ? this.webType(String(value)) : value;
    }
    out['content-type'] ??= this.webType(undefined);
    const status = Number(headers?.[':status'] ?? 200);
    if (options?.endStream) {
      // Trailers-only: the status is in the headers, the body empty.
      res.writeHead(status, { ...out, 'content-length': '0' });
      this.endAnswer();
      return;
    }
    this.wantsTrailers = options?.waitForTrailers === true;
    res.writeHead(status, out);
    flushHead(res);
  }

  sendTrailers(trailers: OutgoingHttpHeaders): void {
    if (!this.res.writableEnded && !this.res.destroyed) {
      this.send(trailersFrame(trailers));
      this.endAnswer();
    }
    const callback = this.finalCallback;
    this.finalCallback = undefined;
    callback?.();
  }

  close(code?: number): void {
    if (this.destroyed) return;
    this.rstCode = code || NGHTTP2_CANCEL;
    abortRequest(this.req);
    this.destroy();
  }
}

/**
 * gRPC-Web calls of a front end, served by its native gRPC (`native`: the connections to the
 * nodes, the service names, the stats).
 */
export class GrpcWeb {
  constructor(
    private readonly native: NativeGrpc,
    private readonly maxMessageBytes: number,
    private readonly errorId: string,
  ) {}

  /** The call a POST of a gRPC-Web content type at `/<package.Service>/<Method>` is; undefined for any other request. */
  route(req: FrontRequest, path: string): GrpcWebCall | undefined {
    if (req.method !== 'POST') return undefined;
    const mode = grpcWebModeOf(req.headers['content-type']);
    const call = mode && grpcMethodOf(path);
    return call && { kind: 'grpc-web', grpcService: call.service, method: call.method, text: mode.text, format: mode.format };
  }

  /** Serves the call (`ctx`: the request's, its trace); resolves when its answer closed. */
  async handle(req: FrontRequest, res: FrontResponse, call: GrpcWebCall, ctx?: CallContext): Promise<void> {
    if (call.refused !== undefined) {
      const e = call.refused instanceof MeshError ? call.refused : undefined;
      return this.refuse(req, res, call, new GrpcWebRefusal(e ? grpcCodeOfHttp(e.code) : GRPC_CODES.internal, e?.detail ?? 'refused'));
    }
    let body: Buffer;
    try {
      body = await readGrpcWebBody(req, call, this.maxMessageBytes, this.errorId);
    } catch (err) {
      if (!(err instanceof GrpcWebRefusal)) throw err;
      return this.refuse(req, res, call, err);
    }
    return this.native.serve(req, res, new GrpcWebStream(req, res, call, body), grpcHeadersOf(req, call), call, undefined, ctx);
  }

  /** Answers the call with a gRPC status, no node asked. */
  private refuse(req: FrontRequest, res: FrontResponse, call: GrpcWebCall, refusal: GrpcWebRefusal): Promise<void> {
    const info = requestInfo(req);
    if (info) info.grpcStatus = refusal.code;
    const stream = new GrpcWebStream(req, res, call, Buffer.alloc(0));
    const closed = new Promise<void>((resolve) => stream.once('close', () => resolve()));
    refuseGrpc(stream, refusal.code, refusal.message);
    return closed;
  }
}
