/**
 * The one place where the CLI's parsed flags (Config, snake_case) become the options of a mesh
 * process (MeshOptions, camelCase): every front end (api, sidecar, proxy, dev), the platform
 * commands and runService build their runtime from optionsFromFlags().
 */
import type { Config } from './flags.js';
import { OptionsError, resolveOptions, type MeshOptions, type ResolvedOptions } from '../options.js';
import { frontRateLimit, type FrontRateLimit } from '../http/rate-limit.js';

/** The flag of an option: `clientRequestTimeout` → `--client_request_timeout`. */
export function flagOf(option: string): string {
  return `--${option.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}`;
}

/**
 * The framework flags as MeshOptions (durations already in ms, sizes in bytes). `--address` is
 * left out: it is the listen address of whatever the command starts (a gateway, a sidecar), and
 * only runService makes it the services' address.
 */
export function meshOptionsFromFlags(config: Config): MeshOptions {
  return {
    registry: config.registry as MeshOptions['registry'],
    registryAddress: config.registry_address,
    registryTlsCaFile: config.registry_tls_ca_file,
    registryTlsCertFile: config.registry_tls_cert_file,
    registryTlsKeyFile: config.registry_tls_key_file,
    broker: config.broker as MeshOptions['broker'],
    brokerAddress: config.broker_address,
    brokerTlsCaFile: config.broker_tls_ca_file,
    brokerTlsCertFile: config.broker_tls_cert_file,
    brokerTlsKeyFile: config.broker_tls_key_file,
    brokerSecret: config.broker_secret,
    brokerSecretFile: config.broker_secret_file,
    brokerMaxDeliver: config.broker_max_deliver,
    brokerAckWait: config.broker_ack_wait,
    brokerDlqSuffix: config.broker_dlq_suffix,
    brokerStreamMaxAge: config.broker_stream_max_age,
    brokerStreamMaxBytes: config.broker_stream_max_bytes,
    brokerInactiveThreshold: config.broker_inactive_threshold,
    brokerMaxConsumers: config.broker_max_consumers,
    clientRequestTimeout: config.client_request_timeout,
    clientRetries: config.client_retries,
    clientPerTryTimeout: config.client_per_try_timeout,
    clientHedgeDelay: config.client_hedge_delay,
    protoPath: config.proto_path,
    protoFiles: config.proto_files,
    serverProtocol: config.server_protocol,
    streamIdleTimeout: config.stream_idle_timeout,
    maxConnections: config.max_connections,
    requestHeadersTimeout: config.request_headers_timeout,
    requestTimeout: config.request_timeout,
    drainDelay: config.drain_delay,
    drainTimeout: config.drain_timeout,
    lbPolicy: config.lb_policy,
    registerTtl: config.register_ttl,
    registerInterval: config.register_interval,
    adminAddress: config.admin_address,
    adminToken: config.admin_token,
    adminAllowedHosts: config.admin_allowed_hosts,
    metricsAddress: config.metrics_address,
    statsHistograms: config.stats_histograms,
    tracing: config.tracing,
    tracingAddress: config.tracing_address,
    tracingSampleRate: config.tracing_sample_rate,
    logLevel: config.log_level as MeshOptions['logLevel'],
    logFormat: config.log_format,
    accessLog: config.access_log,
    accessLogFormat: config.access_log_format,
    enableStats: config.enable_stats,
    enableTls: config.enable_tls,
    tlsCertFile: config.tls_cert_file,
    tlsKeyFile: config.tls_key_file,
    enableAcme: config.enable_acme,
    acmeHosts: config.acme_hosts,
    acmeDirectory: config.acme_directory,
    acmeEmail: config.acme_email,
    acmeHttpPort: config.acme_http_port,
    acmeCache: config.acme_cache,
    maxBodySize: config.max_body_size,
    cors: config.cors,
    advertise: config.advertise,
    meshHome: config.mesh_home,
  };
}

/**
 * The resolved options of a CLI process. The flag parser has checked each value already; what is
 * left (TLS files, engine addresses: start-up problems, exit 1) is reported naming the flag.
 */
export function optionsFromFlags(config: Config, overrides: MeshOptions = {}): ResolvedOptions {
  try {
    return resolveOptions({ ...meshOptionsFromFlags(config), ...overrides });
  } catch (err) {
    if (!(err instanceof OptionsError)) throw err;
    const reason = err.reason.replace(/\b[a-z]+(?:[A-Z][a-z]*)+\b/g, (name) => flagOf(name));
    throw new Error(`${flagOf(err.option)}: ${reason}`);
  }
}

/** The edge options every front end (gateway, sidecar) takes from the flags: its rate limit and CORS max age. */
export function frontEdgeFromFlags(config: Config): { rateLimit?: FrontRateLimit; corsMaxAgeSec: number } {
  return {
    rateLimit: frontRateLimit({ rate: config.rate_limit, burst: config.rate_limit_burst, key: config.rate_limit_key, maxKeys: config.rate_limit_max_keys }),
    corsMaxAgeSec: config.cors_max_age,
  };
}
