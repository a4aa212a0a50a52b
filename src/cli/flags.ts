/**
 * Command-line flags (DESIGN section 3): `--snake_case` names, accepted before or after the
 * command, as `--name=value` or `--name value`, and from the environment as MESH_<NAME>.
 * A bad value is an error naming the flag (exit 2), never ignored.
 */
import { availableParallelism } from 'node:os';
import { parseDuration, parseSize } from '../util/duration.js';
import { parseLevel } from '../util/levels.js';
import { parseAllowedHosts } from '../http/host-check.js';
import { parseAddress } from '../util/address.js';
import { parseCorsOrigins } from '../http/cors.js';
import { parseRate } from '../http/rate-limit.js';
import { compileAccessLogFormat } from '../http/access-log.js';
import { DEFAULT_TRACING_ADDRESS, parseSampleRate, parseTracingAddress } from '../tracing/config.js';

type FlagType = 'string' | 'bool' | 'int' | 'duration' | 'size' | 'list';

interface FlagSpec {
  type: FlagType;
  help: string;
  default?: string;
  choices?: string[];
}

export const FLAG_SPECS = {
  registry: { type: 'string', help: 'registry backend', default: 'local', choices: ['local', 'memory', 'etcd'] },
  registry_address: { type: 'string', help: 'local: directory of the SQLite registry; etcd: [https://[user:password@]]host:port[,...]' },
  broker: { type: 'string', help: 'broker backend', default: 'http', choices: ['http', 'memory', 'nats'] },
  registry_tls_ca_file: { type: 'string', help: 'etcd over https://: PEM CA to trust instead of the system roots' },
  registry_tls_cert_file: { type: 'string', help: 'etcd over https://: PEM client certificate' },
  registry_tls_key_file: { type: 'string', help: 'etcd over https://: PEM client key' },
  broker_address: { type: 'string', help: 'http: listen host[:port] for deliveries; nats: [nats|tls]://[user:password@]host:port' },
  broker_tls_ca_file: { type: 'string', help: 'nats (TLS required): PEM CA to trust instead of the system roots' },
  broker_tls_cert_file: { type: 'string', help: 'nats (TLS required): PEM client certificate' },
  broker_tls_key_file: { type: 'string', help: 'nats (TLS required): PEM client key' },
  broker_secret: { type: 'string', help: 'http: the secret deliveries between mesh processes carry (default: broker.secret in the registry directory, made on first use); prefer MESH_BROKER_SECRET or --broker_secret_file, as other users can see a command line' },
  broker_secret_file: { type: 'string', help: 'http: a file holding the delivery secret (one line), for processes on several machines' },
  broker_max_deliver: { type: 'int', help: 'durable subscriptions: attempts before a message goes to the dead-letter topic', default: '5' },
  broker_ack_wait: { type: 'duration', help: 'durable subscriptions: a delivery not acknowledged within this is redelivered', default: '30s' },
  broker_dlq_suffix: { type: 'string', help: 'durable subscriptions: dead-letter topic = topic + this', default: '.dlq' },
  broker_stream_max_age: { type: 'duration', help: 'durable topics: stored messages older than this are dropped (0: no limit)', default: '0' },
  broker_stream_max_bytes: { type: 'size', help: 'durable topics: bytes stored per topic before the oldest are dropped (0: no limit)', default: '0' },
  broker_inactive_threshold: { type: 'duration', help: 'durable subscriptions: a consumer name no subscriber used for this long is removed with its messages (0: never)', default: '24h' },
  broker_max_consumers: { type: 'int', help: 'durable subscriptions: most consumer names per topic', default: '1000' },
  proxy_address: { type: 'string', help: 'run CLI commands through the sidecar at host:port' },
  client_request_timeout: { type: 'duration', help: 'budget of one outbound call', default: '5s' },
  client_retries: { type: 'int', help: 'retries on connect failure, 502, 503, timeout', default: '1' },
  client_per_try_timeout: { type: 'duration', help: 'budget of one try of an outbound call; past it the call is retried on another host (0: a try may use the whole budget)', default: '0' },
  client_hedge_delay: { type: 'duration', help: 'idempotent calls: send a second try to another host when the first has not answered after this long (0: no hedging)', default: '0' },
  proto_path: { type: 'list', help: 'gRPC: directories of the .proto files of gRPC backends and services, searched for imports in order (comma list; none by default; docs/grpc.md)' },
  proto_files: { type: 'list', help: 'gRPC: the .proto files to load, relative to a --proto_path directory (comma list; default every .proto under --proto_path)' },
  server_protocol: { type: 'string', help: 'framework services: serve the RPC wire (mesh) or gRPC (grpc: the handlers as the unary methods of --proto_path\'s services)', default: 'mesh', choices: ['mesh', 'grpc'] },
  stream_idle_timeout: { type: 'duration', help: 'proxied answers: how long a client may read nothing, or a backend send nothing of a body (0: no limit)', default: '5m' },
  max_connections: { type: 'int', help: 'connections each listener holds at once; more are closed at accept (0: no limit)', default: '10000' },
  request_headers_timeout: { type: 'duration', help: 'a request\'s whole header must arrive within this (0: no limit)', default: '10s' },
  request_timeout: { type: 'duration', help: 'a whole request, header and body, must arrive within this (0: no limit)', default: '30s' },
  drain_delay: { type: 'duration', help: 'on shutdown: time to keep serving after deregistering, so peers and load balancers stop sending', default: '1s' },
  drain_timeout: { type: 'duration', help: 'on shutdown: how long in-flight requests may take to finish before they are cut off', default: '10s' },
  lb_policy: { type: 'string', help: 'load balancing', default: 'round_robin', choices: ['round_robin', 'random', 'least_request'] },
  register_ttl: { type: 'duration', help: 'TTL of a service registration', default: '30s' },
  register_interval: { type: 'duration', help: 'how often a service registers again', default: '10s' },
  admin_address: { type: 'string', help: 'admin interface host:port, or off' },
  admin_token: { type: 'string', help: 'require Authorization: Bearer <token> on the admin interface' },
  metrics_address: { type: 'string', help: 'read-only listener for scrapers and probes (GET /metrics, GET /ready; no Host check) host:port, or off', default: 'off' },
  stats_histograms: { type: 'bool', help: 'print the latency histograms in admin /stats (text quantiles, JSON, Prometheus buckets) and the metrics listener; the --enable_stats dashboard also draws per-cluster p50/p99', default: 'false' },
  tracing: { type: 'string', help: 'otlp: record spans and export them over OTLP/HTTP to --tracing_address; off: none (trace context is still forwarded)', default: 'off', choices: ['off', 'otlp'] },
  tracing_address: { type: 'string', help: 'OTLP/HTTP endpoint of --tracing=otlp (http:// or https:// URL)', default: DEFAULT_TRACING_ADDRESS },
  tracing_sample_rate: { type: 'string', help: 'share of new traces recorded, 0 to 1 (a trace that came with a traceparent follows its sampled flag)', default: '1' },
  admin_allowed_hosts: { type: 'list', help: 'Host names the admin interface and the sidecar answer besides loopback, localhost and their own IP (comma list; *.domain; * turns the check off)' },
  log_level: { type: 'string', help: 'trace, debug, info, warning, error, critical, off', default: 'info' },
  log_format: { type: 'string', help: 'logs on stderr: text (one readable line an event) or json (JSON lines); default text when stderr is a terminal, json otherwise', choices: ['text', 'json'] },
  access_log: { type: 'string', help: 'front ends: access log, one line a request: off, stdout or a file path (reopened on SIGUSR1)' },
  access_log_format: { type: 'string', help: 'access log format: text with %OPERATOR%s, or json; without it, Envoy\'s default format (docs/observability.md)' },
  enable_stats: { type: 'bool', help: 'serve /stats (dashboard and JSON)', default: 'false' },
  enable_tls: { type: 'bool', help: 'serve HTTPS with --tls_cert_file and --tls_key_file', default: 'false' },
  tls_cert_file: { type: 'string', help: 'PEM certificate chain' },
  tls_key_file: { type: 'string', help: 'PEM private key' },
  enable_acme: { type: 'bool', help: 'obtain certificates by ACME for --acme_hosts', default: 'false' },
  acme_hosts: { type: 'list', help: 'host names allowed to get ACME certificates' },
  acme_directory: { type: 'string', help: 'ACME directory URL', default: 'https://acme-v02.api.letsencrypt.org/directory' },
  acme_email: { type: 'string', help: 'ACME account contact' },
  acme_http_port: { type: 'string', help: 'ACME HTTP-01 challenge listener: PORT (all interfaces) or HOST:PORT', default: '80' },
  acme_cache: { type: 'string', help: 'ACME account key and certificates (default $MESH_HOME/acme or ~/.mesh/acme)' },
  max_body_size: { type: 'size', help: 'largest request body accepted', default: '4MiB' },
  cors: { type: 'list', help: 'allowed CORS origins: scheme://host[:port] comma list (reflected, with credentials), or * alone (any origin, never credentials)' },
  cors_max_age: { type: 'int', help: 'seconds a browser may cache a CORS preflight answer (Access-Control-Max-Age)', default: '600' },
  rate_limit: { type: 'string', help: 'requests allowed per client (see --rate_limit_key): N/s, N/m, N/h or N/<duration>, e.g. 100/s; 0 or off: no limit', default: '0' },
  rate_limit_burst: { type: 'int', help: 'most requests a client may send at once (token bucket size; default one second\'s worth of --rate_limit, at least 1)' },
  rate_limit_key: { type: 'string', help: 'what one rate limit bucket counts: the client address, the authenticated subject (else the address), or the route (request path)', default: 'address', choices: ['address', 'subject', 'route'] },
  rate_limit_max_keys: { type: 'int', help: 'most rate limit buckets kept; the least recently used is forgotten first', default: '100000' },
  enable_rpc: { type: 'bool', help: 'gateway: serve POST /rpc (false: /rpc is a path like any other)', default: 'true' },
  rpc_allow: { type: 'list', help: 'gateway: services POST /rpc may call, globs over the name (comma list; * any run of characters, ? one; default all)' },
  auth: { type: 'string', help: 'gateway/sidecar: authenticate requests by bearer JWT or API key (docs/security.md)', default: 'off', choices: ['off', 'jwt', 'key'] },
  auth_jwks: { type: 'string', help: '--auth=jwt: the JWKS (public keys), a file or an http(s) URL (cached, refreshed)' },
  auth_issuer: { type: 'list', help: '--auth=jwt: accepted "iss" values (comma list; unset: any)' },
  auth_audience: { type: 'list', help: '--auth=jwt: accepted "aud" values (comma list; unset: any)' },
  auth_clock_skew: { type: 'duration', help: '--auth=jwt: clock skew tolerated on exp and nbf', default: '30s' },
  auth_jwks_timeout: { type: 'duration', help: '--auth=jwt with a JWKS URL: longest wait for one fetch (a token with a new kid waits for it)', default: '3s' },
  auth_jwks_cooldown: { type: 'duration', help: '--auth=jwt with a JWKS URL: least time between fetches for a kid not in the keys', default: '30s' },
  auth_jwks_refresh: { type: 'duration', help: '--auth=jwt with a JWKS URL: keys older than this are fetched again, in the background', default: '10m' },
  auth_keys: { type: 'string', help: '--auth=key: API key file (lines, or .yaml/.json; keys as sha256:HEX or plaintext)' },
  auth_rules: { type: 'string', help: 'authorization rules file (YAML or JSON; first match wins; reloaded on SIGHUP)' },
  auth_default: { type: 'string', help: 'access of a request no rule matches (default authenticated with --auth, public without)', choices: ['deny', 'authenticated', 'public'] },
  sidecar_token: { type: 'string', help: 'sidecar: every route but the health path needs Mesh-Sidecar-Token: <token>; CLI commands with --proxy_address send it' },
  output: { type: 'string', help: 'text or json', default: 'text', choices: ['text', 'json'] },
  address: { type: 'string', help: 'listen address of the server this command starts' },
  concurrency: { type: 'string', help: 'api, sidecar, proxy: worker processes sharing the listening port, 1 to 256, or auto (one per CPU); one admin interface shows their stats summed', default: '1' },
  sidecar_address: { type: 'string', help: 'dev: listen address of its sidecar', default: '127.0.0.1:8081' },
  advertise: { type: 'string', help: 'address to register instead of the listen address' },
  namespace: { type: 'string', help: 'service namespace of the gateway or sidecar' },
  handler: { type: 'string', help: 'gateway/sidecar handler', choices: ['api', 'rpc', 'proxy', 'event'] },
  server_name: { type: 'string', help: 'sidecar: name to register the app under' },
  server_address: { type: 'string', help: 'sidecar: host:port of the app' },
  healthcheck_url: { type: 'string', help: 'sidecar: URL checked to decide if the app is healthy' },
  healthcheck_interval: { type: 'duration', help: 'sidecar: time between health checks', default: '10s' },
  healthcheck_timeout: { type: 'duration', help: 'sidecar: health check timeout', default: '2s' },
  stream: { type: 'string', help: 'call: a streaming call of this kind instead of a unary call; answers are printed one JSON line each as they arrive, client and bidi requests are read from stdin, one JSON a line (docs/cli.md)', choices: ['server', 'client', 'bidi'] },
  queue: { type: 'string', help: 'subscribe: queue group' },
  ack: { type: 'bool', help: 'subscribe: at least once, under --durable NAME: each message is acknowledged once printed', default: 'false' },
  durable: { type: 'string', help: 'subscribe --ack: the durable consumer name (messages are kept for it while it is not running)' },
  config: { type: 'string', help: 'proxy: configuration file' },
  mesh_home: { type: 'string', help: 'state directory (default $MESH_HOME or ~/.mesh)' },
} satisfies Record<string, FlagSpec>;

