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
import type { FrontRequest, FrontResponse } from './front-types.js';

export const DEFAULT_CORS_MAX_AGE_SEC = 600;
export const CORS_ALLOW_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS';
/**
 * The request headers a cross-origin page may send (besides the CORS-safelisted ones), and any
 * `Mesh-*` header; gRPC-Web clients send `X-Grpc-Web`, `X-User-Agent` and `Grpc-Timeout`.
 */
export const CORS_ALLOW_HEADERS = ['Accept', 'Accept-Language', 'Content-Language', 'Content-Type', 'Authorization', 'X-Requested-With', 'Traceparent', 'Tracestate', 'X-Grpc-Web', 'X-User-Agent', 'Grpc-Timeout'];
/** Response headers a cross-origin page may read besides the safelisted ones (a gRPC-Web call's status when it comes as headers). */
export const CORS_EXPOSE_HEADERS = 'Retry-After, RateLimit, RateLimit-Policy, Grpc-Status, Grpc-Message';

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
  apply(req: FrontRequest, res: FrontResponse): boolean {
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

/**
 * The CORS filter of a route file's rule (the Gateway API's HTTPCORSFilter, docs/routing.md
 * "CORS"), checked when the file is read (src/edge/routes/file.ts). Unlike `--cors`, every field
 * is the route's: its origins (with `*` wildcards in the host), methods, headers, exposed
 * headers, credentials and max age.
 */
export interface RouteCorsSpec {
  /** `*` alone: any origin. Else the origins, each an exact origin or a host pattern. */
  origins: CorsOriginPattern[] | '*';
  credentials: boolean;
  /** Methods as written, or `*`; empty: none listed (the header is left out). */
  methods: string[] | '*';
  /** Header names in lower case, or `*`. */
  headers: string[] | '*';
  expose: string[] | '*';
  /** Access-Control-Max-Age, in seconds. */
  maxAgeSec: number;
}

export interface CorsOriginPattern {
  scheme: 'http' | 'https';
  /** Lower case; `*` alone: any host; `*.example.com`: any name under example.com (any number of labels). */
  host: string;
  /** The port, the scheme's default when the origin names none. */
  port: number;
}

/** scheme://host[:port], the host a DNS name whose leftmost label may be `*` (or `*` alone). */
const ORIGIN_PATTERN = /^(http|https):\/\/(\*|(?:\*\.)?[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)(?::([0-9]{1,5}))?$/;
/** An Origin header: scheme://host[:port], a DNS name or an IPv4 address (an IPv6 one matches only `*`). */
const ORIGIN_HEADER = /^(http|https):\/\/([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)(?::([0-9]{1,5}))?$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** An allowOrigins entry as a pattern; undefined when it is not `scheme://host[:port]` (the host lower case). */
export function corsOriginPattern(text: string): CorsOriginPattern | undefined {
  const m = ORIGIN_PATTERN.exec(text);
  if (!m) return undefined;
  const scheme = m[1] as 'http' | 'https';
  const port = m[3] === undefined ? (scheme === 'http' ? 80 : 443) : Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { scheme, host: m[2]!, port };
}

/** True when the request's Origin is one the spec allows. */
export function corsOriginAllowed(spec: RouteCorsSpec, origin: string): boolean {
  if (spec.origins === '*') return true;
  const m = ORIGIN_HEADER.exec(origin);
  if (!m) return false;
  const scheme = m[1]!;
  const host = m[2]!;
  const port = m[3] === undefined ? (scheme === 'http' ? 80 : 443) : Number(m[3]);
  for (const p of spec.origins) {
    if (p.scheme !== scheme || p.port !== port) continue;
    if (p.host === '*' || p.host === host) return true;
    if (p.host.startsWith('*.') && host.length > p.host.length - 1 && host.endsWith(p.host.slice(1))) return true;
  }
  return false;
}

/** What a rule's CORS filter makes of a request: a preflight it answers, else the headers added to the answer. */
export interface RouteCorsAnswer {
  preflight: boolean;
  /** Lower-case names; empty for a request without an allowed Origin (`vary` aside). */
  headers: Array<[string, string]>;
}

const NOT_CORS: RouteCorsAnswer = { preflight: false, headers: [] };

/**
 * A rule's CORS for one request. A preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) is answered by mesh: the allow headers when the Origin is
 * allowed, none when it is not. Any other request with an allowed Origin gets
 * Access-Control-Allow-Origin (the Origin itself, `*` only for `*` without credentials),
 * -Allow-Credentials and -Expose-Headers. `Vary: Origin` whenever the answer depends on the Origin.
 * Only an Origin that matched is reflected; a `*` of methods or headers is reflected from the
 * request only with credentials, and only when it is a list of tokens.
 */
export function routeCorsAnswer(spec: RouteCorsSpec, method: string | undefined, headers: FrontRequest['headers']): RouteCorsAnswer {
  const origin = headers.origin;
  if (origin === undefined) return NOT_CORS;
  const requestedMethod = headers['access-control-request-method'];
  const preflight = method === 'OPTIONS' && requestedMethod !== undefined;
  const anyOrigin = spec.origins === '*' && !spec.credentials;
  const out: Array<[string, string]> = anyOrigin ? [] : [['vary', 'Origin']];
  if (!corsOriginAllowed(spec, origin)) return { preflight, headers: out };
  out.push(['access-control-allow-origin', anyOrigin ? '*' : origin]);
  if (spec.credentials) out.push(['access-control-allow-credentials', 'true']);
  if (spec.expose === '*' || spec.expose.length > 0) out.push(['access-control-expose-headers', spec.expose === '*' ? '*' : spec.expose.join(', ')]);
  if (!preflight) return { preflight, headers: out };
  if (spec.methods === '*') {
    if (!spec.credentials) out.push(['access-control-allow-methods', '*']);
    else if (TOKEN.test(requestedMethod)) out.push(['access-control-allow-methods', requestedMethod]);
  } else if (spec.methods.length > 0) out.push(['access-control-allow-methods', spec.methods.join(', ')]);
  if (spec.headers === '*') {
    if (!spec.credentials) out.push(['access-control-allow-headers', '*']);
    else {
      const asked = (headers['access-control-request-headers'] ?? '').split(',').map((h) => h.trim()).filter((h) => h !== '');
      if (asked.length > 0 && asked.length <= 64 && asked.every((h) => TOKEN.test(h))) out.push(['access-control-allow-headers', asked.join(', ')]);
    }
  } else if (spec.headers.length > 0) out.push(['access-control-allow-headers', spec.headers.join(', ')]);
  out.push(['access-control-max-age', String(spec.maxAgeSec)]);
  return { preflight, headers: out };
}
