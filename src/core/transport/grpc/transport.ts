/**
 * The client side of gRPC: a node whose registry metadata says `protocol=grpc` is called over
 * HTTP/2 with @grpc/grpc-js instead of the mesh wire. It takes the same RpcRequest and settles
 * the same way as sendRpc (src/core/transport/rpc.ts): an RpcResponse (a gRPC status becomes its HTTP
 * status and mesh error JSON), or a TransportError whose outcome the cluster manager accounts
 * for (connect failure, reset, timeout, cancelled). The client's retries, deadlines, load
 * balancing and outlier detection therefore treat a gRPC node like any other.
 *
 * grpc-js is loaded with the first call to a gRPC node, so a process that never makes one (most
 * sidecars) does not carry it.
 */
import type * as grpc from '@grpc/grpc-js';
import type pino from 'pino';
import { badGateway, badRequest, ERROR_IDS, grpcContentType, notImplemented } from '../../../base/errors.js';
import { mediaType } from '../../../base/codec/codec.js';
import type { UpstreamTarget } from '../../upstream/types.js';
import { TransportError, type RpcControl, type RpcRequest, type RpcResponse } from '../rpc.js';
import { streamKindOf, type GrpcMethod, type GrpcSchema } from './protos.js';
import { decodeToJson, encodeJson, JsonShapeError } from './json.js';
import { meshErrorOfGrpc, transportFailure } from './status.js';
import { reflectionTypes, reflectSchema, ReflectionError } from './reflection.js';
import type { StreamOpener } from '../../client/stream.js';
import type { StreamKind } from '../frames.js';
import { GrpcStreamCall } from './stream.js';
import { ChannelRefused, channelSecurity, type ChannelSecurity } from './credentials.js';
import { spiffeIdOf, type WorkloadTls } from '../../../base/mtls/workload-tls.js';

/** Sends one try of a call to one node; the shape of sendRpc without the dispatcher. */
export type RpcSender = (request: RpcRequest, control: RpcControl) => Promise<RpcResponse>;

/** The node metadata value that makes a node a gRPC backend. */
export const GRPC_PROTOCOL = 'grpc';
/** Node metadata: the full name of the gRPC service an endpoint whose service part names none is sent to. */
export const GRPC_SERVICE_KEY = 'grpc_service';

const JSON_TYPE = 'application/json';
const PROTOBUF_TYPES = new Set(['application/protobuf', 'application/x-protobuf', 'application/grpc+proto']);
/** Channels kept at most; the least recently used one is closed beyond. */
const MAX_CHANNELS = 1024;
/** How long the schema a node's reflection service gave is used before it is asked again. */
const REFLECTION_TTL_MS = 60_000;
/** Metadata names gRPC or HTTP/2 reserve: never forwarded. */
const RESERVED = new Set(['content-type', 'content-length', 'te', 'host', 'user-agent', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'authority']);

export interface GrpcTransportOptions {
  /** The loaded .proto files; undefined when none were given. */
  schema?: GrpcSchema;
  /** Largest response message accepted. */
  maxResponseBytes?: number;
  logger?: pino.Logger;
  /** Ask a node's reflection service for a method the loaded protos do not have. Default true. */
  reflection?: boolean;
  /** This process's workload certificate (--mtls), once it has one: mutual TLS to nodes with `mtls=true` (credentials.ts). */
  workload?: () => WorkloadTls | undefined;
  /** `--grpc_tls_ca_file`'s contents: the roots for nodes with `tls=true`; none: the system's. */
  tlsRoots?: Buffer;
}

interface Channel {
  client: grpc.Client;
  kind: ChannelSecurity['kind'];
  /** The workload context an mTLS channel was made with: a renewal replaces the channel. */
  context?: unknown;
  forget?: () => void;
}

export class GrpcTransport {
  /**
   * One channel per host (not per address: two clusters that share an address count their own
   * connections), least recently used first.
   */
  private readonly channels = new Map<UpstreamTarget, Channel>();
  /** Schemas of the nodes' reflection services, by host key. */
  private readonly reflections = new Map<string, { at: number; schema: Promise<GrpcSchema> }>();
  private reflectionTypes?: ReturnType<typeof reflectionTypes>;
  /** Hosts whose refusal (strict mode, a plain node) was logged. */
  private readonly refusedLogged = new WeakSet<object>();

  /** grpc-js, once loaded (loaded()). */
  private lib?: typeof grpc;
  private loading?: Promise<typeof grpc>;

  constructor(private readonly options: GrpcTransportOptions) {}

  /** Runs `then` with grpc-js loaded: at once when it is, else once its import settled. */
  private loaded<T>(then: (lib: typeof grpc) => T | Promise<T>): T | Promise<T> {
    if (this.lib) return then(this.lib);
    this.loading ??= import('@grpc/grpc-js').then((lib) => (this.lib = lib));
    return this.loading.then(then);
  }