export type FlagName = keyof typeof FLAG_SPECS;

/** The sections of `mesh <command> --help`, in the order they are printed. */
export const FLAG_GROUPS = {
  command: 'command',
  listen: 'listen',
  registry: 'registry',
  broker: 'broker',
  client: 'client (outbound calls)',
  tls: 'TLS and ACME',
  admin: 'admin interface',
  auth: 'authentication and authorization',
  limits: 'limits and drain',
  logging: 'logging',
  other: 'other',
} as const;
export type FlagGroup = keyof typeof FLAG_GROUPS;

/** The commands of `mesh` (src/cli/help.ts describes each). */
export const COMMAND_NAMES = ['dev', 'api', 'sidecar', 'proxy', 'list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health', 'new', 'completion', 'help', 'version'] as const;
export type CommandName = (typeof COMMAND_NAMES)[number];

const SERVE: CommandName[] = ['dev', 'api', 'sidecar', 'proxy'];
const PLATFORM: CommandName[] = ['list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health'];
const MESH_PROCESS: CommandName[] = [...SERVE, ...PLATFORM];
const GATEWAYS: CommandName[] = ['dev', 'api', 'sidecar'];

/**
 * Help metadata: the section a flag is listed in, and the commands whose help lists it (the ones
 * whose code reads it). Every command still accepts every flag; without `commands` a flag is
 * listed for every command that starts a mesh process.
 */
