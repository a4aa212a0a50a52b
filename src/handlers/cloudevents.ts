/**
 * CloudEvents 1.0 at the gateway's event handler (HTTP protocol binding): a request that is a
 * CloudEvent is published as one, in the mode it came in.
 *
 * - Structured mode: `Content-Type: application/cloudevents+json` (parameters allowed); the body
 *   is the event as a JSON object. Published with that Content-Type and the body unchanged.
 * - Binary mode: a `ce-specversion` header; the attributes are the `ce-*` headers, the body is
 *   the data and Content-Type its `datacontenttype`. Published with the `ce-*` headers (names
 *   lower case) and the Content-Type, the body unchanged.
 *
 * Either way `specversion` must be `1.0` and `id`, `source` and `type` non-empty strings; `time`,
 * when given, an RFC 3339 timestamp; otherwise 400. The broker message also gets `mesh-id` (the
 * event's id: the key of durable subscribers' idempotency), `mesh-topic` and `mesh-event`.
 */
import type { IncomingMessage } from 'node:http';
import { MeshError } from '../errors.js';

export const STRUCTURED_TYPE = 'application/cloudevents+json';
const REQUIRED = ['id', 'source', 'type'] as const;
/** RFC 3339 date-time (what `time` must be). */
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

export type CloudEventMode = 'structured' | 'binary';

/** The mode of a request that is a CloudEvent, or undefined for a plain request. */
export function cloudEventMode(req: IncomingMessage): CloudEventMode | undefined {
  const type = String(req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === STRUCTURED_TYPE) return 'structured';
  if (req.headers['ce-specversion'] !== undefined) return 'binary';
  return undefined;
}

function check(errorId: string, attrs: Record<string, unknown>, where: string): string {
  if (attrs.specversion !== '1.0') throw new MeshError(errorId, 400, `cloudevents: ${where}specversion must be "1.0"`);
  for (const name of REQUIRED) {
    const v = attrs[name];
    if (typeof v !== 'string' || v === '') throw new MeshError(errorId, 400, `cloudevents: ${where}${name} is required (a non-empty string)`);
  }
  if (attrs.time !== undefined && (typeof attrs.time !== 'string' || !RFC3339.test(attrs.time) || Number.isNaN(Date.parse(attrs.time)))) {
    throw new MeshError(errorId, 400, `cloudevents: ${where}time must be an RFC 3339 timestamp`);
  }
  return attrs.id as string;
}

/**
 * The broker message header for a CloudEvent request (and its id); throws 400 for an invalid
 * event. `body` is the request body (structured: the event JSON).
 */
export function cloudEventMessage(errorId: string, mode: CloudEventMode, req: IncomingMessage, body: Buffer): { header: Record<string, string>; id: string } {
  if (mode === 'structured') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      throw new MeshError(errorId, 400, 'cloudevents: the body is not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new MeshError(errorId, 400, 'cloudevents: the body must be a JSON object');
    const id = check(errorId, parsed as Record<string, unknown>, '');
    return { header: { 'content-type': String(req.headers['content-type']), 'mesh-id': id }, id };
  }
  const header: Record<string, string> = {};
  const attrs: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (!name.startsWith('ce-') || value === undefined) continue;
    const v = Array.isArray(value) ? value.join(', ') : value;
    header[name] = v;
    attrs[name.slice(3)] = v;
  }
  const id = check(errorId, attrs, 'ce-');
  if (req.headers['content-type'] !== undefined) header['content-type'] = String(req.headers['content-type']);
  header['mesh-id'] = id;
  return { header, id };
}
