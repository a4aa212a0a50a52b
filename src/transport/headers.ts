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

/**
 * The end-to-end headers of an inbound request, as RPC metadata: hop-by-hop ones, those named by
 * `Connection`, and the wire protocol's own are left out.
 */
export function endToEndHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  const named = new Set<string>();
  const connection = headers['connection'];
  if (typeof connection === 'string') for (const n of connection.split(',')) named.add(n.trim().toLowerCase());
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || isHopByHop(name) || named.has(name)) continue;
    if (name === HEADER_SERVICE || name === HEADER_ENDPOINT || name === HEADER_TIMEOUT || name === 'content-type') continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}
