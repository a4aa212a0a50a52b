/**
 * Builds one process's parts from its resolved options (src/process/options.ts), once: logging, stats store, registry, broker,
 * cluster manager, client, TLS provider, health state and admin interface. Everything else receives the runtime;
 * nothing lives in module globals. Front ends register what admin /routes and /certs list
 * (addRouteSource, addCertificateSource); the admin reads the sources at each request, so the
 * order in which a process builds its parts does not matter.
 */
import { redactUrl } from '../base/util/redact.js';
import type { ResolvedOptions } from './options.js';
import { CodecSet } from '../base/codec/codec.js';
import { Logging, parseLevel } from '../base/util/log.js';
import { StatsStore } from '../base/stats/store.js';
import type { Registry } from '../engines/registry/registry.js';
import { createRegistry, defaultRegistryDirectory } from '../engines/registry/create.js';
import type { Broker, Message } from '../engines/broker/broker.js';
import { stampMessageHeader } from '../engines/broker/context.js';
import { HEADER_ID } from '../core/transport/headers.js';
import { failSpan, SpanKind, traceOf } from '../base/tracing/tracer.js';
import { createBroker } from '../engines/broker/create.js';
import { ClusterManager } from '../core/upstream/cluster-manager.js';
import { retryBudgetDefaults, type StaticClusterConfig } from '../core/upstream/config.js';
import type { ClusterManagerView } from '../core/upstream/types.js';
import { Client } from '../core/client/client.js';
import { GrpcTransport } from '../core/transport/grpc/transport.js';
import { readEngineTls } from '../base/util/engine-access.js';
import { loadProtos, type GrpcSchema } from '../core/transport/grpc/protos.js';
import { ServerState, type CertificateInfo, type RouteTableDump } from '../admin/context.js';
import { AdminServer } from '../admin/server.js';
import { MetricsServer } from '../admin/metrics-server.js';
import { effectiveOptions, type ListenerInfo } from '../admin/config-dump.js';
import { ProcessMetrics } from '../base/stats/process-metrics.js';
import { serverLimits, type Drainable, type DrainResult } from '../base/http/lifecycle.js';
import type { ReusePortListening } from '../base/http/reuse-port.js';
import { SelfAddresses } from '../core/upstream/self-guard.js';
import type { TlsProvider } from '../tls/provider.js';
import { FileCertificateStore } from '../tls/file-store.js';
import { parseAcmeHosts } from '../tls/acme/hosts.js';
import { defaultAcmeCacheDir } from '../tls/acme/cache.js';
import { AcmeTlsProvider } from '../tls/acme/provider.js';
import { defaultCaDir, openWorkloadTls, type OpenedWorkloadTls } from '../tls/workload/index.js';
import { advertisedAddress, formatAddress, parseAdvertise } from '../base/util/address.js';
import { newProcessId, ProcessRecorder, type ProcessRecord } from '../engines/registry/processes.js';
import { packageVersion } from '../admin/build-info.js';
import { trafficReport, type TrafficReport } from '../admin/traffic.js';
import { CallerCounts } from '../base/http/callers.js';
import { AccessLog, AccessLogWriter, DEFAULT_ACCESS_LOG_FORMAT, compileAccessLogFormat } from '../base/http/access-log.js';
import { TapHub } from '../base/http/tap.js';
import { ContextStore } from '../base/util/call-context.js';
import { Tracer } from '../base/tracing/tracer.js';
import { SchemaOptionError } from '../base/util/option-error.js';
import { spiffeIdProblem, type WorkloadTls } from '../base/mtls/workload-tls.js';
import { listenFailure } from '../base/util/listen-error.js';
import { hostname } from 'node:os';

export interface RuntimeOptions {
  /** Who is running: names the process in logs and server_info. */
  role: string;
  /** Clusters from configuration (`mesh proxy -c FILE`), next to the registry's. */
  staticClusters?: StaticClusterConfig[];
  /**
   * False: the cluster manager has only the static clusters and no registry watch, so admin
   * /clusters says `version_info::static`. Default true.
   */
  registryClusters?: boolean;
  /**
   * Opens the workload certificate of a name (mutual TLS). Default: openWorkloadTls from the
   * options (the mesh CA in --ca_dir, or the --mtls_*_file files). Tests give certificates of
   * their own.
   */
  openWorkloadTls?: (name: string) => Promise<WorkloadTls>;
  /** The parsed command line by schema key (a CLI process): admin /config_dump shows the options the library does not have from it. */
  flags?: Readonly<Record<string, unknown>>;
  /** A worker of --concurrency whose front listeners bind with reusePort, each its own socket (src/cli/concurrency.ts). */
  reusePort?: ReusePortListening;
  /** The service this process speaks for (a sidecar's app): `mesh ps` shows it. */
  processName?: string;
}

