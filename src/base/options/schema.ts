/**
 * The option schema: every option of a mesh process declared once, by its schema key (snake_case,
 * the flag's name). From this table come the CLI flags (`--client_request_timeout`) and their
 * checks, the environment variables (`MESH_CLIENT_REQUEST_TIMEOUT`), the camelCase API options
 * (`clientRequestTimeout`, MeshOptions) and their TypeScript types, `--help` per command,
 * completion, and the generated flag tables of docs/ (`npm run docs:options`).
 *
 * An entry: `type` (how a value is read), `default` (as the flag writes it), `choices`,
 * `min`/`max`/`orZero` with `range` (the reason a value out of range is refused), `group` (the
 * help section), `commands` (the mesh commands that use it: any other command refuses the flag),
 * `api: true` when it is an option of the library (MeshOptions), `apiDefault` when the library's
 * default differs from the flag's (null: none), `commandDefaults` (a command's own default, shown
 * by its help and the docs' tables), `help` (one line). Adding an option is one entry
 * here plus the code that reads it. Pure data: no imports but constants and the naming of options.
 */
import { DEFAULT_TRACING_ADDRESS } from '../tracing/config.js';
import { optionLabel } from '../util/option-error.js';
import { LOG_FORMATS } from '../util/levels.js';

/** How a value is read: from a flag's text, and (api options) from a MeshOptions value. */
export type OptionType = 'string' | 'bool' | 'int' | 'duration' | 'size' | 'list';

/** The commands of `mesh` (src/cli/help.ts describes each). */
export const COMMAND_NAMES = ['dev', 'api', 'sidecar', 'proxy', 'list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health', 'ca', 'check', 'xds', 'new', 'run', 'envoy', 'tap', 'top', 'ps', 'stop', 'stat', 'edges', 'completion', 'help', 'version'] as const;
export type CommandName = (typeof COMMAND_NAMES)[number];

/** The sections of `mesh <command> --help` and of the docs' flag tables, in the order they are printed. */
export const OPTION_GROUPS = {
  command: 'command',
  listen: 'listen',
  registry: 'registry',
  broker: 'broker',
  client: 'client (outbound calls)',
  tls: 'TLS and ACME',
  mtls: 'identity and mutual TLS',
  admin: 'admin interface',
  auth: 'authentication and authorization',
  limits: 'limits and drain',
  logging: 'logging',
  other: 'other',
} as const;
export type OptionGroup = keyof typeof OPTION_GROUPS;

export interface OptionSpec {
  readonly type: OptionType;
  readonly help: string;
  readonly group: OptionGroup;
  readonly commands: readonly CommandName[];
  readonly default?: string;
  readonly choices?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  /** With min: 0 is allowed too (it means "none" or "never"). */
  readonly orZero?: boolean;
  /** The reason a value outside min..max is refused. */
  readonly range?: string;
  readonly api?: boolean;
  readonly apiDefault?: string | number | null;
  /** The default of some commands when it differs from `default` (e.g. `mesh dev` runs the demo with --mtls=strict). */
  readonly commandDefaults?: Partial<Record<CommandName, string>>;
  /**
   * This option names a file that holds the value of the option `fileOf` (a secret, kept off the
   * command line): read once at start, trailing newlines dropped, one line; not given with that option.
   */
  readonly fileOf?: string;
}

/** The load-balancing policies (`--lb_policy`, a proxy cluster's `lb_policy`); src/core/upstream/load-balancer.ts implements each. */
export const LB_POLICIES = ['round_robin', 'random', 'least_request'] as const;

const SERVE = ['dev', 'api', 'sidecar', 'proxy'] as const satisfies readonly CommandName[];
const PLATFORM = ['list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health', 'ps', 'stop', 'tap', 'top', 'stat', 'edges'] as const satisfies readonly CommandName[];
/** The commands that start a mesh process (the others take no option). */
export const MESH_PROCESS = [...SERVE, ...PLATFORM, 'check'] as const satisfies readonly CommandName[];
const GATEWAYS = ['dev', 'api', 'sidecar'] as const satisfies readonly CommandName[];
const BROKER_USERS = ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] as const satisfies readonly CommandName[];
const CALLERS = [...SERVE, 'call', 'health'] as const satisfies readonly CommandName[];

/**
 * `mesh run` starts a sidecar for its app in the same process: it takes every option of `mesh sidecar`
 * but those it sets itself from --name, --app_port and --health_path (and --concurrency: one
 * process). withRun adds `run` to the commands of those options.
 */
const NOT_RUN = new Set(['server_name', 'server_address', 'healthcheck_url', 'concurrency']);
function withRun<T extends Record<string, OptionSpec>>(options: T): T {
  for (const [key, spec] of Object.entries(options)) {
    if (spec.commands.includes('sidecar') && !spec.commands.includes('run') && !NOT_RUN.has(key)) (spec as { commands: readonly CommandName[] }).commands = [...spec.commands, 'run'];
  }
  return options;
}