export interface FlagHelp {
  group: FlagGroup;
  commands?: CommandName[];
}

export const FLAG_HELP: Partial<Record<FlagName, FlagHelp>> = {
  registry: { group: 'registry' },
  registry_address: { group: 'registry' },
  registry_tls_ca_file: { group: 'registry' },
  registry_tls_cert_file: { group: 'registry' },
  registry_tls_key_file: { group: 'registry' },
  mesh_home: { group: 'registry' },
  register_ttl: { group: 'registry', commands: ['dev', 'sidecar', 'register'] },
  register_interval: { group: 'registry', commands: ['dev', 'sidecar'] },
  broker: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_address: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_tls_ca_file: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_tls_cert_file: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_tls_key_file: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_secret: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq'] },
  broker_secret_file: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq'] },
  broker_max_deliver: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_ack_wait: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_dlq_suffix: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_stream_max_age: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_stream_max_bytes: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_inactive_threshold: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  broker_max_consumers: { group: 'broker', commands: ['dev', 'api', 'sidecar', 'publish', 'subscribe', 'dlq', 'consumers'] },
  proxy_address: { group: 'client', commands: PLATFORM },
  client_request_timeout: { group: 'client', commands: MESH_PROCESS },
  client_retries: { group: 'client', commands: [...SERVE, 'call', 'health'] },
  client_per_try_timeout: { group: 'client', commands: [...SERVE, 'call', 'health'] },
  client_hedge_delay: { group: 'client', commands: [...SERVE, 'call', 'health'] },
  lb_policy: { group: 'client', commands: [...SERVE, 'call', 'health'] },
  proto_path: { group: 'client', commands: [...SERVE, 'call'] },
  proto_files: { group: 'client', commands: [...SERVE, 'call'] },
  server_protocol: { group: 'listen', commands: ['dev'] },
  address: { group: 'listen', commands: GATEWAYS },
  concurrency: { group: 'listen', commands: ['api', 'sidecar', 'proxy'] },
  sidecar_address: { group: 'listen', commands: ['dev'] },
  advertise: { group: 'listen', commands: ['dev', 'sidecar'] },
  cors: { group: 'listen', commands: GATEWAYS },
  cors_max_age: { group: 'listen', commands: GATEWAYS },
  rate_limit: { group: 'limits', commands: GATEWAYS },
  rate_limit_burst: { group: 'limits', commands: GATEWAYS },
  rate_limit_key: { group: 'limits', commands: GATEWAYS },
  rate_limit_max_keys: { group: 'limits', commands: GATEWAYS },
  enable_rpc: { group: 'command', commands: ['dev', 'api'] },
  rpc_allow: { group: 'command', commands: ['dev', 'api'] },
  auth: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_jwks: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_issuer: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_audience: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_clock_skew: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_jwks_timeout: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_jwks_cooldown: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_jwks_refresh: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_keys: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_rules: { group: 'auth', commands: ['api', 'sidecar'] },
  auth_default: { group: 'auth', commands: ['api', 'sidecar'] },
  sidecar_token: { group: 'auth', commands: ['sidecar', ...PLATFORM] },
  enable_tls: { group: 'tls', commands: SERVE },
  tls_cert_file: { group: 'tls', commands: SERVE },
  tls_key_file: { group: 'tls', commands: SERVE },
  enable_acme: { group: 'tls', commands: SERVE },
  acme_hosts: { group: 'tls', commands: SERVE },
  acme_directory: { group: 'tls', commands: SERVE },
  acme_email: { group: 'tls', commands: SERVE },
  acme_http_port: { group: 'tls', commands: SERVE },
  acme_cache: { group: 'tls', commands: SERVE },
  admin_address: { group: 'admin', commands: SERVE },
  admin_token: { group: 'admin', commands: SERVE },
  admin_allowed_hosts: { group: 'admin', commands: SERVE },
  metrics_address: { group: 'admin', commands: SERVE },
  stats_histograms: { group: 'admin', commands: SERVE },
  tracing: { group: 'logging', commands: SERVE },
  tracing_address: { group: 'logging', commands: SERVE },
  tracing_sample_rate: { group: 'logging', commands: SERVE },
  max_body_size: { group: 'limits', commands: [...SERVE, 'call'] },
  max_connections: { group: 'limits', commands: SERVE },
  request_headers_timeout: { group: 'limits', commands: SERVE },
  request_timeout: { group: 'limits', commands: SERVE },
  stream_idle_timeout: { group: 'limits', commands: SERVE },
  drain_delay: { group: 'limits', commands: SERVE },
  drain_timeout: { group: 'limits', commands: SERVE },
  log_level: { group: 'logging' },
  log_format: { group: 'logging' },
  access_log: { group: 'logging', commands: SERVE },
  access_log_format: { group: 'logging', commands: SERVE },
  enable_stats: { group: 'command', commands: GATEWAYS },
  namespace: { group: 'command', commands: GATEWAYS },
  handler: { group: 'command', commands: GATEWAYS },
  server_name: { group: 'command', commands: ['sidecar'] },
  server_address: { group: 'command', commands: ['sidecar'] },
  healthcheck_url: { group: 'command', commands: ['sidecar'] },
  healthcheck_interval: { group: 'command', commands: ['sidecar'] },
  healthcheck_timeout: { group: 'command', commands: ['sidecar'] },
  output: { group: 'command', commands: PLATFORM },
  stream: { group: 'command', commands: ['call'] },
  queue: { group: 'command', commands: ['subscribe'] },
  ack: { group: 'command', commands: ['subscribe'] },
  durable: { group: 'command', commands: ['subscribe'] },
  config: { group: 'command', commands: ['proxy'] },
};

