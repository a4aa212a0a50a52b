/**
 * Streams to a gRPC node (metadata `protocol=grpc`): the StreamCall of src/core/client/stream.ts over a
 * grpc-js server, client or bidi stream on the node's channel (docs/grpc.md "Streaming").
 *
 * - The kind comes from the .proto (or the node's reflection service): a method whose kind is not
 *   the one asked is a 400, before anything is sent.
 * - Messages are converted with the JSON rules of json.ts (or passed through as protobuf).
 * - Backpressure: send() waits for 'drain' when the call's write buffer is full. Messages are
 *   read ahead of the consumer up to RECEIVE_HIGH_WATER bytes (64 KiB; always at least one
 *   message), not grpc-js's 16 messages of up to the message size limit each: beyond the bound
 *   the call is asked for no further message until the consumer has pulled below it, so grpc-js
 *   stops reading the HTTP/2 stream and the node's writes wait on flow control.
 * - cancel() cancels the call (RST_STREAM: the server's call is cancelled); the stream's
 *   timeout is the gRPC deadline; the final status is mapped with the status table into the
 *   stream's end error, and the lease is released with the outcome a unary try would have.
 */
import { once } from 'node:events';
import type * as grpc from '@grpc/grpc-js';
import { badGateway, badRequest, ERROR_IDS, flagged, grpcContentType, MeshError, serverStreamSend, streamMessageTooLarge, streamRequestClosed } from '../../../base/errors.js';
import { mediaType } from '../../../base/codec/codec.js';
import { cancelledError, RECEIVE_HIGH_WATER, streamTimeout, type StreamCall, type StreamOpenRequest } from '../../client/stream.js';
import type { AttemptOutcome, UpstreamTarget } from '../../upstream/types.js';
import { TransportError } from '../rpc.js';
import { streamKindOf, type GrpcMethod } from './protos.js';
import { decodeToJson, encodeJson, JsonShapeError } from './json.js';
import { meshErrorOfGrpc, transportFailure } from './status.js';

const CLIENT_ID = ERROR_IDS.client;
const JSON_TYPE = 'application/json';
const PROTOBUF_TYPES = new Set(['application/protobuf', 'application/x-protobuf', 'application/grpc+proto']);
const OK = 0;

/** What the stream needs of the transport. */
export interface GrpcStreamDeps {
  /** The method of the endpoint (from the loaded protos, or the node's reflection service). */
  method(): GrpcMethod | Promise<GrpcMethod>;
  channel(): grpc.Client;
  metadata(metadata: Record<string, string>, id: string): grpc.Metadata;
}

type AnyCall = grpc.ClientReadableStream<Buffer> | grpc.ClientWritableStream<Buffer> | grpc.ClientDuplexStream<Buffer, Buffer>;

export class GrpcStreamCall implements StreamCall {
  readonly service: string;
  readonly endpoint: string;
  readonly opened: Promise<void>;
  contentType: string;
  onFinish?: () => void;
  private resolveOpened!: () => void;
  private rejectOpened!: (err: MeshError) => void;
  private readonly asJson: boolean;
  private method?: GrpcMethod;
  private call?: AnyCall;
  /** Resolves once the call exists; rejects with the refusal or failure before that. */
  private readonly ready: Promise<void>;
  /** Set when the stream is given up on our side (cancel, timeout, a bad message): thrown at once. */
  private failure?: MeshError;
  /** The node's status, once it came; its error is thrown after the messages before it. */
  private status?: grpc.StatusObject;
  private statusError?: MeshError;
  private outcome?: AttemptOutcome;
  private released = false;
  private endRequested = false;
  /** The one answer of a client stream. */
  private reply?: Buffer;
  private readonly abort = new AbortController();
  private readonly started = Date.now();
  private wake?: () => void;
  /** Bytes of the node's messages taken from HTTP/2 and not yet pulled by the consumer. */
  private aheadBytes = 0;
  /** The call's request for the next message, held while aheadBytes is at the bound. */
  private heldRead?: () => void;

  constructor(
    private readonly req: StreamOpenRequest,
    private readonly target: UpstreamTarget,
    private readonly deps: GrpcStreamDeps,
  ) {
    this.service = req.service;
    this.endpoint = req.endpoint;
    const type = mediaType(req.contentType);
    this.asJson = type === JSON_TYPE || type === '';
    this.contentType = this.asJson ? JSON_TYPE : 'application/protobuf';
    this.opened = new Promise<void>((resolve, reject) => {
      this.resolveOpened = resolve;
      this.rejectOpened = reject;
    });
    this.opened.catch(() => {});
    this.ready = this.start();
    this.ready.catch(() => {});
  }

