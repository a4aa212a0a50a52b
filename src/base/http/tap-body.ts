/**
 * The bodies a tap shows (admin `/tap?bodies=true`, docs/admin.md): a request's and a response's
 * body bytes, copied as they stream up to a cap (never more held than the cap, nothing delayed or
 * changed), then rendered once for the event: UTF-8 text when the content type is text-like and
 * the bytes are valid UTF-8, else base64; the values of the configured JSON field names replaced
 * by `[redacted]` at any depth in a complete JSON body, and a JSON body that cannot be read whole
 * (truncated, compressed, not parseable) replaced whole.
 */

/** What a redacted value becomes: a header's (src/base/http/tap.ts), a JSON field's, a whole body's data. */
export const REDACTED = '[redacted]';

/** A body as a tap event shows it (`request_body`, `response_body`). */
export interface TapBody {
  /** Body bytes that went through, captured or not. */
  bytes: number;
  /** Fewer bytes than `bytes` are in `data` (the cap was reached). */
  truncated: boolean;
  /** `utf8`: `data` is the text; `base64`: `data` is the bytes in base64. */
  encoding: 'utf8' | 'base64';
  data: string;
  /** JSON fields (or the whole body, `data` then `[redacted]`) were replaced. */
  redacted: boolean;
}

/** The bytes of one body, up to a cap: the first `cap` bytes are copied, the rest only counted. */
export class BodyCapture {
  private readonly chunks: Buffer[] = [];
  private captured = 0;
  /** Every byte that went through. */
  total = 0;

  constructor(private readonly cap: number) {}

  add(chunk: unknown, encoding?: unknown): void {
    let bytes: Uint8Array;
    if (typeof chunk === 'string') {
      const enc = typeof encoding === 'string' && Buffer.isEncoding(encoding) ? encoding : 'utf8';
      if (this.captured >= this.cap) {
        this.total += Buffer.byteLength(chunk, enc);
        return;
      }
      bytes = Buffer.from(chunk, enc);
    } else if (chunk instanceof Uint8Array) {
      bytes = chunk;
    } else {
      return;
    }
    this.total += bytes.byteLength;
    const room = this.cap - this.captured;
    if (room <= 0 || bytes.byteLength === 0) return;
    // A copy: the writer may reuse its buffer once the write returns.
    const copy = Buffer.from(bytes.subarray(0, Math.min(room, bytes.byteLength)));
    this.chunks.push(copy);
    this.captured += copy.byteLength;
  }

  get truncated(): boolean {
    return this.total > this.captured;
  }

  bytes(): Buffer {
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.captured);
  }
}

/** The request's and the response's captures of one request. */
export interface BodyCaptures {
  request: BodyCapture;
  response: BodyCapture;
}

/** The media type of a Content-Type value: lower case, without parameters. */
function mediaType(contentType: unknown): string {
  const v = Array.isArray(contentType) ? contentType[0] : contentType;
  return typeof v === 'string' ? v.split(';', 1)[0]!.trim().toLowerCase() : '';
}

/** `application/json` and `…+json`: the bodies JSON field redaction reads. */
export function isJsonType(media: string): boolean {
  return media === 'application/json' || (media.startsWith('application/') && media.endsWith('+json'));
}

const TEXT_TYPES = new Set(['application/xml', 'application/x-www-form-urlencoded', 'application/javascript', 'application/x-ndjson', 'application/graphql', 'application/yaml']);

function isTextType(media: string): boolean {
  return media.startsWith('text/') || isJsonType(media) || TEXT_TYPES.has(media) || media.endsWith('+xml');
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function decodeUtf8(bytes: Uint8Array): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Replaces the values of the named fields (lower case) at any depth; says whether one was. */
export function redactJsonFields(value: unknown, fields: ReadonlySet<string>): { value: unknown; changed: boolean } {
  let changed = false;
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v === null || typeof v !== 'object') return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (fields.has(k.toLowerCase())) {
        changed = true;
        out[k] = REDACTED;
      } else {
        out[k] = walk(x);
      }
    }
    return out;
  };
  const result = walk(value);
  return { value: result, changed };
}

/**
 * A capture as the event shows it. `headers`: those that describe the body (the request's or the
 * answer's): Content-Type and Content-Encoding. `jsonFields`: the field names to redact (lower case).
 */
export function renderBody(capture: BodyCapture, headers: Record<string, unknown>, jsonFields: ReadonlySet<string>): TapBody {
  const media = mediaType(headers['content-type']);
  const coding = mediaType(headers['content-encoding']);
  const encoded = coding !== '' && coding !== 'identity';
  const bytes = capture.bytes();
  const base = { bytes: capture.total, truncated: capture.truncated };
  if (jsonFields.size > 0 && isJsonType(media) && capture.total > 0) {
    const whole = { ...base, encoding: 'utf8' as const, data: REDACTED, redacted: true };
    // Only a complete body can be read field by field: a truncated or compressed one is hidden whole.
    if (capture.truncated || encoded) return whole;
    const text = decodeUtf8(bytes);
    if (text === undefined) return whole;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return whole;
    }
    const { value, changed } = redactJsonFields(parsed, jsonFields);
    return changed ? { ...base, encoding: 'utf8', data: JSON.stringify(value), redacted: true } : { ...base, encoding: 'utf8', data: text, redacted: false };
  }
  if (bytes.byteLength === 0) return { ...base, encoding: 'utf8', data: '', redacted: false };
  const text = !encoded && isTextType(media) ? decodeUtf8(bytes) : undefined;
  return text !== undefined ? { ...base, encoding: 'utf8', data: text, redacted: false } : { ...base, encoding: 'base64', data: bytes.toString('base64'), redacted: false };
}
