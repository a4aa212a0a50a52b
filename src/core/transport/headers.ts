/** Header names: those of the RPC wire protocol (DESIGN section 5), hop-by-hop filtering, canonical capitalisation; strict integer header values. */
import { MAX_DURATION_MS } from '../../base/util/duration.js';

export const HEADER_SERVICE = 'mesh-service';
export const HEADER_ENDPOINT = 'mesh-endpoint';
export const HEADER_ID = 'mesh-id';
export const HEADER_TIMEOUT = 'mesh-timeout';
/** A streaming call (docs/protocol.md, Streams): server, client or bidi. */
export const HEADER_STREAM = 'mesh-stream';

/** Headers that describe one connection and must never be forwarded (RFC 9110 7.6.1), plus ones we set ourselves. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'expect',
]);

/** A header name's characters (RFC 9110 5.6.2 token): letters, digits and !#$%&'*+-.^_`|~ */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * The canonical form of a header name, as Go's textproto.CanonicalMIMEHeaderKey writes it (and as
 * Go services see names in their header maps): the first letter and every letter after a `-` in
 * upper case, every other letter in lower case; digits and the other token characters are kept.
 * `content-type` → `Content-Type`, `X-FOO-bar` → `X-Foo-Bar`, `ETAG` → `Etag`, `a--b-` → `A--B-`,
 * `x_foo` → `X_foo`. A name that is not a token (empty, or holding a space, a separator such as
 * `:` `/` `(`, a control or a non-ASCII character) is returned unchanged, as Go does. Idempotent.
 * The one home of this rule: the api handler and the sidecar's broker both use it.
 */
export function canonicalHeaderKey(name: string): string {
  if (!TOKEN.test(name)) return name;
  let out = '';
  let upper = true;
  for (let i = 0; i < name.length; i++) {
    const c = name[i]!;
    out += upper ? c.toUpperCase() : c.toLowerCase();
    upper = c === '-';
  }
  return out;
}

/** A hop-by-hop header, or an HTTP/2 pseudo-header (`:path`...): neither is forwarded. */
export function isHopByHop(name: string): boolean {
  return HOP_BY_HOP.has(name) || name.charCodeAt(0) === 0x3a;
}

/** Whether a raw header name (undici's Buffer form) is `lower`, in any case. */
export function rawNameIs(name: Buffer, lower: string): boolean {
  return name.length === lower.length && name.toString('latin1').toLowerCase() === lower;
}

/** Header names a `Connection` header lists beyond the usual keep-alive/close; undefined when none. */
export function connectionNamed(connection: string | string[] | undefined): Set<string> | undefined {
  if (typeof connection !== 'string') return undefined;
  const lower = connection.toLowerCase();
  if (lower === 'keep-alive' || lower === 'close') return undefined;
  const named = new Set<string>();
  for (const n of lower.split(',')) named.add(n.trim());
  return named;
}

/** Header names starting with this are the edge's to set (Mesh-Auth-Subject, -Scopes): a client's own are removed at the edge. */
export const AUTH_HEADER_PREFIX = 'mesh-auth-';

/**
 * The caller's workload identity (`spiffe://...`) a sidecar gives the app behind it, from the
 * certificate the caller presented on the sidecar's inbound listener. Only that sidecar sets it:
 * one that arrives from outside is removed (src/fronts/sidecar/inbound.ts, src/edge/auth/edge.ts).
 */
export const HEADER_PEER_IDENTITY = 'mesh-peer-identity';

/** The headers only a mesh edge sets (Mesh-Auth-*, Mesh-Peer-Identity): a `Connection` header can never name them away. */
export function isEdgeSetHeader(name: string): boolean {
  return name.startsWith(AUTH_HEADER_PREFIX) || name === HEADER_PEER_IDENTITY;
}

/**
 * The header names a request's `Connection` header removes from what is forwarded: those it lists
 * (connectionNamed), except the edge's own `Mesh-Auth-*` and `Mesh-Peer-Identity` (isEdgeSetHeader).
 * The edge sets those on the request after removing the client's, so a nomination can only ever
 * name the edge's: a client cannot strip the identity the edge gives it. (X-Forwarded-* and the trace headers a hop sets are added after the
 * removal, so nothing can nominate them away either.)
 */
