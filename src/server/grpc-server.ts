/**
 * A framework service served over gRPC (`--server_protocol=grpc`): its handlers answer the unary
 * methods of the same name in the .proto files of --proto_path, over @grpc/grpc-js. A handler
 * gets the request as the JSON a mesh call would carry (proto-loader's conventions:
 * src/transport/grpc/json.ts) and its answer is checked against the response message; a
 * MeshError it throws becomes the gRPC status of its HTTP code, with the detail as the message.
 */
import * as grpc from '@grpc/grpc-js';
import type pino from 'pino';
import { MeshError, toMeshError } from '../errors.js';
import type { DrainResult, Drainable } from '../http/lifecycle.js';
import type { GrpcMethod, GrpcSchema } from '../transport/grpc/protos.js';
import { decodeToJson, encodeJson, JsonShapeError } from '../transport/grpc/json.js';
import { grpcCodeOfHttp } from '../transport/grpc/status.js';
import { ContextStore } from '../util/call-context.js';
import { parseTraceparent, TRACEPARENT, TRACESTATE } from '../util/trace-context.js';
import type { EndpointDefinition, HandlerContext } from './rpc-server.js';

export interface GrpcServerOptions {
  service: string;
  schema: GrpcSchema;
  /** How long close() lets in-flight calls finish before cutting them off (ms). */
  drainTimeoutMs: number;
  maxBodyBytes: number;
  logger?: pino.Logger;
  /** The process's call context: a handler runs inside its call's, as with the RPC server. */
  context?: ContextStore;
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

  /** Throws when an endpoint has no unary method of that name in the loaded protos. */
  constructor(
    private readonly options: GrpcServerOptions,
    endpoints: EndpointDefinition[],
  ) {
    this.server = new grpc.Server({ 'grpc.max_receive_message_length': options.maxBodyBytes });
    const byService = new Map<string, Record<string, grpc.MethodDefinition<Buffer, Buffer>>>();
    const impls = new Map<string, grpc.UntypedServiceImplementation>();
    for (const def of endpoints) {
      if (BUILT_IN.has(def.name)) continue;
      if (def.stream) throw new Error(`--server_protocol=grpc: endpoint ${def.name} of ${options.service} is a streaming endpoint; only unary handlers are served over gRPC`);
      const found = options.schema.lookup(def.name);
      if ('error' in found) throw new Error(`--server_protocol=grpc: endpoint ${def.name} of ${options.service}: ${found.error}`);
      const m = found.method;
      if (m.requestStream || m.responseStream) throw new Error(`--server_protocol=grpc: endpoint ${def.name}: ${m.path} is a streaming method; only unary methods are served`);
      const definition = byService.get(m.service) ?? {};
      const impl = impls.get(m.service) ?? {};
      definition[m.name] = {
        path: m.path,
        requestStream: false,
        responseStream: false,
        originalName: m.name,
        requestSerialize: (b: Buffer) => b,
        requestDeserialize: (b: Buffer) => b,
        responseSerialize: (b: Buffer) => b,
        responseDeserialize: (b: Buffer) => b,
      };
      impl[m.name] = (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => void this.unary(def, m, call, cb);
      byService.set(m.service, definition);
      impls.set(m.service, impl);
    }
    for (const [name, definition] of byService) this.server.addService(definition as grpc.ServiceDefinition, impls.get(name)!);
    this.services = [...byService.keys()].sort();
  }

  private async unary(def: EndpointDefinition, m: GrpcMethod, call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>): Promise<void> {
    this.active++;
    try {
      let request: unknown;
      try {
        request = JSON.parse(decodeToJson(m.requestType, call.request));
      } catch (err) {
        throw new MeshError(this.options.service, 400, `malformed request: ${(err as Error).message}`);
      }
      const metadata: Record<string, string> = {};
      for (const [k, v] of Object.entries(call.metadata.getMap())) if (typeof v === 'string') metadata[k] = v;
      const deadline = call.getDeadline();
      const parent = parseTraceparent(metadata[TRACEPARENT], metadata[TRACESTATE]);
      const context = (this.contextStore ??= this.options.context ?? new ContextStore());
      const trace = context.hop(parent);
      const ctx: HandlerContext = {
        id: metadata['mesh-id'] ?? '',
        service: this.options.service,
        endpoint: def.name,
        metadata,
        deadline: deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? Number(deadline) : Date.now() + 30_000,
        traceId: trace.traceId,
        spanId: trace.spanId,
      };
      const { [TRACEPARENT]: _p, [TRACESTATE]: _s, ...rest } = metadata;
      const result = await context.run({ id: ctx.id || undefined, deadline: ctx.deadline, metadata: rest, trace }, () => def.handler(request, ctx));
      let bytes: Uint8Array;
      try {
        bytes = encodeJson(m.responseType, result ?? {});
      } catch (err) {
        const why = err instanceof JsonShapeError ? err.message : (err as Error).message;
        throw new MeshError(this.options.service, 500, `the answer of ${def.name} does not fit ${m.responseType.fullName.replace(/^\./, '')}: ${why}`);
      }
      cb(null, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    } catch (err) {
      const e = toMeshError(err, this.options.service);
      if (e.code >= 500) this.options.logger?.warn({ endpoint: def.name, err: e.detail }, 'gRPC handler failed');
      cb({ code: grpcCodeOfHttp(e.code), details: e.detail });
    } finally {
      this.active--;
    }
  }

  listen(host: string, port: number): Promise<number> {
    const target = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    return new Promise((resolve, reject) => this.server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))));
  }

  beginDrain(): void {
    // gRPC clients learn of the shutdown from its GOAWAY at close().
  }

  /** Stops accepting; in-flight calls get up to the drain timeout, then are cut off. */
  close(): Promise<DrainResult> {
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
