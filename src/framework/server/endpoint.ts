/**
 * What a framework service serves: an endpoint's definition, its handler, and the context a handler
 * gets. The RPC server (rpc-server.ts), streams (stream-server.ts) and the gRPC server
 * (grpc-server.ts) all serve these.
 */
import type { Type } from 'protobufjs';
import type { Metadata } from '../../engines/registry/registry.js';
import type { StreamKind } from '../../core/transport/frames.js';

export interface HandlerContext {
  id: string;
  service: string;
  endpoint: string;
  /** The caller's end-to-end headers. */
  metadata: Record<string, string>;
  /** Epoch ms after which the caller no longer waits. */
  deadline: number;
  /** The call's trace id (the caller's, or a new trace when none came). */
  traceId: string;
  /** This call's own span id: the parent of the calls and messages the handler sends. */
  spanId: string;
  /**
   * The caller's workload identity: the SPIFFE ID of the certificate it called with over mutual
   * TLS (`spiffe://<trust_domain>/svc/<caller>`), or undefined for a caller without one (plain).
   */
  peer?: string;
}

export type Handler = (request: any, ctx: HandlerContext) => unknown | Promise<unknown>; // eslint-disable-line @typescript-eslint/no-explicit-any -- handlers type their own requests

export interface EndpointDefinition {
  /** `Endpoint.Method`, e.g. `Say.Hello`. */
  name: string;
  handler: Handler;
  /** Needed to accept and answer application/protobuf. */
  requestType?: Type;
  responseType?: Type;
  /** Endpoint metadata for the gateway router: handler, method, path, host, description; `stream` for streams. */
  metadata?: Metadata;
  /**
   * A streaming endpoint (src/framework/server/stream-server.ts): `server` (the handler returns an async
   * iterable of answers), `client` (it gets an async iterable of requests and returns one
   * answer) or `bidi` (both). Absent: a unary call.
   */
  stream?: StreamKind;
}
