/**
 * A streaming call through a sidecar (`mesh --proxy_address=... call --stream=...`): a StreamCall
 * over the WebSocket the sidecar serves at `/rpc?service=S&endpoint=E` (docs/sidecar.md
 * "Streaming endpoints"). Each text frame is one JSON message each way; a server stream's first
 * frame is its request; an empty frame ends the client's side. The sidecar closing with 1000 ends
 * the stream; 4000 + code is that error with the reason as its detail; 1009 a message over the
 * size limit (413); any other close, or none, a broken stream (502).
 *
 * Backpressure both ways: the socket is paused while RECEIVE_HIGH_WATER bytes of answers wait for
 * the consumer, and send() waits while more than SEND_HIGH_WATER bytes wait for the socket.
 * cancel() (or SIGINT, the signal, leaving the iteration early) closes the socket, which cancels
 * the sidecar's call of the backend.
 */
import WebSocket from 'ws';
import { badGateway, ERROR_IDS, errorWithStatus, internalError, MeshError, payloadTooLarge, serverStreamSend, serviceUnavailable, streamRequestClosed } from '../base/errors.js';
import { cancelledError, RECEIVE_HIGH_WATER, SEND_HIGH_WATER, type StreamCall } from '../core/client/stream.js';
import type { StreamKind } from '../core/transport/frames.js';
import { SIDECAR_ERROR_ID } from '../fronts/sidecar/server.js';

const CLI_ID = ERROR_IDS.cli;

/** The error a close code stands for; undefined for 1000 (the stream's end). */
export function closeError(code: number, reason: string, what: string): MeshError | undefined {
  if (code === 1000) return undefined;
  if (code >= 4100 && code <= 4599) return errorWithStatus(SIDECAR_ERROR_ID, code - 4000, reason || `${what}: closed with ${code}`);
  if (code === 1009) return payloadTooLarge(SIDECAR_ERROR_ID, reason || `${what}: a message over the size limit`);
  if (code === 1001) return serviceUnavailable(SIDECAR_ERROR_ID, reason || `${what}: the sidecar is shutting down`);
  if (code === 1011) return internalError(SIDECAR_ERROR_ID, reason || `${what}: internal error of the sidecar`);
  return badGateway(CLI_ID, `${what}: the WebSocket closed with ${code}${reason ? ` (${reason})` : ' without an end'}`);
}

export class SidecarStreamCall implements StreamCall {
  readonly opened = Promise.resolve();
  contentType = 'application/json';
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private paused = false;
  /** Set once the stream is over: undefined failure with `done` is the clean end. */
  private done = false;
  private failure?: MeshError;
  private ended = false;
  private wake?: () => void;
  private readonly what: string;

  /** `ws` is open; a server stream's request is sent now. */
  constructor(
    private readonly ws: WebSocket,
    readonly service: string,
    readonly endpoint: string,
    private readonly kind: StreamKind,
    request?: Uint8Array,
    signal?: AbortSignal,
  ) {
    this.what = `stream ${service}.${endpoint} through the sidecar`;
    ws.on('error', () => undefined); // 'close' follows and reports it
    ws.on('message', (data: WebSocket.RawData) => {
      if (this.done) return;
      const message = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]);
      this.queue.push(message);
      this.queued += message.byteLength;
      if (this.queued >= RECEIVE_HIGH_WATER && !this.paused) {
        this.paused = true;
        ws.pause();
      }
      this.notify();
    });
    ws.on('close', (code: number, reason: Buffer) => {
      if (!this.done) this.finish(closeError(code, reason.toString('utf8'), this.what));
    });
    if (signal) {
      if (signal.aborted) this.cancel();
      else {
        const onAbort = () => this.cancel();
        signal.addEventListener('abort', onAbort, { once: true });
        ws.once('close', () => signal.removeEventListener('abort', onAbort));
      }
    }
    if (kind === 'server' && !this.done) ws.send(Buffer.from(request ?? Buffer.from('{}')), { binary: false });
  }

  /** Bytes of answers received and not yet taken by the consumer (bounded: the socket pauses at RECEIVE_HIGH_WATER). */
  get buffered(): number {
    return this.queued;
  }

  async send(payload: Uint8Array): Promise<void> {
    if (this.kind === 'server') throw serverStreamSend(CLI_ID);
    if (this.failure) throw this.failure;
    if (this.done || this.ended) throw streamRequestClosed(CLI_ID);
    // An empty frame would end the client's side: a message is never empty (the CLI sends JSON).
    const sent = new Promise<void>((resolve, reject) => this.ws.send(Buffer.from(payload), { binary: false }, (err) => (err ? reject(err) : resolve())));
    sent.catch(() => {});
    if (this.ws.bufferedAmount > SEND_HIGH_WATER) {
      try {
        await sent;
      } catch {
        throw this.failure ?? badGateway(CLI_ID, `${this.what}: the WebSocket closed`);
      }
    }
  }

  end(): void {
    if (this.kind === 'server' || this.ended || this.done) return;
    this.ended = true;
    this.ws.send('');
  }

  cancel(reason = 'stream cancelled'): void {
    if (this.done) return;
    this.finish(cancelledError(CLI_ID, reason), true);
    // Paused, the socket would not read the sidecar's close frame: let it, then the close completes.
    this.ws.resume();
    this.ws.close(1000, 'cancelled');
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    try {
      for (;;) {
        const message = this.queue.shift();
        if (message) {
          this.queued -= message.byteLength;
          if (this.paused && this.queued < RECEIVE_HIGH_WATER / 2) {
            this.paused = false;
            this.ws.resume();
          }
          yield message;
          continue;
        }
        if (this.done) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      // Left early (break, return, throw in the loop body): the sidecar must hear of it.
      if (!this.done) this.cancel('the consumer stopped reading');
    }
  }

  /** The stream is over: the answers already received still come first, unless `drop` (a cancel). */
  private finish(failure: MeshError | undefined, drop = false): void {
    this.done = true;
    this.failure = failure;
    if (drop) {
      this.queue.length = 0;
      this.queued = 0;
    }
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}
