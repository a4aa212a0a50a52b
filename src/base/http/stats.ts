/**
 * The `http.<stat_prefix>.*` stat family: one HTTP front end's downstream stats (gateway, sidecar,
 * proxy listeners, the RPC server, admin), their names declared once. The front end's scope is
 * `store.scope(httpStatPrefix(statPrefix))`.
 */

/** `http.<stat_prefix>.` */
export const httpStatPrefix = (statPrefix: string): string => `http.${statPrefix}.`;

/** What every front end counts per request and connection. */
export const HTTP_DOWNSTREAM_STATS = {
  counters: {
    rqTotal: 'downstream_rq_total',
    cxTotal: 'downstream_cx_total',
    headerTimeouts: 'downstream_rq_header_timeout',
    requestTimeouts: 'downstream_rq_timeout',
    cxHttp1Total: 'downstream_cx_http1_total',
    cxHttp2Total: 'downstream_cx_http2_total',
  },
  gauges: { rqActive: 'downstream_rq_active', cxActive: 'downstream_cx_active', cxHttp1Active: 'downstream_cx_http1_active', cxHttp2Active: 'downstream_cx_http2_active' },
  histograms: { rqTime: 'downstream_rq_time' },
} as const;

/** `downstream_rq_<cls>xx` (cls 1..5) */
export const httpRqClassStat = (cls: number): string => `downstream_rq_${cls}xx`;

/** The connection lifecycle's (limits and drain). */
export const HTTP_LIFECYCLE_STATS = {
  counters: { overflow: 'downstream_cx_overflow', drainClose: 'downstream_cx_drain_close', destroyActive: 'downstream_cx_destroy_active_rq' },
} as const;

/**
 * `--rate_limit` and the auth rules' rate limits. As Envoy's rate limit filter: `over_limit` the
 * 429s, `error` the requests the shared store could not decide (the failure mode did: refused with
 * a 503 when closed, allowed and also in `ok` when open).
 */
export const HTTP_RATE_LIMIT_STATS = {
  counters: { ok: 'ratelimit.ok', overLimit: 'ratelimit.over_limit', error: 'ratelimit.error' },
} as const;

/** The edge auth step's decisions. */
export const HTTP_AUTH_STATS = {
  counters: { allowed: 'auth.allowed', denied: 'auth.denied', unauthenticated: 'auth.unauthenticated' },
} as const;
