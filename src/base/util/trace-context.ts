/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
 * headers, parsed and written. A hop forwards the caller's trace id with its own span id, and
 * starts a trace when none came; a malformed `traceparent` is ignored (a new trace starts), never
 * an error. The one home of the header rules: front ends, the RPC server and wire, the proxy
 * handler and broker messages all use these functions.
 */
import { randomFillSync } from 'node:crypto';

export const TRACEPARENT = 'traceparent';
export const TRACESTATE = 'tracestate';

/** The trace of one hop: its trace id, its own span id (the parent of what it sends), flags and vendor state. */
export interface TraceContext {
  /** 32 lower-case hex digits, not all zero. */
  readonly traceId: string;
  /** 16 lower-case hex digits, not all zero. */
  readonly spanId: string;
  /** Trace flags; bit 0 is `sampled`. */
  readonly flags: number;
  /** The `tracestate` to forward, as received (undefined when none, or when it was malformed). */
  readonly state?: string;
}

const HEX = /^[0-9a-f]+$/;
const ZERO_TRACE = '00000000000000000000000000000000';
const ZERO_SPAN = '0000000000000000';
/** RFC: at most 32 list members of at most 256 characters each; 512 characters is what a hop must forward. */
const MAX_TRACESTATE = 512;
// eslint-disable-next-line no-control-regex
const TRACESTATE_BAD = /[\x00-\x1f\x7f-\xff]/;

/**
 * Parses `traceparent` (and `tracestate`) of an inbound request or message. Undefined for
 * anything malformed: a missing or repeated header, a wrong length, upper-case or non-hex digits,
 * version `ff`, version `00` with extra fields, an all-zero trace or parent id. A malformed
 * `tracestate` is dropped, the `traceparent` kept. The returned spanId is the caller's span (the
 * parent of this hop).
 */
export function parseTraceparent(value: string | string[] | undefined, state?: string | string[]): TraceContext | undefined {
  if (typeof value !== 'string' || value.length < 55) return undefined;
  const v = value.trim();
  if (v.length < 55 || v[2] !== '-' || v[35] !== '-' || v[52] !== '-') return undefined;
  const version = v.slice(0, 2);
  if (!HEX.test(version) || version === 'ff') return undefined;
  // Version 00 has exactly four fields; a later version may add fields after a dash.
  if (v.length > 55 && (version === '00' || v[55] !== '-')) return undefined;
  const traceId = v.slice(3, 35);
  const spanId = v.slice(36, 52);
  const flags = v.slice(53, 55);
  if (!HEX.test(traceId) || !HEX.test(spanId) || !HEX.test(flags) || traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, flags: parseInt(flags, 16), state: parseTracestate(state) };
}

/** `tracestate` to forward: repeated headers joined with a comma; dropped when empty, too long or holding control or non-ASCII characters. */
export function parseTracestate(state: string | string[] | undefined): string | undefined {
  if (state === undefined) return undefined;
  const s = (typeof state === 'string' ? state : state.join(',')).trim();
  if (s === '' || s.length > MAX_TRACESTATE || TRACESTATE_BAD.test(s)) return undefined;
  return s;
}

/** The `traceparent` this hop sends: version 00, its trace id, its span id, its flags. */
export function formatTraceparent(trace: TraceContext): string {
  return `00-${trace.traceId}-${trace.spanId}-${(trace.flags & 0xff).toString(16).padStart(2, '0')}`;
}

/**
 * Random trace and span ids from a pool of random bytes refilled 4 KiB at a time, so an id costs a
 * slice of a buffer, not a call into the CSPRNG. One instance per process (owned by its
 * ContextStore); never all zero.
 */
export class TraceIds {
  private readonly pool = Buffer.alloc(4096);
  private offset = 4096;

  private take(bytes: number): string {
    if (this.offset + bytes > this.pool.length) {
      randomFillSync(this.pool);
      this.offset = 0;
    }
    const id = this.pool.toString('hex', this.offset, this.offset + bytes);
    this.offset += bytes;
    return id === ZERO_TRACE || id === ZERO_SPAN ? this.take(bytes) : id;
  }

  traceId(): string {
    return this.take(16);
  }

  spanId(): string {
    return this.take(8);
  }
}