/** A flag's help metadata; a flag missing from FLAG_HELP goes by its name (log_* is logging) and is listed for every mesh process. */
export function flagHelp(name: string): Required<FlagHelp> {
  const h = (FLAG_HELP as Record<string, FlagHelp | undefined>)[name];
  const group: FlagGroup = h?.group ?? (name.startsWith('log_') ? 'logging' : 'other');
  return { group, commands: h?.commands ?? MESH_PROCESS };
}

/** The environment variable of a flag: MESH_CLIENT_RETRIES for client_retries. */
export function envName(name: string): string {
  return `MESH_${name.toUpperCase()}`;
}

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
export function editDistance(a: string, b: string): number {
  const d: number[][] = [];
  for (let i = 0; i <= a.length; i++) d.push([i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 0; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidates closest to `input` (case, "-" and "_" ignored), best first, at most 3; none when
 * nothing is close (a distance up to a third of the input's length, at least 1, or a prefix of 3+
 * characters).
 */
export function suggest(input: string, candidates: readonly string[]): string[] {
  const norm = (s: string) => s.toLowerCase().replace(/-/g, '_');
  const want = norm(input);
  if (want === '' || input.length > 100) return [];
  const limit = Math.max(1, Math.floor(want.length / 3));
  const scored = candidates
    .map((c) => {
      const n = norm(c);
      const dist = editDistance(want, n);
      return { c, dist: want.length >= 3 && n.startsWith(want) ? Math.min(dist, limit) : dist };
    })
    .filter((s) => s.dist <= limit)
    .sort((x, y) => x.dist - y.dist || (x.c < y.c ? -1 : 1));
  if (scored.length === 0) return [];
  const best = scored[0]!.dist;
  return scored.filter((s) => s.dist === best).slice(0, 3).map((s) => s.c);
}

/** ", did you mean X?" or "" (X quoted by `show`). */
export function didYouMean(input: string, candidates: readonly string[], show: (c: string) => string = (c) => c): string {
  const s = suggest(input, candidates);
  return s.length === 0 ? '' : `: did you mean ${s.map(show).join(' or ')}?`;
}

export interface Config {
  registry: string;
  registry_address?: string;
  broker: string;
  registry_tls_ca_file?: string;
  registry_tls_cert_file?: string;
  registry_tls_key_file?: string;
  broker_address?: string;
  broker_tls_ca_file?: string;
  broker_tls_cert_file?: string;
  broker_tls_key_file?: string;
  broker_secret?: string;
  broker_secret_file?: string;
  broker_max_deliver: number;
  broker_ack_wait: number;
  broker_dlq_suffix: string;
  broker_stream_max_age: number;
  broker_stream_max_bytes: number;
  broker_inactive_threshold: number;
  broker_max_consumers: number;
  proxy_address?: string;
  client_request_timeout: number;
  client_retries: number;
  client_per_try_timeout: number;
  client_hedge_delay: number;
  proto_path: string[];
  proto_files: string[];
  server_protocol: 'mesh' | 'grpc';
  stream_idle_timeout: number;
  max_connections: number;
  request_headers_timeout: number;
  request_timeout: number;
  drain_delay: number;
  drain_timeout: number;
  lb_policy: 'round_robin' | 'random' | 'least_request';
  register_ttl: number;
  register_interval: number;
  admin_address?: string;
  admin_token?: string;
  admin_allowed_hosts: string[];
  metrics_address: string;
  stats_histograms: boolean;
  tracing: 'off' | 'otlp';
  tracing_address: string;
  tracing_sample_rate: number;
  log_level: string;
  /** undefined: text on a terminal, json otherwise. */
  log_format?: 'text' | 'json';
  /** undefined: the command's default (off; mesh dev: stdout). */
  access_log?: string;
  access_log_format?: string;
  enable_stats: boolean;
  enable_tls: boolean;
  tls_cert_file?: string;
  tls_key_file?: string;
  enable_acme: boolean;
  acme_hosts: string[];
  acme_directory: string;
  acme_email?: string;
  acme_http_port: string;
  acme_cache?: string;
  max_body_size: number;
  cors: string[];
  cors_max_age: number;
  rate_limit: string;
  rate_limit_burst?: number;
  rate_limit_key: 'address' | 'subject' | 'route';
  rate_limit_max_keys: number;
  enable_rpc: boolean;
  rpc_allow: string[];
  auth: 'off' | 'jwt' | 'key';
  auth_jwks?: string;
  auth_issuer: string[];
  auth_audience: string[];
  auth_clock_skew: number;
  auth_jwks_timeout: number;
  auth_jwks_cooldown: number;
  auth_jwks_refresh: number;
  auth_keys?: string;
  auth_rules?: string;
  auth_default?: 'deny' | 'authenticated' | 'public';
  sidecar_token?: string;
  output: 'text' | 'json';
  address?: string;
  /** Worker processes (--concurrency; `auto` resolved to os.availableParallelism()). */
  concurrency: number;
  sidecar_address: string;
  advertise?: string;
  namespace?: string;
  handler?: 'api' | 'rpc' | 'proxy' | 'event';
  server_name?: string;
  server_address?: string;
  healthcheck_url?: string;
  healthcheck_interval: number;
  healthcheck_timeout: number;
  /** mesh call: the kind of streaming call (unset: unary). */
  stream?: 'server' | 'client' | 'bidi';
  queue?: string;
  ack: boolean;
  durable?: string;
  config?: string;
  mesh_home?: string;
}

/** Most worker processes --concurrency accepts. */
export const MAX_CONCURRENCY = 256;

/** --concurrency: `auto` (os.availableParallelism()) or a whole number from 1 to MAX_CONCURRENCY. */
export function parseConcurrency(raw: string): number {
  if (raw === 'auto') return Math.min(MAX_CONCURRENCY, availableParallelism());
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_CONCURRENCY) throw new Error(`use a number of worker processes from 1 to ${MAX_CONCURRENCY}, or auto`);
  return Number(raw);
}

export class FlagError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'FlagError';
  }
}