export function requestConnectionNamed(connection: string | string[] | undefined): Set<string> | undefined {
  const named = connectionNamed(connection);
  if (named) for (const name of named) if (isEdgeSetHeader(name)) named.delete(name);
  return named;
}

/**
 * The end-to-end headers of an inbound request, as RPC metadata: hop-by-hop ones, those named by
 * `Connection` (never the edge's Mesh-Auth-*), and the wire protocol's own are left out. Runs on every request: no per-header
 * allocation beyond the result.
 */
export function endToEndHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  const named = requestConnectionNamed(headers['connection']);
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || isHopByHop(name) || named?.has(name)) continue;
    if (name === HEADER_SERVICE || name === HEADER_ENDPOINT || name === HEADER_TIMEOUT || name === HEADER_STREAM || name === 'content-type') continue;
    out[name] = typeof value === 'string' ? value : value.join(', ');
  }
  return out;
}

/** Folded names the mesh sets or reads on a request (beyond the prefixes of MESH_HEADER_PREFIXES). */
const MESH_HEADER_NAMES: ReadonlySet<string> = new Set([
  'content-length',
  'content-type',
  'transfer-encoding',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'user-agent',
  'if-none-match',
  'access-control-request-method',
  'access-control-request-headers',
]);
/**
 * Prefixes of folded names the mesh sets or reads: its own (`Mesh-*`: the wire protocol, the
 * edge's identity headers, the sidecar token, the broker's), the admin's `X-Mesh-Admin`, the
 * forwarding headers it sets (`X-Forwarded-*`), gRPC's, the WebSocket handshake's, the fetch
 * metadata the admin reads (`Sec-Fetch-*`) and the CloudEvents attributes (`ce-*`).
 */
const MESH_HEADER_PREFIXES = ['mesh-', 'x-mesh-', 'x-forwarded-', 'grpc-', 'sec-websocket-', 'sec-fetch-', 'ce-'] as const;

/**
 * Whether a folded header name (foldHeaderName) is one the mesh sets or reads: a client's header
 * spelled with `_` that folds to one of these is never passed on, whatever
 * --headers_with_underscores says, since a CGI-style backend would read it as the mesh's own.
 */
export function isMeshHeaderName(folded: string): boolean {
  if (MESH_HEADER_NAMES.has(folded)) return true;
  for (const prefix of MESH_HEADER_PREFIXES) if (folded.startsWith(prefix)) return true;
  return false;
}

/** The most digits a header integer may have: any 15-digit number is exact in a JS number. */
const MAX_INTEGER_DIGITS = 15;
const DIGITS = /^[0-9]+$/;

/**
 * A header value that is a non-negative integer, read strictly: decimal digits only (as RFC 9110
 * writes Content-Length), at most 15 of them. Anything else (a sign, `0x10`, `1e3`, `1.5`, spaces
 * inside, an empty value, a repeated header) is undefined: the caller says no, never guesses.
 * The one parser of integer header values.
 */
export function parseHeaderInteger(value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (text.length > MAX_INTEGER_DIGITS || !DIGITS.test(text)) return undefined;
  return Number(text);
}

/**
 * `Mesh-Timeout` of a request: the budget in milliseconds, undefined when the header is absent or
 * 0 (no budget given). Throws an Error naming the value when it is not a whole number of
 * milliseconds; the caller answers 400. A budget longer than a timer can wait is that longest wait.
 */
export function meshTimeoutOf(headers: Record<string, string | string[] | undefined>): number | undefined {
  const value = headers[HEADER_TIMEOUT];
  if (value === undefined) return undefined;
  const ms = parseHeaderInteger(value);
  if (ms === undefined) {
    const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 32)) : 'given more than once';
    throw new Error(`Mesh-Timeout ${shown} is not a whole number of milliseconds`);
  }
  return ms === 0 ? undefined : Math.min(ms, MAX_DURATION_MS);
}
