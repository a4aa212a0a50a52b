/**
 * A framework service: an RpcServer plus its registry lifecycle. Registers with --register_ttl,
 * refreshes every --register_interval, withdraws itself while the admin says draining, and on
 * shutdown deregisters first (the runtime's drain turns the state to draining), then keeps serving
 * for --drain_delay and lets in-flight calls finish (up to --drain_timeout).
 */
import { randomUUID } from 'node:crypto';
import type { Runtime } from '../../process/runtime.js';
import type { Metadata, Service as ServiceRecord } from '../../engines/registry/registry.js';
import { RegistryValidationError, reservedServiceProblem, validateService } from '../../engines/registry/validate.js';
import { advertisedAddress, parseAddress, parseAdvertise } from '../../base/util/address.js';
import { serverLimits } from '../../base/http/lifecycle.js';
import { EndpointStats } from '../../base/stats/endpoint-stats.js';
import type { GrpcServer } from './grpc-server.js';
import { isStreamKind, type StreamKind } from '../../core/transport/frames.js';
import type { StreamContext } from './stream-server.js';
import { RpcServer } from './rpc-server.js';
import type { EndpointDefinition, Handler, HandlerContext } from './endpoint.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import type { ServiceAuthz } from '../../edge/auth/authz.js';
import { MTLS_METADATA_KEY, type WorkloadTls } from '../../base/mtls/workload-tls.js';

/**
 * A streaming handler: `request` is the one request of a server stream, or the async iterable of
 * requests of a client or bidi stream; see Service.stream.
 */
export type StreamHandler = (request: any, ctx: StreamContext) => unknown; // eslint-disable-line @typescript-eslint/no-explicit-any -- handlers type their own requests

/** A handler with typed request and answer (the answer may be a promise). */
export type TypedHandler<TReq, TRes> = (request: TReq, ctx: HandlerContext) => TRes | Promise<TRes>;

export interface ServiceOptions {
  name: string;
  version?: string;
  /** Listen address host:port; default the `address` option of the mesh (127.0.0.1:0, a free port). */
  address?: string;
  /** Address registered instead of the listen address. */
  advertise?: string;
  metadata?: Metadata;
}

export class Service {
  readonly server: RpcServer;
  readonly nodeId: string;
  private record?: ServiceRecord;
  /** With --server_protocol=grpc: the gRPC server that serves the handlers instead of the RPC server. */
  private grpcServer?: GrpcServer;
  private refreshTimer?: NodeJS.Timeout;
  private registered = false;
  private stopped = false;
  /** --stats_endpoints: this service's per-endpoint stats (shared by its RPC or gRPC server). */
  private readonly endpointStats?: EndpointStats;

  constructor(
    private readonly runtime: Runtime,
    private readonly options: ServiceOptions,
    /** @internal the process's authorization (--authz_rules), checked where each call arrives. */
    private readonly authz?: ServiceAuthz,
  ) {
    this.nodeId = `${options.name}-${randomUUID()}`;
    this.endpointStats = runtime.options.statsEndpoints ? new EndpointStats(runtime.stats, options.name) : undefined;
    this.server = new RpcServer({
      service: options.name,
      maxBodyBytes: runtime.options.maxBodySize,
      logger: runtime.logging.get('server'),
      isLive: () => runtime.state.state === 'live',
      limits: serverLimits(runtime.options),
      stats: runtime.stats,
      codecs: runtime.codecs,
      context: runtime.context,
      tracer: runtime.tracer,
      authz,
      endpointStats: this.endpointStats,
    });
    runtime.addServiceName(options.name);
    this.server.handle({ name: 'Debug.Health', handler: () => ({ status: 'ok' }) });
  }

  get name(): string {
    return this.options.name;
  }

  /**
   * Adds an endpoint: `handle('Say.Hello', (req, ctx) => answer)`, or the object form
   * `handle({ name, handler, metadata, requestType, responseType })`.
   */
  handle<TReq = any, TRes = unknown>(name: string, handler: TypedHandler<TReq, TRes>, options?: Omit<EndpointDefinition, 'name' | 'handler'>): this; // eslint-disable-line @typescript-eslint/no-explicit-any -- untyped by default, like a JSON body
  handle(def: EndpointDefinition): this;
  handle(nameOrDef: string | EndpointDefinition, handler?: Handler, options: Omit<EndpointDefinition, 'name' | 'handler'> = {}): this {
    if (typeof nameOrDef === 'string') {
      if (typeof handler !== 'function') throw new TypeError(`handle("${nameOrDef}"): the handler must be a function`);
      this.server.handle({ ...options, name: nameOrDef, handler });
    } else {
      this.server.handle(nameOrDef);
    }
    return this;
  }

  /**
   * Adds a streaming endpoint, advertised with endpoint metadata `stream: <kind>`:
   * - `server`: `(request, ctx) => AsyncIterable<answer>` (an async generator);
   * - `client`: `(requests: AsyncIterable, ctx) => answer`;
   * - `bidi`: `(requests: AsyncIterable, ctx) => AsyncIterable<answer>`.
   * `ctx.signal` aborts when the caller goes away or the deadline passes.
   */
  stream(name: string, handler: StreamHandler, options: Omit<EndpointDefinition, 'name' | 'handler' | 'stream'> & { kind: StreamKind }): this {
    if (typeof handler !== 'function') throw new TypeError(`stream("${name}"): the handler must be a function`);
    const { kind, ...rest } = options ?? ({} as { kind: StreamKind });
    if (!isStreamKind(kind)) throw new TypeError(`stream("${name}"): kind must be server, client or bidi (got ${String(kind)})`);
    this.server.handle({ ...rest, name, handler: handler as Handler, stream: kind, metadata: { ...rest.metadata, stream: kind } });
    return this;
  }

