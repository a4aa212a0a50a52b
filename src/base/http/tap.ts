/**
 * The tap hub of a process (admin `/tap`, `mesh tap`; docs/admin.md): every front end publishes one
 * event per finished request here, and each attached tap (a sink with its filter) takes those it
 * wants. One hub per process, held by the Runtime and lent to the front ends through the
 * EdgeContext; nothing here is module state.
 *
 * With no tap attached, `active` is false and a front end does nothing else: no record is begun,
 * no event object is built (the front server checks `active` once at a request's start and once
 * at its end). An event gets its headers (the most of its cost) only once a tap takes it: one
 * over a tap's rate, or out of its filter or sample, costs none (TapSink.admits). A request that began before the first tap attached is not seen unless the process
 * keeps an access log (its record then exists anyway).
 *
 * Events carry headers with secrets redacted (REDACTED_HEADERS, any `mesh-auth-*`, and the
 * names of --tap_redact_headers), compared as the edge compares names: case and `_`/`-` folded.
 * Bodies (request_body, response_body) only for a tap that asks (TapSink.bodies) on a process that
 * allows them (--tap_bodies_max_bytes above 0): while such a tap is attached, `bodies` is true and
 * each request that starts gets its body captures (src/base/http/tap-body.ts); otherwise nothing
 * tees a body.
 */
import type { FrontRequest, FrontResponse } from './front-types.js';
import { attachRequestInfo, countBytes, observeBodies, RequestInfo } from './access-log.js';
import { BodyCapture, REDACTED, renderBody, type BodyCaptures, type TapBody } from './tap-body.js';
import { targetOf } from './target.js';
import { peerIdentityOf } from '../mtls/workload-tls.js';
import { foldHeaderName } from './header-name.js';

/** Header names always redacted (folded form: lower case, `_` as `-`). */
export const REDACTED_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'set-cookie'] as const;
/** Any header whose folded name starts with this is redacted (the end user the edge asserts). */
export const REDACTED_PREFIX = 'mesh-auth-';
/** What a redacted header's value becomes (one marker for headers and bodies). */
export { REDACTED };

/** One finished request, as a tap sees it (the JSON of one NDJSON line). */
export interface TapEvent {
  /** ISO time the request started. */
  time: string;
  /** The front end (its stat prefix: gateway, sidecar, sidecar_inbound, a proxy listener's name). */
  front: string;
  method: string;
  authority: string | null;
  /** The path in its normal form (without the query). */
  path: string;
  /** The query as received, or null. */
  query: string | null;
  /** `https` when the request came over TLS, else `http`. */
  scheme: 'http' | 'https';
  /** What was sent: 0 when no answer started (the client went away, a reset). */
  status: number;
  request_headers: Record<string, string>;
  response_headers: Record<string, string>;
  bytes_in: number;
  bytes_out: number;
  /** Milliseconds from the request's start to the answer's end (or the connection's close). */
  duration_ms: number;
  /** Milliseconds from the start: `upstream` (the last upstream host chosen), `first_byte` (the answer's first body byte written). */
  phases: { upstream_ms: number | null; first_byte_ms: number | null };
  /** The route file's rule that served it. */
  route: string | null;
  /** A native gRPC call's status (0 OK ... 16); null for any other request. */
  grpc_status: number | null;
  /** The upstream cluster (service) and host of the last try. */
  cluster: string | null;
  host: string | null;
  /** Tries after the first. */
  retries: number;
  /** Envoy's response flags (UH, UF, UT, ... DC), `-` when none. */
  response_flags: string;
  /** The caller's SPIFFE ID (mutual TLS), or null. */
  identity: string | null;
  trace_id: string | null;
  /** Only for a tap that asked for bodies: the captured bodies, null when not captured (the request began before such a tap attached). */
  request_body?: TapBody | null;
  response_body?: TapBody | null;
}

/** An attached tap: asked of every event (it filters and paces on its own), given those it takes. */
export interface TapSink {
  /** The tap asked for bodies (the hub refuses it unless they are allowed). */
  readonly bodies?: boolean;
  /**
   * Whether the tap may take a request of this method and path (what is known at its start); a
   * request no attached tap may take gets no record. Unset: any request.
   */
  mayTake?(method: string, path: string): boolean;
  /**
   * Whether the tap takes a finished request's event, asked before its headers are filled in (a
   * filter, a sample and a rate cap need none: an event no tap takes costs no headers); one it
   * refuses is its own to count. Unset: it takes every event.
   */
  admits?(event: TapEvent): boolean;
  /** An event the tap took, headers in. */
  deliver(event: TapEvent): void;
}

/** The headers of an event no tap has taken yet (filled in once one does). */
const NOT_YET: Record<string, string> = Object.freeze({}) as Record<string, string>;

