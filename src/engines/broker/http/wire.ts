/**
 * The http broker's delivery wire: the request path and query (topic, one or a batch of ids), the
 * Mesh-Broker-Header encoding, the Mesh-Broker-Missing answer of a batch, and how a failed
 * delivery reads. The wire itself is described at the top of src/engines/broker/http/broker.ts.
 */
import type { Node } from '../../registry/registry.js';
import { formatAddress } from '../../../base/util/address.js';
import { ERROR_IDS } from '../../../base/errors.js';

export const DELIVERY_PATH = '/_mesh/broker';
export const HEADER_FIELD = 'mesh-broker-header';
/** Registry version of subscribers without a queue. */
export const BROADCAST_VERSION = 'broadcast';
/** Largest encoded message header accepted (bytes of JSON). */
export const MAX_HEADER_BYTES = 32 * 1024;
/** Error id of the delivery endpoint's answers. */
export const ERROR_ID = ERROR_IDS.broker;
/** Node metadata: the subscriber's endpoint takes several `id`s in one delivery (value "1"). */
export const BATCH_METADATA = 'batch';
/** Answer header of a batched delivery: the ids (comma-separated) it did not know. */
export const MISSING_FIELD = 'mesh-broker-missing';
/** A batched delivery's query string stays under this many characters (the endpoint takes 64 KiB of head). */
const MAX_BATCH_QUERY = 8 * 1024;

/** JSON of the header with everything outside printable ASCII \u-escaped, so it is a valid header value. */
export function encodeHeader(header: Record<string, string>): string {
  return JSON.stringify(header).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** Parses a Mesh-Broker-Header value; throws a message for a 400 on anything but an object of strings. */
export function decodeHeader(value: string): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new Error(`${HEADER_FIELD}: not valid JSON`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error(`${HEADER_FIELD}: must be a JSON object`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed as Record<string, unknown>)) {
    if (typeof v !== 'string') throw new Error(`${HEADER_FIELD}: value of "${k}" must be a string`);
    out[k] = v;
  }
  return out;
}

/** A name as a URL component; a lone surrogate (which encodeURIComponent refuses) becomes U+FFFD. */
function encodeComponent(id: string): string {
  try {
    return encodeURIComponent(id);
  } catch {
    return encodeURIComponent(id.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD'));
  }
}

function decodeComponent(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** One delivery request: to one node, or (batch) to several subscriptions behind one endpoint. */
export interface Delivery {
  nodes: Node[];
  /** http://host:port */
  origin: string;
  /** /_mesh/broker?topic=...&id=... */
  path: string;
}

/** The request to the endpoint of nodes[0] for all the nodes (one endpoint). */
export function deliveryTo(nodes: Node[], topic: string): Delivery {
  const node = nodes[0]!;
  let path = `${DELIVERY_PATH}?topic=${encodeComponent(topic)}`;
  for (const n of nodes) path += `&id=${encodeComponent(n.id)}`;
  return { nodes, origin: `http://${formatAddress(node.address, node.port)}`, path };
}

/** The batched requests to one endpoint for these nodes: several when the ids would make one request's head too long. */
export function batchDeliveries(nodes: Node[], topic: string): Delivery[] {
  const out: Delivery[] = [];
  let chunk: Node[] = [];
  let length = 0;
  for (const node of nodes) {
    const add = encodeComponent(node.id).length + 4;
    if (chunk.length > 0 && length + add > MAX_BATCH_QUERY) {
      out.push(deliveryTo(chunk, topic));
      chunk = [];
      length = 0;
    }
    chunk.push(node);
    length += add;
  }
  out.push(deliveryTo(chunk, topic));
  return out;
}

/** The Mesh-Broker-Missing value: ids from the request, percent-encoded, so no byte of theirs can break the header. */
export function encodeMissing(ids: string[]): string {
  return ids.map(encodeComponent).join(',');
}

export function decodeMissing(value: string): Set<string> {
  return new Set(value.split(',').map(decodeComponent));
}

/** A delivery the endpoint answered with an error; `missing`: the ids a batch's endpoint did not know. */
export class DeliveryError extends Error {
  constructor(
    message: string,
    readonly missing?: Set<string>,
  ) {
    super(message);
  }
}

/** An error's message with its cause's, for logs and the errors the broker throws. */
export function errorText(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}