  private async start(): Promise<void> {
    try {
      if (!this.asJson && !PROTOBUF_TYPES.has(mediaType(this.req.contentType))) {
        throw grpcContentType(CLIENT_ID, mediaType(this.req.contentType));
      }
      const found = this.deps.method();
      const method = found instanceof Promise ? await found : found;
      if (this.failure) throw this.failure; // cancelled while reflection answered
      const kind = streamKindOf(method);
      if (kind === 'unary') throw badRequest(CLIENT_ID, `${method.path} is a unary method: call it without a stream`);
      if (kind !== this.req.kind) throw badRequest(CLIENT_ID, `${method.path} is a ${kind} stream, not a ${this.req.kind} stream`);
      this.method = method;
      const first = kind === 'server' ? this.encode(this.req.request ?? new Uint8Array(0)) : undefined;
      this.open(method, first);
    } catch (err) {
      let e: MeshError;
      if (err instanceof MeshError) {
        // Refused before sending: not the node's fault.
        e = err;
        this.outcome ??= { kind: 'cancelled' };
      } else {
        // The reflection stream failed: the node's connection.
        const t = err instanceof TransportError ? err : new TransportError({ kind: 'reset' }, String(err));
        this.outcome ??= t.outcome;
        e = this.transportError(t);
      }
      this.failure ??= e;
      this.rejectOpened(this.failure);
      this.finish();
      throw this.failure;
    }
  }

  /** The request message: JSON converted to the request type (400 naming the field), or protobuf as it is. */
  private encode(payload: Uint8Array): Buffer {
    const m = this.method!;
    if (!this.asJson) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
    let value: unknown;
    try {
      value = payload.byteLength === 0 ? {} : JSON.parse(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString('utf8'));
    } catch (err) {
      throw badRequest(CLIENT_ID, `stream message is not valid JSON: ${(err as Error).message}`);
    }
    try {
      return Buffer.from(encodeJson(m.requestType, value));
    } catch (err) {
      if (err instanceof JsonShapeError) throw badRequest(CLIENT_ID, `${m.path}: ${err.message}`);
      throw badRequest(CLIENT_ID, `${m.path}: encoding the request: ${(err as Error).message}`);
    }
  }

  private open(method: GrpcMethod, first: Buffer | undefined): void {
    const client = this.deps.channel();
    const metadata = this.deps.metadata(this.req.metadata, this.req.id);
    const options: grpc.CallOptions = this.req.timeoutMs > 0 ? { deadline: this.started + this.req.timeoutMs } : {};
    const pass = (b: Buffer) => b;
    // Every message the call takes from HTTP/2 passes here on its way to the call's buffer.
    const counted = (b: Buffer) => {
      this.aheadBytes += b.byteLength;
      return b;
    };
    let call: AnyCall;
    if (first) {
      call = client.makeServerStreamRequest<Buffer, Buffer>(method.path, pass, counted, first, metadata, options);
      this.req.stats?.sent.inc();
    } else if (this.req.kind === 'client') {
      call = client.makeClientStreamRequest<Buffer, Buffer>(method.path, pass, pass, metadata, options, (err, value) => {
        if (!err && value) this.reply = value;
      });
    } else call = client.makeBidiStreamRequest<Buffer, Buffer>(method.path, pass, counted, metadata, options);
    this.call = call;
    if (this.req.kind !== 'client') this.boundReadAhead(call as grpc.ClientReadableStream<Buffer>);
    call.on('metadata', () => this.resolveOpened());
    call.on('readable', () => this.wakeUp());
    // Errors come with the status: handled there.
    call.on('error', () => {});
    call.on('status', (status: grpc.StatusObject) => this.onStatus(status));
    // Ended while the method was looked up: after the messages sent before (they wait on `ready` too).
    if (this.endRequested) void this.ready.then(() => (call as grpc.ClientWritableStream<Buffer>).end(), () => {});
  }

  /**
   * Bounds the read-ahead by bytes. A grpc-js call is a Readable in object mode: it asks for the
   * next message (its _read) whenever it buffers fewer than 16, whether or not it is paused, so
   * pause() would not bound it. Its _read is held instead while aheadBytes is at the bound, and
   * given back when the consumer pulls below it (next()).
   */
  private boundReadAhead(call: grpc.ClientReadableStream<Buffer>): void {
    const readable = call as unknown as { _read(size: number): void };
    const read = readable._read.bind(call);
    readable._read = (size: number) => {
      if (this.aheadBytes < RECEIVE_HIGH_WATER) read(size);
      else this.heldRead = () => read(size);
    };
  }

  private onStatus(status: grpc.StatusObject): void {
    if (this.status) return;
    this.status = status;
    if (!this.failure) {
      if (status.code === OK) {
        this.outcome = { kind: 'response', status: 200 };
        this.resolveOpened();
      } else {
        const deadline = this.req.timeoutMs > 0 ? this.started + this.req.timeoutMs : Infinity;
        const t = transportFailure(status, Date.now() >= deadline - 20);
        if (t) {
          this.outcome = t.outcome;
          this.statusError = this.transportError(t);
        } else {
          const e = meshErrorOfGrpc(this.method!.service, status.code, status.details);
          e.fromUpstream = true;
          this.outcome = { kind: 'response', status: e.code };
          this.statusError = e;
        }
        this.rejectOpened(this.statusError);
      }
    }
    this.abort.abort();
    this.finish();
    this.wakeUp();
  }

