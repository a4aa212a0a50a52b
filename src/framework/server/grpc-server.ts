/**
 * A framework service served over gRPC (`--server_protocol=grpc`): its handlers answer the
 * methods of the same name in the .proto files of --proto_path, over @grpc/grpc-js (unary
 * handlers the unary methods, streaming handlers the streaming methods of their kind). A handler
 * gets the request as the JSON a mesh call would carry (proto-loader's conventions:
 * src/core/transport/grpc/json.ts) and its answer is checked against the response message; a
 * MeshError it throws becomes the gRPC status of its HTTP code, with the detail as the message.
 * With tracing on, each call is a server span, child of the caller's `traceparent` metadata,
 * ended with the call's gRPC status (rpc.grpc.status_code; an error status for any but OK).
 */
import * as grpc from '@grpc/grpc-js';
import type pino from 'pino';
import type { PeerCertificate } from 'node:tls';
import { badRequest, clientClosed, gatewayTimeout, internalError, MeshError, notAsyncIterable, toMeshError } from '../../base/errors.js';
import type { DrainResult, Drainable } from '../../base/http/lifecycle.js';
import { decodeToJson, encodeJson, JsonShapeError } from '../../core/transport/grpc/json.js';
import { grpcCodeOfHttp } from '../../core/transport/grpc/status.js';
import { ContextStore } from '../../base/util/call-context.js';
import { parseTraceparent, TRACEPARENT, TRACESTATE } from '../../base/util/trace-context.js';
import { failSpan, SpanKind, traceOf, type Span, type Tracer } from '../../base/tracing/tracer.js';
import type { EndpointDefinition, HandlerContext } from './endpoint.js';
import { isAsyncIterable, untilAborted, type StreamContext } from './stream-server.js';
import { streamKindOf, type GrpcMethod, type GrpcSchema } from '../../core/transport/grpc/protos.js';
import { once } from 'node:events';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { WorkloadServerCredentials } from '../../core/transport/grpc/server-credentials.js';
import { spiffeIdOfCertificate, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { ServiceAuthz } from '../../edge/auth/authz.js';
import type { EndpointStats } from '../../base/stats/endpoint-stats.js';

export interface GrpcServerOptions {
  service: string;
  schema: GrpcSchema;
  /** How long close() lets in-flight calls finish before cutting them off (ms). */
  drainTimeoutMs: number;
  maxBodyBytes: number;
  logger?: pino.Logger;
  /** The process's call context: a handler runs inside its call's, as with the RPC server. */
  context?: ContextStore;
  /** Records a server span per call (--tracing=otlp), child of the caller's `traceparent` metadata. */
  tracer?: Tracer;
  /**
   * This process's workload certificate: with --mtls=strict the server speaks mutual TLS only
   * (src/core/transport/grpc/credentials.ts); otherwise plaintext (gRPC cannot share a port
   * between the two, so permissive serves plain).
   */
  workload?: WorkloadTls;
  /** Who may call whom (--authz_rules): a call it denies ends with PERMISSION_DENIED before the handler runs. */
  authz?: ServiceAuthz;
  /**
   * Per-endpoint stats (--stats_endpoints): each call counted under its endpoint with the HTTP
   * status of its outcome (200, or its error's) and its time. Unset: nothing kept per call.
   */
  endpointStats?: EndpointStats;
}

/** Endpoints every framework service has, with no gRPC method of their own. */
const BUILT_IN = new Set(['Debug.Health']);

export class GrpcServer implements Drainable {
  private readonly server: grpc.Server;
  /** gRPC service full names this server answers. */
  readonly services: string[];
  private active = 0;
  private contextStore?: ContextStore;
  private closing?: Promise<DrainResult>;
  private credentials?: WorkloadServerCredentials;

  /** Throws when an endpoint has no method of that name and kind in the loaded protos. */
  constructor(
    private readonly options: GrpcServerOptions,
    endpoints: EndpointDefinition[],
  ) {
    this.server = new grpc.Server({ 'grpc.max_receive_message_length': options.maxBodyBytes });
    const byService = new Map<string, Record<string, grpc.MethodDefinition<Buffer, Buffer>>>();
    const impls = new Map<string, grpc.UntypedServiceImplementation>();
    for (const def of endpoints) {
      if (BUILT_IN.has(def.name)) continue;
      const found = options.schema.lookup(def.name);
      if ('error' in found) throw new SchemaOptionError('server_protocol', `{server_protocol}=grpc: endpoint ${def.name} of ${options.service}: ${found.error}`);
      const m = found.method;
      const kind = streamKindOf(m);
      const wanted = def.stream ?? 'unary';
      if (kind !== wanted) {
        const what = (k: string) => (k === 'unary' ? 'a unary method' : `a ${k} stream`);
        throw new SchemaOptionError('server_protocol', `{server_protocol}=grpc: endpoint ${def.name} of ${options.service} is ${what(wanted)}, but ${m.path} is ${what(kind)}`);
      }
      const definition = byService.get(m.service) ?? {};
      const impl = impls.get(m.service) ?? {};
      definition[m.name] = {
        path: m.path,
        requestStream: m.requestStream,
        responseStream: m.responseStream,
        originalName: m.name,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      };
      if (kind === 'unary') impl[m.name] = (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => void this.unary(def, m, call, cb);
      else if (kind === 'client') impl[m.name] = (call: grpc.ServerReadableStream<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => void this.stream(def, m, call, cb);
      else impl[m.name] = (call: grpc.ServerWritableStream<Buffer, Buffer> | grpc.ServerDuplexStream<Buffer, Buffer>) => void this.stream(def, m, call);
      byService.set(m.service, definition);
      impls.set(m.service, impl);
    }
    for (const [name, definition] of byService) this.server.addService(definition as grpc.ServiceDefinition, impls.get(name)!);
    this.services = [...byService.keys()].sort();
  }

  /**
   * The handler's context of a call (id, metadata, deadline, trace), the call context it runs in
   * and its server span (with tracing on).
   */
  private callContext(def: EndpointDefinition, call: { metadata: grpc.Metadata; getDeadline(): grpc.Deadline; getAuthContext(): { sslPeerCertificate?: PeerCertificate } }) {
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(call.metadata.getMap())) if (typeof v === 'string') metadata[k] = v;
    const deadline = call.getDeadline();
    const parent = parseTraceparent(metadata[TRACEPARENT], metadata[TRACESTATE]);
    const context = (this.contextStore ??= this.options.context ?? new ContextStore());
    const service = this.options.service;
    const span = this.options.tracer?.startSpan(`${service}/${def.name}`, SpanKind.SERVER, parent, {
      'rpc.system': 'grpc',
      'rpc.service': service,
      'rpc.method': def.name,
    });
    const trace = span ? traceOf(span) : context.hop(parent);
    const at = deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? Number(deadline) : undefined;
    const ctx: HandlerContext = {
      id: metadata['mesh-id'] ?? '',
      service: this.options.service,
      endpoint: def.name,
      metadata,
      deadline: at ?? Date.now() + 30_000,
      traceId: trace.traceId,
      spanId: trace.spanId,
      peer: spiffeIdOfCertificate(call.getAuthContext().sslPeerCertificate),
    };
    const { [TRACEPARENT]: _p, [TRACESTATE]: _s, ...rest } = metadata;
    return { ctx, context, deadline: at, span, run: { id: ctx.id || undefined, deadline: ctx.deadline, metadata: rest, trace } };
  }

  /** The JSON of a request message. */
  private decode(m: GrpcMethod, bytes: Buffer): unknown {
    try {
      return JSON.parse(decodeToJson(m.requestType, bytes));
    } catch (err) {
      throw badRequest(this.options.service, `malformed request: ${(err as Error).message}`);
    }
  }

  /** The bytes of an answer, checked against the response message (500 naming the field). */
  private encode(def: EndpointDefinition, m: GrpcMethod, value: unknown): Buffer {
    let bytes: Uint8Array;
    try {
      bytes = encodeJson(m.responseType, value ?? {});
    } catch (err) {
      const why = err instanceof JsonShapeError ? err.message : (err as Error).message;
      throw internalError(this.options.service, `the answer of ${def.name} does not fit ${m.responseType.fullName.replace(/^\./, '')}: ${why}`);
    }
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private statusOf(def: EndpointDefinition, err: unknown): { code: number; details: string; http: number } {
    const e = toMeshError(err, this.options.service);
    if (e.code >= 500 && e.code !== 504) this.options.logger?.warn({ endpoint: def.name, err: e.detail }, 'gRPC handler failed');
    return { code: grpcCodeOfHttp(e.code), details: e.detail, http: e.code };
  }

  private async unary(def: EndpointDefinition, m: GrpcMethod, call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>): Promise<void> {
    this.active++;
    const family = this.options.endpointStats?.of(def.name);
    const start = family ? performance.now() : 0;
    const { ctx, context, run, span } = this.callContext(def, call);
    try {
      const denied = this.options.authz?.check(ctx.peer, this.options.service, def.name);
      if (denied) throw denied;
      const request = this.decode(m, call.request);
      const result = await context.run(run, () => def.handler(request, ctx));
      cb(null, this.encode(def, m, result));
      endSpan(span, grpc.status.OK);
      family?.record(200, performance.now() - start);
    } catch (err) {
      const status = this.statusOf(def, err);
      cb(status);
      endSpan(span, status.code, status.details);
      family?.record(status.http, performance.now() - start);
    } finally {
      this.active--;
    }
  }

  /**
   * A streaming handler (Service.stream) as a server, client or bidi gRPC method: the requests
   * as an async iterable pulled from the call (client, bidi) or the one request (server); the
   * answers written one by one, waiting for 'drain' when the call's buffer is full (server,
   * bidi), or the one answer (client). The caller cancelling, or the deadline passing, aborts
   * ctx.signal and gives the handler's iterable up.
   */
  private async stream(
    def: EndpointDefinition,
    m: GrpcMethod,
    call: grpc.ServerWritableStream<Buffer, Buffer> | grpc.ServerDuplexStream<Buffer, Buffer> | grpc.ServerReadableStream<Buffer, Buffer>,
    cb?: grpc.sendUnaryData<Buffer>,
  ): Promise<void> {
    this.active++;
    const id = this.options.service;
    const kind = def.stream!;
    const abort = new AbortController();
    const signal = abort.signal;
    let finished = false;
    const family = this.options.endpointStats?.of(def.name);
    const start = family ? performance.now() : 0;
    const { ctx, context, deadline, run, span } = this.callContext(def, call);
    let status: { code: number; details: string; http: number } = { code: grpc.status.OK, details: '', http: 200 };
    const onCancel = () => {
      if (finished) return;
      const past = deadline !== undefined && Date.now() >= deadline;
      abort.abort(past ? gatewayTimeout(id, 'stream deadline exceeded') : clientClosed(id, 'the caller cancelled the stream'));
    };
    call.on('cancelled', onCancel);
    call.on('error', () => {});
    // grpc-js answers DEADLINE_EXCEEDED by itself at the deadline; the handler is told too.
    const timer = deadline !== undefined && deadline - Date.now() < 2 ** 31 - 1 ? setTimeout(onCancel, Math.max(0, deadline - Date.now())) : undefined;
    const streamCtx: StreamContext = { ...ctx, kind, signal, deadline: deadline ?? Infinity };
    const self = this;
    async function* requests(): AsyncGenerator<unknown> {
      // Not destroyed at its end: a bidi call's answers still go out on the same stream.
      const it = (call as grpc.ServerReadableStream<Buffer, Buffer>).iterator({ destroyOnReturn: false })[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
      for (;;) {
        const next = await untilAborted(it.next(), signal);
        if (next.done) return;
        yield self.decode(m, next.value);
      }
    }
    const writable = call as grpc.ServerWritableStream<Buffer, Buffer>;
    try {
      const denied = this.options.authz?.check(ctx.peer, id, def.name);
      if (denied) throw denied;
      const input = kind === 'server' ? this.decode(m, (call as grpc.ServerWritableStream<Buffer, Buffer>).request) : requests();
      await context.run(run, async () => {
        const out = def.handler(input, streamCtx);
        if (kind === 'client') {
          const value = await untilAborted(Promise.resolve(out), signal);
          cb!(null, this.encode(def, m, value));
          return;
        }
        if (!isAsyncIterable(out)) throw notAsyncIterable(id, def.name, kind);
        const it = out[Symbol.asyncIterator]();
        let done = false;
        try {
          for (;;) {
            const next = await untilAborted(it.next(), signal);
            if (next.done) {
              done = true;
              break;
            }
            if (!writable.write(this.encode(def, m, next.value))) await untilAborted(once(writable, 'drain').then(() => undefined), signal);
          }
        } finally {
          // Given up early (cancel, deadline, an answer that does not fit): the handler's finally blocks run.
          if (!done) void Promise.resolve(it.return?.()).catch(() => {});
        }
        writable.end();
      });
    } catch (err) {
      if (!signal.aborted) {
        status = this.statusOf(def, err);
        if (cb) cb(status);
        else writable.emit('error', status); // grpc-js ends the call with this status after the messages written
      }
    } finally {
      if (signal.aborted) {
        const reason = signal.reason as MeshError;
        status = { code: reason.code === 504 ? grpc.status.DEADLINE_EXCEEDED : grpc.status.CANCELLED, details: reason.detail, http: reason.code };
      }
      endSpan(span, status.code, status.details);
      family?.record(status.http, performance.now() - start);
      finished = true;
      clearTimeout(timer);
      call.off('cancelled', onCancel);
      this.active--;
    }
  }

  listen(host: string, port: number): Promise<number> {
    const target = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    const workload = this.options.workload;
    const credentials = workload?.mode === 'strict' ? (this.credentials = new WorkloadServerCredentials(workload)) : grpc.ServerCredentials.createInsecure();
    return new Promise((resolve, reject) => this.server.bindAsync(target, credentials, (err, bound) => (err ? reject(err) : resolve(bound))));
  }

  /** True when the server speaks mutual TLS (registered as `mtls=true`). */
  get mutualTls(): boolean {
    return this.credentials !== undefined;
  }

  beginDrain(): void {
    // gRPC clients learn of the shutdown from its GOAWAY at close().
  }

  /** Stops accepting; in-flight calls get up to the drain timeout, then are cut off. */
  close(): Promise<DrainResult> {
    this.credentials?.detach();
    this.closing ??= new Promise<DrainResult>((resolve) => {
      let done = false;
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        const cut = this.active;
        this.server.forceShutdown();
        resolve({ requestsCutOff: cut, connectionsCutOff: cut > 0 ? 1 : 0 });
      }, this.options.drainTimeoutMs);
      this.server.tryShutdown(() => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve({ requestsCutOff: 0, connectionsCutOff: 0 });
      });
    });
    return this.closing;
  }
}

/** Ends a call's server span with its gRPC status: an error status for any but OK. */
function endSpan(span: Span | undefined, code: number, details = ''): void {
  if (!span) return;
  span.setAttribute('rpc.grpc.status_code', code);
  if (code !== grpc.status.OK) failSpan(span, details || grpc.status[code] || `status ${code}`, String(code));
  span.end();
}
