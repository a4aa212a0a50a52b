/** Header names of the RPC wire protocol (DESIGN section 5) and hop-by-hop filtering. */

export const HEADER_SERVICE = 'mesh-service';
export const HEADER_ENDPOINT = 'mesh-endpoint';
export const HEADER_ID = 'mesh-id';
export const HEADER_TIMEOUT = 'mesh-timeout';

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

export function isHopByHop(name: string): boolean {
  return HOP_BY_HOP.has(name);
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

/**
 * The end-to-end headers of an inbound request, as RPC metadata: hop-by-hop ones, those named by
 * `Connection`, and the wire protocol's own are left out. Runs on every request: no per-header
 * allocation beyond the result.
 */
export function endToEndHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  const named = connectionNamed(headers['connection']);
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || named?.has(name)) continue;
    if (name === HEADER_SERVICE || name === HEADER_ENDPOINT || name === HEADER_TIMEOUT || name === 'content-type') continue;
    out[name] = typeof value === 'string' ? value : value.join(', ');
  }
  return out;
}
