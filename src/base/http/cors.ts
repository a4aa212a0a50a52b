/**
 * CORS of the front ends (`--cors`, docs/gateway.md "CORS"):
 *
 *  - `*`: every response carries `Access-Control-Allow-Origin: *` and never
 *    `Access-Control-Allow-Credentials` (browsers then send no cookies or HTTP authentication
 *    cross-origin, and the answer is the same for every origin: no `Vary`).
 *  - a list of origins: a listed Origin is reflected with `Access-Control-Allow-Credentials: true`;
 *    every response carries `Vary: Origin` (a cache keeps one answer per origin). Another origin
 *    gets no CORS header at all, so the browser keeps the answer from its page.
 *  - a preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered 204 by the
 *    front end itself; for an allowed origin with `Access-Control-Allow-Methods`,
 *    `Access-Control-Allow-Headers` (the requested headers when each is allowed, else the fixed
 *    list) and `Access-Control-Max-Age` (`--cors_max_age`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export const DEFAULT_CORS_MAX_AGE_SEC = 600;
export const CORS_ALLOW_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS';
/** The request headers a cross-origin page may send (besides the CORS-safelisted ones), and any `Mesh-*` header. */
export const CORS_ALLOW_HEADERS = ['Accept', 'Accept-Language', 'Content-Language', 'Content-Type', 'Authorization', 'X-Requested-With', 'Traceparent', 'Tracestate'];
/** Response headers a cross-origin page may read besides the safelisted ones. */
export const CORS_EXPOSE_HEADERS = 'Retry-After, RateLimit, RateLimit-Policy';

const ALLOWED_HEADER_SET = new Set(CORS_ALLOW_HEADERS.map((h) => h.toLowerCase()));

/**
 * Checks the `--cors` list: `*` alone, or origins `scheme://host[:port]` (no path, no trailing
 * slash). Returns it; throws naming the bad entry.
 */
export function parseCorsOrigins(list: readonly string[]): string[] {
  if (list.includes('*')) {
    if (list.length > 1) throw new Error('* allows every origin: give it alone, or list the origins');
    return ['*'];
  }
  for (const o of list) {
    let origin: string | undefined;
    try {
      origin = new URL(o).origin;
    } catch {
      origin = undefined;
    }
    if (origin === undefined || origin === 'null' || origin !== o) {
      throw new Error(`"${o}" is not an origin: use scheme://host[:port] (e.g. https://app.example.com), or * for any`);
    }
  }
  return [...list];
}

export class CorsPolicy {
  private readonly any: boolean;
  private readonly origins: ReadonlySet<string>;

  constructor(
    origins: readonly string[],
    private readonly maxAgeSec = DEFAULT_CORS_MAX_AGE_SEC,
  ) {
    this.any = origins.includes('*');
    this.origins = new Set(origins);
  }

  /**
   * Sets the CORS headers of the response; answers a preflight (204). True when it answered.
   */
  apply(req: IncomingMessage, res: ServerResponse): boolean {
    const origin = req.headers.origin;
    let allowed = false;
    if (this.any) {
      res.setHeader('access-control-allow-origin', '*');
      allowed = true;
    } else {
      res.setHeader('vary', 'Origin');
      if (origin !== undefined && this.origins.has(origin)) {
        res.setHeader('access-control-allow-origin', origin);
        res.setHeader('access-control-allow-credentials', 'true');
        allowed = true;
      }
    }
    const preflight = req.method === 'OPTIONS' && origin !== undefined && req.headers['access-control-request-method'] !== undefined;
    if (!preflight) {
      if (allowed && origin !== undefined) res.setHeader('access-control-expose-headers', CORS_EXPOSE_HEADERS);
      return false;
    }
    req.resume();
    if (allowed) {
      res.setHeader('access-control-allow-methods', CORS_ALLOW_METHODS);
      res.setHeader('access-control-allow-headers', allowHeaders(req.headers['access-control-request-headers']));
      res.setHeader('access-control-max-age', String(this.maxAgeSec));
    }
    res.writeHead(204, { 'content-length': 0 });
    res.end();
    return true;
  }
}

/** The requested headers when every one is allowed (lower case, as browsers send them), else the fixed list. */
function allowHeaders(requested: string | undefined): string {
  const names = (requested ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h !== '');
  if (names.length > 0 && names.every((h) => ALLOWED_HEADER_SET.has(h) || /^mesh-[a-z0-9-]+$/.test(h))) return names.join(', ');
  return CORS_ALLOW_HEADERS.join(', ');
}
