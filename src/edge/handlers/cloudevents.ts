/**
 * CloudEvents 1.0 at the front ends (HTTP protocol binding, JSON event format): one home for the
 * rules, used by the gateway's event handler and the sidecar's `/broker`.
 *
 * In (a request that is a CloudEvent is published as one, in the mode it came in):
 * - Structured mode: `Content-Type: application/cloudevents+json` (parameters allowed); the body
 *   is the event as a JSON object. Published with that Content-Type and the body unchanged.
 * - Binary mode: a `ce-specversion` header; the attributes are the `ce-*` headers, the body is
 *   the data and Content-Type its `datacontenttype`. Published with the `ce-*` headers and the
 *   Content-Type, the body unchanged.
 *
 * Either way `specversion` must be `1.0` and `id`, `source` and `type` non-empty strings; `time`,
 * when given, an RFC 3339 timestamp; otherwise 400. The broker message also gets `mesh-id` (the
 * event's id: the key of durable subscribers' idempotency); the gateway adds `mesh-topic` and
 * `mesh-event`.
 *
 * Out (messageCloudEvent): any broker message as a structured CloudEvent (JSON text), for the
 * sidecar's `format=cloudevents` subscribers; the mapping is the table in docs/sidecar.md.
 */
import type { FrontRequest } from '../../base/http/front-types.js';
import { randomUUID } from 'node:crypto';
import { badRequest } from '../../base/errors.js';
import { isJsonMedia, mediaType } from '../../base/codec/codec.js';
import type { Message } from '../../engines/broker/broker.js';

export const STRUCTURED_TYPE = 'application/cloudevents+json';
const REQUIRED = ['id', 'source', 'type'] as const;
/** RFC 3339 date-time (what `time` must be). */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

export type CloudEventMode = 'structured' | 'binary';

/** The mode of a request that is a CloudEvent, or undefined for a plain request. */
export function cloudEventMode(req: FrontRequest): CloudEventMode | undefined {
  if (mediaType(headerText(req.headers['content-type'])) === STRUCTURED_TYPE) return 'structured';
  if (req.headers['ce-specversion'] !== undefined) return 'binary';
  return undefined;
}

function headerText(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

function check(errorId: string, attrs: Record<string, unknown>, where: string): string {
  if (attrs.specversion !== '1.0') throw badRequest(errorId, `cloudevents: ${where}specversion must be "1.0"`);
  for (const name of REQUIRED) {
    const v = attrs[name];
    if (typeof v !== 'string' || v === '') throw badRequest(errorId, `cloudevents: ${where}${name} is required (a non-empty string)`);
  }
  if (attrs.time !== undefined && (typeof attrs.time !== 'string' || !RFC3339.test(attrs.time) || Number.isNaN(Date.parse(attrs.time)))) {
    throw badRequest(errorId, `cloudevents: ${where}time must be an RFC 3339 timestamp`);
  }
  return attrs.id as string;
}

/**
 * Validates a CloudEvent request and returns its id; throws 400 for an invalid event. `body` is
 * the request body (structured: the event JSON).
 */
export function checkCloudEventRequest(errorId: string, mode: CloudEventMode, req: FrontRequest, body: Buffer): string {
  if (mode === 'structured') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      throw badRequest(errorId, 'cloudevents: the body is not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw badRequest(errorId, 'cloudevents: the body must be a JSON object');
    return check(errorId, parsed as Record<string, unknown>, '');
  }
  const attrs: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith('ce-') && value !== undefined) attrs[name.slice(3)] = headerText(value);
  }
  return check(errorId, attrs, 'ce-');
}

/**
 * The broker message header for a CloudEvent request (and its id); throws 400 for an invalid
 * event. `body` is the request body (structured: the event JSON).
 */
export function cloudEventMessage(errorId: string, mode: CloudEventMode, req: FrontRequest, body: Buffer): { header: Record<string, string>; id: string } {
  const id = checkCloudEventRequest(errorId, mode, req, body);
  if (mode === 'structured') return { header: { 'content-type': String(req.headers['content-type']), 'mesh-id': id }, id };
  const header: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith('ce-') && value !== undefined) header[name] = headerText(value)!;
  }
  if (req.headers['content-type'] !== undefined) header['content-type'] = String(req.headers['content-type']);
  header['mesh-id'] = id;
  return { header, id };
}

