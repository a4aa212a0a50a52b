/**
 * The frames of a streaming RPC (docs/protocol.md "Streams"): each message of a request or
 * response body is `flags (1 byte) | length (4 bytes, big-endian) | payload`. Flag 0x00 carries
 * one codec-encoded message; flag 0x01 is the end of the stream (the trailer): an empty payload
 * for a stream that ended well, or the error JSON of the protocol.
 */
import { badRequest, MeshError, streamMessageTooLarge } from '../../base/errors.js';

export type StreamKind = 'server' | 'client' | 'bidi';
export const STREAM_KINDS: readonly StreamKind[] = ['server', 'client', 'bidi'];

export function isStreamKind(value: unknown): value is StreamKind {
  return value === 'server' || value === 'client' || value === 'bidi';
}

export const FLAG_MESSAGE = 0x00;
export const FLAG_END = 0x01;
export const FRAME_HEADER_BYTES = 5;

/** One frame: a message (flag 0x00) or the end of the stream (flag 0x01). */
export function encodeFrame(flags: number, payload: Uint8Array | string = ''): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + body.byteLength);
  frame[0] = flags;
  frame.writeUInt32BE(body.byteLength, 1);
  frame.set(body, FRAME_HEADER_BYTES);
  return frame;
}

/** The end frame of a stream that ended well. */
export const END_OK = encodeFrame(FLAG_END);

export interface Frame {
  flags: number;
  payload: Buffer;
}

/**
 * Cuts frames out of a byte stream. Bounded: a frame whose declared length is over `maxBytes`
 * fails as soon as its header is read (nothing of it is buffered), and unknown flags fail.
 */
export class FrameDecoder {
  private buffered: Buffer[] = [];
  private size = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly errorId: string,
  ) {}

  /** Bytes held that do not make a whole frame yet. */
  get pending(): number {
    return this.size;
  }

  /**
   * A bad frame found after whole frames of the same chunk: push() returned those, and the caller
   * throws this once it has handled them. Every later push() throws it.
   */
  failure?: MeshError;

  /** Adds bytes; returns the whole frames they complete. Throws a MeshError (413 too large, 400 bad flags). */
  push(chunk: Buffer): Frame[] {
    if (this.failure) throw this.failure;
    this.buffered.push(chunk);
    this.size += chunk.length;
    const frames: Frame[] = [];
    while (this.size >= FRAME_HEADER_BYTES) {
      const head = this.peek(FRAME_HEADER_BYTES);
      const flags = head[0]!;
      const length = head.readUInt32BE(1);
      let bad: MeshError | undefined;
      if (flags !== FLAG_MESSAGE && flags !== FLAG_END) bad = badRequest(this.errorId, `stream frame with unknown flags 0x${flags.toString(16).padStart(2, '0')}`);
      else if (length > this.maxBytes) bad = streamMessageTooLarge(this.errorId, length, this.maxBytes);
      if (bad) {
        this.failure = bad;
        this.buffered = [];
        this.size = 0;
        if (frames.length === 0) throw bad;
        return frames;
      }
      if (this.size < FRAME_HEADER_BYTES + length) break;
      const all = this.take(FRAME_HEADER_BYTES + length);
      frames.push({ flags, payload: all.subarray(FRAME_HEADER_BYTES) });
    }
    return frames;
  }

  private peek(n: number): Buffer {
    if (this.buffered[0]!.length >= n) return this.buffered[0]!;
    const joined = Buffer.concat(this.buffered, this.size);
    this.buffered = [joined];
    return joined;
  }

  private take(n: number): Buffer {
    const first = this.peek(n);
    const out = first.subarray(0, n);
    const rest = first.subarray(n);
    this.buffered = rest.length > 0 ? [rest, ...this.buffered.slice(1)] : this.buffered.slice(1);
    this.size -= n;
    return out;
  }
}