  /** grpc-js, for the code that runs only after loaded(). */
  private get grpc(): typeof grpc {
    if (!this.lib) throw new Error('grpc-js is not loaded yet');
    return this.lib;
  }

  /** The sender of a gRPC node (metadata `protocol=grpc`); undefined for any other node. */
  senderFor(target: UpstreamTarget): RpcSender | undefined {
    if (target.metadata.protocol !== GRPC_PROTOCOL) return undefined;
    return (request, control) => Promise.resolve(this.loaded(() => this.unary(target, request, control)));
  }

  /**
   * One unary call. Throws a MeshError before anything is sent when the call cannot be made
   * (no such method: 501; a body that does not fit the request message: 400; a content type
   * with no protobuf meaning: 415): not the node's fault, so the client does not retry it.
   */
  unary(target: UpstreamTarget, request: RpcRequest, control?: RpcControl): Promise<RpcResponse> {
    const unaryOnly = (m: GrpcMethod): GrpcMethod => {
      const kind = streamKindOf(m);
      if (kind !== 'unary') throw badRequest(ERROR_IDS.client, `${m.path} is a ${kind} stream: open it as a stream (a WebSocket, Server-Sent Events, Mesh.stream)`);
      return m;
    };
    const found = this.method(request.endpoint, target, this.options.schema);
    if ('method' in found) return this.send(target, unaryOnly(found.method), request, control);
    return this.resolveMethod(target, request.service, request.endpoint, request.timeoutMs, found.error).then((m) => this.send(target, unaryOnly(m), request, control));
  }

  /** The stream opener of a gRPC node (metadata `protocol=grpc`); undefined for any other node. */
  streamFor(target: UpstreamTarget): StreamOpener | undefined {
    if (target.metadata.protocol !== GRPC_PROTOCOL) return undefined;
    return (request) =>
      new GrpcStreamCall(request, target, {
        // The method is found first, and grpc-js loaded meanwhile: channel() and metadata() come after.
        method: () =>
          this.loaded(() => {
            const found = this.method(request.endpoint, target, this.options.schema);
            if ('method' in found) return found.method;
            // Reflection within the stream's deadline, or 10 s when it has none.
            return this.resolveMethod(target, request.service, request.endpoint, request.timeoutMs > 0 ? request.timeoutMs : 10_000, found.error);
          }),
        channel: () => this.channel(target, request.service),
        metadata: (metadata, id) => toMetadata(this.grpc, metadata, id),
      });
  }

  /**
   * The kind of the method of an endpoint (`unary`, `server`, `client`, `bidi`) on a node: from
   * the loaded protos, else from the node's reflection service, asked as for a call (kept a
   * minute per node, deadline timeoutMs). Rejects with a MeshError 501 when neither has the
   * method, or the TransportError of a node that did not answer (connect failure, timeout).
   */
  methodKind(service: string, endpoint: string, node: Pick<UpstreamTarget, 'key' | 'metadata'>, timeoutMs: number): Promise<'unary' | StreamKind> {
    // A method is found with the node's key (its channel, its reflection) and metadata only.
    const target = node as UpstreamTarget;
    const found = this.method(endpoint, target, this.options.schema);
    if ('method' in found) return Promise.resolve(streamKindOf(found.method));
    return Promise.resolve(this.loaded(() => this.resolveMethod(target, service, endpoint, timeoutMs, found.error))).then(streamKindOf);
  }

  /**
   * The method of an endpoint the loaded protos do not have, from the node's reflection service.
   * A refusal is a MeshError (the client does not count it against the node).
   */
  private resolveMethod(target: UpstreamTarget, service: string, endpoint: string, timeoutMs: number, protoError: string): Promise<GrpcMethod> {
    if (this.options.reflection === false) return Promise.reject(notImplemented(ERROR_IDS.client, protoError));
    return this.reflected(target, service, timeoutMs, protoError).then((schema) => {
      const again = this.method(endpoint, target, schema);
      if ('error' in again) throw notImplemented(ERROR_IDS.client, `${again.error} (the node's reflection service)`);
      return again.method;
    });
  }

