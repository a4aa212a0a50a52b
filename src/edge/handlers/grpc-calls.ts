/**
 * The gRPC calls of a front end (gateway, sidecar, `mesh proxy`): native gRPC over HTTP/2 when the
 * front serves HTTP/2 (./grpc-native.ts), and gRPC-Web over HTTP/1.1 or HTTP/2 always
 * (./grpc-web.ts), both served through one NativeGrpc: the same connections to the nodes, service
 * names, route-file GRPCRoutes, stats and access log. The route phase asks `route`, the handle
 * phase `handle`; a front's auth step passes its answer through `authorized`.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { CallContext } from '../../base/util/call-context.js';
import type { WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { EdgeHandlerContext } from './front-end.js';
import type { CompiledGrpcRoutes } from '../routes/grpc-route.js';
import { NativeGrpc, type NativeGrpcCall } from './grpc-native.js';
import { GrpcWeb, grpcHeadersOf, type GrpcWebCall } from './grpc-web.js';

/** A gRPC call the route phase found: native (HTTP/2) or gRPC-Web. */
export type GrpcCall = NativeGrpcCall | GrpcWebCall;

export interface GrpcCallsOptions {
  /** The front serves HTTP/2 (--enable_http2, a listener's `http2: true`): native calls are served. */
  http2: boolean;
  /** The caller's workload certificate for the hop to a node (mutual TLS). */
  workload: () => WorkloadTls | undefined;
  /** The route file's GRPCRoutes in use, tried before the service names. */
  routes?: () => CompiledGrpcRoutes | undefined;
}

export class GrpcCalls {
  readonly native: NativeGrpc;
  private readonly web: GrpcWeb;
  private readonly http2: boolean;

  constructor(fe: EdgeHandlerContext, options: GrpcCallsOptions) {
    this.http2 = options.http2;
    this.native = new NativeGrpc(fe, options.workload, undefined, options.routes);
    this.web = new GrpcWeb(this.native, fe.maxBodyBytes, fe.errorId);
  }

  /** True for a request that may be a native gRPC call: its grpc-timeout bounds it, not --request_timeout. */
  untimed(req: FrontRequest): boolean {
    return this.http2 && this.native.untimed(req);
  }

  /** The call a request is (a gRPC content type at `/<package.Service>/<Method>`), else undefined. */
  route(req: FrontRequest, path: string): GrpcCall | undefined {
    return (this.http2 ? this.native.route(req, path) : undefined) ?? this.web.route(req, path);
  }

  /**
   * The call as `table` (a listener's GRPCRoutes) routes it, matched on the headers its node gets
   * (a gRPC-Web call's metadata, a gRPC content type); undefined when no GRPCRoute takes it.
   */
  routeBy(table: CompiledGrpcRoutes, req: FrontRequest, call: GrpcCall): GrpcCall | undefined {
    const headers = call.kind === 'grpc' ? req.headers : grpcHeadersOf(req, call);
    const routed = table.match({ path: `/${call.grpcService}/${call.method}`, authority: (headers[':authority'] as string | undefined) ?? req.headers.host, headers });
    return routed && { ...call, routed };
  }

  /**
   * The front's auth step for a call (`checked`: its answer): a gRPC-Web call's refusal is kept on
   * the call and answered by its handler as a gRPC status (a browser reads no error JSON there).
   */
  authorized(call: GrpcCall, checked: Promise<void> | undefined): Promise<void> | undefined {
    return call.kind === 'grpc-web' && checked ? checked.catch((err: unknown) => void (call.refused = err)) : checked;
  }

  /** Serves the call; resolves when its answer closed. */
  handle(req: FrontRequest, res: FrontResponse, call: GrpcCall, ctx?: CallContext): Promise<void> {
    return call.kind === 'grpc' ? this.native.handle(req, res, call, ctx) : this.web.handle(req, res, call, ctx);
  }

  /** Closes the connections to the nodes (shutdown): calls in flight finish first. */
  close(): void {
    this.native.close();
  }
}
