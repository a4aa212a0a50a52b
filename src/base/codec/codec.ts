/**
 * Codecs turn message values into bytes and back, chosen by Content-Type (go-micro's Codec).
 * JSON is the default; protobuf needs a message type (protobufjs) to encode or decode.
 */
import type { Type } from 'protobufjs';
import { parseJson, stringifyJson } from './json.js';

export interface Codec {
  readonly contentType: string;
  encode(value: unknown, type?: Type): Uint8Array;
  decode(bytes: Uint8Array, type?: Type): unknown;
}

export class JsonCodec implements Codec {
  readonly contentType = 'application/json';
  encode(value: unknown): Uint8Array {
    return Buffer.from(stringifyJson(value));
  }
  decode(bytes: Uint8Array): unknown {
    if (bytes.length === 0) return {};
    // Bodies read from the network are Buffers already: no view to make.
    const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return parseJson(buf.toString());
  }
}

export class ProtobufCodec implements Codec {
  readonly contentType = 'application/protobuf';
  encode(value: unknown, type?: Type): Uint8Array {
    if (!type) throw new Error('protobuf encoding needs a message type');
    const message = type.fromObject((value ?? {}) as Record<string, unknown>);
    return type.encode(message).finish();
  }
  decode(bytes: Uint8Array, type?: Type): unknown {
    if (!type) throw new Error('protobuf decoding needs a message type');
    return type.toObject(type.decode(bytes), { longs: String, enums: String, defaults: true });
  }
}

export const JSON_CODEC = new JsonCodec();
export const PROTOBUF_CODEC = new ProtobufCodec();

/** The media type without parameters, lower case: "application/json; charset=utf-8" -> "application/json". */
export function mediaType(contentType: string | undefined): string {
  if (!contentType) return '';
  const semi = contentType.indexOf(';');
  return (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase();
}

/** True for media types that declare JSON: application/json, text/json, application/<x>+json; '' (none) too. */
export function isJsonMedia(media: string): boolean {
  return media === '' || media === 'application/json' || media === 'text/json' || /^application\/[\w.+-]+\+json$/.test(media);
}

/** The codec for a Content-Type, or undefined when unsupported. Empty means JSON (the default). */
export function codecFor(contentType: string | undefined): Codec | undefined {
  const media = mediaType(contentType);
  if (media === '' || media === 'application/json') return JSON_CODEC;
  if (media === 'application/protobuf' || media === 'application/x-protobuf' || media === 'application/proto')
    return PROTOBUF_CODEC;
  return undefined;
}

/**
 * The codecs of one process: JSON and protobuf, plus extra ones by content type (the `codecs`
 * option). An extra codec for a built-in content type replaces the built-in one.
 */
export class CodecSet {
  private readonly extra = new Map<string, Codec>();

  constructor(extra: readonly Codec[] = []) {
    for (const codec of extra) this.extra.set(mediaType(codec.contentType), codec);
  }

  /** The codec for a Content-Type, or undefined when unsupported. Empty means JSON. */
  for(contentType: string | undefined): Codec | undefined {
    if (this.extra.size > 0) {
      const own = this.extra.get(mediaType(contentType) || JSON_CODEC.contentType);
      if (own) return own;
    }
    return codecFor(contentType);
  }
}