export const OPTIONS = withRun({
  registry: { type: 'string', default: 'local', choices: ['local', 'memory', 'etcd'], group: 'registry', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'registry backend' },
  registry_address: { type: 'string', group: 'registry', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'local: directory of the SQLite registry; etcd: [https://[user:password@]]host:port[,...]' },
  broker: { type: 'string', default: 'http', choices: ['http', 'memory', 'nats'], group: 'broker', commands: [...BROKER_USERS, 'check'], api: true, help: 'broker backend' },
  registry_tls_ca_file: { type: 'string', group: 'registry', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'etcd over https://: PEM CA to trust instead of the system roots' },
  registry_tls_cert_file: { type: 'string', group: 'registry', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'etcd over https://: PEM client certificate' },
  registry_tls_key_file: { type: 'string', group: 'registry', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'etcd over https://: PEM client key' },
  broker_address: { type: 'string', group: 'broker', commands: [...BROKER_USERS, 'check'], api: true, help: 'http: listen host[:port] for deliveries; nats: [nats|tls]://[user:password@]host:port' },
  broker_tls_ca_file: { type: 'string', group: 'broker', commands: [...BROKER_USERS, 'check'], api: true, help: 'nats (TLS required): PEM CA to trust instead of the system roots' },
  broker_tls_cert_file: { type: 'string', group: 'broker', commands: [...BROKER_USERS, 'check'], api: true, help: 'nats (TLS required): PEM client certificate' },
  broker_tls_key_file: { type: 'string', group: 'broker', commands: [...BROKER_USERS, 'check'], api: true, help: 'nats (TLS required): PEM client key' },
  broker_secret: { type: 'string', group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'check'], api: true, help: 'http: the secret deliveries between mesh processes carry (default: broker.secret in the registry directory, made on first use); prefer MESH_BROKER_SECRET or --broker_secret_file, as other users can see a command line' },
  broker_secret_file: { type: 'string', group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'check'], api: true, help: 'http: a file holding the delivery secret (one line), for processes on several machines' },
  broker_max_deliver: { type: 'int', default: '5', min: 1, max: 1000, range: 'must be from 1 to 1000', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable subscriptions: attempts before a message goes to the dead-letter topic' },
  broker_ack_wait: { type: 'duration', default: '30s', min: 100, max: 3_600_000, range: 'must be from 100ms to 1h', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable subscriptions: a delivery not acknowledged within this is redelivered' },
  broker_dlq_suffix: { type: 'string', default: '.dlq', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable subscriptions: dead-letter topic = topic + this' },
  broker_stream_max_age: { type: 'duration', default: '0', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable topics: stored messages older than this are dropped (0: no limit)' },
  broker_stream_max_bytes: { type: 'size', default: '0', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable topics: bytes stored per topic before the oldest are dropped (0: no limit)' },
  broker_inactive_threshold: { type: 'duration', default: '24h', min: 1000, orZero: true, range: 'must be 0 (never) or from 1s', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable subscriptions: a consumer name no subscriber used for this long is removed with its messages (0: never)' },
  broker_max_consumers: { type: 'int', default: '1000', min: 1, max: 100_000, range: 'must be from 1 to 100000', group: 'broker', commands: BROKER_USERS, api: true, help: 'durable subscriptions: most consumer names per topic' },
  proxy_address: { type: 'string', group: 'client', commands: PLATFORM, help: 'run CLI commands through the sidecar at host:port' },
  client_request_timeout: { type: 'duration', default: '5s', group: 'client', commands: MESH_PROCESS, api: true, help: 'budget of one outbound call' },
  client_retries: { type: 'int', default: '1', group: 'client', commands: CALLERS, api: true, help: 'retries on connect failure, 502, 503, timeout' },
  grpc_retry_on: { type: 'list', default: 'unavailable', group: 'client', commands: SERVE, api: true, help: 'native gRPC calls through a front: the statuses tried again on another node (up to --client_retries, within the deadline) when no message was answered and the whole request (at most 64 KiB) was held: cancelled, deadline-exceeded, resource-exhausted, internal, unavailable (comma list), or none' },
  client_per_try_timeout: { type: 'duration', default: '0', group: 'client', commands: CALLERS, api: true, help: 'budget of one try of an outbound call; past it the call is retried on another host (0: a try may use the whole budget)' },
  retry_budget_percent: { type: 'int', default: '20', min: 0, max: 100, range: 'must be from 0 to 100', group: 'client', commands: [...CALLERS, 'xds'], api: true, help: 'retry budget: retries at once, as a share (%) of a cluster\'s active requests, for every retry (--client_retries, the proxy handler\'s, hedges); past it a retry is not made (upstream_rq_retry_overflow); 0: no budget' },
  retry_budget_min: { type: 'int', default: '3', min: 0, max: 1_000_000, range: 'must be from 0 to 1000000', group: 'client', commands: [...CALLERS, 'xds'], api: true, help: 'retry budget: retries allowed at once whatever the load' },
  client_hedge_delay: { type: 'duration', default: '0', group: 'client', commands: CALLERS, api: true, help: 'idempotent calls: send a second try to another host when the first has not answered after this long (0: no hedging)' },
  proto_path: { type: 'list', group: 'client', commands: ['dev', 'api', 'sidecar', 'proxy', 'call'], api: true, help: 'gRPC: directories of the .proto files of gRPC backends and services, searched for imports in order (comma list; none by default; docs/grpc.md)' },
  proto_files: { type: 'list', group: 'client', commands: ['dev', 'api', 'sidecar', 'proxy', 'call'], api: true, help: 'gRPC: the .proto files to load, relative to a --proto_path directory (comma list; default every .proto under --proto_path)' },
  grpc_tls_ca_file: { type: 'string', group: 'client', commands: ['dev', 'api', 'sidecar', 'proxy', 'call'], api: true, help: 'gRPC: PEM CA to verify gRPC nodes registered with tls=true (servers outside the mesh with a certificate of their own) instead of the system roots' },
  server_protocol: { type: 'string', default: 'mesh', choices: ['mesh', 'grpc'], group: 'listen', commands: ['dev'], api: true, help: 'framework services: serve the RPC wire (mesh) or gRPC (grpc: the handlers as the unary methods of --proto_path\'s services)' },
  stream_idle_timeout: { type: 'duration', default: '5m', group: 'limits', commands: SERVE, api: true, help: 'proxied answers and any answer over HTTP/2: how long a client may read nothing, or a backend send nothing of a body (0: no limit)' },
  max_connections: { type: 'int', default: '10000', group: 'limits', commands: SERVE, api: true, help: 'connections each listener holds at once; more are closed at accept (0: no limit)' },
  request_headers_timeout: { type: 'duration', default: '10s', group: 'limits', commands: SERVE, api: true, help: 'a request\'s whole header must arrive within this (0: no limit)' },
  request_timeout: { type: 'duration', default: '30s', group: 'limits', commands: SERVE, api: true, help: 'a whole request, header and body, must arrive within this (0: no limit)' },
  headers_with_underscores: { type: 'string', default: 'allow', choices: ['allow', 'drop', 'reject'], group: 'limits', commands: SERVE, api: true, help: 'request headers with _ in the name: allow passes them (but never one that reads as a header the mesh sets or reads once _ is taken for -), drop removes them all, reject answers 400' },
  drain_delay: { type: 'duration', default: '1s', group: 'limits', commands: SERVE, api: true, help: 'on shutdown: time to keep serving after deregistering, so peers and load balancers stop sending' },
  drain_timeout: { type: 'duration', default: '10s', group: 'limits', commands: SERVE, api: true, help: 'on shutdown: how long in-flight requests may take to finish before they are cut off' },
  semi_space_mb: { type: 'int', default: '4', min: 1, max: 1024, orZero: true, range: 'must be 0 (Node\'s own size) or from 1 to 1024', group: 'limits', commands: SERVE, help: 'V8\'s young-generation semi-space in MiB, which sets most of the memory a busy process holds: at start mesh restarts itself with node --max-semi-space-size (Node 22.15 or later; 0: Node\'s own size)' },
  lb_policy: { type: 'string', default: 'round_robin', choices: LB_POLICIES, group: 'client', commands: [...CALLERS, 'xds'], api: true, help: 'load balancing' },
  register_ttl: { type: 'duration', default: '30s', group: 'registry', commands: ['dev', 'sidecar', 'register'], api: true, help: 'TTL of a service registration' },
  register_interval: { type: 'duration', default: '10s', group: 'registry', commands: ['dev', 'sidecar'], api: true, help: 'how often a service registers again' },
  admin_address: { type: 'string', commandDefaults: { run: 'off' }, group: 'admin', commands: [...SERVE, 'xds', 'envoy'], api: true, help: 'admin interface host:port, or off' },
  admin_token: { type: 'string', group: 'admin', commands: [...SERVE, 'xds', 'tap', 'top', 'stop', 'stat', 'edges'], api: true, help: 'require Authorization: Bearer <token> on the admin interface (mesh tap: the token it sends; prefer --admin_token_file or MESH_ADMIN_TOKEN: other users can see a command line)' },
  admin_token_file: { type: 'string', group: 'admin', commands: [...SERVE, 'xds', 'tap', 'top', 'stop', 'stat', 'edges'], fileOf: 'admin_token', help: 'a file holding --admin_token (read at start; trailing newlines dropped)' },
  metrics_address: { type: 'string', default: 'off', apiDefault: null, group: 'admin', commands: [...SERVE, 'xds'], api: true, help: 'read-only listener for scrapers and probes (GET /metrics, GET /ready; no Host check) host:port, or off' },
  stats_histograms: { type: 'bool', default: 'false', group: 'admin', commands: [...SERVE, 'xds'], api: true, help: 'print the latency histograms in admin /stats (text quantiles, JSON, Prometheus buckets) and the metrics listener; the --enable_stats dashboard also draws per-cluster p50/p99' },
  stats_endpoints: { type: 'bool', default: 'false', group: 'admin', commands: ['dev', 'api'], api: true, help: 'per-endpoint stats: requests, answers by status and a latency histogram for each endpoint of a framework service and each route of the gateway (service.<name>.endpoint.<endpoint>.*; undeclared names in one _other family); prints the latency histograms as --stats_histograms does' },
  tracing: { type: 'string', default: 'off', choices: ['off', 'otlp'], group: 'logging', commands: SERVE, api: true, help: 'otlp: record spans and export them over OTLP to --tracing_address; off: none (trace context is still forwarded); when not given, the OTEL_* variables decide (docs/observability.md)' },
  tracing_address: { type: 'string', default: DEFAULT_TRACING_ADDRESS, group: 'logging', commands: SERVE, api: true, help: 'OTLP endpoint of --tracing=otlp (http:// or https:// URL); when not given, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT' },
  tracing_sample_rate: { type: 'string', default: '1', apiDefault: 1, group: 'logging', commands: SERVE, api: true, help: 'share of new traces recorded, 0 to 1 (a trace that came with a traceparent follows its sampled flag)' },
  tap_allowed_identities: { type: 'list', group: 'admin', commands: ['api', 'sidecar', 'proxy'], api: true, help: 'admin /tap over mutual TLS: the SPIFFE IDs that may tap without the admin token (comma list; needs --mtls); the admin port then also accepts mutual TLS, and serves only /tap over it' },
  tap_redact_headers: { type: 'list', group: 'admin', commands: SERVE, api: true, help: 'admin /tap: header names whose values a tap shows as [redacted], besides Authorization, Proxy-Authorization, Cookie, Set-Cookie and Mesh-Auth-* (comma list; case and _/- ignored)' },
  tap_bodies_max_bytes: { type: 'size', default: '0', min: 0, max: 1048576, range: 'bytes, 0 (no bodies) to 1MiB', group: 'admin', commands: SERVE, api: true, help: 'admin /tap: allow a tap to ask for request and response bodies (bodies=true, mesh tap --bodies), each captured up to this many bytes (0: bodies are never captured)' },
  tap_redact_json_fields: { type: 'list', group: 'admin', commands: SERVE, api: true, help: 'admin /tap with bodies: JSON field names whose values a tap shows as [redacted], at any depth of a JSON body (comma list; case ignored); a JSON body cut at --tap_bodies_max_bytes is shown as [redacted] whole' },
  admin_allowed_hosts: { type: 'list', group: 'admin', commands: [...SERVE, 'xds'], api: true, help: 'Host names the admin interface and the sidecar answer besides loopback, localhost and their own IP (comma list; *.domain; * turns the check off)' },
  log_level: { type: 'string', default: 'info', group: 'logging', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'trace, debug, info, warning, error, critical, off' },
  log_format: { type: 'string', choices: LOG_FORMATS, group: 'logging', commands: [...MESH_PROCESS, 'xds'], api: true, help: 'logs on stderr: text (one readable line an event) or json (JSON lines); default text when stderr is a terminal, json otherwise' },
  access_log: { type: 'string', group: 'logging', commands: SERVE, api: true, help: 'front ends: access log, one line a request: off, stdout or a file path (reopened on SIGUSR1)' },
  access_log_format: { type: 'string', group: 'logging', commands: SERVE, api: true, help: 'access log format: text with %OPERATOR%s, or json; without it, Envoy\'s default format (docs/observability.md)' },
  enable_stats: { type: 'bool', default: 'false', group: 'command', commands: GATEWAYS, api: true, help: 'serve /stats (dashboard and JSON)' },
  mtls: { type: 'string', default: 'off', commandDefaults: { dev: 'strict', call: 'permissive', health: 'permissive', check: 'permissive', publish: 'permissive', subscribe: 'permissive' }, choices: ['off', 'permissive', 'strict'], group: 'mtls', commands: MESH_PROCESS, api: true, help: 'mutual TLS between mesh processes: off, permissive (TLS and plain on one port; mTLS to nodes that serve it) or strict (mTLS only)' },
  trust_domain: { type: 'string', default: 'mesh.local', group: 'mtls', commands: [...MESH_PROCESS, 'ca'], api: true, help: 'trust domain of the workload identities (spiffe://<trust_domain>/svc/<service>)' },
  ca_dir: { type: 'string', group: 'mtls', commands: [...MESH_PROCESS, 'ca'], api: true, help: 'the mesh CA (default $MESH_HOME/ca or ~/.mesh/ca)' },
  mtls_cert_file: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'an outside PKI (cert-manager, Vault): this process\'s workload certificate, PEM, then any intermediates (with --mtls_key_file and --mtls_ca_file; reloaded when it changes)' },
  mtls_key_file: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'an outside PKI: the workload certificate\'s private key, PEM' },
  mtls_ca_file: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'an outside PKI: the roots that sign the other workloads\' certificates, PEM' },
  ca_cert_file: { type: 'string', group: 'mtls', commands: ['ca'], help: 'mesh ca init: bring your own root or intermediate CA: its certificate, PEM, then its issuers up to the root' },
  ca_key_file: { type: 'string', group: 'mtls', commands: ['ca'], help: 'mesh ca init: the private key of --ca_cert_file, PEM' },
  finish: { type: 'bool', default: 'false', group: 'command', commands: ['ca'], help: 'mesh ca rotate: end a rotation: stop trusting every root but the one that signs now' },
  mtls_cert_ttl: { type: 'duration', default: '24h', group: 'mtls', commands: [...MESH_PROCESS, 'ca'], api: true, help: 'lifetime of a workload certificate (renewed at two thirds of it)' },
  ca_server: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'get the workload certificate from the mesh CA\'s signing service (mesh ca serve) at https://HOST:PORT instead of --ca_dir (with --ca_token and --ca_root_fingerprint)' },
  ca_token: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'with --ca_server: the join token for the first certificate (mesh ca token); renewals present the certificate instead' },
  ca_token_file: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'with --ca_server: a file holding the join token (read at each use)' },
  ca_root_fingerprint: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'with --ca_server: the pinned root, sha256:HEX as mesh ca show prints it; a signing service that does not chain to it is refused' },
  ca_root_file: { type: 'string', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'with --ca_server: the pinned root as a PEM file (instead of, or as well as, --ca_root_fingerprint)' },
  ca_bundle_poll: { type: 'duration', default: '1m', group: 'mtls', commands: MESH_PROCESS, api: true, help: 'with --ca_server: how often the trust bundle is fetched from mesh ca serve (a rotation reaches the process within it; its certificate is issued again from the new root two of these later)' },
  ca_serve_names: { type: 'list', group: 'mtls', commands: ['ca'], help: 'mesh ca serve: DNS names and IP addresses of its certificate, how clients reach it (comma list; default the host of --address)' },
  ca_join_lifetime: { type: 'duration', default: '168h', group: 'mtls', commands: ['ca'], help: 'mesh ca serve: how long after its join (its first certificate, with a join token) a process renews with its certificate alone; after that a renewal needs a new join token (1s to 596h, about 24 days)' },
  serial: { type: 'string', group: 'command', commands: ['ca'], help: 'mesh ca revoke: refuse renewals of the certificate with this serial (with the serial of a join\'s first certificate: every renewal of that join)' },
  service: { type: 'string', group: 'command', commands: ['ca', 'tap', 'top'], help: 'mesh ca revoke: refuse renewals of every certificate of this service that joined before now; mesh tap: only requests sent to this service (the upstream cluster)' },
  admin: { type: 'list', group: 'command', commands: ['tap', 'top', 'stat', 'edges'], help: 'mesh tap, top, stat and edges: the admin interfaces to read, HOST:PORT comma list (default: every process mesh ps lists)' },
  interval: { type: 'duration', default: '1s', group: 'command', commands: ['top'], help: 'mesh top: how often the table is drawn again (at least 100ms)' },
  window: { type: 'duration', default: '10s', group: 'command', commands: ['stat', 'edges'], help: 'mesh stat and edges: how long to count (0: since each process started)' },
  path: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only requests whose path (normal form) starts with this prefix' },
  method: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only requests with this method' },
  status: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only answers of this class (2xx to 5xx) or this status code' },
  route: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only requests a route file\'s rule of this name served' },
  identity: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only requests whose caller presented this SPIFFE ID (mutual TLS)' },
  min_duration: { type: 'duration', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: only requests that took at least this long' },
  sample: { type: 'string', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: the share of matching requests shown, 0 to 1 (default 1)' },
  rate: { type: 'int', default: '100', min: 1, max: 1000, range: 'events a second, 1 to 1000', group: 'command', commands: ['tap', 'top'], help: 'mesh tap: the most events a second each process sends (more are dropped and counted)' },
  bodies: { type: 'bool', default: 'false', group: 'command', commands: ['tap'], help: 'mesh tap: ask for the request and response bodies (the process must allow them with --tap_bodies_max_bytes)' },
  line: { type: 'int', min: 1, max: 2147483647, range: 'a line number, from 1', group: 'command', commands: ['tap'], help: 'mesh tap replay: replay the event on this line of the file (default: every event in it)' },
  to: { type: 'string', group: 'command', commands: ['tap'], help: 'mesh tap replay: send to this URL (scheme://host:port) instead of the front end the event names' },
  token_id: { type: 'string', group: 'command', commands: ['ca'], help: 'mesh ca revoke: refuse joins with the join token of this id (mesh ca token --output=json prints it), and renewals of every process that joined with it' },
  services: { type: 'list', group: 'command', commands: ['ca'], help: 'mesh ca token: the service names (globs, * and ?) the token may get certificates for (comma list)' },
  ttl: { type: 'duration', default: '1h', group: 'command', commands: ['ca'], help: 'mesh ca token: how long the token may be used (1s to 168h); renewals do not need it' },
  inbound_auth_callers: { type: 'list', default: 'mesh.api', group: 'mtls', commands: ['sidecar'], help: 'sidecar with --mtls and --server_name: the callers (service names, of their certificates) whose Mesh-Auth-Subject and Mesh-Auth-Scopes reach the app; removed from every other caller (empty: from all)' },
  inbound_address: { type: 'string', group: 'mtls', commands: ['sidecar'], help: 'sidecar with --mtls and --server_name: host:port of the inbound listener, which terminates mutual TLS for the app and is registered in its place (default the host of --server_address, a free port)' },
  authz_rules: { type: 'string', group: 'mtls', commands: ['dev', 'sidecar'], api: true, help: 'who may call the framework services of this process (or, on a sidecar with --mtls, its app): rules from caller identities to services and endpoints, YAML or JSON (first match wins; reloaded on SIGHUP; docs/security.md)' },
  authz_default: { type: 'string', default: 'allow', choices: ['allow', 'deny'], group: 'mtls', commands: ['dev', 'sidecar'], api: true, help: 'what a call no --authz_rules rule matches gets (allow by default, so that nothing changes without rules)' },
  enable_tls: { type: 'bool', default: 'false', group: 'tls', commands: [...SERVE, 'xds'], api: true, help: 'serve HTTPS with --tls_cert_file and --tls_key_file' },
  tls_cert_file: { type: 'string', group: 'tls', commands: [...SERVE, 'check', 'xds'], api: true, help: 'PEM certificate chain' },
  tls_key_file: { type: 'string', group: 'tls', commands: [...SERVE, 'xds'], api: true, help: 'PEM private key' },
  enable_acme: { type: 'bool', default: 'false', group: 'tls', commands: SERVE, api: true, help: 'obtain certificates by ACME for --acme_hosts' },
  acme_hosts: { type: 'list', group: 'tls', commands: SERVE, api: true, help: 'host names allowed to get ACME certificates' },
  acme_directory: { type: 'string', default: 'https://acme-v02.api.letsencrypt.org/directory', group: 'tls', commands: SERVE, api: true, help: 'ACME directory URL' },
  acme_email: { type: 'string', group: 'tls', commands: SERVE, api: true, help: 'ACME account contact' },
  acme_http_port: { type: 'string', default: '80', group: 'tls', commands: SERVE, api: true, help: 'ACME HTTP-01 challenge listener: PORT (all interfaces) or HOST:PORT' },
  acme_cache: { type: 'string', group: 'tls', commands: SERVE, api: true, help: 'ACME account key and certificates (default $MESH_HOME/acme or ~/.mesh/acme)' },
  max_body_size: { type: 'size', default: '4MiB', group: 'limits', commands: ['dev', 'api', 'sidecar', 'proxy', 'call'], api: true, help: 'largest request body accepted' },
  cors: { type: 'list', group: 'listen', commands: GATEWAYS, api: true, help: 'allowed CORS origins: scheme://host[:port] comma list (reflected, with credentials), or * alone (any origin, never credentials)' },
  cors_max_age: { type: 'int', default: '600', group: 'listen', commands: GATEWAYS, help: 'seconds a browser may cache a CORS preflight answer (Access-Control-Max-Age)' },
  rate_limit: { type: 'string', default: '0', group: 'limits', commands: GATEWAYS, help: 'requests allowed per client (see --rate_limit_key): N/s, N/m, N/h or N/<duration>, e.g. 100/s; 0 or off: no limit' },
  rate_limit_burst: { type: 'int', group: 'limits', commands: GATEWAYS, help: 'most requests a client may send at once (token bucket size; default one second\'s worth of --rate_limit, at least 1)' },
  rate_limit_key: { type: 'string', default: 'address', choices: ['address', 'subject', 'route'], group: 'limits', commands: GATEWAYS, help: 'what one rate limit bucket counts: the client address, the authenticated subject (else the address), or the route (request path)' },
  rate_limit_max_keys: { type: 'int', default: '100000', min: 1, range: 'must be at least 1', group: 'limits', commands: GATEWAYS, help: 'most rate limit buckets kept; the least recently used is forgotten first' },
  rate_limit_store: { type: 'string', default: 'local', group: 'limits', commands: [...GATEWAYS, 'check'], help: 'where the rate limit buckets live: local (this process; the workers of --concurrency share the primary\'s), or redis://[:password@]host:port[/db] (rediss:// for TLS): one budget across every instance using it' },
  rate_limit_store_tls_ca_file: { type: 'string', group: 'limits', commands: [...GATEWAYS, 'check'], help: 'rediss://: PEM CA to trust instead of the system roots' },
  rate_limit_store_tls_cert_file: { type: 'string', group: 'limits', commands: [...GATEWAYS, 'check'], help: 'rediss://: PEM client certificate' },
  rate_limit_store_tls_key_file: { type: 'string', group: 'limits', commands: [...GATEWAYS, 'check'], help: 'rediss://: PEM client key' },
  rate_limit_store_timeout: { type: 'duration', default: '100ms', min: 1, max: 10_000, range: 'must be from 1ms to 10s', group: 'limits', commands: GATEWAYS, help: 'the longest a request waits for the shared rate limit store; past it --rate_limit_failure_mode decides' },
  rate_limit_failure_mode: { type: 'string', default: 'open', choices: ['open', 'closed'], group: 'limits', commands: GATEWAYS, help: 'the shared rate limit store does not answer (within --rate_limit_store_timeout): open allows the request, closed refuses it (503)' },
  enable_rpc: { type: 'bool', default: 'true', group: 'command', commands: ['dev', 'api'], help: 'gateway: serve POST /rpc (false: /rpc is a path like any other)' },
  enable_http2: { type: 'bool', default: 'false', group: 'listen', commands: ['dev', 'api', 'sidecar'], help: 'gateway and sidecar: serve HTTP/2 too, on the same port (h2 by ALPN with TLS, h2c by prior knowledge without), and native gRPC calls; HTTP/1.1 Upgrade: h2c stays refused' },
  mesh: { type: 'string', group: 'command', commands: ['new'], help: 'new service: the project depends on this checkout (a directory) or packed tarball (npm pack) of @mesh-platform/mesh instead of the registry version' },
  rpc_allow: { type: 'list', group: 'command', commands: ['dev', 'api'], help: 'gateway: services POST /rpc may call, globs over the name (comma list; * any run of characters, ? one; default all)' },
  auth: { type: 'string', default: 'off', choices: ['off', 'jwt', 'key'], group: 'auth', commands: ['api', 'sidecar'], help: 'gateway/sidecar: authenticate requests by bearer JWT or API key (docs/security.md)' },
  auth_jwks: { type: 'string', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt: the JWKS (public keys), a file or an http(s) URL (cached, refreshed)' },
  auth_issuer: { type: 'list', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt: accepted "iss" values (comma list; unset: any)' },
  auth_audience: { type: 'list', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt: accepted "aud" values (comma list; unset: any)' },
  auth_clock_skew: { type: 'duration', default: '30s', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt: clock skew tolerated on exp and nbf' },
  auth_jwks_timeout: { type: 'duration', default: '3s', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt with a JWKS URL: longest wait for one fetch (a token with a new kid waits for it)' },
  auth_jwks_cooldown: { type: 'duration', default: '30s', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt with a JWKS URL: least time between fetches for a kid not in the keys' },
  auth_jwks_refresh: { type: 'duration', default: '10m', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=jwt with a JWKS URL: keys older than this are fetched again, in the background' },
  auth_keys: { type: 'string', group: 'auth', commands: ['api', 'sidecar'], help: '--auth=key: API key file (lines, or .yaml/.json; keys as sha256:HEX or plaintext)' },
  auth_rules: { type: 'string', group: 'auth', commands: ['api', 'sidecar'], help: 'authorization rules file (YAML or JSON; first match wins; reloaded on SIGHUP)' },
  auth_default: { type: 'string', choices: ['deny', 'authenticated', 'public'], group: 'auth', commands: ['api', 'sidecar'], help: 'access of a request no rule matches (default authenticated with --auth, public without)' },
  sidecar_token: { type: 'string', group: 'auth', commands: ['sidecar', 'list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health'], help: 'sidecar: every route but the health path needs Mesh-Sidecar-Token: <token>; CLI commands with --proxy_address send it (prefer --sidecar_token_file or MESH_SIDECAR_TOKEN: other users can see a command line)' },
  sidecar_token_file: { type: 'string', group: 'auth', commands: ['sidecar', 'list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health'], fileOf: 'sidecar_token', help: 'a file holding --sidecar_token (read at start; trailing newlines dropped)' },
  output: { type: 'string', default: 'text', choices: ['text', 'json'], group: 'command', commands: [...PLATFORM, 'ca', 'check', 'envoy'], help: 'text or json' },
  address: { type: 'string', apiDefault: '127.0.0.1:0', commandDefaults: { run: '127.0.0.1:0' }, group: 'listen', commands: [...GATEWAYS, 'ca', 'xds'], api: true, help: 'listen address of the server this command starts' },
  concurrency: { type: 'string', default: '1', group: 'listen', commands: ['api', 'sidecar', 'proxy'], help: 'api, sidecar, proxy: worker processes sharing the listening port, 1 to 256, or auto (one per CPU); one admin interface shows their stats summed' },
  sidecar_address: { type: 'string', default: '127.0.0.1:8081', group: 'listen', commands: ['dev'], help: 'dev: listen address of its sidecar' },
  advertise: { type: 'string', group: 'listen', commands: ['dev', 'sidecar'], api: true, help: 'address to register instead of the listen address' },
  namespace: { type: 'string', group: 'command', commands: GATEWAYS, help: 'service namespace of the gateway or sidecar' },
  handler: { type: 'string', choices: ['api', 'rpc', 'proxy', 'event'], group: 'command', commands: GATEWAYS, help: 'gateway/sidecar handler' },
  routes: { type: 'string', group: 'command', commands: ['dev', 'api', 'sidecar', 'envoy', 'xds', 'check'], help: 'gateway and sidecar: route file of Gateway API HTTPRoute documents, YAML or JSON (weighted versions, matches on path, method, headers and query, timeouts); reloaded on SIGHUP and when the file changes (docs/routing.md); mesh envoy bootstrap: the routes of Envoy\'s HTTP listener; mesh xds: served as an Envoy HTTP listener (mesh_http) and its routes (mesh_routes) over ADS, reloaded as the gateway\'s; mesh check: the routes whose backendRefs do not resolve (another kind, a service the registry does not know)' },
  gateway_ports: { type: 'list', group: 'listen', commands: ['dev', 'api'], help: 'gateway: where the route file\'s Gateway listeners listen, PORT=BIND comma list (the port as the Gateway writes it = the port to listen on, 0 any free one; default the same port; docs/routing.md)' },
  server_name: { type: 'string', group: 'command', commands: ['sidecar'], help: 'sidecar: name to register the app under' },
  server_address: { type: 'string', group: 'command', commands: ['sidecar'], help: 'sidecar: host:port of the app' },
  healthcheck_url: { type: 'string', group: 'command', commands: ['sidecar'], help: 'sidecar: URL checked to decide if the app is healthy' },
  healthcheck_interval: { type: 'duration', default: '10s', commandDefaults: { run: '2s' }, group: 'command', commands: ['sidecar'], help: 'sidecar: time between health checks' },
  healthcheck_timeout: { type: 'duration', default: '2s', group: 'command', commands: ['sidecar'], help: 'sidecar: health check timeout' },
  stream: { type: 'string', choices: ['server', 'client', 'bidi'], group: 'command', commands: ['call'], help: 'call: a streaming call of this kind instead of a unary call; answers are printed one JSON line each as they arrive, client and bidi requests are read from stdin, one JSON a line (docs/cli.md)' },
  queue: { type: 'string', group: 'command', commands: ['subscribe'], help: 'subscribe: queue group' },
  ack: { type: 'bool', default: 'false', group: 'command', commands: ['subscribe'], help: 'subscribe: at least once, under --durable NAME: each message is acknowledged once printed' },
  durable: { type: 'string', group: 'command', commands: ['subscribe'], help: 'subscribe --ack: the durable consumer name (messages are kept for it while it is not running)' },
  config: { type: 'string', group: 'command', commands: ['proxy'], help: 'proxy: configuration file' },
  xds_address: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap: host:port of the xDS server (mesh xds --address) Envoy takes its configuration from' },
  node_id: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap: the node id Envoy presents to the xDS server (default this machine\'s host name)' },
  node_cluster: { type: 'string', default: 'envoy', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap: the node cluster Envoy presents to the xDS server' },
  xds_token: { type: 'string', group: 'command', commands: ['xds'], help: 'mesh xds: admit only ADS streams whose gRPC metadata carries authorization: Bearer <token> (prefer --xds_token_file or MESH_XDS_TOKEN: other users can see a command line)' },
  xds_token_file: { type: 'string', group: 'command', commands: ['xds'], fileOf: 'xds_token', help: 'mesh xds: a file holding --xds_token (read at start; trailing newlines dropped)' },
  xds_node_ids: { type: 'list', group: 'command', commands: ['xds'], help: 'mesh xds: admit only ADS streams whose node id is one of these (comma list; * any run of characters, ? one)' },
  xds_tls_client_ca_file: { type: 'string', group: 'command', commands: ['xds'], help: 'mesh xds --enable_tls: mutual TLS: admit only clients whose certificate this PEM CA file signs' },
  listener_address: { type: 'string', group: 'command', commands: ['envoy', 'xds'], help: 'mesh envoy bootstrap --routes, mesh xds --routes: where Envoy\'s HTTP listener listens (default :10000)' },
  xds_tls_ca_file: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap: connect to the xDS server over TLS, its certificate checked against this PEM CA file (a path on Envoy\'s machine)' },
  xds_tls_cert_file: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap, mutual TLS: Envoy\'s certificate chain, PEM (with --xds_tls_key_file and --xds_tls_ca_file)' },
  xds_tls_key_file: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap, mutual TLS: the private key of --xds_tls_cert_file, PEM' },
  xds_tls_server_name: { type: 'string', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap with TLS: the name sent as SNI (default the host of --xds_address when it is a name)' },
  xds_tls_san: { type: 'list', group: 'command', commands: ['envoy'], help: 'mesh envoy bootstrap with TLS: the names the xDS server\'s certificate must carry one of: spiffe:// URIs, IP addresses or DNS names (comma list; default --xds_tls_server_name, else the host of --xds_address)' },
  mesh_home: { type: 'string', group: 'registry', commands: [...MESH_PROCESS, 'xds', 'ca'], api: true, help: 'state directory (default $MESH_HOME or ~/.mesh)' },

  name: { type: 'string', group: 'command', commands: ['run'], help: 'run: the service name the app is registered under' },
  app_port: { type: 'string', default: 'auto', group: 'command', commands: ['run'], help: 'run: the port the app listens on, given to it as PORT (auto: a free port)' },
  health_path: { type: 'string', default: '/health', group: 'command', commands: ['run'], help: 'run: the path on the app that answers 2xx when it is healthy; the app is registered once it does (off: registered at start, no check)' },
  file: { type: 'string', group: 'command', commands: ['run'], help: 'run: a YAML file of apps to run, each with its sidecar (-f FILE; docs/run.md)' },
} as const satisfies Record<string, OptionSpec>);

export type OptionKey = keyof typeof OPTIONS;

/** The spec of a schema key, or undefined for a name that is not one. */
export function optionSpec(key: string): OptionSpec | undefined {
  return Object.hasOwn(OPTIONS, key) ? (OPTIONS as Record<string, OptionSpec>)[key] : undefined;
}

/** Every schema key with its spec, in the table's order. */
export function optionEntries(): Array<[OptionKey, OptionSpec]> {
  return Object.entries(OPTIONS) as Array<[OptionKey, OptionSpec]>;
}

/** The environment variable of an option: MESH_CLIENT_RETRIES for client_retries. */
export function envName(key: string): string {
  return `MESH_${key.toUpperCase()}`;
}

/** The API name of an option: client_request_timeout → clientRequestTimeout. */
export function apiName(key: string): string {
  return optionLabel(key, 'api');
}

/** The schema key of an API name: clientRequestTimeout → client_request_timeout. */
export function keyOfApiName(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** The default of an option for a command: its own (commandDefaults), else the option's. */
export function commandDefault(spec: OptionSpec, command: CommandName | undefined): string | undefined {
  return (command !== undefined ? spec.commandDefaults?.[command] : undefined) ?? spec.default;
}

/**
 * The commands with a default of their own, grouped by value, as help and the docs print them after
 * the option's default: `dev: strict; call, health: permissive` (empty: none).
 */
export function commandDefaultsText(spec: OptionSpec, show: (value: string) => string = (v) => v): string {
  const byValue = new Map<string, string[]>();
  for (const [command, value] of Object.entries(spec.commandDefaults ?? {}) as Array<[CommandName, string]>) {
    byValue.set(value, [...(byValue.get(value) ?? []), command]);
  }
  return [...byValue].map(([value, commands]) => `${commands.join(', ')}: ${show(value)}`).join('; ');
}

/** Why a number is outside the option's range, or undefined when it is inside (or the option has none). */
export function outOfRange(key: string, value: number): string | undefined {
  const spec = optionSpec(key);
  if (!spec?.range) return undefined;
  if (spec.orZero && value === 0) return undefined;
  if ((spec.min !== undefined && value < spec.min) || (spec.max !== undefined && value > spec.max)) return spec.range;
  return undefined;
}

// ---- Types derived from the table --------------------------------------------------------

/** A duration: a Go-syntax string (`300ms`, `1m30s`) or a number of milliseconds. */
export type Duration = string | number;
/** A size: a string (`4MiB`, `512KiB`, `1024`) or a number of bytes. */
export type Size = string | number;

type CamelCase<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<CamelCase<T>>}` : S;
type Spec<K extends OptionKey> = (typeof OPTIONS)[K];
type Choice<S> = S extends { choices: readonly (infer C)[] } ? C : string;

/** A value as the API takes it. */
type ApiValue<S> = S extends { type: 'duration' } ? Duration : S extends { type: 'size' } ? Size : S extends { type: 'int' } ? number : S extends { type: 'bool' } ? boolean : S extends { type: 'list' } ? string[] : Choice<S>;
/** A value as the flag parser gives it (durations in ms, sizes in bytes). */
type FlagValue<S> = S extends { type: 'duration' | 'size' | 'int' } ? number : S extends { type: 'bool' } ? boolean : S extends { type: 'list' } ? string[] : Choice<S>;

type ApiKey = { [K in OptionKey]: Spec<K> extends { api: true } ? K : never }[OptionKey];
/** A flag always has a value after parsing when it has a default (lists: []). */
type Always = { [K in OptionKey]: Spec<K> extends { default: string } | { type: 'list' } ? K : never }[OptionKey];

/** The camelCase API options of the schema, each optional, typed from its entry. */
export type SchemaApiOptions = { [K in ApiKey as CamelCase<K>]?: ApiValue<Spec<K>> };

/** The parsed flags, by schema key. */
export type SchemaConfig = { [K in Always]: FlagValue<Spec<K>> } & { [K in Exclude<OptionKey, Always>]?: FlagValue<Spec<K>> };

/** An API option always has a value once resolved when it has a default of its own (lists: []). */
type ApiAlways = { [K in OptionKey]: Spec<K> extends { apiDefault: string | number } | { type: 'list' } ? K : Spec<K> extends { apiDefault: null } ? never : Spec<K> extends { default: string } ? K : never }[OptionKey];

/** The API options after resolution, typed from the schema (durations in ms, sizes in bytes). */
export type SchemaResolvedOptions = { [K in ApiKey & ApiAlways as CamelCase<K>]: FlagValue<Spec<K>> } & { [K in Exclude<ApiKey, ApiAlways> as CamelCase<K>]?: FlagValue<Spec<K>> };
