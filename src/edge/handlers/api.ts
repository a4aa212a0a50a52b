/**
 * The api handler: the request becomes the API Request message of proto/api.proto
 * `{method, path, header, get, post, body, url}`, the API service answers an API Response
 * `{statusCode, header, body}` which is written as it is (statusCode 0 → 200; Content-Type
 * defaults to application/json). JSON on the wire unless the node's metadata says
 * `content_type: application/protobuf`. A JSON answer that has none of the Response fields (a
 * service that answers its own JSON) is passed through as a 200; one that mixes them with other
 * keys, or gives a field of the wrong type, is a 502 that says so.
 */
import { writeHeadFlat, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import { asFrontEndError, badGateway, routedError } from '../../base/errors.js';
import { JSON_CODEC, PROTOBUF_CODEC, codecFor, mediaType } from '../../base/codec/codec.js';
import { apiTypes } from '../../base/codec/api-proto.js';
import { readBody } from '../../base/http/body.js';
import { sendError } from '../../base/http/respond.js';
import { targetOf } from '../../base/http/target.js';
import { canonicalHeaderKey, isHopByHop } from '../../core/transport/headers.js';
import { callOptionsFrom, type EdgeHandlerContext } from './front-end.js';
import type { RoutePolicy } from '../routes/effects.js';
import type { CallContext } from '../../base/util/call-context.js';
import type { RpcRoute } from './resolve.js';

export interface Pair {
  key: string;
  values: string[];
}

export type PairMap = Record<string, Pair>;

function addPair(map: PairMap, key: string, value: string): void {
  const pair = map[key];
  if (pair) pair.values.push(value);
  else map[key] = { key, values: [value] };
}

/** Request headers as pairs, with their canonical capitalisation (Content-Type). */
export function headerPairs(req: FrontRequest): PairMap {
  const out: PairMap = {};
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = forwardedHeaderName(raw[i]!);
    if (name !== undefined) addPair(out, name, raw[i + 1]!);
  }
  return out;
}

/**
 * Header names as sent → canonical name (canonicalHeaderKey), or null for a hop-by-hop header.
 * Names repeat from request to request, so each is worked out once; bounded, since clients choose
 * the names.
 */
const headerNames = new Map<string, string | null>();
const HEADER_NAMES_MAX = 1024;

function forwardedHeaderName(name: string): string | undefined {
  let known = headerNames.get(name);
  if (known === undefined) {
    known = isHopByHop(name.toLowerCase()) ? null : canonicalHeaderKey(name);
    if (headerNames.size >= HEADER_NAMES_MAX) headerNames.clear();
    headerNames.set(name, known);
  }
  return known ?? undefined;
}

export function queryPairs(search: string): PairMap {
  const out: PairMap = {};
  for (const [k, v] of new URLSearchParams(search)) addPair(out, k, v);
  return out;
}

export interface ApiRequestMessage {
  method: string;
  path: string;
  header: PairMap;
  get: PairMap;
  post: PairMap;
  body: string;
  url: string;
}

export function buildApiRequest(req: FrontRequest, body: Buffer): ApiRequestMessage {
  const { url, path, query } = targetOf(req);
  const media = mediaType(req.headers['content-type']);
  const text = body.toString('utf8');
  return {
    method: req.method ?? 'GET',
    path,
    header: headerPairs(req),
    get: query === undefined ? {} : queryPairs(query),
    // The form is parsed for convenience; the raw body is always kept as well.
    post: media === 'application/x-www-form-urlencoded' ? queryPairs(text) : {},
    body: text,
    url,
  };
}

interface ApiResponseMessage {
  statusCode?: number;
  header?: Record<string, { key?: string; values?: string[] }>;
  body?: string;
}

const NO_BODY = Buffer.alloc(0);

const RESPONSE_FIELDS: ReadonlySet<string> = new Set(['statusCode', 'header', 'body']);
/** How many of the other keys a 502 names, and how much of each. */
const NAMED_KEYS = 3;
const NAMED_KEY_CHARS = 64;

/**
 * A decoded JSON answer: 'response' (an API Response: an object whose keys are all Response fields,
 * `{}` included, the JSON of an empty Response), 'plain' (no Response field at all, or not an
 * object: the service's own JSON), or the reason it is neither.
 */