const ALWAYS_REDACTED: ReadonlySet<string> = new Set(REDACTED_HEADERS);

/** Folds a header name of any case as the edge does (foldHeaderName). */
function foldName(name: string): string {
  return foldHeaderName(name.toLowerCase());
}

/** Whether a header name is redacted given the configured extra names (folded). */
export function isRedacted(name: string, extra: ReadonlySet<string>): boolean {
  const n = foldName(name);
  return ALWAYS_REDACTED.has(n) || n.startsWith(REDACTED_PREFIX) || extra.has(n);
}

/** Headers as a flat object of strings (repeated ones joined by `, `), those `redacted` names (isRedacted, or a hub's memory of it) replaced. */
export function redactHeaders(headers: Record<string, unknown>, redacted: (name: string) => boolean): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    out[name] = redacted(name) ? REDACTED : typeof value === 'string' ? value : Array.isArray(value) ? value.map(String).join(', ') : String(value);
  }
  return out;
}

/** Header names whose redaction a hub remembers (the names a process sees are few; made-up ones past these are folded each time). */
export const REDACTION_CACHE_NAMES = 512;

/**
 * The headers of an answer as sent: parsed from the head node wrote (which also holds those given
 * to writeHead, which getHeaders does not see); getHeaders when no head was written.
 */
export function responseHeadersOf(res: FrontResponse): Record<string, unknown> {
  const head = (res as unknown as { _header?: string | null })._header;
  if (typeof head !== 'string') return res.getHeaders();
  const out: Record<string, string | string[]> = {};
  // Header lines after the status line, each `name: value\r\n` (node wrote them: no folding).
  let at = head.indexOf('\r\n') + 2;
  while (at > 1 && at < head.length) {
    const eol = head.indexOf('\r\n', at);
    const end = eol === -1 ? head.length : eol;
    const colon = head.indexOf(':', at);
    if (colon > at && colon < end) {
      const name = head.slice(at, colon).trim().toLowerCase();
      const value = head.slice(colon + 1, end).trim();
      const had = out[name];
      out[name] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [had, value];
    }
    at = end + 2;
  }
  return out;
}

export interface TapHubOptions {
  /** --tap_redact_headers: more header names to redact. */
  redact?: readonly string[];
  /** Most taps attached at once (admin /tap answers 503 over it). */
  maxTaps?: number;
  /** --tap_bodies_max_bytes: the most bytes of each body a tap that asks gets; 0 (default): no bodies. */
  bodiesMaxBytes?: number;
  /** --tap_redact_json_fields: JSON field names whose values a tap shows as [redacted], at any depth. */
  redactJsonFields?: readonly string[];
}

/** Default of TapHubOptions.maxTaps. */
export const MAX_TAPS = 8;

export class TapHub {
  /** True while a tap is attached: the one check a front end makes per request without one. */
  active = false;
  /** True while a tap that asked for bodies is attached: a request that starts then gets its bodies captured. */
  bodies = false;
  readonly maxTaps: number;
  /** The cap of each captured body; 0: bodies are not allowed. */
  readonly bodiesMaxBytes: number;
  private readonly sinks = new Set<TapSink>();
  private bodySinks = 0;
  private readonly redact: ReadonlySet<string>;
  /** isRedacted's answer per header name as received, for at most REDACTION_CACHE_NAMES names. */
  private readonly redactedNames = new Map<string, boolean>();
  private readonly redacted = (name: string): boolean => {
    let r = this.redactedNames.get(name);
    if (r === undefined) {
      r = isRedacted(name, this.redact);
      if (this.redactedNames.size < REDACTION_CACHE_NAMES) this.redactedNames.set(name, r);
    }
    return r;
  };
  private readonly jsonFields: ReadonlySet<string>;

  constructor(options: TapHubOptions = {}) {
    this.redact = new Set((options.redact ?? []).map(foldName));
    this.maxTaps = options.maxTaps ?? MAX_TAPS;
    this.bodiesMaxBytes = options.bodiesMaxBytes ?? 0;
    this.jsonFields = new Set((options.redactJsonFields ?? []).map((f) => f.toLowerCase()));
  }

  /** Whether a tap may ask for bodies. */
  get bodiesAllowed(): boolean {
    return this.bodiesMaxBytes > 0;
  }

  get size(): number {
    return this.sinks.size;
  }

  /** Attaches a tap; undefined when maxTaps are attached already. Returns its removal. */
  attach(sink: TapSink): (() => void) | undefined {
    if (this.sinks.size >= this.maxTaps) return undefined;
    if (sink.bodies && !this.bodiesAllowed) throw new Error('tap bodies are not allowed on this process (--tap_bodies_max_bytes is 0)');
    this.sinks.add(sink);
    this.active = true;
    if (sink.bodies) this.bodies = ++this.bodySinks > 0;
    return () => {
      if (!this.sinks.delete(sink)) return;
      this.active = this.sinks.size > 0;
      if (sink.bodies) this.bodies = --this.bodySinks > 0;
    };
  }