  /**
   * The schema of a node's reflection service, asked once and kept for a minute per node (so is
   * its lack); a MeshError 501 when the node offers none (a connection failure rejects as a
   * TransportError and is asked again next time).
   */
  private reflected(target: UpstreamTarget, service: string, timeoutMs: number, protoError: string): Promise<GrpcSchema> {
    const key = target.key;
    const cached = this.reflections.get(key);
    if (cached && Date.now() - cached.at < REFLECTION_TTL_MS) return cached.schema;
    let client: grpc.Client;
    try {
      client = this.channel(target, service);
    } catch (err) {
      return Promise.reject(err);
    }
    const lib = this.grpc;
    const schema = reflectSchema(lib, client, Date.now() + Math.max(1, timeoutMs), (this.reflectionTypes ??= reflectionTypes())).catch((err: unknown) => {
      // A node without reflection is remembered for the minute too; a failed connection is not.
      if (err instanceof ReflectionError) {
        const why = err.code === lib.status.UNIMPLEMENTED ? 'the node offers no reflection service' : err.message;
        throw notImplemented(ERROR_IDS.client, `${protoError}, and ${why}`);
      }
      this.reflections.delete(key);
      const e = err as grpc.ServiceError;
      throw transportFailure(e, e.code === lib.status.DEADLINE_EXCEEDED) ?? new TransportError({ kind: 'reset' }, `reflection: ${e.details ?? String(err)}`);
    });
    this.reflections.delete(key);
    this.reflections.set(key, { at: Date.now(), schema });
    if (this.reflections.size > MAX_CHANNELS) this.reflections.delete(this.reflections.keys().next().value as string);
    return schema;
  }

  /** Encodes the request for a known method and sends it; MeshError for a body that does not fit. */
  private send(target: UpstreamTarget, method: GrpcMethod, request: RpcRequest, control?: RpcControl): Promise<RpcResponse> {
    const type = mediaType(request.contentType);
    let body: Buffer;
    if (type === JSON_TYPE || type === '') {
      let value: unknown;
      try {
        value = request.body.byteLength === 0 ? {} : JSON.parse(Buffer.from(request.body).toString('utf8'));
      } catch (err) {
        throw badRequest(ERROR_IDS.client, `request body is not valid JSON: ${(err as Error).message}`);
      }
      try {
        body = Buffer.from(encodeJson(method.requestType, value));
      } catch (err) {
        if (err instanceof JsonShapeError) throw badRequest(ERROR_IDS.client, `${method.path}: ${err.message}`);
        throw badRequest(ERROR_IDS.client, `${method.path}: encoding the request: ${(err as Error).message}`);
      }
    } else if (PROTOBUF_TYPES.has(type)) {
      body = Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength);
    } else {
      throw grpcContentType(ERROR_IDS.client, type);
    }
    const asJson = !PROTOBUF_TYPES.has(type);
    const metadata = toMetadata(this.grpc, request.metadata, request.id, request.traceparent, request.tracestate);
    let client: grpc.Client;
    try {
      client = this.channel(target, request.service);
    } catch (err) {
      return Promise.reject(err);
    }
    const started = Date.now();
    return new Promise<RpcResponse>((resolve, reject) => {
      let cancelled: TransportError | undefined;
      const call = client.makeUnaryRequest<Buffer, Buffer>(
        method.path,
        (b) => b,
        (b) => b,
        body,
        metadata,
        { deadline: started + Math.max(1, request.timeoutMs) },
        (err, value) => {
          if (cancelled) return reject(cancelled);
          if (!err) {
            let out: Buffer;
            try {
              out = asJson ? Buffer.from(decodeToJson(method.responseType, value ?? Buffer.alloc(0))) : (value ?? Buffer.alloc(0));
            } catch (e) {
              // The node answered with bytes that are not the declared message.
              const m = badGateway(method.service, `${method.path}: decoding the response: ${(e as Error).message}`);
              return resolve({ status: 502, contentType: JSON_TYPE, body: Buffer.from(m.toBody()) });
            }
            return resolve({ status: 200, contentType: asJson ? JSON_TYPE : 'application/protobuf', body: out });
          }
          const failure = transportFailure(err, Date.now() - started >= request.timeoutMs);
          if (failure) return reject(failure);
          const m = meshErrorOfGrpc(method.service, err.code, err.details);
          resolve({ status: m.code, contentType: JSON_TYPE, body: Buffer.from(m.toBody()) });
        },
      );
      if (control) {
        control.cancel = (reason) => {
          cancelled ??= new TransportError({ kind: 'cancelled' }, reason);
          call.cancel();
        };
      }
    });
  }

  /**
   * The method of an endpoint `Service.Method` (Service: a full or unique short name); when
   * Service names no loaded service, the node's metadata `grpc_service` (a full name) is the
   * service.
   */
  private method(endpoint: string, target: UpstreamTarget, schema: GrpcSchema | undefined): { method: GrpcMethod } | { error: string } {
    if (!schema) return { error: `${endpoint}: no .proto files loaded for gRPC backends (--proto_path)` };
    let found = schema.lookup(endpoint);
    const fallback = target.metadata[GRPC_SERVICE_KEY];
    if ('error' in found && fallback && !schema.hasService(endpoint.slice(0, endpoint.lastIndexOf('.')))) {
      found = schema.lookup(`${fallback}.${endpoint.slice(endpoint.lastIndexOf('.') + 1)}`);
    }
    return found;
  }

  /**
   * The channel of a node, created on first use; the least recently used beyond MAX_CHANNELS is
   * closed, and so is a host's when it leaves its cluster. Its connection is counted in the
   * host's cx_* stats (watchConnections).
   */
  private channel(target: UpstreamTarget, service: string): grpc.Client {
    const kept = this.channels.get(target);
    const workload = this.options.workload?.();
    if (kept && (kept.kind !== 'mtls' || kept.context === workload?.secureContext())) {
      this.channels.delete(target);
      this.channels.set(target, kept);
      return kept.client;
    }
    if (kept) {
      // The workload certificate was renewed (or the roots changed): calls in flight finish on the old channel.
      this.channels.delete(target);
      kept.forget?.();
      kept.client.close();
    }
    let security: ChannelSecurity;
    try {
      security = channelSecurity(this.grpc, target.key, target.metadata, workload ? spiffeIdOf(workload.trustDomain, service) : '', { workload, tlsRoots: this.options.tlsRoots });
    } catch (err) {
      if (!(err instanceof ChannelRefused)) throw err;
      // Once per host (it is refused at every call until its registration changes).
      if (!this.refusedLogged.has(target)) {
        this.refusedLogged.add(target);
        this.options.logger?.warn({ host: target.key, service }, err.message);
      }
      throw new TransportError({ kind: 'connect_failure' }, err.message);
    }
    const client = new this.grpc.Client(target.key, security.credentials, {
      ...security.options,
      'grpc.max_receive_message_length': this.options.maxResponseBytes ?? 64 * 1024 * 1024,
      // The mesh client retries, on another host; gRPC's own retries would hide failures from it.
      'grpc.enable_retries': 0,
      // A node that comes back is tried again within a second (grpc-js would wait up to 2 min).
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
    });
    watchConnections(this.grpc, client.getChannel(), target);
    const entry: Channel = { client, kind: security.kind, context: security.kind === 'mtls' ? workload!.secureContext() : undefined };
    this.channels.set(target, entry);
    // A host that already left its cluster keeps its channel here until it is the oldest.
    entry.forget = target.onClose?.(() => {
      if (this.channels.get(target) === entry) this.channels.delete(target);
      client.close();
    });
    if (this.channels.size > MAX_CHANNELS) {
      const [oldest, c] = this.channels.entries().next().value as [UpstreamTarget, typeof entry];
      this.channels.delete(oldest);
      c.forget?.();
      c.client.close();
    }
    return client;
  }

  /** Closes every channel. */
  close(): void {
    for (const c of this.channels.values()) {
      c.forget?.();
      c.client.close();
    }
    this.channels.clear();
    this.reflections.clear();
  }
}