function classifyJsonAnswer(value: unknown): 'response' | 'plain' | string {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'plain';
  const keys = Object.keys(value);
  const others = keys.filter((k) => !RESPONSE_FIELDS.has(k));
  if (others.length === keys.length && keys.length > 0) return 'plain';
  if (others.length > 0) {
    const named = others.slice(0, NAMED_KEYS).map((k) => JSON.stringify(k.slice(0, NAMED_KEY_CHARS)));
    return `an object with API Response fields and other keys (${named.join(', ')}${others.length > NAMED_KEYS ? ', ...' : ''})`;
  }
  const { header, body } = value as ApiResponseMessage;
  if (header !== undefined && header !== null && (typeof header !== 'object' || Array.isArray(header))) return `a header that is not an object (${Array.isArray(header) ? 'array' : typeof header})`;
  if (body !== undefined && body !== null && typeof body !== 'string') return `a body that is not a string (${Array.isArray(body) ? 'array' : typeof body})`;
  return 'response';
}

/**
 * `ctx`: the request's call context, when the front end passes it explicitly (else the ambient
 * one); `policy`: what a route of the route file adds (a version, timeouts).
 */
export async function handleApi(fe: EdgeHandlerContext, route: RpcRoute, req: FrontRequest, res: FrontResponse, ctx?: CallContext, policy?: RoutePolicy): Promise<void> {
  const body = req.method === 'GET' || req.method === 'HEAD' ? (req.resume(), NO_BODY) : await readBody(req, fe.maxBodyBytes, fe.errorId);
  const message = buildApiRequest(req, body);
  const types = apiTypes();
  // callOptionsFrom returns a fresh object: extend it rather than copy it.
  const options = callOptionsFrom(req, undefined, ctx, policy);
  options.encodeFor = (target) =>
    target.metadata.content_type === 'application/protobuf'
      ? { contentType: PROTOBUF_CODEC.contentType, body: PROTOBUF_CODEC.encode(message, types.Request) }
      : { contentType: JSON_CODEC.contentType, body: JSON_CODEC.encode(message) };
  let answer;
  try {
    answer = await fe.edge.client.call(route.service, route.method, NO_BODY, options);
  } catch (err) {
    sendError(res, policy ? routedError(err, fe.errorId) : asFrontEndError(err, fe.errorId));
    return;
  }
  const codec = codecFor(answer.contentType);
  let response: ApiResponseMessage;
  try {
    if (!codec) throw new Error(`content type ${answer.contentType}`);
    response = codec.decode(answer.body, types.Response) as ApiResponseMessage;
  } catch (err) {
    throw badGateway(fe.errorId, `${route.service} answered something that is not an API Response: ${(err as Error).message}`);
  }
  if (codec === JSON_CODEC) {
    const kind = classifyJsonAnswer(response);
    if (kind === 'plain') {
      // The service's own JSON, byte for byte, under the node's JSON Content-Type.
      writeHeadFlat(res, 200, ['Content-Type', answer.contentType || JSON_CODEC.contentType, 'Content-Length', String(answer.body.byteLength)]);
      res.end(answer.body);
      return;
    }
    if (kind !== 'response') throw badGateway(fe.errorId, `${route.service} answered ${kind}: not an API Response`);
  }
  const status = response.statusCode ? Number(response.statusCode) : 200;
  if (!Number.isInteger(status) || status < 100 || status > 599) throw badGateway(fe.errorId, `${route.service} answered statusCode ${status}`);
  // The answer's headers as a flat list (name, value, name, value...; a name repeats for each of
  // its values) and the body as a string: Node sends the head and the body in one write, with no
  // Buffer copy of the body and no header object to walk.
  const head: string[] = [];
  let typed = false;
  const given = response.header;
  if (given) {
    for (const name in given) {
      if (!Object.prototype.hasOwnProperty.call(given, name)) continue;
      const pair = given[name];
      const key = pair?.key || name;
      const lower = key.toLowerCase();
      // The length is the gateway's own (the body below).
      if (lower === 'content-length' || isHopByHop(lower)) continue;
      if (lower === 'content-type') typed = true;
      const values = pair?.values as unknown;
      if (Array.isArray(values)) for (let i = 0; i < values.length; i++) head.push(key, values[i] as string);
      else if (values !== undefined && values !== null) head.push(key, values as string);
    }
  }
  if (!typed) head.push('Content-Type', 'application/json');
  const text = response.body ?? '';
  head.push('Content-Length', String(Buffer.byteLength(text, 'utf8')));
  writeHeadFlat(res, status, head);
  res.end(text, 'utf8');
}