  /**
   * Starts capturing a request's bodies (called at its start when `bodies` said true): a copy of
   * the first bodiesMaxBytes of each, the rest counted. Nothing the client or the upstream gets changes.
   */
  captureBodies(req: FrontRequest, res: FrontResponse): BodyCaptures {
    const captures: BodyCaptures = { request: new BodyCapture(this.bodiesMaxBytes), response: new BodyCapture(this.bodiesMaxBytes) };
    const head = req.method === 'HEAD';
    observeBodies(req, res, {
      received: (chunk) => captures.request.add(chunk),
      sent: (chunk, encoding) => {
        if (!head) captures.response.add(chunk, encoding);
      },
    });
    return captures;
  }

  /** Whether an attached tap may take a request of this method and path (TapSink.mayTake). */
  mayTake(method: string, path: string): boolean {
    for (const sink of this.sinks) if (!sink.mayTake || sink.mayTake(method, path)) return true;
    return false;
  }

  /**
   * A request's record, when a tap that may take it is attached and the access log made none
   * (bytes counted); `path`: the request's path in its normal form, as events show it.
   */
  begin(req: FrontRequest, res: FrontResponse, traceId: string | undefined, path: string): RequestInfo | undefined {
    if (!this.active || !this.mayTake(req.method ?? 'GET', path)) return undefined;
    const info = new RequestInfo(Date.now(), req.url, traceId);
    attachRequestInfo(req, info);
    countBytes(req, res, info);
    return info;
  }

  /** A finished request (called from the response's 'close' once `active` said true). */
  publish(front: string, req: FrontRequest, res: FrontResponse, info: RequestInfo, durationMs: number, bodies?: BodyCaptures): void {
    if (this.sinks.size === 0) return;
    // Cut off before the answer was complete, and not for an upstream reason: the client went away (as the access log says).
    if (!res.writableFinished && info.flags === 0) info.addFlag('DC');
    const target = targetOf(req);
    const event: TapEvent = {
      time: new Date(info.startMs).toISOString(),
      front,
      method: req.method ?? 'GET',
      authority: req.headers.host ?? null,
      path: target.path,
      query: target.query ?? null,
      scheme: (req.socket as { encrypted?: boolean }).encrypted === true ? 'https' : 'http',
      status: res.headersSent ? res.statusCode : 0,
      request_headers: NOT_YET,
      response_headers: NOT_YET,
      bytes_in: info.bytesReceived,
      bytes_out: info.bytesSent,
      duration_ms: round(durationMs),
      phases: { upstream_ms: since(info.upstreamAt, info.startPerf), first_byte_ms: since(info.firstByteAt, info.startPerf) },
      route: info.routeName ?? null,
      grpc_status: info.grpcStatus ?? null,
      cluster: info.upstreamCluster ?? null,
      host: info.upstreamHost ?? null,
      retries: Math.max(0, info.tries - 1),
      response_flags: info.flagText(),
      identity: peerIdentityOf(req.socket) ?? null,
      trace_id: info.traceId ?? null,
    };
    let takers: TapSink[] | undefined;
    for (const sink of this.sinks) if (!sink.admits || sink.admits(event)) (takers ??= []).push(sink);
    if (!takers) return;
    event.request_headers = redactHeaders(req.headers, this.redacted);
    event.response_headers = res.headersSent ? redactHeaders(responseHeadersOf(res), this.redacted) : {};
    // The bodies are rendered once, and only for a tap that asked for them.
    let withBodies: TapEvent | undefined;
    for (const sink of takers) {
      if (!sink.bodies) {
        sink.deliver(event);
        continue;
      }
      withBodies ??= {
        ...event,
        request_body: bodies ? renderBody(bodies.request, req.headers, this.jsonFields) : null,
        response_body: bodies ? (res.headersSent ? renderBody(bodies.response, responseHeadersOf(res), this.jsonFields) : renderBody(bodies.response, {}, this.jsonFields)) : null,
      };
      sink.deliver(withBodies);
    }
  }

  /** Ends every tap (shutdown): each sink's removal is its own business. */
  sinksNow(): TapSink[] {
    return [...this.sinks];
  }
}

/** Milliseconds from `start` to `at` (performance.now()), to 0.1 ms; null when `at` is not known. */
function since(at: number | undefined, start: number): number | null {
  return at === undefined ? null : round(at - start);
}

/** Milliseconds to 0.1 ms. */
function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
