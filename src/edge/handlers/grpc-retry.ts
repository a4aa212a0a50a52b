/**
 * Retries of a native gRPC call on a gRPC status (docs/grpc.md, "Retries of native gRPC calls"): which statuses are
 * retried is --grpc_retry_on (src/core/transport/grpc/retry-on.ts); here, the copy of the request a
 * retry sends again (RequestHold). A call is retried only when it is safe to: its node answered
 * one of those statuses before any message of the answer reached the client, and the front holds
 * the whole request (the client ended its side, within HOLD_BYTES). ./grpc-pass.ts decides.
 */
import { Transform, type TransformCallback } from 'node:stream';

/**
 * The longest a node's answer headers are held back (while its call may still be retried) when
 * neither a message nor the trailers follow them: then they go to the client, and the call is not
 * retried any more (a stream whose node answers headers, then waits, is not kept from its client).
 */
export const HOLD_HEADERS_MS = 250;

/** The largest request a front holds for a retry (bytes of the call's body, its messages with their prefixes). */
export const HOLD_BYTES = 64 * 1024;

/**
 * Passes a call's request on unchanged and keeps a copy of it while it is at most `max` bytes:
 * `whole()` is the request once the client ended its side within the bound, else undefined (the
 * copy is dropped as soon as it grows past the bound: bounded memory).
 */
export class RequestHold extends Transform {
  private chunks: Buffer[] | undefined = [];
  private size = 0;
  private ended = false;

  constructor(private readonly max: number = HOLD_BYTES) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.chunks) {
      this.size += chunk.length;
      if (this.size > this.max) this.chunks = undefined;
      else this.chunks.push(chunk);
    }
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    this.ended = true;
    callback();
  }

  /** Drops the copy (the answer reached the client: no retry any more); the request still passes on. */
  forget(): void {
    this.chunks = undefined;
  }

  /** The whole request, when the client ended it within the bound. */
  whole(): Buffer | undefined {
    return this.ended && this.chunks ? Buffer.concat(this.chunks) : undefined;
  }
}