/**
 * Reports the connection of a channel to its host, on the channel's connectivity events (no
 * polling): READY is a connection opened, leaving READY one closed, CONNECTING → TRANSIENT_FAILURE
 * a connection that failed. SHUTDOWN (the channel closed) ends the watch.
 */
function watchConnections(lib: typeof grpc, channel: ReturnType<grpc.Client['getChannel']>, target: UpstreamTarget): void {
  const { READY, CONNECTING, TRANSIENT_FAILURE, SHUTDOWN } = lib.connectivityState;
  let state = channel.getConnectivityState(false);
  const watch = (): void =>
    channel.watchConnectivityState(state, Infinity, (err?: Error) => {
      // Only a deadline gives an error, and there is none.
      if (err) return;
      const next = channel.getConnectivityState(false);
      if (state === READY && next !== READY) target.connectionClosed?.();
      else if (next === READY && state !== READY) target.connectionOpened?.();
      else if (next === TRANSIENT_FAILURE && state === CONNECTING) target.connectionFailed?.();
      state = next;
      if (next !== SHUTDOWN) watch();
    });
  watch();
}

/**
 * The call's metadata: the caller's end-to-end headers that gRPC allows, the request id and the
 * trace context (given apart, or as `traceparent`/`tracestate` of the metadata).
 */
function toMetadata(lib: typeof grpc, given: Record<string, string> | undefined, id: string, traceparent?: string, tracestate?: string): grpc.Metadata {
  const md = new lib.Metadata();
  if (given) {
    for (const name in given) {
      const key = name.toLowerCase();
      if (RESERVED.has(key) || ((key === 'traceparent' || key === 'tracestate') && traceparent) || key.startsWith('grpc-') || key.startsWith(':') || key.endsWith('-bin') || !/^[0-9a-z_.-]+$/.test(key)) continue;
      const value = given[name]!;
      if (!/^[\x20-\x7e]*$/.test(value)) continue;
      md.add(key, value);
    }
  }
  md.set('mesh-id', id);
  // W3C trace context travels as gRPC metadata of the same names.
  if (traceparent) md.set('traceparent', traceparent);
  if (tracestate) md.set('tracestate', tracestate);
  return md;
}