  private transportError(t: TransportError): MeshError {
    const where = `stream ${this.service} on ${this.target.key}`;
    switch (t.outcome.kind) {
      case 'timeout':
        return streamTimeout(this.service, this.endpoint, this.req.givenTimeoutMs);
      case 'connect_failure':
        return flagged(badGateway(CLIENT_ID, `${where}: connection failed: ${t.message}`), 'UF');
      default:
        return flagged(badGateway(CLIENT_ID, `${where}: connection reset: ${t.message}`), 'UC');
    }
  }

  /** Gives the stream up on our side: the call is cancelled (the server's call too). */
  private fail(err: MeshError, outcome: AttemptOutcome): void {
    if (this.failure || this.status) return;
    this.failure = err;
    this.outcome = outcome;
    this.call?.cancel();
    this.abort.abort();
    this.rejectOpened(err);
    this.finish();
    this.wakeUp();
  }

  async send(payload: Uint8Array): Promise<void> {
    if (this.req.kind === 'server') throw serverStreamSend(CLIENT_ID);
    if (this.failure) throw this.failure;
    // Sent before end(): goes out before the end even while the method is still being looked up.
    const early = !this.endRequested;
    if (!this.call) await this.ready;
    const call = this.call as grpc.ClientWritableStream<Buffer>;
    if (this.failure) throw this.failure;
    if (this.status) throw this.statusError ?? badRequest(CLIENT_ID, 'the stream is over');
    if (!early || call.writableEnded) throw streamRequestClosed(CLIENT_ID);
    let message: Buffer;
    try {
      message = this.encode(payload);
    } catch (err) {
      // A message the method cannot take: the stream is given up (not the node's fault).
      this.fail(err as MeshError, { kind: 'cancelled' });
      throw err;
    }
    this.req.stats?.sent.inc();
    if (!call.write(message)) {
      try {
        await once(call, 'drain', { signal: this.abort.signal });
      } catch {
        throw this.failure ?? this.statusError ?? badRequest(CLIENT_ID, 'the stream is over');
      }
    }
  }

  end(): void {
    if (this.endRequested) return;
    this.endRequested = true;
    const call = this.call as grpc.ClientWritableStream<Buffer> | undefined;
    if (call && !call.writableEnded && !this.status && !this.failure) call.end();
  }

  cancel(reason = 'stream cancelled'): void {
    this.fail(cancelledError(CLIENT_ID, reason), { kind: 'cancelled' });
  }

  private wakeUp(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** The next message the node sent, or null when none is buffered. */
  private next(): Buffer | null {
    const call = this.call!;
    if (this.req.kind === 'client') {
      const r = this.reply;
      this.reply = undefined;
      return r ?? null;
    }
    const raw = (call as grpc.ClientReadableStream<Buffer>).read() as Buffer | null;
    if (raw !== null) {
      this.aheadBytes -= raw.byteLength;
      const held = this.heldRead;
      if (held && this.aheadBytes < RECEIVE_HIGH_WATER) {
        this.heldRead = undefined;
        held();
      }
    }
    return raw;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    let over = false;
    try {
      await this.ready;
      for (;;) {
        if (this.failure) throw this.failure;
        const raw = this.next();
        if (raw !== null) {
          this.resolveOpened();
          if (raw.byteLength > this.req.maxMessageBytes) {
            const e = streamMessageTooLarge(CLIENT_ID, raw.byteLength, this.req.maxMessageBytes);
            this.fail(e, { kind: 'reset' });
            throw e;
          }
          let out: Buffer;
          if (this.asJson) {
            try {
              out = Buffer.from(decodeToJson(this.method!.responseType, raw));
            } catch (err) {
              const e = badGateway(this.method!.service, `${this.method!.path}: decoding a message: ${(err as Error).message}`);
              this.fail(e, { kind: 'response', status: 502 });
              throw e;
            }
          } else out = raw;
          this.req.stats?.received.inc();
          yield out;
          continue;
        }
        if (this.status) {
          over = true;
          if (this.statusError) throw this.statusError;
          return;
        }
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      // Left early (break, return, a throw in the loop body): the server must hear of it.
      if (!over && !this.status && !this.failure) this.cancel('the consumer stopped reading');
    }
  }

  private finish(): void {
    if (this.released) return;
    this.released = true;
    this.req.stats?.active.dec();
    this.req.lease.release(this.outcome ?? { kind: 'cancelled' }, Date.now() - this.started);
    this.onFinish?.();
  }
}