/** Binds the listener of an address option; a bind error names the listener, who holds the address and the option to change. */
async function bindOption<T>(key: 'admin_address' | 'metrics_address', what: string, address: string, listen: () => Promise<T>): Promise<T> {
  try {
    return await listen();
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (!e.code) throw err;
    throw new SchemaOptionError(key, `${what} cannot listen on ${address}: ${listenFailure(e, address, `{${key}}`)}`);
  }
}

type ShutdownHook = () => Promise<void> | void;

/** Functions registered with the runtime, called in registration order; each add returns its removal. */
/** The same certificate listed by several sources (the mesh roots behind each workload certificate) once. */
function uniqueCertificates(certs: CertificateInfo[]): CertificateInfo[] {
  const seen = new Set<string>();
  return certs.filter((c) => {
    const key = `${c.path}\n${c.serialNumber}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

class Sources<T> {
  private readonly entries = new Set<{ read: () => T[] }>();

  add(read: () => T[]): () => void {
    const entry = { read };
    this.entries.add(entry);
    return () => {
      this.entries.delete(entry);
    };
  }

  get size(): number {
    return this.entries.size;
  }

  read(): T[] {
    const out: T[] = [];
    for (const e of this.entries) out.push(...e.read());
    return out;
  }
}

export class Runtime {
  readonly logging: Logging;
  readonly stats: StatsStore;
  readonly registry: Registry;
  readonly state = new ServerState();
  /** Addresses this process listens on (admin, front listeners): never forwarded to. */
  readonly selfAddresses = new SelfAddresses();
  /** This process's id in its registry record (src/engines/registry/processes.ts). */
  readonly processId = newProcessId();
  /** Who calls this process's front ends (admin /traffic). */
  readonly callers = new CallerCounts();
  readonly clusters: ClusterManager;
  readonly client: Client;
  /** Calls to nodes with metadata `protocol=grpc` (docs/grpc.md). */
  readonly grpc: GrpcTransport;
  /** The .proto files of --proto_path, loaded at start; undefined without it. */
  readonly grpcSchema?: GrpcSchema;
  /** The codecs of the process: JSON, protobuf and the extra ones of the options. */
  readonly codecs: CodecSet;
  /** The front ends' access log (--access_log), or none when off. */
  readonly accessLog?: AccessLog;
  /** Where the front ends publish their finished requests for admin /tap (src/base/http/tap.ts). */
  readonly tap: TapHub;
  /** The context of the call being served (Mesh-Id, deadline, metadata, trace), carried across awaits. */
  readonly context = new ContextStore();
  /** The span recorder and exporter (--tracing=otlp); undefined when tracing is off. */
  readonly tracer?: Tracer;
  /** Names the process in the `service.name` of its spans (a Mesh: its services; see tracingServiceName). */
  private readonly serviceNames: string[] = [];
  private brokerInstance?: Broker;
  /** The TLS provider once built; null when the process serves no TLS. */
  private tlsProvider?: TlsProvider | null;
  private readonly routeSources = new Sources<RouteTableDump>();
  private readonly listenerSources = new Sources<ListenerInfo>();
  private readonly certificateSources = new Sources<CertificateInfo>();
  private readonly authRuleSources = new Sources<unknown>();
  private readonly rateLimitSources = new Sources<unknown>();
  private readonly shutdownHooks: ShutdownHook[] = [];
  private readonly drainables: Drainable[] = [];
  private shuttingDown?: Promise<DrainResult>;
  /** Epoch ms when the state last turned draining (admin /healthcheck/fail or the shutdown). */
  private drainingSince?: number;
  /** The standard process metrics (event-loop monitor included), built with the first listener that shows them. */
  private processMetricsInstance?: ProcessMetrics;
  private metricsServer?: MetricsServer;
  /** The workload certificates opened so far, per name (workloadTls()). */
  private readonly workloads = new Map<string, Promise<WorkloadTls>>();
  /** What this process's calls present: the first workload certificate opened. */
  private callerTls?: WorkloadTls;

  /** The workload certificate this process calls with (--mtls), once opened; undefined before or without. */
  get callerWorkload(): WorkloadTls | undefined {
    return this.callerTls;
  }

  constructor(
    readonly options: ResolvedOptions,
    readonly setup: RuntimeOptions,
  ) {
    const context = this.context;
    this.logging = new Logging({ level: parseLevel(options.logLevel), format: options.logFormat, trace: () => context.current?.trace });
    this.stats = new StatsStore();
    if (options.tracing === 'otlp') {
      const log = this.logging.get('main');
      const tracer = new Tracer({
        address: options.tracingAddress,
        sampleRate: options.tracingSampleRate,
        protocol: options.tracingExport.protocol,
        headers: options.tracingExport.headers,
        resource: options.tracingExport.resource,
        parentBased: options.tracingExport.parentBased,
        serviceName: () => this.tracingServiceName,
        stats: this.stats,
        onExportError: (err) => log.warn({ err: redactUrl(err.message), address: redactUrl(options.tracingAddress) }, 'span export failed; spans are dropped until the receiver answers'),
      });
      this.tracer = tracer;
      // Registered first, so it runs last: the spans of the drain are exported too.
      this.onShutdown(() => tracer.shutdown());
    }
    this.codecs = new CodecSet(options.codecs);
    this.tap = new TapHub({ redact: options.tapRedactHeaders, bodiesMaxBytes: options.tapBodiesMaxBytes, redactJsonFields: options.tapRedactJsonFields });
    if (options.accessLog !== 'off') {
      const stats = this.stats;
      let writer: AccessLogWriter;
      try {
        writer = new AccessLogWriter({
        destination: options.accessLog,
        stats: { written: stats.counter('access_log.written'), dropped: stats.counter('access_log.dropped'), writeErrors: stats.counter('access_log.write_errors'), reopened: stats.counter('access_log.reopened') },
        log: this.logging.get('http'),
      });
      } catch (err) {
        throw new Error(`access log ${options.accessLog}: cannot open: ${(err as Error).message}`);
      }
      this.accessLog = new AccessLog(compileAccessLogFormat(options.accessLogFormat ?? DEFAULT_ACCESS_LOG_FORMAT), writer);
    }
    this.registry =
      typeof options.registry === 'string'
        ? createRegistry(options.registry, options.registryAddress, {
            home: options.meshHome,
            tls: { caFile: options.registryTlsCaFile, certFile: options.registryTlsCertFile, keyFile: options.registryTlsKeyFile },
            stats: this.stats,
            logging: this.logging,
          })
        : options.registry;
    this.clusters = new ClusterManager({
      registry: setup.registryClusters === false ? undefined : this.registry,
      stats: this.stats,
      logging: this.logging,
      lbPolicy: options.lbPolicy,
      staticClusters: setup.staticClusters,
      defaults: retryBudgetDefaults(options.retryBudgetPercent, options.retryBudgetMin),
      // Closed after the drain: the upstream calls still running then serve requests the drain cut off.
      closeGraceMs: 1000,
      self: this.selfAddresses,
      workloadTls: () => this.callerTls,
    });
    if (options.protoPath.length > 0) {
      try {
        this.grpcSchema = loadProtos({ paths: options.protoPath, files: options.protoFiles });
      } catch (err) {
        if (err instanceof SchemaOptionError) throw new SchemaOptionError(err.key, `.proto files: ${err.reason}`, err.value);
        throw new Error(`.proto files: ${(err as Error).message}`);
      }
    } else if (options.protoFiles.length > 0) throw new SchemaOptionError('proto_files', '.proto files: {proto_files} needs {proto_path} (the directories the files and their imports are found in)');
    this.grpc = new GrpcTransport({ schema: this.grpcSchema, maxResponseBytes: Math.max(options.maxBodySize, 64 * 1024 * 1024), logger: this.logging.get('client'), tlsRoots: readEngineTls('grpc_tls', { caFile: options.grpcTlsCaFile })?.ca, workload: () => this.callerTls });
    this.client = new Client({
      selector: this.clusters,
      requestTimeoutMs: options.clientRequestTimeout,
      retries: options.clientRetries,
      perTryTimeoutMs: options.clientPerTryTimeout,
      hedgeDelayMs: options.clientHedgeDelay,
      logger: this.logging.get('client'),
      maxResponseBytes: Math.max(options.maxBodySize, 64 * 1024 * 1024),
      codecs: this.codecs,
      context: this.context,
      tracer: this.tracer,
      stats: this.stats,
      maxMessageBytes: options.maxBodySize,
      senderFor: (target) => this.grpc.senderFor(target),
      streamFor: (target) => this.grpc.streamFor(target),
    });
    // A NATS broker connects on first use, so building it is cheap: build it now, so that a bad
    // address or TLS file stops the start instead of the first publish. A Broker instance is used as it is.
    // So does a bad http broker secret (--broker_secret, --broker_secret_file).
    const httpSecret = options.broker === 'http' && (options.brokerSecret !== undefined || options.brokerSecretFile !== undefined);
    if (options.broker === 'nats' || httpSecret || typeof options.broker !== 'string') this.brokerInstance = this.createBroker();
    this.state.on('state', (state) => (this.drainingSince = state === 'draining' ? Date.now() : undefined));
  }

  /**
   * The `service.name` of this process's spans: `mesh-api`, `mesh-sidecar`, `mesh-proxy` for the
   * front ends, the names of its services for a process of framework services (`mesh` before any).
   */
  get tracingServiceName(): string {
    if (this.serviceNames.length > 0) return this.serviceNames.join(',');
    const role = this.setup.role;
    return role === 'api' || role === 'sidecar' || role === 'proxy' ? `mesh-${role}` : 'mesh';
  }

  /** A framework service of this process, named in the resource of its spans. */
  addServiceName(name: string): void {
    if (!this.serviceNames.includes(name)) this.serviceNames.push(name);
  }

  /** The broker, created on first use (short CLI commands that never publish don't build one). */
  get broker(): Broker {
    this.brokerInstance ??= this.createBroker();
    return this.brokerInstance;
  }

  /**
   * Publishes through the broker with the trace and Mesh-Id of the call being served in the
   * message headers (a new trace outside any). `replaceTrace`: a traceparent already in the
   * headers is the caller's (a front end's request headers) and gives way to this hop's; without
   * it (headers the publisher set) it is kept. With --tracing=otlp a producer span covers it.
   */
  async publish(topic: string, message: Message, replaceTrace = false): Promise<void> {
    const ctx = this.context.current;
    const span = this.tracer?.startSpan(`${topic} publish`, SpanKind.PRODUCER, ctx?.trace, { 'messaging.system': 'mesh', 'messaging.destination.name': topic, 'messaging.operation.type': 'send' });
    const trace = span ? traceOf(span) : (ctx?.trace ?? this.context.hop(undefined));
    try {
      await this.broker.publish(topic, { header: stampMessageHeader(message.header, trace, ctx?.id ? [HEADER_ID, ctx.id] : undefined, replaceTrace), body: message.body });
    } catch (err) {
      if (span) failSpan(span, (err as Error)?.message ?? String(err));
      throw err;
    } finally {
      span?.end();
    }
  }

  /** The broker's name (registered in each service node's metadata), without building it. */
  get brokerName(): string {
    return typeof this.options.broker === 'string' ? this.options.broker : this.options.broker.name;
  }

  private createBroker(): Broker {
    const options = this.options;
    if (typeof options.broker !== 'string') return options.broker;
    return createBroker(options.broker, {
      registry: this.registry,
      address: options.brokerAddress,
      // advertise may carry a service's port; the broker's endpoint keeps its own.
      advertiseHost: options.advertise?.trim() ? parseAdvertise(options.advertise).host : undefined,
      tls: { caFile: options.brokerTlsCaFile, certFile: options.brokerTlsCertFile, keyFile: options.brokerTlsKeyFile },
      durable: { maxDeliver: options.brokerMaxDeliver, ackWaitMs: options.brokerAckWait, dlqSuffix: options.brokerDlqSuffix, maxAgeMs: options.brokerStreamMaxAge, maxBytes: options.brokerStreamMaxBytes, inactiveThresholdMs: options.brokerInactiveThreshold, maxConsumers: options.brokerMaxConsumers },
      secret: options.brokerSecret,
      secretFile: options.brokerSecretFile,
      // The local registry's directory keeps the http broker's secret; with etcd, $MESH_HOME does.
      secretDirectory: options.registry === 'etcd' ? defaultRegistryDirectory(options.meshHome) : undefined,
      stats: this.stats,
      // With --mtls, deliveries between processes go over mutual TLS with this process's certificate.
      workloadTls: () => this.callerTls,
      logger: this.logging.get('broker'),
    });
  }

  /**
   * Records this process in the registry (src/engines/registry/processes.ts) with its admin at
   * `admin`, until the shutdown: `mesh ps`, `mesh stop` and `mesh tap` find it there. `as`: the
   * process this one records instead (worker 0 of --concurrency records its primary, whose admin
   * serves the workers: src/cli/concurrency.ts).
   */
  async recordProcess(admin: { host: string; port: number }, as?: { id: string; pid: number; startedMs: number }): Promise<void> {
    const advertised = advertisedAddress(admin);
    const started = as?.startedMs ?? this.state.startedAt;
    const version = packageVersion();
    const adminListener = as ? [`admin=${formatAddress(admin.host, admin.port)}`] : [];
    const read = (): ProcessRecord => ({
      id: as?.id ?? this.processId,
      kind: this.setup.role,
      name: this.setup.processName ?? '',
      pid: as?.pid ?? process.pid,
      host: hostname(),
      admin: { address: advertised.host, port: advertised.port },
      startedMs: started,
      mtls: this.options.mtls,
      listeners: [...adminListener, ...this.selfAddresses.list().map((l) => `${l.what}=${formatAddress(l.host, l.port)}`)],
      version,
    });
    const recorder = new ProcessRecorder(this.registry, read, this.logging.get('registry'));
    this.selfAddresses.onAdd(() => void recorder.changed());
    this.onShutdown(() => recorder.stop());
    await recorder.start();
  }

  /**
   * Serves the admin interface at the adminAddress option (or the role's default; `off` disables
   * it). Resolves with the bound address, or undefined when disabled.
   */
  async startAdmin(defaultAddress: string, views: { clusters?: ClusterManagerView } = {}): Promise<{ host: string; port: number } | undefined> {
    await this.startMetrics();
    const address = this.options.adminAddress ?? defaultAddress;
    if (address === 'off') return undefined;
    const tapMtls = this.tapMtls();
    const admin = new AdminServer({
      stats: this.stats,
      logging: this.logging,
      // `views.clusters`: a process whose clusters are not its cluster manager's (mesh xds: the ones it serves).
      clusters: views.clusters ?? this.clusters,
      // Read at each request: a source registered after the admin started is listed too.
      routes: () => this.routeSources.read(),
      hasRoutes: () => this.routeSources.size > 0,
      listeners: () => this.listenerSources.read(),
      hasListeners: () => this.listenerSources.size > 0,
      options: () => effectiveOptions(this.setup.role, this.options, this.setup.flags),
      certs: () => this.certificates(),
      authRules: () => this.authRuleSources.read(),
      hasAuthRules: () => this.authRuleSources.size > 0,
      rateLimits: () => this.rateLimitSources.read(),
      hasRateLimits: () => this.rateLimitSources.size > 0,
      server: this.state,
      token: this.options.adminToken,
      allowedHosts: this.options.adminAllowedHosts,
      histograms: this.options.statsHistograms || this.options.statsEndpoints,
      limits: serverLimits(this.options),
      processMetrics: this.processMetrics(),
      tap: this.tap,
      processId: this.processId,
      traffic: () => this.traffic(views.clusters),
      ...(tapMtls ? { tapMtls } : {}),
      quit: async () => {
        process.exit(exitCodeOf(await this.shutdown()));
      },
    });
    const bound = await bindOption('admin_address', 'admin', address, () => admin.listen(address));
    this.selfAddresses.add(bound.host, bound.port, 'admin');
    this.onShutdown(() => admin.close());
    if (this.setup.role !== 'cli') await this.recordProcess(bound);
    return bound;
  }

  /**
   * Serves the read-only metrics listener (GET /metrics, GET /ready) at the metricsAddress option,
   * once; `off` or unset: none. Started by startAdmin, whether the admin itself is on or off.
   */
  private async startMetrics(): Promise<void> {
    const address = this.options.metricsAddress;
    if (address === undefined || address === 'off' || this.metricsServer) return;
    const metrics = new MetricsServer({
      stats: this.stats,
      logging: this.logging,
      certs: () => this.certificates(),
      server: this.state,
      limits: serverLimits(this.options),
      processMetrics: this.processMetrics(),
      histograms: this.options.statsHistograms || this.options.statsEndpoints,
    });
    this.metricsServer = metrics;
    const bound = await bindOption('metrics_address', 'metrics listener', address, () => metrics.listen(address));
    this.selfAddresses.add(bound.host, bound.port, 'metrics');
    this.onShutdown(() => metrics.close());
  }

  /** The bound address of the metrics listener, once started. */
  get metricsAddress(): { host: string; port: number } | undefined {
    return this.metricsServer?.address;
  }

  /** The process metrics of the Prometheus format, created once and closed on shutdown. */
  private processMetrics(): ProcessMetrics {
    if (!this.processMetricsInstance) {
      const metrics = new ProcessMetrics();
      this.processMetricsInstance = metrics;
      this.onShutdown(() => metrics.close());
    }
    return this.processMetricsInstance;
  }

  /**
   * Registers dynamic route tables (the gateway's router, the proxy's listeners): admin /routes
   * lists those of every source, in registration order, and exists only while there is at least
   * one source. Returns the function that removes the source.
   */
  addRouteSource(read: () => RouteTableDump[]): () => void {
    return this.routeSources.add(read);
  }

  /** Registers listening sockets (the gateway's): admin /listeners lists them while one is registered. Returns the removal. */
  addListenerSource(read: () => ListenerInfo[]): () => void {
    return this.listenerSources.add(read);
  }

  /** Registers the loaded auth configuration (src/edge/auth/): admin /auth_rules shows it while one is registered. Returns the removal. */
  addAuthRulesSource(read: () => unknown[]): () => void {
    return this.authRuleSources.add(read);
  }

  /** The route tables of every source now (what admin /routes lists); hasRouteTables: whether there is a source. */
  /**
   * --tap_allowed_identities: the SPIFFE IDs checked (each as the mesh CA would issue it, in this
   * trust domain) and the certificate the admin presents over mutual TLS: the front end's, opened
   * before the admin starts. Undefined without the option.
   */
  private tapMtls(): { workload: WorkloadTls; allowed: readonly string[] } | undefined {
    const allowed = this.options.tapAllowedIdentities;
    if (allowed.length === 0) return undefined;
    for (const id of allowed) {
      const problem = spiffeIdProblem(id, this.options.trustDomain);
      if (problem) throw new SchemaOptionError('tap_allowed_identities', problem, id);
    }
    if (this.options.mtls === 'off') throw new SchemaOptionError('tap_allowed_identities', '{tap_allowed_identities} needs {mtls} (permissive or strict): the admin checks who taps by their certificate');
    if (!this.callerTls) throw new SchemaOptionError('tap_allowed_identities', '{tap_allowed_identities} needs a front end with a workload certificate (mesh api, sidecar or proxy)');
    return { workload: this.callerTls, allowed };
  }

  /** admin /traffic (src/admin/traffic.ts): what this process sent, and who called it; `clusters` as for startAdmin. */
  traffic(clusters: ClusterManagerView = this.clusters): TrafficReport {
    return trafficReport({ id: this.processId, kind: this.setup.role, name: this.setup.processName ?? '', mtls: this.options.mtls, started_ms: this.state.startedAt }, this.stats, clusters, this.callers);
  }

  routeTables(): RouteTableDump[] {
    return this.routeSources.read();
  }

  hasRouteTables(): boolean {
    return this.routeSources.size > 0;
  }

  /** Registers a rate limit store's state (src/base/http/rate-limit-store.ts): admin /rate_limits shows it while one is registered. Returns the removal. */
  addRateLimitSource(read: () => unknown[]): () => void {
    return this.rateLimitSources.add(read);
  }

  /** The rate limit stores' states now (what admin /rate_limits shows). */
  rateLimits(): unknown[] {
    return this.rateLimitSources.read();
  }

  /** The loaded auth configurations now (what admin /auth_rules lists). */
  authRules(): unknown[] {
    return this.authRuleSources.read();
  }

  /** The loaded certificates now (what admin /certs lists). */
  certificates(): CertificateInfo[] {
    return uniqueCertificates(this.certificateSources.read());
  }

  /** Registers loaded certificates (the TLS provider): admin /certs lists them. Returns the removal. */
  addCertificateSource(read: () => CertificateInfo[]): () => void {
    return this.certificateSources.add(read);
  }

  /**
   * The process's TLS provider, built on first use from the options (undefined without TLS; the
   * options were checked by resolveOptions): certificate files (reloaded when they change) or
   * ACME. Building it reads and checks the certificate files: a missing, unreadable or mismatched
   * file throws an Error naming it. It is shared by every HTTPS listener of the process, listed
   * by admin /certs and closed on shutdown. See docs/tls.md.
   */
  get tls(): TlsProvider | undefined {
    if (this.tlsProvider === undefined) {
      const provider = this.createTlsProvider();
      this.tlsProvider = provider ?? null;
      if (provider) {
        this.addCertificateSource(() => provider.certificates());
        this.onShutdown(() => provider.close());
      }
    }
    return this.tlsProvider ?? undefined;
  }

  /** Builds and starts the TLS provider (a start-up error names the file, flag or port). */
  async startTls(): Promise<TlsProvider | undefined> {
    const provider = this.tls;
    await provider?.start();
    return provider;
  }

  private createTlsProvider(): TlsProvider | undefined {
    const options = this.options;
    const log = this.logging.get('http');
    if (options.enableAcme) {
      return new AcmeTlsProvider({
        hosts: parseAcmeHosts(options.acmeHosts),
        directoryUrl: options.acmeDirectory,
        email: options.acmeEmail,
        cacheDir: defaultAcmeCacheDir(options.acmeCache, options.meshHome),
        challengeAddress: options.acmeHttpPort,
        log,
        stats: this.stats,
      });
    }
    if (options.enableTls) {
      return new FileCertificateStore({ certFile: options.tlsCertFile!, keyFile: options.tlsKeyFile!, log, stats: this.stats });
    }
    return undefined;
  }

  /**
   * The workload certificate of `name` (mutual TLS): a service of this process, or the identity
   * of a caller that is not a service (CALLER_NAMES: the gateway, the proxy, the sidecar without
   * an app, the CLI), opened once per name and closed on shutdown; undefined with --mtls=off.
   * The first one opened is also what this process's calls present. A front end opens its own
   * before it serves; a service opens its own before it listens (its node then says mtls=true).
   * Rejects with an Error naming the flag or file at fault.
   */
  workloadTls(name: string): Promise<WorkloadTls | undefined> {
    if (this.options.mtls === 'off') return Promise.resolve(undefined);
    let opened = this.workloads.get(name);
    if (!opened) {
      const open = this.setup.openWorkloadTls ?? ((n: string) => this.openWorkloadTls(n));
      opened = open(name).then((workload) => {
        this.callerTls ??= workload;
        return workload;
      });
      // A failed open is not kept: the next start tries again (and fails with the same message).
      opened.catch(() => this.workloads.delete(name));
      this.workloads.set(name, opened);
    }
    return opened;
  }

  /** What this process's calls present (the first workload certificate opened), or undefined before any (or with --mtls=off). */
  get callerWorkloadTls(): WorkloadTls | undefined {
    return this.callerTls;
  }

  /**
   * Opens this process's workload certificate for `service` (mutual TLS, src/tls/workload/):
   * from the mesh CA in --ca_dir (made on first use) or the --mtls_*_file files. Admin /certs
   * lists it and its roots while it is open; it is closed on shutdown. Rejects with an Error
   * naming the flag or file at fault.
   */
  async openWorkloadTls(service: string): Promise<OpenedWorkloadTls> {
    const o = this.options;
    const workload = await openWorkloadTls({
      mode: o.mtls,
      trustDomain: o.trustDomain,
      caDir: defaultCaDir(o.caDir, o.meshHome),
      certTtlMs: o.mtlsCertTtl,
      service,
      certFile: o.mtlsCertFile,
      keyFile: o.mtlsKeyFile,
      caFile: o.mtlsCaFile,
      caServer: o.caServer,
      caToken: o.caToken,
      caTokenFile: o.caTokenFile,
      caRootFingerprint: o.caRootFingerprint,
      caRootFile: o.caRootFile,
      bundlePollMs: o.caBundlePoll,
      log: this.logging.get('main'),
      stats: this.stats,
    });
    const remove = this.addCertificateSource(() => workload.certificates());
    this.onShutdown(async () => {
      remove();
      await workload.close();
    });
    return workload;
  }

  /** Registers work to do on shutdown; hooks run in reverse order of registration. */
  onShutdown(hook: ShutdownHook): void {
    this.shutdownHooks.push(hook);
  }

  /** Registers a server the shutdown drains (FrontServer, RpcServer: src/base/http/lifecycle.ts). */
  addDrainable(server: Drainable): void {
    this.drainables.push(server);
  }

  /**
   * Drains and closes everything once; safe to call many times. Resolves with what the drain
   * had to cut off (see drain()).
   */
  shutdown(): Promise<DrainResult> {
    this.shuttingDown ??= (async () => {
      const log = this.logging.get('main');
      const result = await this.drain();
      // The lines of the last requests, before anything else can fail.
      await this.accessLog?.writer.flush();
      for (const hook of this.shutdownHooks.slice().reverse()) {
        try {
          await hook();
        } catch (err) {
          log.error({ err: (err as Error).message }, 'shutdown step failed');
        }
      }
      await this.clusters.close();
      this.grpc.close();
      if (this.brokerInstance) await this.brokerInstance.close().catch(() => undefined);
      await this.registry.close().catch(() => undefined);
      await this.accessLog?.writer.close();
      this.logging.flush();
      return result;
    })();
    return this.shuttingDown;
  }

  /**
   * The drain (docs/architecture.md, "Shutdown and drain"):
   * 1. every answer from now on carries `Connection: close` (idle keep-alive connections close
   *    with the listeners, in 4: peers still sending on them until then would see a reset);
   * 2. the state turns draining: its hooks deregister (framework services, the sidecar's app) and
   *    the health-check paths answer 503;
   * 3. the servers keep serving for --drain_delay (less the time already spent draining after
   *    admin /healthcheck/fail), so peers watching the registry and load balancers polling the
   *    health path stop sending;
   * 4. the listeners and idle connections close; in-flight requests get up to --drain_timeout,
   *    then are cut off.
   */
  private async drain(): Promise<DrainResult> {
    const log = this.logging.get('main');
    const now = Date.now();
    const drainables = this.drainables.splice(0);
    // Connection: close first, so that anyone who sees the health path answer 503 sees it too.
    for (const d of drainables) d.beginDrain();
    try {
      await this.state.fail();
    } catch (err) {
      log.error({ err: (err as Error).message }, 'deregistration failed');
    }
    if (drainables.length === 0) return { requestsCutOff: 0, connectionsCutOff: 0 };
    const delay = this.options.drainDelay - (now - (this.drainingSince ?? now));
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const results = await Promise.all(drainables.map((d) => d.close()));
    const total = results.reduce(
      (sum, r) => ({ requestsCutOff: sum.requestsCutOff + r.requestsCutOff, connectionsCutOff: sum.connectionsCutOff + r.connectionsCutOff }),
      { requestsCutOff: 0, connectionsCutOff: 0 },
    );
    if (total.requestsCutOff > 0) {
      log.error(
        { requests: total.requestsCutOff, connections: total.connectionsCutOff, drain_timeout_ms: this.options.drainTimeout },
        `drain timed out: ${total.requestsCutOff} request(s) on ${total.connectionsCutOff} connection(s) cut off`,
      );
    }
    return total;
  }

  /**
   * SIGINT/SIGTERM: drain, shut down, exit 0 (1 when the drain cut requests off, or the shutdown
   * failed); a second signal exits at once with 130. SIGUSR1 reopens the access log file.
   */
  installSignalHandlers(): void {
    let signalled = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (signalled) process.exit(130);
      signalled = true;
      this.logging.get('main').info({ signal }, 'shutting down');
      void this.shutdown().then(
        (result) => process.exit(exitCodeOf(result)),
        () => process.exit(1),
      );
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // logrotate: the access log file is opened again (after a rename, the new file gets the lines).
    const accessLog = this.accessLog;
    if (accessLog) process.on('SIGUSR1', () => void accessLog.writer.reopen());
  }
}

/** The exit code after a shutdown: 0 when the drain lost nothing, 1 when it cut requests off. */
export function exitCodeOf(result: DrainResult): number {
  return result.requestsCutOff > 0 ? 1 : 0;
}
