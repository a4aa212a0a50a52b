/**
 * Native gRPC at a front end that serves HTTP/2 (docs/grpc.md, "Native gRPC through the gateway
 * and the sidecar"): which requests are native gRPC calls (the route phase), and serving one (the
 * handle phase): the mesh service named for it (./grpc-names.ts), the auth rules for that service
 * and method, then the call passed through to a node unchanged (./grpc-pass.ts). Every refusal
 * is a gRPC status, never error JSON. One per front end: the connections to the nodes, the names
 * and the stats are its own.
 */
import type { Http2ServerResponse, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { isHttp2Request, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import { requestInfo } from '../../base/http/access-log.js';
import { MeshError } from '../../base/errors.js';
import { grpcCodeName, grpcCodeOfHttp } from '../../core/transport/grpc/status.js';
import { failSpan, SpanKind, traceOf } from '../../base/tracing/tracer.js';
import type { CallContext } from '../../base/util/call-context.js';
import { hopTrace } from './proxy.js';
import { meshTimeoutOf } from '../../core/transport/headers.js';
import type { WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { EdgeHandlerContext } from './front-end.js';
import { GrpcCallStats, GrpcConnections, grpcMethodOf, type GrpcDownstream, isGrpcContentType, parseGrpcTimeout, passGrpcCall, refuseGrpc, GRPC_CODES } from './grpc-pass.js';
import { GrpcServiceNames, MESH_SERVICE_HEADER } from './grpc-names.js';
import { GrpcMirror } from './grpc-mirror.js';
import type { CompiledGrpcRoutes, GrpcRouteAnswer } from '../routes/grpc-route.js';

/** A native gRPC call the route phase found. */
export interface NativeGrpcCall {
  kind: 'grpc';
  grpcService: string;
  method: string;
  /** The GRPCRoute the route phase matched already (`mesh proxy`: only such calls are native). */
  routed?: GrpcRouteAnswer;
}

export class NativeGrpc {
  private readonly connections: GrpcConnections;
  private readonly names: GrpcServiceNames;
  private readonly stats: GrpcCallStats;
  private readonly mirror: GrpcMirror;

  /**
   * `serviceOf`: the one service every call goes to (the sidecar's inbound listener: its app's
   * static cluster), else each call's is looked up (./grpc-names.ts). `routes`: the route file's
   * GRPCRoutes in use (src/edge/routes/grpc-route.ts), tried before either.
   */
  constructor(
    private readonly fe: EdgeHandlerContext,
    workload: () => WorkloadTls | undefined,
    private readonly serviceOf?: () => string,
    private readonly routes?: () => CompiledGrpcRoutes | undefined,
  ) {
    this.connections = new GrpcConnections(workload);
    this.names = new GrpcServiceNames(fe.edge.registry);
    this.stats = new GrpcCallStats(fe.edge.stats);
    this.mirror = new GrpcMirror(fe.edge.clusters, this.connections, fe.edge.stats, fe.edge.settings.clientRequestTimeoutMs);
  }

  /** True for a request that may be a native gRPC call (its content type): --request_timeout does not bound it. */
  untimed(req: FrontRequest): boolean {
    return isHttp2Request(req) && isGrpcContentType(req.headers['content-type']);
  }

  /** The call an HTTP/2 request of a gRPC content type at `/<package.Service>/<Method>` is; undefined for any other request. */
  route(req: FrontRequest, path: string): NativeGrpcCall | undefined {
    if (!this.untimed(req)) return undefined;
    const call = grpcMethodOf(path);
    return call && { kind: 'grpc', grpcService: call.service, method: call.method };
  }

  /** Serves the call (`ctx`: the request's, its trace); resolves when its stream closed. */
  async handle(req: FrontRequest, res: FrontResponse, call: NativeGrpcCall, ctx?: CallContext): Promise<void> {
    if (!isHttp2Request(req)) return;
    return this.serve(req, res, req.stream, req.headers, call, (trailers) => (res as Http2ServerResponse).addTrailers(trailers), ctx);
  }

  /**
   * Serves a call answered on `stream` (the request's HTTP/2 stream, or one that acts as it: a
   * gRPC-Web call, ./grpc-web.ts), `headers` its gRPC headers; resolves when `stream` closed.
   * `compatTrailers`: see GrpcPassOptions. `ctx`: the request's context (its trace: the node's
   * `traceparent` is this hop's, or with --tracing=otlp the client span's that covers the call).
   */
  async serve(req: FrontRequest, res: FrontResponse, stream: GrpcDownstream, headers: IncomingHttpHeaders, call: Pick<NativeGrpcCall, 'grpcService' | 'method' | 'routed'>, compatTrailers?: (trailers: OutgoingHttpHeaders) => void, ctx?: CallContext): Promise<void> {
    const closed = new Promise<void>((resolve) => (stream.closed ? resolve() : stream.once('close', () => resolve())));
    const info = requestInfo(req);
    const routed = call.routed ?? this.routes?.()?.match({ path: `/${call.grpcService}/${call.method}`, authority: headers[':authority'] as string | undefined, headers });
    // A backend is a cluster the front end has (a static one of mesh proxy's included), else a service of the registry.
    if (routed && (routed.kind === 'unavailable' || (!this.fe.edge.clusters.cluster(routed.service) && !(await this.names.exists(routed.service))))) {
      // A GRPCRoute whose backend cannot be called: UNAVAILABLE, as the Gateway API says.
      if (info) info.grpcStatus = GRPC_CODES.unavailable;
      refuseGrpc(stream, GRPC_CODES.unavailable, routed.kind === 'unavailable' ? routed.message : `route ${routed.route}: service ${routed.service}: not found`);
      return closed;
    }
    const named = headers[MESH_SERVICE_HEADER];
    const service = routed?.service ?? this.serviceOf?.() ?? (await this.names.resolve(call.grpcService, headers[':authority'] as string | undefined, typeof named === 'string' ? named : undefined));
    if (routed) headers = routed.requestHeaders;
    if (!service) {
      if (info) info.grpcStatus = GRPC_CODES.unimplemented;
      refuseGrpc(stream, GRPC_CODES.unimplemented, `no mesh service serves ${call.grpcService} (register its nodes with grpc_service=${call.grpcService}, or name the service in :authority or mesh-service)`);
      return closed;
    }
    try {
      await this.fe.authorizeCall?.(req, res, service, `${call.grpcService}.${call.method}`);
    } catch (err) {
      const e = err instanceof MeshError ? err : undefined;
      const code = e ? grpcCodeOfHttp(e.code) : GRPC_CODES.internal;
      if (info) info.grpcStatus = code;
      refuseGrpc(stream, code, e?.detail ?? 'refused');
      return closed;
    }
    let budget = parseGrpcTimeout(headers['grpc-timeout'] as string | undefined);
    let meshTimeout: number | undefined;
    try {
      meshTimeout = meshTimeoutOf(headers);
    } catch {
      meshTimeout = undefined; // a malformed Mesh-Timeout: the grpc-timeout alone
    }
    if (meshTimeout !== undefined) budget = budget === undefined ? meshTimeout : Math.min(budget, meshTimeout);
    if (info) info.upstreamCluster = service;
    const edge = this.fe.edge;
    // A client span (OpenTelemetry's RPC conventions) covers the call to the nodes, retries included, and is their parent.
    const hop = hopTrace(this.fe, req, ctx);
    const span = edge.tracer?.startSpan(`${call.grpcService}/${call.method}`, SpanKind.CLIENT, hop, {
      'rpc.system': 'grpc',
      'rpc.service': call.grpcService,
      'rpc.method': call.method,
      'server.address': service,
    });
    passGrpcCall(stream, headers, {
      clusters: edge.clusters,
      connections: this.connections,
      service,
      retries: edge.settings.clientRetries,
      retryOn: edge.settings.grpcRetryOn,
      trace: span ? traceOf(span) : hop,
      onRetry: () => this.stats.retried(service, call.grpcService, call.method),
      acquireTimeoutMs: edge.settings.clientRequestTimeoutMs,
      deadline: budget === undefined ? undefined : Date.now() + budget,
      maxMessageBytes: this.fe.maxBodyBytes,
      compatTrailers,
      version: routed?.version,
      answerHeaders: routed?.responseHeaders,
      tap: routed && routed.mirrors.length > 0 ? this.mirror.tap(routed.mirrors, headers) : undefined,
      onStatus: (code, host) => {
        if (info) {
          if (host) info.upstreamHost = host;
          info.grpcStatus = code;
        }
        this.stats.record(service, call.grpcService, call.method, code);
        if (span) {
          span.setAttribute('rpc.grpc.status_code', code);
          if (code !== GRPC_CODES.ok) failSpan(span, grpcCodeName(code), String(code));
          span.end();
        }
      },
    });
    return closed;
  }

  /** Answers a call refused before it was looked at (authorization): its gRPC status. */
  refuse(req: FrontRequest, err: MeshError): void {
    if (!isHttp2Request(req)) return;
    const info = requestInfo(req);
    const code = grpcCodeOfHttp(err.code);
    if (info) info.grpcStatus = code;
    refuseGrpc(req.stream, code, err.detail);
  }

  /** Closes the connections to the nodes (shutdown): calls in flight finish first. */
  close(): void {
    this.connections.close();
  }
}