  /** Listens, registers, and keeps the registration alive. Resolves with the registered record. */
  async start(): Promise<ServiceRecord> {
    // The registry's rules, checked before anything listens: a bad name fails here, naming the field.
    validateService({ name: this.options.name, version: this.options.version ?? 'latest', metadata: { ...this.options.metadata }, endpoints: [], nodes: [] }, false);
    const reserved = reservedServiceProblem(this.options.name);
    if (reserved) throw new RegistryValidationError(`Name: ${reserved}`);
    const { host, port } = parseAddress(this.options.address ?? this.runtime.options.address);
    const advertise = this.options.advertise ?? this.runtime.options.advertise;
    if (advertise?.trim()) parseAdvertise(advertise); // a bad value fails before anything listens
    const grpcMode = this.runtime.options.serverProtocol === 'grpc';
    let boundPort: number;
    let workload: WorkloadTls | undefined;
    if (grpcMode) {
      const schema = this.runtime.grpcSchema;
      if (!schema) throw new SchemaOptionError('proto_path', `{server_protocol}=grpc: service ${this.options.name} needs its .proto files ({proto_path})`);
      // With --mtls=strict the gRPC server serves mutual TLS only (gRPC cannot share a port with plaintext, so permissive serves plain).
      const own = await this.runtime.workloadTls(this.options.name);
      // Loaded here: a service serving the mesh wire does not carry grpc-js.
      const { GrpcServer } = await import('./grpc-server.js');
      this.grpcServer = new GrpcServer(
        { service: this.options.name, schema, drainTimeoutMs: this.runtime.options.drainTimeout, maxBodyBytes: this.runtime.options.maxBodySize, logger: this.runtime.logging.get('server'), context: this.runtime.context, tracer: this.runtime.tracer, authz: this.authz, workload: own, endpointStats: this.endpointStats },
        this.server.listEndpoints(),
      );
      boundPort = await this.grpcServer.listen(host, port);
      if (this.grpcServer.mutualTls) workload = own;
      this.runtime.addDrainable(this.grpcServer);
    } else {
      // With --mtls, the service's own certificate: its server terminates mutual TLS and its node says so.
      workload = await this.runtime.workloadTls(this.options.name);
      boundPort = (await this.server.listen(host, port, workload)).port;
      this.runtime.addDrainable(this.server);
    }
    const advertised = advertisedAddress({ host, port: boundPort }, advertise);
    const grpcServices = this.grpcServer?.services ?? [];
    const record: ServiceRecord = {
      name: this.options.name,
      version: this.options.version ?? 'latest',
      metadata: { ...this.options.metadata },
      endpoints: this.server.listEndpoints().map((e) => ({ name: e.name, metadata: { ...e.metadata } })),
      nodes: [
        {
          id: this.nodeId,
          address: advertised.host,
          port: advertised.port,
          metadata: {
            protocol: grpcMode ? 'grpc' : 'mesh',
            transport: grpcMode ? 'grpc' : 'http',
            ...(grpcServices.length === 1 ? { grpc_service: grpcServices[0]! } : {}),
            registry: this.runtime.registry.name,
            broker: this.runtime.brokerName,
            ...(workload ? { [MTLS_METADATA_KEY]: 'true' } : {}),
          },
        },
      ],
    };
    try {
      validateService(record);
    } catch (err) {
      await this.server.close();
      await this.grpcServer?.close();
      throw err;
    }
    this.record = record;
    await this.register();
    const interval = this.runtime.options.registerInterval;
    if (interval > 0) {
      this.refreshTimer = setInterval(() => {
        if (this.runtime.state.state === 'live') void this.register();
      }, interval);
      this.refreshTimer.unref();
    }
    this.runtime.state.onFail(() => this.deregister());
    this.runtime.state.onOk(() => this.register());
    this.runtime.onShutdown(() => this.stop());
    this.runtime.logging.get('server').info({ service: this.options.name, node: this.nodeId, address: `${advertised.host}:${advertised.port}` }, 'service started');
    return this.record;
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    await this.deregister();
    await this.server.close();
    await this.grpcServer?.close();
  }

  private async register(): Promise<void> {
    if (!this.record || this.stopped) return;
    try {
      await this.runtime.registry.register(this.record, { ttlMs: this.runtime.options.registerTtl });
      this.registered = true;
    } catch (err) {
      this.runtime.logging.get('registry').error({ err: (err as Error).message, service: this.options.name }, 'registration failed; will retry');
    }
  }

  private async deregister(): Promise<void> {
    if (!this.record || !this.registered) return;
    this.registered = false;
    try {
      await this.runtime.registry.deregister(this.record);
    } catch (err) {
      this.runtime.logging.get('registry').error({ err: (err as Error).message, service: this.options.name }, 'deregistration failed');
    }
  }
}
