/**
 * The server side of the RPC wire protocol (DESIGN section 5): `POST /` with Mesh-Service and
 * Mesh-Endpoint, body in JSON or protobuf. Also answers `GET /health` (503 while draining), so
 * a framework service can be health-checked like any HTTP app.
 */
import type { IncomingHttpHeaders, IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from '../../base/http/node-http.js';
import type { AddressInfo } from 'node:net';
import type pino from 'pino';
import { badRequest, internalError, methodNotAllowed, notFound, tooManyHeaderFields, unsupportedMediaType } from '../../base/errors.js';
import { JSON_CODEC, codecFor, mediaType, type Codec, type CodecSet } from '../../base/codec/codec.js';
import { JsonSyntaxError, stringifyJson } from '../../base/codec/json.js';
import { readBodyThen } from '../../base/http/body.js';
import { httpServerOptions, listenOn, MAX_HEADER_COUNT, ServerLifecycle, tooManyHeaders, type Drainable, type DrainResult, type ServerLimits } from '../../base/http/lifecycle.js';
import type { StatsStore } from '../../base/stats/store.js';
import type { EndpointStats } from '../../base/stats/endpoint-stats.js';
import { httpStatPrefix } from '../../base/http/stats.js';
import { sendBytes, sendError, sendJson } from '../../base/http/respond.js';
import { splitTarget } from '../../base/http/target.js';
import { endToEndHeaders, HEADER_ENDPOINT, HEADER_ID, HEADER_STREAM, meshTimeoutOf } from '../../core/transport/headers.js';
import { ContextStore } from '../../base/util/call-context.js';
import { parseTraceparent, TRACEPARENT, TRACESTATE, type TraceContext } from '../../base/util/trace-context.js';
import { failSpan, SpanKind, traceOf, type Span, type Tracer } from '../../base/tracing/tracer.js';
import { serveStream } from './stream-server.js';
import { serveMtls } from '../../base/mtls/server.js';
import { peerIdentityOf, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { EndpointDefinition, HandlerContext } from './endpoint.js';
import type { ServiceAuthz } from '../../edge/auth/authz.js';

export interface RpcServerOptions {
  service: string;
  maxBodyBytes: number;
  logger?: pino.Logger;
  /** False while draining: GET /health answers 503. */
  isLive?: () => boolean;
  /** Server-side cap on how long a call may wait for its handler (ms). */
  defaultTimeoutMs?: number;
  /** Connection cap, read timeouts and drain timeout (from the flags: serverLimits()). */
  limits: ServerLimits;
  /** Where `http.rpc.downstream_cx_overflow` and the drain counters are kept. */
  stats: StatsStore;
  /** Codecs besides JSON and protobuf (the `codecs` option). */
  codecs?: CodecSet;
  /**
   * The process's call context: each handler runs inside its call's (id, deadline, metadata,
   * trace), so the calls and publishes it makes carry them. Default: a store of the server's own.
   */
  context?: ContextStore;
  /** Records a server span per call (--tracing=otlp). */
  tracer?: Tracer;
  /** Who may call whom (--authz_rules): a call it denies gets its 403 before the body is read. */
  authz?: ServiceAuthz;
  /**
   * This process's workload certificate (--mtls permissive or strict): the server terminates
   * mutual TLS on its port (src/base/mtls/server.ts); a handler's caller is then
   * peerIdentityOf(req.socket).
   */
  workloadTls?: WorkloadTls;
  /**
   * Per-endpoint stats (--stats_endpoints): each call is counted, by status, with its time, under
   * its endpoint when handled here, under `_other` otherwise. Unset: nothing is kept per call.
   */
  endpointStats?: EndpointStats;
}

/** The stat prefix of the RPC servers of a process. */
export const RPC_STAT_PREFIX = httpStatPrefix('rpc');

export class RpcServer implements Drainable {
  private readonly endpoints = new Map<string, EndpointDefinition>();
  private server?: Server;
  private lifecycle?: ServerLifecycle;
  private stopMtls?: () => void;
  private readonly context: ContextStore;
  /** The SPIFFE ID of each TLS connection's peer (undefined: none), read once per connection. */
  private readonly peers = new WeakMap<object, string | undefined>();

  constructor(private readonly options: RpcServerOptions) {
    this.context = options.context ?? new ContextStore();
  }

  handle(def: EndpointDefinition): void {
    if (!/^[A-Za-z_][\w]*\.[A-Za-z_][\w]*$/.test(def.name)) throw new Error(`invalid endpoint name "${def.name}" (use Endpoint.Method)`);
    this.endpoints.set(def.name, def);
    this.options.endpointStats?.declare(def.name);
  }

  listEndpoints(): EndpointDefinition[] {
    return [...this.endpoints.values()];
  }

  /** Listens; with a workload certificate (default: the options'), terminates mutual TLS as its mode says. */
  async listen(host: string, port: number, workload: WorkloadTls | undefined = this.options.workloadTls): Promise<AddressInfo> {
    const server = createServer(httpServerOptions(this.options.limits), (req, res) => void this.onRequest(req, res));
    // Node's own answer to a read timeout (408, no body) is kept: callers are mesh clients.
    this.server = server;
    if (workload && workload.mode !== 'off') {
      this.stopMtls = serveMtls(server, {
        workload,
        service: this.options.service,
        stats: this.options.stats.scope(RPC_STAT_PREFIX),
        acceptTimeoutMs: this.options.limits.headersTimeoutMs,
        log: this.options.logger,
      });
    }
    this.lifecycle = new ServerLifecycle(server, this.options.limits, { stats: this.options.stats, prefix: RPC_STAT_PREFIX });
    return listenOn(server, host, port);
  }

  beginDrain(): void {
    this.lifecycle?.beginDrain();
  }

  /** Drains (answers close their connections), stops accepting, lets in-flight calls finish (up to the drain timeout). */
  async close(): Promise<DrainResult> {
    this.stopMtls?.();
    return (await this.lifecycle?.close()) ?? { requestsCutOff: 0, connectionsCutOff: 0 };
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    this.lifecycle?.request(res);
    const path = req.url ?? '/';
    if (tooManyHeaders(req) > 0) {
      req.resume();
      res.shouldKeepAlive = false;
      sendError(res, tooManyHeaderFields(this.options.service, MAX_HEADER_COUNT));
      return;
    }
    if (req.method === 'GET' && (path === '/health' || path.startsWith('/health?'))) {
      const live = this.options.isLive?.() ?? true;
      sendJson(res, live ? 200 : 503, live ? '{"status":"ok"}' : '{"status":"draining"}');
      return;
    }
    const id = this.options.service;
    if (path !== '/' && !path.startsWith('/?')) {
      sendError(res, notFound(id, `path ${splitTarget(path).path} not found: RPC calls are POST /`));
      return;
    }
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      sendError(res, methodNotAllowed(id, `method ${req.method} not allowed: RPC calls are POST /`));
      return;
    }
    this.call(req, res);
  }

  /**
   * One call, in flight from here until its answer or error is written: read the body, decode,
   * run the handler, encode, write. No async frame and no promise of the server's own for a
   * unary call: the body is read with callbacks and the handler's promise (if it returns one) is
   * followed with one `then`. While an AsyncLocalStorage is in use (the call context), every
   * promise costs hook calls at each step, so the count matters.
   */
  private call(req: IncomingMessage, res: ServerResponse): void {
    const id = this.options.service;
    const headers = req.headers;
    const parent = parseTraceparent(headers[TRACEPARENT], headers[TRACESTATE]);
    const endpointName = headerValue(headers, HEADER_ENDPOINT);
    if (this.options.endpointStats) {
      const family = this.options.endpointStats.of(endpointName);
      const start = performance.now();
      res.once('finish', () => family.record(res.statusCode, performance.now() - start));
    }
    const span = this.options.tracer?.startSpan(`${id}/${endpointName ?? 'unknown'}`, SpanKind.SERVER, parent, {
      'rpc.system': 'mesh',
      'rpc.service': id,
      'rpc.method': endpointName ?? '',
    });
    const trace = span ? traceOf(span) : this.context.hop(parent);
    const fail = (err: unknown) => {
      sendError(res, err, id);
      if (span) endSpan(span, res.statusCode, err);
    };
    if (!endpointName) return fail(badRequest(id, 'missing Mesh-Endpoint header'));
    const peer = this.peerOf(req);
    const denied = this.options.authz?.check(peer, id, endpointName);
    if (denied) {
      req.resume();
      return fail(denied);
    }
    const def = this.endpoints.get(endpointName);
    const contentType = headerValue(headers, 'content-type');
    const codec = this.options.codecs ? this.options.codecs.for(contentType) : codecFor(contentType);
    if (!codec) {
      req.resume();
      return fail(unsupportedMediaType(id, `unsupported content type ${mediaType(contentType)}: use application/json or application/protobuf`));
    }
    if (def?.stream) {
      this.callStream(req, res, def, codec, trace, span, peer).catch(fail);
      return;
    }
    if (headers[HEADER_STREAM] !== undefined) {
      req.resume();
      if (!def) return fail(notFound(id, `endpoint ${endpointName} not found on ${id}`));
      return fail(badRequest(id, `endpoint ${endpointName} is not a streaming endpoint: call it without Mesh-Stream`));
    }
    readBodyThen(req, this.options.maxBodyBytes, id, (readError, body) => {
      if (readError) return fail(readError);
      if (!def) return fail(notFound(id, `endpoint ${endpointName} not found on ${id}`));
      if (codec.contentType === 'application/protobuf' && (!def.requestType || !def.responseType))
        return fail(unsupportedMediaType(id, `endpoint ${endpointName} does not accept application/protobuf`));
      let request: unknown;
      try {
        request = codec.decode(body!, def.requestType);
      } catch (err) {
        const what = err instanceof JsonSyntaxError || err instanceof SyntaxError ? 'malformed JSON' : 'malformed request';
        return fail(badRequest(id, `${what}: ${(err as Error).message}`));
      }
      let inbound: number | undefined;
      try {
        inbound = meshTimeoutOf(headers);
      } catch (err) {
        return fail(badRequest(id, (err as Error).message));
      }
      const budget = inbound ?? this.options.defaultTimeoutMs ?? 30_000;
      const ctx: HandlerContext = {
        id: headerValue(headers, HEADER_ID) ?? '',
        service: id,
        endpoint: endpointName,
        metadata: endToEndHeaders(headers),
        deadline: Date.now() + budget,
        traceId: trace.traceId,
        spanId: trace.spanId,
        peer,
      };
      const answer = (result: unknown) => {
        // JSON is written as a string: no intermediate Buffer, the same bytes on the wire (the
        // header block is ASCII, so Node sends header and body in one write).
        let encoded: Uint8Array | string;
        try {
          encoded = codec === JSON_CODEC ? stringifyJson(result ?? {}) : codec.encode(result ?? {}, def.responseType);
        } catch (err) {
          return fail(internalError(id, `encoding response: ${(err as Error).message}`));
        }
        try {
          sendBytes(res, 200, codec.contentType, encoded);
        } catch (err) {
          return fail(err);
        }
        if (span) endSpan(span, 200);
      };
      // The handler runs inside its call's context: what it calls or publishes carries the call's
      // remaining deadline, id, metadata and trace (the metadata without the inbound trace headers).
      let result: unknown;
      try {
        result = this.context.run({ id: ctx.id || undefined, deadline: ctx.deadline, metadata: withoutTrace(ctx.metadata), trace }, () => def.handler(request, ctx));
      } catch (err) {
        return fail(err);
      }
      if (isThenable(result)) result.then(answer, fail);
      else answer(result);
    });
  }

  /** The caller's workload identity: the SPIFFE ID of its certificate, or undefined (a plain connection, or no certificate). */
  private peerOf(req: IncomingMessage): string | undefined {
    const socket = req.socket as { encrypted?: boolean };
    if (!socket.encrypted) return undefined;
    if (this.peers.has(socket)) return this.peers.get(socket);
    const peer = peerIdentityOf(socket);
    this.peers.set(socket, peer);
    return peer;
  }

  /** A streaming endpoint's call: the whole stream runs inside its call's context. */
  private async callStream(req: IncomingMessage, res: ServerResponse, def: EndpointDefinition, codec: Codec, trace: TraceContext, span: Span | undefined, peer: string | undefined): Promise<void> {
    const id = this.options.service;
    const headers = req.headers;
    if (codec.contentType === 'application/protobuf' && (!def.requestType || !def.responseType)) {
      req.resume();
      throw unsupportedMediaType(id, `endpoint ${def.name} does not accept application/protobuf`);
    }
    // The handler's iteration runs inside the call's context too, so what it calls or publishes
    // carries the call's id, metadata and trace.
    const streamContext = { id: headerValue(headers, HEADER_ID) || undefined, metadata: withoutTrace(endToEndHeaders(headers)), trace };
    await this.context.run(streamContext, () => serveStream({ service: id, maxMessageBytes: this.options.maxBodyBytes, logger: this.options.logger, trace, peer }, def, codec, req, res));
    if (span) endSpan(span, res.statusCode);
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

/** The caller's metadata as the handler's calls forward it: the trace headers are the hop's own. */
function withoutTrace(metadata: Record<string, string>): Record<string, string> {
  if (metadata[TRACEPARENT] === undefined && metadata[TRACESTATE] === undefined) return metadata;
  const { [TRACEPARENT]: _p, [TRACESTATE]: _s, ...rest } = metadata;
  return rest;
}

function endSpan(span: Span, status: number, err?: unknown): void {
  span.setAttribute('rpc.response.status_code', status);
  if (status >= 500 || err !== undefined) failSpan(span, err instanceof Error ? err.message : `status ${status}`, String(status));
  span.end();
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}