/** A valid CloudEvents attribute name: lower-case ASCII letters and digits. */
const ATTRIBUTE_NAME = /^[a-z0-9]{1,64}$/;
/** Never taken from a plain header: the context attributes, the data members, and the publish time. */
const RESERVED = new Set(['specversion', 'id', 'source', 'type', 'datacontenttype', 'dataschema', 'subject', 'time', 'data', 'data_base64', 'timestamp']);
/** Plain HTTP request headers with names that would pass as attributes but describe the publishing request, not the message. */
const REQUEST_ONLY = new Set(['accept', 'date', 'expect', 'forwarded', 'from', 'origin', 'pragma', 'priority', 'referer', 'te', 'via', 'warning']);
/** The default `type` of a message that is not a CloudEvent. */
export const DEFAULT_TYPE = 'mesh.message';

/** True when `attrs` has what a CloudEvent needs (the rules of `check`), without throwing. */
function isValidEvent(attrs: Record<string, unknown>): boolean {
  try {
    check('', attrs, '');
    return true;
  } catch {
    return false;
  }
}

/**
 * A broker message as a structured CloudEvent (JSON text, the `application/cloudevents+json`
 * event format), delivered on `topic`. A message that is a valid structured CloudEvent is that
 * event unchanged; a binary-mode one (`ce-*` headers) gives its attributes, the rest of the
 * message its data; any other message gets the defaults (id: its Mesh-Id, source:
 * `mesh://<topic>`, type `mesh.message`, time from `Timestamp`). The body is `data` when it is
 * JSON (declared JSON or no Content-Type, and parses), otherwise `data_base64`. Headers whose
 * lower-case names are valid attribute names become extension attributes (`ce-*` ones win).
 */
export function messageCloudEvent(message: Message, topic: string): string {
  const header = new Map<string, string>();
  for (const [k, v] of Object.entries(message.header ?? {})) {
    const name = k.toLowerCase();
    if (!header.has(name)) header.set(name, v);
  }
  const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
  const contentType = header.get('content-type');
  const media = mediaType(contentType);
  if (media === STRUCTURED_TYPE) {
    const text = body.toString('utf8');
    const event = parseJson(text);
    if (event && typeof event === 'object' && !Array.isArray(event) && isValidEvent(event as Record<string, unknown>)) return text.trim();
  }
  const attrs: Record<string, string> = {};
  const ce: Record<string, string> = {};
  for (const [name, value] of header) {
    if (name.startsWith('ce-')) {
      if (ATTRIBUTE_NAME.test(name.slice(3))) ce[name.slice(3)] = value;
    } else if (ATTRIBUTE_NAME.test(name) && !RESERVED.has(name) && !REQUEST_ONLY.has(name)) attrs[name] = value;
  }
  const binary = ce.specversion !== undefined && isValidEvent(ce);
  const event: Record<string, string> = {
    specversion: '1.0',
    id: (binary ? ce.id : undefined) ?? message.id ?? header.get('mesh-id') ?? randomUUID(),
    source: binary ? ce.source! : `mesh://${encodeURIComponent(topic)}`,
    type: binary ? ce.type! : DEFAULT_TYPE,
  };
  const time = binary && ce.time !== undefined ? ce.time : timestampTime(header.get('timestamp'));
  if (time !== undefined) event.time = time;
  if (contentType !== undefined) event.datacontenttype = contentType;
  if (binary) {
    for (const [name, value] of Object.entries(ce)) {
      if (name !== 'datacontenttype' && name !== 'data' && name !== 'data_base64' && event[name] === undefined) attrs[name] = value;
    }
  }
  for (const [name, value] of Object.entries(attrs)) if (event[name] === undefined) event[name] = value;
  const head = JSON.stringify(event);
  if (body.length === 0) return head;
  if (isJsonMedia(media)) {
    const text = body.toString('utf8');
    if (parseJson(text) !== undefined) return `${head.slice(0, -1)},"data":${text.trim()}}`;
  }
  return `${head.slice(0, -1)},"data_base64":"${body.toString('base64')}"}`;
}

/** JSON.parse without throwing: undefined when the text is not JSON. */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** A `Timestamp` header (seconds since the epoch) as an RFC 3339 time; undefined when absent or not one. */
function timestampTime(value: string | undefined): string | undefined {
  if (value === undefined || !/^\d{1,12}$/.test(value.trim())) return undefined;
  const date = new Date(Number(value.trim()) * 1000);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString().replace('.000Z', 'Z');
}
