/**
 * The proxy handler: a reverse proxy to a node of the service chosen by the cluster manager, with
 * the full original path and query, streaming both ways, X-Forwarded-For/-Proto/-Host set, and
 * WebSocket (any Upgrade but h2c) requests tunnelled once the node accepted them with a 101. Talks
 * HTTP to the node: plain, or over mutual TLS when the node serves it (--mtls; requests through the
 * host's pool, upgrades through its connector).
 *
 * Request bodies are bounded by --max_body_size: a Content-Length over it gets 413 before any host
 * is contacted; a chunked body is counted as it streams, and the byte that crosses the limit is
 * never sent: the upstream request is aborted (the host sees an incomplete request, never the
 * whole body) and the client gets 413, or, when the host's answer had already started, a reset
 * connection (a status can no longer be sent). After a 413 the rest of the upload is read and
 * dropped, up to another --max_body_size, then the connection is closed.
 */
import { bodyOfUnknownLength, onceDrain, writeChunk, writeHeadFlat, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import type { Dispatcher } from 'undici';
import type { IncomingMessage } from 'node:http';
import { request as httpRequest, STATUS_CODES } from '../../base/http/node-http.js';
import type { Socket } from 'node:net';
import { Transform, type Duplex, type Readable, type TransformCallback } from 'node:stream';
import { asFrontEndError, badGateway, badRequest, bodyTooLarge, errorWithStatus, MeshError, proxyFailed, proxyRetriesSpent, proxyTimeout, routedError } from '../../base/errors.js';
import { requestInfo } from '../../base/http/access-log.js';
import { endRawLingering, refuseSocket, sendError } from '../../base/http/respond.js';
import { classifyError } from '../../core/transport/rpc.js';
import { connectionNamed, isHopByHop, rawNameIs, requestConnectionNamed } from '../../core/transport/headers.js';
import { lingerOnRest, readBody } from '../../base/http/body.js';
import type { UpstreamLease } from '../../core/upstream/types.js';
import type { EdgeHandlerContext } from './front-end.js';
import type { RoutePolicy } from '../routes/effects.js';
import type { RuleEffects } from '../routes/effects.js';
import type { SessionCall } from '../routes/session.js';
import { formatTraceparent, parseTraceparent, TRACEPARENT, TRACESTATE, type TraceContext } from '../../base/util/trace-context.js';
import { failSpan, SpanKind, traceOf } from '../../base/tracing/tracer.js';
import type { CallContext } from '../../base/util/call-context.js';
import { compose } from '../../core/client/interceptors/compose.js';
import { retry } from '../../core/client/interceptors/retry.js';
import { isRetryOverflow } from '../../core/upstream/retry-budget.js';
import { leaseWithin } from '../../core/client/budget.js';
import { splitTarget } from '../../base/http/target.js';

/**
 * The request headers sent upstream, as undici's flat [name, value, ...] list: the end-to-end
 * ones (hop-by-hop and `Connection`-named left out, but never the edge's Mesh-Auth-*), the original Host, and X-Forwarded-For,
 * -Proto and -Host (a front proxy's -Proto and -Host are kept; -For is appended to).
 */
function forwardedHeaders(req: FrontRequest, secure: boolean, withLength: boolean, trace: TraceContext | undefined): string[] {
  const headers = req.headers;
  const out: string[] = [];
  const named = requestConnectionNamed(headers.connection);
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || isHopByHop(name) || named?.has(name)) continue;
    if (name === 'x-forwarded-for' || name === 'x-forwarded-proto' || name === 'x-forwarded-host') continue;
    // The trace headers are this hop's (below): the caller's span is the parent of this hop, not of the backend.
    if (trace && (name === TRACEPARENT || name === TRACESTATE)) continue;
    out.push(name, typeof value === 'string' ? value : value.join(', '));
  }
  const peer = req.socket.remoteAddress ?? '';
  const prior = headers['x-forwarded-for'];
  out.push('x-forwarded-for', prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${peer}` : peer);
  out.push('x-forwarded-proto', (headers['x-forwarded-proto'] as string | undefined) ?? (secure ? 'https' : 'http'));
  out.push('x-forwarded-host', (headers['x-forwarded-host'] as string | undefined) ?? headers.host ?? '');
  if (headers.host) out.push('host', headers.host);
  if (trace) {
    out.push(TRACEPARENT, formatTraceparent(trace));
    if (trace.state !== undefined) out.push(TRACESTATE, trace.state);
  }
  // A streamed body keeps the client's framing: undici sends chunked unless it knows the length.
  if (withLength && headers['content-length'] !== undefined) out.push('content-length', headers['content-length']);
  return out;
}

/** This hop's trace: the request's (given, or the ambient context's), or for an upgrade, one of its own. */
export function hopTrace(fe: EdgeHandlerContext, req: FrontRequest, ctx: CallContext | undefined): TraceContext {
  if (ctx?.trace) return ctx.trace;
  const context = fe.edge.context;
  return context.current?.trace ?? context.hop(parseTraceparent(req.headers[TRACEPARENT], req.headers[TRACESTATE]));
}

/** Bodies up to this size (by Content-Length) are read first and sent in one write with the headers. */
const BUFFERED_BODY_MAX = 64 * 1024;

type RequestBody = { kind: 'none' } | { kind: 'buffered'; bytes: Buffer } | { kind: 'stream'; stream: Readable };

/**
 * Passes a chunked body through until it exceeds limit bytes, then fails (the chunk that crosses
 * the limit is not passed on) and sets `exceeded`.
 */
class BodyLimit extends Transform {
  private size = 0;
  exceeded = false;
  constructor(private readonly limit: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.exceeded = true;
      done(new Error(`request body larger than ${this.limit} bytes`));
      return;
    }
    done(null, chunk);
  }
}

function bodyKind(req: FrontRequest): 'none' | 'small' | 'stream' {
  const length = req.headers['content-length'];
  if (bodyOfUnknownLength(req)) return 'stream';
  if (length === undefined || length === '0') return 'none';
  const n = Number(length);
  return Number.isInteger(n) && n >= 0 && n <= BUFFERED_BODY_MAX ? 'small' : 'stream';
}

type ForwardResult =
  | { kind: 'response'; status: number }
  /** retryStatus: the node answered this status, which is retried: its answer was dropped, never sent to the client. */
  | { kind: 'error'; err: unknown; timedOut: boolean; responded: boolean; clientGone: boolean; retryStatus?: number };

/** What a try does with the node's answer head besides passing it on. */
interface AnswerPolicy {
  /** A status this try drops for a retry (a route's `retry.codes`, on a try that is not the last). */
  retryStatus?: (status: number) => boolean;
  /** The route's ResponseHeaderModifier. */
  responseHeaders?: (flat: string[]) => string[];
}

const TIMEOUT_MESSAGE = 'timeout waiting for the upstream answer';

/** Statuses whose answers never have a body, whatever Content-Length says (RFC 9110 6.4.1). */
function bodiless(status: number, head: boolean): boolean {
  return head || status === 204 || status === 304;
}

/**
 * One attempt in flight: the request goes to the host and the answer straight into `res`, through
 * undici's raw dispatch callbacks (the form its HTTP/1.1 client speaks natively: the response's
 * raw header list is filtered and handed to writeHead as it is, never parsed into an object).
 *
 * Only the wait for the answer's head is bounded by timeoutMs, from the dispatch or, for a streamed
 * body, from the end of the upload; a body may take as long as it needs. The attempt settles at
 * once on a timeout or a client that went away while it still waits for a connection (the request
 * is dropped when it gets one), and a client that goes away later aborts it.
 */
class ProxyAttempt implements Dispatcher.DispatchHandler {
  private abort?: (err?: Error) => void;
  private resume?: () => void;
  private timer?: NodeJS.Timeout;
  private timedOut = false;
  private clientGone = false;
  private responded = false;
  /** The answer was complete at its head (HEAD, 204, 304): anything after it is ignored. */
  private ended = false;
  private done = false;
  private status = 0;
  private retryStatus: number | undefined;
  private readonly onClientGone = () => {
    if (this.res.writableFinished) return;
    this.clientGone = true;
    const err = new Error('client went away');
    if (this.abort) this.abort(err);
    else this.onError(err);
  };
  /** Runs while the answer waits for a client that reads nothing (backpressure). */
  private idleTimer?: NodeJS.Timeout;
  private readonly onDrain = () => {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.resume?.();
    this.armBackendIdle();
  };
  /**
   * Runs while the answer's body is read from the host: a host that sends nothing for idleMs
   * (a body shorter than its Content-Length, held open) is cut. Stopped while the host is paused
   * for a slow client (idleTimer's case) and once the answer is complete.
   */
  private backendTimer?: NodeJS.Timeout;

  constructor(
    private readonly res: FrontResponse,
    private readonly head: boolean,
    private readonly timeoutMs: number,
    private readonly idleMs: number,
    streamedBody: boolean,
    private readonly settle: (result: ForwardResult) => void,
    private readonly answer: AnswerPolicy | undefined,
  ) {
    if (!streamedBody) this.startTimer();
    res.on('close', this.onClientGone);
  }

  private startTimer(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.onTimeout(), this.timeoutMs);
  }

  private onTimeout(): void {
    if (this.responded) return;
    this.timedOut = true;
    const err = new Error(TIMEOUT_MESSAGE);
    if (this.abort) this.abort(err);
    else this.onError(err); // still waiting for a connection
  }

  private armBackendIdle(): void {
    if (this.idleMs <= 0 || this.ended || this.done) return;
    // One timer per answer, pushed back on each chunk (refresh: no new timer per chunk).
    if (this.backendTimer) this.backendTimer.refresh();
    else
      this.backendTimer = setTimeout(() => {
        this.timedOut = true;
        this.abort?.(new Error(`the upstream sent nothing of its answer for ${this.idleMs} ms`));
      }, this.idleMs);
  }

  private finish(result: ForwardResult): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    clearTimeout(this.idleTimer);
    clearTimeout(this.backendTimer);
    this.res.off('close', this.onClientGone);
    this.res.off('drain', this.onDrain);
    this.settle(result);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abort = abort;
    if (this.timedOut) abort(new Error(TIMEOUT_MESSAGE));
    else if (this.clientGone || this.res.destroyed) abort(new Error('client went away'));
  }

  /** A streamed body is sent: the wait for the answer starts now (a slow upload is not a slow host). */
  onRequestSent(): void {
    if (!this.timer && !this.done) this.startTimer();
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // an interim answer (100 Continue): the final one follows
    if (this.answer?.retryStatus?.(statusCode)) {
      // Dropped for a retry: nothing of it reaches the client.
      this.retryStatus = statusCode;
      clearTimeout(this.timer);
      this.abort?.(new Error(`answered ${statusCode}`));
      return false;
    }
    this.responded = true;
    this.status = statusCode;
    this.resume = resume;
    clearTimeout(this.timer);
    // Hop-by-hop headers, and those the answer's own Connection header names, stay here.
    let named: Set<string> | undefined;
    for (let i = 0; i < rawHeaders.length; i += 2) {
      if (rawNameIs(rawHeaders[i]!, 'connection')) {
        named = connectionNamed(rawHeaders[i + 1]!.toString('latin1')) ?? named;
      }
    }
    const out: string[] = [];
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString('latin1');
      const lower = name.toLowerCase();
      if ((lower !== 'content-length' && isHopByHop(lower)) || named?.has(lower)) continue;
      out.push(name, rawHeaders[i + 1]!.toString('latin1'));
    }
    // On HTTP/2 the node's connection-specific headers are left out (writeHeadFlat).
    writeHeadFlat(this.res, statusCode, this.answer?.responseHeaders ? this.answer.responseHeaders(out) : out);
    if (bodiless(statusCode, this.head)) {
      // Complete now: undici may still object to a Content-Length that announces no body.
      this.ended = true;
      this.res.end();
    }
    this.armBackendIdle();
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.ended) return true;
    if (this.res.destroyed) {
      this.clientGone = true;
      this.abort?.(new Error('client went away'));
      return false;
    }
    if (writeChunk(this.res, chunk)) {
      this.armBackendIdle();
      return true;
    }
    // Paused for the client: the host is not read meanwhile, so its silence is not its fault.
    clearTimeout(this.backendTimer);
    this.backendTimer = undefined;
    onceDrain(this.res, this.onDrain);
    // Only while paused: a client that reads nothing must not hold the host's connection forever.
    if (this.idleMs > 0 && !this.idleTimer) {
      this.idleTimer = setTimeout(() => {
        this.clientGone = true;
        this.abort?.(new Error(`client read nothing for ${this.idleMs} ms`));
      }, this.idleMs);
    }
    return false;
  }

  onComplete(): void {
    if (!this.ended) this.res.end();
    this.finish({ kind: 'response', status: this.status });
  }

  onError(err: Error): void {
    if (this.ended) return this.finish({ kind: 'response', status: this.status });
    this.finish({ kind: 'error', err, timedOut: this.timedOut, responded: this.responded, clientGone: this.clientGone, retryStatus: this.retryStatus });
  }
}

function forward(dispatcher: Dispatcher, req: FrontRequest, res: FrontResponse, path: string, headers: string[], body: RequestBody, timeoutMs: number, idleMs: number, answer?: AnswerPolicy): Promise<ForwardResult> {
  return new Promise<ForwardResult>((resolve) => {
    const attempt = new ProxyAttempt(res, req.method === 'HEAD', timeoutMs, idleMs, body.kind === 'stream', resolve, answer);
    try {
      dispatcher.dispatch(
        {
          path,
          method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
          headers,
          body: body.kind === 'buffered' ? body.bytes : body.kind === 'stream' ? body.stream : undefined,
        },
        attempt,
      );
    } catch (err) {
      attempt.onError(err as Error);
    }
  });
}

/**
 * Proxies a request to a node of the service. The backend gets the hop's traceparent; with
 * --tracing=otlp a client span (named after the method, as OpenTelemetry's HTTP client spans are)
 * covers the forwarding and is the backend's parent.
 */
export async function handleProxy(fe: EdgeHandlerContext, service: string, secure: boolean, req: FrontRequest, res: FrontResponse, ctx?: CallContext, policy?: RoutePolicy): Promise<void> {
  const tracer = fe.edge.tracer;
  if (!tracer) return proxyRequest(fe, service, secure, req, res, hopTrace(fe, req, ctx), policy);
  const method = req.method ?? 'GET';
  const span = tracer.startSpan(method, SpanKind.CLIENT, hopTrace(fe, req, ctx), { 'http.request.method': method, 'url.path': splitTarget(req.url ?? '/').path, 'server.address': service });
  try {
    await proxyRequest(fe, service, secure, req, res, traceOf(span), policy);
  } catch (err) {
    failSpan(span, (err as Error)?.message ?? String(err));
    throw err;
  } finally {
    const status = res.headersSent ? res.statusCode : 0;
    if (status > 0) span.setAttribute('http.response.status_code', status);
    if (status === 0 || status >= 500) failSpan(span, status === 0 ? 'no response' : `status ${status}`, String(status || 'no_response'));
    span.end();
  }
}

async function proxyRequest(fe: EdgeHandlerContext, service: string, secure: boolean, req: FrontRequest, res: FrontResponse, trace: TraceContext, policy?: RoutePolicy): Promise<void> {
  const limit = fe.maxBodyBytes;
  const declared = Number(req.headers['content-length']);
  if (req.headers['content-length'] !== undefined && declared > limit) {
    // Before any host is contacted (the front server drops the rest of the body: lingerOnRest).
    throw bodyTooLarge(fe.errorId, limit);
  }
  const kind = bodyKind(req);
  let body: RequestBody;
  let counter: BodyLimit | undefined;
  if (kind === 'small') body = { kind: 'buffered', bytes: await readBody(req, BUFFERED_BODY_MAX, fe.errorId) };
  else if (kind === 'none') body = { kind: 'none' };
  else if (!bodyOfUnknownLength(req)) body = { kind: 'stream', stream: req }; // Content-Length within the limit: the parser (node:http, nghttp2) enforces it
  else {
    const limited = (counter = new BodyLimit(limit));
    req.pipe(limited);
    // pipe() does not pass on a client that goes away mid-upload: end the upstream body with an error too.
    req.once('error', (err) => limited.destroy(err));
    req.once('close', () => {
      if (!req.complete) limited.destroy(new Error('client went away'));
    });
    body = { kind: 'stream', stream: limited };
  }
  const route = policy?.effects;
  const forwarded = forwardedHeaders(req, secure, body.kind !== 'buffered', trace);
  const headers = route ? route.requestHeaders(forwarded) : forwarded;
  const path = policy?.path ?? req.url ?? '/';
  const retry = route?.rule.retry;
  // A streamed body can be sent once only; otherwise a refused connection (and with a route's retry, its codes, a closed connection and a try timeout) is retried on another host.
  const retries = body.kind === 'stream' ? 0 : (retry?.attempts ?? fe.edge.settings.clientRetries);
  // A route's timeouts: each try waits for the answer's head at most backendRequest, else request, else --client_request_timeout;
  // with `request`, every try (and the pauses between them) ends by its deadline.
  const timeoutMs = policy?.tryTimeoutMs ?? policy?.requestTimeoutMs ?? fe.edge.settings.clientRequestTimeoutMs;
  const requestTimeoutMs = policy?.requestTimeoutMs;
  const deadline = requestTimeoutMs ? Date.now() + requestTimeoutMs : undefined;
  const mirrors = route && route.rule.filters.mirrors.length > 0 ? route.drawMirrors() : undefined;
  if (route && mirrors && mirrors.length > 0) {
    if (body.kind === 'stream' || !fe.mirrors) for (const _ of mirrors) route.stats.mirrorDropped.inc();
    else fe.mirrors.send(mirrors, { method: req.method ?? 'GET', path, headers, body: body.kind === 'buffered' ? body.bytes : undefined }, route.stats);
  }
  const call: ProxyCall = {
    fe, service, version: policy?.version, timeoutMs, deadline, requestTimeoutMs, req, res, path, headers, body, counter, limit, retries, tried: undefined, info: requestInfo(req),
    route, codes: retry?.codes ?? [], backoffMs: retry?.backoffMs ?? 0, retryFailures: retry !== undefined, responseHeaders: route?.responseHeaders(),
    session: policy?.session,
  };
  const result = await sendProxied(call, 0);
  if (result.kind === 'failed') sendError(res, result.error);
}

/** One proxied request, across its tries. */
interface ProxyCall {
  readonly fe: EdgeHandlerContext;
  readonly service: string;
  /** Only the nodes of this registry version (a route's backend). */
  readonly version: string | undefined;
  /** The wait for each try's answer head (ms). */
  readonly timeoutMs: number;
  /** A route's `timeouts.request`: epoch ms by which every try ends (no try starts after it); undefined: none. */
  readonly deadline: number | undefined;
  readonly requestTimeoutMs: number | undefined;
  readonly req: FrontRequest;
  readonly res: FrontResponse;
  /** The path and query sent (a route's URLRewrite applied). */
  readonly path: string;
  readonly headers: string[];
  readonly body: RequestBody;
  /** Counts a chunked body against `limit` (--max_body_size). */
  readonly counter: BodyLimit | undefined;
  readonly limit: number;
  readonly retries: number;
  /** Hosts already tried (only when a retry may follow). */
  tried: Set<string> | undefined;
  readonly info: ReturnType<typeof requestInfo>;
  /** The route's rule (its stats and retry budget), when a route file's route sent the request. */
  readonly route: RuleEffects | undefined;
  /** Answer statuses retried (a route's retry.codes). */
  readonly codes: readonly number[];
  /** Pause before each retry (a route's retry.backoff). */
  readonly backoffMs: number;
  /**
   * A route's `retry`: a try whose connection the host closed or reset before any answer, and a
   * try that ran out of its own timeout (`timeouts.backendRequest`), are retried too.
   */
  readonly retryFailures: boolean;
  readonly responseHeaders: ((flat: string[]) => string[]) | undefined;
  /** A route's sessionPersistence: the node the request's token names, and the answer's token. */
  readonly session: SessionCall | undefined;
}

/**
 * A try answered the client (or there is no one left to answer), failed before any answer
 * started, or was a retry that max_retries or the retry budget refused (not made).
 */
type ProxyTry = { kind: 'done' } | { kind: 'failed'; error: MeshError; retriable: boolean } | { kind: 'overflow' };

const DONE: ProxyTry = { kind: 'done' };
const OVERFLOW: ProxyTry = { kind: 'overflow' };

/**
 * The proxy's tries under the client's retry interceptor, with the proxy's policy: a connect
 * failure is retried on another host (retries is 0 for a streamed body), and so is an answer
 * whose status a route's retry.codes name (after the route's backoff) and, with a route's
 * `retry`, a try the host closed or reset before answering or that ran out of its own timeout;
 * no try outlasts the route's `timeouts.request`. The last failure is the answer, also when the
 * retry budget refuses the retry (an answer dropped for a retry is then error JSON with its status).
 */
const sendProxied = compose<ProxyCall, number, ProxyTry>(proxyTry, [
  retry({
    retries: (call) => call.retries,
    attempt: (_call, n) => n,
    decide: (r) => (r.kind === 'overflow' ? 'stop' : r.kind === 'failed' && r.retriable ? 'retry' : 'done'),
    exhausted: (call) => ({ kind: 'failed', error: badGateway(call.fe.errorId, `proxy to ${call.service} failed`), retriable: false }),
    backoff: (_n, call) => call.backoffMs,
    deadline: (call) => call.deadline ?? Infinity,
  }),
]);

/** One try: a host of the service, the request forwarded to it, and its answer streamed to the client. */
async function proxyTry(call: ProxyCall, attempt: number): Promise<ProxyTry> {
  const { fe, service, req, res, counter, limit, info } = call;
  // A try ends by the route's request deadline, whatever its own timeout.
  const left = call.deadline === undefined ? Infinity : Math.max(1, call.deadline - Date.now());
  const byDeadline = left < call.timeoutMs;
  const timeoutMs = byDeadline ? left : call.timeoutMs;
  /** What a timeout of this try names: the route's whole request when the deadline cut it. */
  const timeoutShown = byDeadline ? call.requestTimeoutMs! : timeoutMs;
  let lease: UpstreamLease | undefined;
  try {
    const clusters = fe.edge.clusters;
    const options = { exclude: call.tried, retry: attempt > 0, version: call.version, retryBudget: call.route?.budget, prefer: call.session?.prefer };
    // The wait for a host (a service's first registry lookup) is bounded by the try's timeout too.
    lease = clusters.acquireNow(service, options) ?? (await leaseWithin(clusters.acquire(service, options), Date.now() + timeoutMs));
  } catch (err) {
    if (isRetryOverflow(err)) {
      call.route?.stats.retryOverflow.inc();
      return OVERFLOW;
    }
    req.resume();
    // A route file's backend the registry does not know is the route's to answer: 500.
    sendError(res, call.route ? routedError(err, fe.errorId) : asFrontEndError(err, fe.errorId));
    return DONE;
  }
  if (!lease) {
    req.resume();
    sendError(res, proxyTimeout(fe.errorId, service, timeoutShown));
    return DONE;
  }
  const started = Date.now();
  if (attempt > 0) call.route?.stats.retry.inc();
  if (info) {
    info.upstreamCluster = service;
    info.upstreamHost = lease.target.key;
  }
  if (res.destroyed) {
    // The client left while a host was being found (a service's first use reads the registry).
    lease.release({ kind: 'cancelled' }, 0);
    return DONE;
  }
  if (call.retries > 0) (call.tried ??= new Set()).add(lease.target.key);
  const codes = call.codes;
  const responseHeaders = withSessionHeader(call.responseHeaders, call.session?.answerHeader(lease.target));
  const answer: AnswerPolicy | undefined =
    responseHeaders || (codes.length > 0 && attempt < call.retries) ? { responseHeaders, retryStatus: attempt < call.retries && codes.length > 0 ? (status) => codes.includes(status) : undefined } : undefined;
  const result = await forward(lease.target.dispatcher, req, res, call.path, call.headers, call.body, timeoutMs, fe.edge.settings.streamIdleTimeoutMs, answer);
  if (result.kind === 'response') {
    lease.release(result, Date.now() - started);
    return DONE;
  }
  if (counter?.exceeded) {
    // Not the host's fault. The host got an aborted request, never the whole body.
    lease.release({ kind: 'cancelled' }, Date.now() - started);
    req.unpipe(counter);
    if (result.kind === 'error' && !result.responded && !res.headersSent && !res.destroyed) {
      lingerOnRest(req, res, limit);
      sendError(res, bodyTooLarge(fe.errorId, limit));
    } else {
      req.resume();
      res.destroy();
    }
    return DONE;
  }
  if (result.clientGone) {
    // Not the host's fault: no error charged, nothing to answer.
    lease.release({ kind: 'cancelled' }, Date.now() - started);
    res.destroy();
    return DONE;
  }
  if (result.responded) {
    // The answer had started: nothing to do but cut the connection.
    lease.release({ kind: 'reset' }, Date.now() - started);
    info?.addFlag(result.timedOut ? 'UT' : 'UC');
    res.destroy();
    return DONE;
  }
  if (result.retryStatus !== undefined && !res.destroyed) {
    lease.release({ kind: 'response', status: result.retryStatus }, Date.now() - started);
    return { kind: 'failed', error: errorWithStatus(fe.errorId, result.retryStatus, `proxy to ${service} on ${lease.target.key}: answered ${result.retryStatus}`), retriable: true };
  }
  const failure = classifyError(result.err, result.timedOut);
  lease.release(failure.outcome, Date.now() - started);
  if (res.destroyed || res.writableEnded) return DONE; // the client went away
  const outcome = failure.outcome.kind;
  const to = `${service} on ${lease.target.key}`;
  const flag = outcome === 'connect_failure' ? 'UF' : 'UC';
  // A route's retry that still fails before any answer: the service is unavailable (503).
  const error =
    outcome === 'timeout'
      ? proxyTimeout(fe.errorId, to, timeoutShown)
      : call.retryFailures && attempt > 0
        ? proxyRetriesSpent(fe.errorId, to, failure.message, attempt + 1, flag)
        : proxyFailed(fe.errorId, to, failure.message, flag);
  // Nothing of an answer was sent to the client, and the body is in memory (a streamed one has no retries): the request can be sent again.
  const retriable = outcome === 'connect_failure' || (call.retryFailures && (outcome === 'reset' || (outcome === 'timeout' && !byDeadline)));
  return { kind: 'failed', error, retriable };
}

/**
 * The answer's headers with a session's token header last (after the route's modifiers and CORS):
 * a Set-Cookie is one more; a session header replaces the node's own of that name.
 */
function withSessionHeader(headers: ((flat: string[]) => string[]) | undefined, token: [string, string] | undefined): ((flat: string[]) => string[]) | undefined {
  if (!token) return headers;
  const [name, value] = token;
  return (flat) => {
    const out = headers ? headers(flat) : flat;
    if (name === 'set-cookie') return [...out, name, value];
    const kept: string[] = [];
    for (let i = 0; i < out.length; i += 2) if (out[i]!.toLowerCase() !== name) kept.push(out[i]!, out[i + 1]!);
    kept.push(name, value);
    return kept;
  };
}

/** Whether an Upgrade header lists h2c (HTTP/2 over cleartext, any version) among its protocols. */
export function upgradesToH2c(upgrade: string | undefined): boolean {
  if (upgrade === undefined) return false;
  for (const token of upgrade.split(',')) {
    const slash = token.indexOf('/');
    if ((slash === -1 ? token : token.slice(0, slash)).trim().toLowerCase() === 'h2c') return true;
  }
  return false;
}

/** The head of a node's answer for the client: its status, its end-to-end headers (rawHeaders form), then `extra`. */
function answerHead(res: IncomingMessage, extra: string): string {
  const status = res.statusCode ?? 502;
  let named: Set<string> | undefined;
  const raw = res.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === 'connection') named = connectionNamed(raw[i + 1]) ?? named;
  let head = `HTTP/1.1 ${status} ${res.statusMessage || STATUS_CODES[status] || ''}\r\n`;
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase();
    if (isHopByHop(lower) || named?.has(lower)) continue;
    head += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  return `${head}${extra}\r\n`;
}

/**
 * Proxies an Upgrade request (WebSocket) to a node of the service, on a connection of its own.
 * Nothing more is read from the client until the node answers. Its `101 Switching Protocols` opens
 * the tunnel: the answer goes to the client as it came, then bytes flow both ways until either side
 * closes. Any other answer is passed on (status, end-to-end headers, the body framed by its length
 * or chunked) with `Connection: close`, and the client connection is closed after it: what the
 * client sent behind the upgrade request (pipelined requests) is dropped, never forwarded, and must
 * be sent again on a new connection. `Upgrade: h2c` is refused (400): an HTTP/2 connection would
 * carry requests the edge never sees. Only the wait for the node's answer is bounded
 * (--client_request_timeout); an open tunnel may idle.
 */
export function handleProxyUpgrade(fe: EdgeHandlerContext, service: string, secure: boolean, req: IncomingMessage, socket: Duplex, head: Buffer, version?: string): void {
  const refuse = (err: MeshError) => refuseSocket(socket, err, fe.errorId);
  if (upgradesToH2c(req.headers.upgrade)) {
    return refuse(badRequest(fe.errorId, 'Upgrade: h2c is refused: an HTTP/2 connection would carry requests past the edge (send HTTP/1.1 requests)'));
  }
  if (req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0') {
    return refuse(badRequest(fe.errorId, 'an upgrade request carries no body'));
  }
  // The wait for a host (a service's first registry lookup) is bounded as the wait for the answer.
  const timeoutMs = fe.edge.settings.clientRequestTimeoutMs;
  leaseWithin(fe.edge.clusters.acquire(service, { version }), Date.now() + timeoutMs).then(
    (lease) => (lease ? upgradeOn(fe, service, secure, req, socket, head, lease, refuse) : refuse(proxyTimeout(fe.errorId, service, timeoutMs))),
    (err: unknown) => refuse(asFrontEndError(err, fe.errorId)),
  );
}

function upgradeOn(fe: EdgeHandlerContext, service: string, secure: boolean, req: IncomingMessage, socket: Duplex, head: Buffer, lease: UpstreamLease, refuse: (err: MeshError) => void): void {
  const started = Date.now();
  if (socket.destroyed) return lease.release({ kind: 'cancelled' }, 0);
  /** waiting for the node's answer; answered (its head was passed on); done (lease released, nothing more to answer). */
  let state: 'waiting' | 'answered' | 'done' = 'waiting';
  const release = (outcome: Parameters<UpstreamLease['release']>[0]) => {
    if (state === 'done') return;
    state = 'done';
    clearTimeout(timer);
    socket.off('close', onClientGone);
    lease.release(outcome, Date.now() - started);
  };
  const headers = forwardedHeaders(req, secure, false, hopTrace(fe, req, undefined));
  headers.push('connection', 'Upgrade', 'upgrade', req.headers.upgrade ?? 'websocket');
  const timeoutMs = fe.edge.settings.clientRequestTimeoutMs;
  const target = lease.target;
  const connector = target.connector;
  // A node the pool calls over mutual TLS is reached the same way (its identity checked; in strict mode a plain node is refused).
  const createConnection = connector
    ? (_options: unknown, oncreate: (err: Error | null, socket: Duplex) => void) => {
        connector({ hostname: target.address, host: target.key, protocol: 'http:', port: String(target.port), localAddress: null }, (err, socket) => oncreate(err, socket as Duplex));
        return undefined;
      }
    : undefined;
  // A connection of its own: no agent (`agent: false` would make one, which ignores createConnection).
  const upstream = httpRequest({ host: target.address, port: target.port, method: req.method, path: req.url, headers, setHost: false, ...(createConnection ? { createConnection: createConnection as never } : { agent: false }) });
  const timer = setTimeout(() => {
    if (state !== 'waiting') return;
    release({ kind: 'timeout' });
    refuse(proxyTimeout(fe.errorId, `${service} on ${lease.target.key}`, timeoutMs));
    upstream.destroy();
  }, timeoutMs);
  const onClientGone = () => {
    release({ kind: 'cancelled' });
    upstream.destroy();
  };
  socket.once('close', onClientGone);
  upstream.on('upgrade', (res: IncomingMessage, tunnel: Socket, tunnelHead: Buffer) => {
    release({ kind: 'response', status: 101 });
    if (socket.destroyed) return void tunnel.destroy();
    // The 101 as it came: its Upgrade, Connection and handshake headers are the client's business.
    let answer = `HTTP/1.1 101 ${res.statusMessage || 'Switching Protocols'}\r\n`;
    for (let i = 0; i < res.rawHeaders.length; i += 2) answer += `${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}\r\n`;
    socket.write(`${answer}\r\n`, 'latin1'); // header bytes as they came (Node read them as latin1)
    if (tunnelHead.length) socket.write(tunnelHead);
    if (head.length) tunnel.write(head);
    tunnel.pipe(socket);
    socket.pipe(tunnel);
    tunnel.on('error', () => socket.destroy());
    tunnel.on('close', () => socket.destroy());
    socket.on('close', () => tunnel.destroy());
  });
  upstream.on('response', (res: IncomingMessage) => {
    // Not an upgrade: one answer, then the connection closes (nothing behind the request is read).
    clearTimeout(timer);
    state = 'answered';
    const status = res.statusCode ?? 502;
    const length = res.headers['content-length'];
    const framing = bodiless(status, req.method === 'HEAD') ? 'none' : length !== undefined ? 'length' : 'chunked';
    const extra = framing === 'length' ? `content-length: ${length}\r\n` : framing === 'chunked' ? 'transfer-encoding: chunked\r\n' : '';
    socket.write(answerHead(res, `${extra}connection: close\r\n`), 'latin1');
    res.on('data', (chunk: Buffer) => {
      if (framing === 'none') return;
      if (framing === 'chunked') socket.write(`${chunk.length.toString(16)}\r\n`);
      if (!socket.write(framing === 'chunked' ? Buffer.concat([chunk, CRLF]) : chunk)) res.pause();
    });
    socket.on('drain', () => res.resume());
    res.on('end', () => {
      release({ kind: 'response', status });
      endRawLingering(socket, framing === 'chunked' ? '0\r\n\r\n' : undefined);
    });
    res.on('error', () => {
      release({ kind: 'reset' });
      socket.destroy();
    });
  });
  upstream.on('error', (err) => {
    if (state === 'done') return; // the timeout or the client ended it, or the tunnel is open
    if (state === 'answered') {
      release({ kind: 'reset' });
      socket.destroy();
      return;
    }
    const failure = classifyError(err, false);
    release(failure.outcome);
    const outcome = failure.outcome.kind;
    refuse(proxyFailed(fe.errorId, `${service} on ${lease.target.key}`, failure.message, outcome === 'connect_failure' ? 'UF' : 'UC'));
  });
  upstream.end();
}

const CRLF = Buffer.from('\r\n');