export interface ParsedArgs {
  config: Config;
  positionals: string[];
  /** Flags that were given explicitly (command line or environment). */
  given: Set<FlagName>;
  /** Special switches: --help, --version, --hot-restart-version. */
  switches: Set<string>;
  /** Flags whose value came from the environment (MESH_<NAME>), not from the command line. */
  fromEnv: Set<FlagName>;
}

const SWITCHES = new Set(['help', 'version', 'hot-restart-version', 'h']);
const SHORT_SWITCHES: Record<string, string> = { '-h': 'help', '-v': 'version' };

/** How an error names a flag: `flag --client_retries`, or `MESH_CLIENT_RETRIES (--client_retries)` when the environment set it. */
export function flagLabel(name: string, fromEnv: boolean): string {
  return fromEnv ? `${envName(name)} (--${name})` : `flag --${name}`;
}

/**
 * A FlagError message of a command runner (`invalid value "x" for flag --namespace: ...`) naming
 * the environment variable when the value came from there.
 */
export function attributeFlagError(message: string, fromEnv: ReadonlySet<string>): string {
  return message.replace(/\bfor flag --([a-z0-9_]+)/, (all, name: string) => (fromEnv.has(name) ? `for ${flagLabel(name, true)}` : all));
}

function convert(name: string, spec: FlagSpec, raw: string, fromEnv = false): unknown {
  const fail = (why: string): never => {
    throw new FlagError(`invalid value "${raw}" for ${flagLabel(name, fromEnv)}: ${why}`);
  };
  switch (spec.type) {
    case 'string':
      if (spec.choices && !spec.choices.includes(raw)) fail(`use one of ${spec.choices.join(', ')}`);
      return raw;
    case 'bool':
      if (['true', '1', 'yes', ''].includes(raw.toLowerCase())) return true;
      if (['false', '0', 'no'].includes(raw.toLowerCase())) return false;
      return fail('use true or false');
    case 'int':
      if (!/^\d+$/.test(raw)) fail('not a non-negative integer');
      return Number(raw);
    case 'duration':
      try {
        return parseDuration(raw);
      } catch (err) {
        return fail((err as Error).message);
      }
    case 'size':
      try {
        return parseSize(raw);
      } catch (err) {
        return fail((err as Error).message);
      }
    case 'list':
      return raw
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
  }
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const values = new Map<FlagName, string>();
  const given = new Set<FlagName>();
  const fromEnv = new Set<FlagName>();
  const switches = new Set<string>();
  const positionals: string[] = [];

  // Environment first; the command line wins.
  for (const name of Object.keys(FLAG_SPECS) as FlagName[]) {
    const v = env[`MESH_${name.toUpperCase()}`];
    if (v !== undefined && v !== '') {
      values.set(name, v);
      given.add(name);
      fromEnv.add(name);
    }
  }

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === '-c') {
      const next = argv[++i];
      if (next === undefined) throw new FlagError('flag -c needs a value (the configuration file)');
      values.set('config', next);
      given.add('config');
      fromEnv.delete('config');
      continue;
    }
    const short = SHORT_SWITCHES[arg];
    if (short) {
      switches.add(short);
      continue;
    }
    if (!arg.startsWith('--') || arg === '--') {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const rawName = arg.slice(2, eq === -1 ? undefined : eq);
    if (SWITCHES.has(rawName)) {
      switches.add(rawName === 'h' ? 'help' : rawName);
      continue;
    }
    const name = rawName.replace(/-/g, '_') as FlagName;
    const spec: FlagSpec | undefined = Object.hasOwn(FLAG_SPECS, name) ? (FLAG_SPECS as Record<string, FlagSpec>)[name] : undefined;
    if (!spec) {
      const hint = didYouMean(rawName, [...Object.keys(FLAG_SPECS), 'help', 'version', 'hot-restart-version'], (c) => `--${c}`);
      throw new FlagError(`unknown flag --${rawName}${hint} (see mesh --help)`);
    }
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (spec.type === 'bool') value = 'true';
    else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new FlagError(`flag --${rawName} needs a value`);
      value = next;
      i++;
    }
    values.set(name, value);
    given.add(name);
    fromEnv.delete(name);
  }

  const config: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(FLAG_SPECS) as Array<[FlagName, FlagSpec]>) {
    const raw = values.get(name) ?? spec.default;
    config[name] = raw === undefined ? (spec.type === 'list' ? [] : undefined) : convert(name, spec, raw, fromEnv.has(name));
  }
  try {
    config.admin_allowed_hosts = parseAllowedHosts(config.admin_allowed_hosts as string[]);
  } catch (err) {
    throw new FlagError(`invalid value "${(config.admin_allowed_hosts as string[]).join(',')}" for ${flagLabel('admin_allowed_hosts', fromEnv.has('admin_allowed_hosts'))}: ${(err as Error).message}`);
  }
  if (config.metrics_address !== 'off') {
    try {
      parseAddress(config.metrics_address as string, { what: 'metrics address' });
    } catch (err) {
      throw new FlagError(`invalid value "${String(config.metrics_address)}" for ${flagLabel('metrics_address', fromEnv.has('metrics_address'))}: ${(err as Error).message}`);
    }
  }
  const check = (name: FlagName, fn: () => void, shownValue = String(config[name])) => {
    try {
      fn();
    } catch (err) {
      throw new FlagError(`invalid value "${shownValue}" for ${flagLabel(name, fromEnv.has(name))}: ${(err as Error).message}`);
    }
  };
  check('concurrency', () => (config.concurrency = parseConcurrency(config.concurrency as string)));
  check('cors', () => (config.cors = parseCorsOrigins(config.cors as string[])), (config.cors as string[]).join(','));
  check('rate_limit', () => parseRate(config.rate_limit as string));
  check('rate_limit_burst', () => {
    if (config.rate_limit_burst === 0) throw new Error('must be at least 1 (leave it out for one second\'s worth of --rate_limit)');
  });
  check('rate_limit_max_keys', () => {
    if (config.rate_limit_max_keys === 0) throw new Error('must be at least 1');
  });
  check('rpc_allow', () => {
    for (const p of config.rpc_allow as string[]) if (!/^[A-Za-z0-9._*?-]+$/.test(p)) throw new Error(`"${p}" is not a service name glob: letters, digits, . _ - and the wildcards * ?`);
  }, (config.rpc_allow as string[]).join(','));
  try {
    parseTracingAddress(config.tracing_address as string);
  } catch (err) {
    throw new FlagError(`invalid value "${String(config.tracing_address)}" for ${flagLabel('tracing_address', fromEnv.has('tracing_address'))}: ${(err as Error).message}`);
  }
  try {
    config.tracing_sample_rate = parseSampleRate(config.tracing_sample_rate as string);
  } catch (err) {
    throw new FlagError(`invalid value "${String(config.tracing_sample_rate)}" for ${flagLabel('tracing_sample_rate', fromEnv.has('tracing_sample_rate'))}: ${(err as Error).message}`);
  }
  try {
    parseLevel(config.log_level as string);
  } catch (err) {
    throw new FlagError(`invalid value "${String(config.log_level)}" for ${flagLabel('log_level', fromEnv.has('log_level'))}: ${(err as Error).message}`);
  }
  if (config.access_log === '') {
    throw new FlagError(`invalid value "" for ${flagLabel('access_log', fromEnv.has('access_log'))}: use off, stdout or a file path`);
  }
  if (config.access_log_format !== undefined) {
    try {
      compileAccessLogFormat(config.access_log_format as string);
    } catch (err) {
      throw new FlagError(`invalid value "${String(config.access_log_format)}" for ${flagLabel('access_log_format', fromEnv.has('access_log_format'))}: ${(err as Error).message}`);
    }
  }
  const headers = config.request_headers_timeout as number;
  const whole = config.request_timeout as number;
  if (whole > 0 && headers > whole) {
    throw new FlagError(`invalid value "${values.get('request_headers_timeout') ?? '10s'}" for ${flagLabel('request_headers_timeout', fromEnv.has('request_headers_timeout'))}: longer than --request_timeout (${values.get('request_timeout') ?? '30s'})`);
  }
  const durable: Array<[FlagName, boolean, string]> = [
    ['broker_max_deliver', (config.broker_max_deliver as number) >= 1 && (config.broker_max_deliver as number) <= 1000, 'must be from 1 to 1000'],
    ['broker_ack_wait', (config.broker_ack_wait as number) >= 100 && (config.broker_ack_wait as number) <= 3_600_000, 'must be from 100ms to 1h'],
    ['broker_dlq_suffix', !/^$|[\s*>]/.test(config.broker_dlq_suffix as string), "must be non-empty, without whitespace, '*' or '>'"],
    ['broker_inactive_threshold', (config.broker_inactive_threshold as number) === 0 || (config.broker_inactive_threshold as number) >= 1000, 'must be 0 (never) or from 1s'],
    ['broker_max_consumers', (config.broker_max_consumers as number) >= 1 && (config.broker_max_consumers as number) <= 100_000, 'must be from 1 to 100000'],
  ];
  for (const [name, ok, why] of durable) {
    if (!ok) throw new FlagError(`invalid value "${values.get(name) ?? ''}" for ${flagLabel(name, fromEnv.has(name))}: ${why}`);
  }
  return { config: config as unknown as Config, positionals, given, switches, fromEnv };
}

