/** The headers of a hop, dropped by the Node floors when they forward a request or an answer. */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'host']);

/** The end-to-end headers: a copy without the hop-by-hop ones. */
export function forward(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const k in headers) if (!HOP.has(k)) out[k] = headers[k];
  return out;
}
