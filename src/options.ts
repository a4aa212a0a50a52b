/**
 * The options of a mesh process (a Mesh, or a CLI front end): camelCase, every one optional, each
 * with the same meaning and default as the command-line flag of the same name in snake_case
 * (`clientRequestTimeout` ↔ `--client_request_timeout`). resolveOptions() fills the defaults and
 * checks every value once; the runtime only ever sees resolved options. See docs/api.md.
 */
import type { Registry } from './registry/registry.js';
import type { Broker } from './broker/broker.js';
import type { Codec } from './codec/codec.js';
import { parseDuration, parseSize } from './util/duration.js';
import { isLevel, LEVELS, LOG_FORMATS, type Level, type LogFormat } from './util/levels.js';
import { parseAllowedHosts } from './http/host-check.js';
import { parseCorsOrigins } from './http/cors.js';
import { AccessLogFormatError, compileAccessLogFormat } from './http/access-log.js';
import { parseAcmeHosts } from './tls/acme/hosts.js';
import { parseChallengeAddress } from './tls/acme/challenge-server.js';
import { parseAddress, parseAdvertise } from './util/address.js';
import { DEFAULT_TRACING_ADDRESS, parseSampleRate, parseTracingAddress, TRACING_KINDS, type TracingKind } from './tracing/config.js';

/** A duration: a Go-syntax string (`300ms`, `1m30s`) or a number of milliseconds. */
export type Duration = string | number;
/** A size: a string (`4MiB`, `512KiB`, `1024`) or a number of bytes. */
export type Size = string | number;

export type RegistryKind = 'local' | 'memory' | 'etcd';
export type BrokerKind = 'http' | 'memory' | 'nats';
export type LbPolicy = 'round_robin' | 'random' | 'least_request';
export type ServerProtocol = 'mesh' | 'grpc';
export type LogLevel = Level;

/** Everything a mesh process can be told. Every field is optional; defaults are those of the flags. */
export interface MeshOptions {
  /** Registry backend by name, or your own Registry instance. Default `'local'`. */
  registry?: RegistryKind | Registry;
  /** local: the registry's directory (default `$MESH_HOME`, else `~/.mesh`); etcd: `host:port[,...]` or `https://[user:password@]host:port[,...]` (required). */
  registryAddress?: string;
  /** etcd over https://: PEM CA to trust instead of the system roots. */
  registryTlsCaFile?: string;
  /** etcd over https://: PEM client certificate. */
  registryTlsCertFile?: string;
  /** etcd over https://: PEM client key. */
  registryTlsKeyFile?: string;
  /** Broker backend by name, or your own Broker instance. Default `'http'`. */
  broker?: BrokerKind | Broker;
  /** http: listen `host[:port]` for deliveries (default 127.0.0.1:0); nats: `[nats|tls]://[user:password@]host:port` (required). */
  brokerAddress?: string;
  /** nats: PEM CA to trust instead of the system roots. */
  brokerTlsCaFile?: string;
  /** nats: PEM client certificate. */
  brokerTlsCertFile?: string;
  /** nats: PEM client key. */
  brokerTlsKeyFile?: string;
  /**
   * http: the secret every delivery between mesh processes carries. Default: `broker.secret` in the
   * local registry's directory (or `$MESH_HOME` with etcd), made on first use; give the same one
   * to every process of a mesh that spans machines.
   */
  brokerSecret?: string;
  /** http: a file holding the delivery secret (one line), instead of brokerSecret. */
  brokerSecretFile?: string;
  /** Durable subscriptions: attempts before the dead-letter topic. Default `5`. */
  brokerMaxDeliver?: number;
  /** Durable subscriptions: redelivery after this without an ack. Default `'30s'`. */
  brokerAckWait?: Duration;
  /** Durable subscriptions: dead-letter topic = topic + this. Default `'.dlq'`. */
  brokerDlqSuffix?: string;
  /** Durable topics: stored messages older than this are dropped (0: no limit). Default `0`. */
  brokerStreamMaxAge?: Duration;
  /** Durable topics: bytes stored per topic (0: no limit). Default `0`. */
  brokerStreamMaxBytes?: Size;
  /** Durable subscriptions: a consumer name no subscriber used for this long is removed with its messages (0: never). Default `'24h'`. */
  brokerInactiveThreshold?: Duration;
  /** Durable subscriptions: most consumer names per topic. Default `1000`. */
  brokerMaxConsumers?: number;
  /** Extra codecs, chosen by their content type (JSON and protobuf are built in). Default `[]`. */
  codecs?: Codec[];
  /** Budget of one outbound call. Default `'5s'`. */
  clientRequestTimeout?: Duration;
  /** Retries on connect failure, 502, 503 and timeout. Default `1`. */
  clientRetries?: number;
  /** Budget of one try of an outbound call (0: a try may use the whole budget). Default `0`. */
  clientPerTryTimeout?: Duration;
  /** Idempotent calls: a second try goes to another host after this long (0: no hedging). Default `0`. */
  clientHedgeDelay?: Duration;
  /** gRPC: directories of the .proto files of gRPC backends and services (docs/grpc.md). Default none. */
  protoPath?: string[];
  /** gRPC: the .proto files to load, relative to a protoPath directory. Default every .proto under protoPath. */
  protoFiles?: string[];
  /** Framework services: `mesh` (the RPC wire) or `grpc` (the handlers as the unary methods of protoPath's services). Default `'mesh'`. */
  serverProtocol?: ServerProtocol;
  /** Proxied answers: how long a client may read nothing, or a backend send nothing of a body (0: no limit). Default `'5m'`. */
  streamIdleTimeout?: Duration;
  /** Connections each listener holds at once (0: no limit). Default `10000`. */
  maxConnections?: number;
  /** A request's whole header must arrive within this (0: no limit). Default `'10s'`. */
  requestHeadersTimeout?: Duration;
  /** A whole request must arrive within this (0: no limit). Default `'30s'`. */
  requestTimeout?: Duration;
  /** On shutdown: time to keep serving after deregistering. Default `'1s'`. */
  drainDelay?: Duration;
  /** On shutdown: how long in-flight requests may take before they are cut off. Default `'10s'`. */
  drainTimeout?: Duration;
  /** Load balancing. Default `'round_robin'`. */
  lbPolicy?: LbPolicy;
  /** TTL of a service registration. Default `'30s'`. */
  registerTtl?: Duration;
  /** How often a service registers again (0: never). Default `'10s'`. */
  registerInterval?: Duration;
  /** Admin interface `host:port`, or `'off'`. Default `'off'` for a Mesh (runService: `127.0.0.1:0`). */
  adminAddress?: string;
  /** Require `Authorization: Bearer <token>` on the admin interface. */
  adminToken?: string;
  /** Host names the admin interface answers besides loopback, localhost and its own IP (`*.domain`; `*` turns the check off). Default `[]`. */
  adminAllowedHosts?: string[];
  /** Read-only metrics listener `host:port` (GET /metrics, GET /ready), or `'off'`. Default `'off'`. */
  metricsAddress?: string;
  /** Admin /stats and the metrics listener print the latency histograms (default false). */
  statsHistograms?: boolean;
  /** `'otlp'`: record spans and export them over OTLP/HTTP to tracingAddress; `'off'`: none (trace context is still forwarded). Default `'off'`. */
  tracing?: TracingKind;
  /** The OTLP/HTTP endpoint spans go to (an http:// or https:// URL). Default `'http://127.0.0.1:4318/v1/traces'`. */
  tracingAddress?: string;
  /** Share of new traces recorded, 0 to 1 (a trace that came with a traceparent follows its sampled flag). Default `1`. */
  tracingSampleRate?: number;
  /** trace, debug, info, warning, error, critical, off. Default `'info'`. */
  logLevel?: LogLevel;
  /** `'text'` (one readable line per event) or `'json'` (JSON lines with level names). Default: text when stderr is a terminal, else JSON. */
  logFormat?: LogFormat;
  /** Front ends' access log: `'off'`, `'stdout'` or a file path. Default `'off'`. */
  accessLog?: string;
  /** Format of the access log: text with `%OPERATOR%`s, or `'json'`. Default: Envoy's default format (docs/observability.md). */
  accessLogFormat?: string;
  /** Front ends: serve /stats (dashboard and JSON). Default `false`. */
  enableStats?: boolean;
  /** Serve HTTPS with tlsCertFile and tlsKeyFile. Default `false`. */
  enableTls?: boolean;
  /** PEM certificate chain. */
  tlsCertFile?: string;
  /** PEM private key. */
  tlsKeyFile?: string;
  /** Obtain certificates by ACME for acmeHosts. Default `false`. */
  enableAcme?: boolean;
  /** Host names allowed to get ACME certificates. Default `[]`. */
  acmeHosts?: string[];
  /** ACME directory URL. Default `'https://acme-v02.api.letsencrypt.org/directory'`. */
  acmeDirectory?: string;
  /** ACME account contact. */
  acmeEmail?: string;
  /** ACME HTTP-01 challenge listener: PORT (all interfaces) or HOST:PORT. Default `'80'`. */
  acmeHttpPort?: string;
  /** ACME account key and certificates. Default `$MESH_HOME/acme` or `~/.mesh/acme`. */
  acmeCache?: string;
  /** Largest request body accepted. Default `'4MiB'`. */
  maxBodySize?: Size;
  /** Allowed CORS origins, `scheme://host[:port]` each (reflected, with credentials), or `['*']` (any origin, never credentials). Default `[]`. */
  cors?: string[];
  /** Listen address of the services that do not set their own. Default `'127.0.0.1:0'` (a free port). */
  address?: string;
  /** Address to register instead of the listen address (`host` or `host:port`). */
  advertise?: string;
  /** State directory. Default `$MESH_HOME`, else `~/.mesh`. */
  meshHome?: string;
}

/** MeshOptions after resolveOptions(): defaults filled in, durations in ms, sizes in bytes. */
export interface ResolvedOptions {
  registry: RegistryKind | Registry;
  registryAddress?: string;
  registryTlsCaFile?: string;
  registryTlsCertFile?: string;
  registryTlsKeyFile?: string;
  broker: BrokerKind | Broker;
  brokerAddress?: string;
  brokerTlsCaFile?: string;
  brokerTlsCertFile?: string;
  brokerTlsKeyFile?: string;
  brokerSecret?: string;
  brokerSecretFile?: string;
  brokerMaxDeliver: number;
  brokerAckWait: number;
  brokerDlqSuffix: string;
  brokerStreamMaxAge: number;
  brokerStreamMaxBytes: number;
  brokerInactiveThreshold: number;
  brokerMaxConsumers: number;
  codecs: Codec[];
  clientRequestTimeout: number;
  clientRetries: number;
  clientPerTryTimeout: number;
  clientHedgeDelay: number;
  protoPath: string[];
  protoFiles: string[];
  serverProtocol: ServerProtocol;
  streamIdleTimeout: number;
  maxConnections: number;
  requestHeadersTimeout: number;
  requestTimeout: number;
  drainDelay: number;
  drainTimeout: number;
  lbPolicy: LbPolicy;
  registerTtl: number;
  registerInterval: number;
  /** Undefined: the default of whoever starts the admin (a Mesh: off; runService: 127.0.0.1:0; the CLI's front ends: their own). */
  adminAddress?: string;
  adminToken?: string;
  adminAllowedHosts: string[];
  /** Undefined or `'off'`: no metrics listener. */
  metricsAddress?: string;
  statsHistograms: boolean;
  tracing: TracingKind;
  tracingAddress: string;
  tracingSampleRate: number;
  logLevel: LogLevel;
  logFormat?: LogFormat;
  accessLog: string;
  accessLogFormat?: string;
  enableStats: boolean;
  enableTls: boolean;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  enableAcme: boolean;
  acmeHosts: string[];
  acmeDirectory: string;
  acmeEmail?: string;
  acmeHttpPort: string;
  acmeCache?: string;
  maxBodySize: number;
  cors: string[];
  address: string;
  advertise?: string;
  meshHome?: string;
}

/** A bad option: `invalid option <name>: <why>`. */
export class OptionsError extends Error {
  /** The option's name, as in MeshOptions (e.g. `clientRetries`). */
  readonly option: string;
  /** What is wrong with it (the message without `invalid option <name>: `). */
  readonly reason: string;
  constructor(option: string, reason: string) {
    super(`invalid option ${option}: ${reason}`);
    this.name = 'OptionsError';
    this.option = option;
    this.reason = reason;
  }
}

/** The defaults, as the flags have them. */
export const DEFAULT_OPTIONS = Object.freeze({
  registry: 'local',
  broker: 'http',
  brokerMaxDeliver: 5,
  brokerAckWait: '30s',
  brokerDlqSuffix: '.dlq',
  brokerStreamMaxAge: 0,
  brokerStreamMaxBytes: 0,
  brokerInactiveThreshold: '24h',
  brokerMaxConsumers: 1000,
  clientRequestTimeout: '5s',
  clientRetries: 1,
  clientPerTryTimeout: 0,
  clientHedgeDelay: 0,
  serverProtocol: 'mesh',
  streamIdleTimeout: '5m',
  maxConnections: 10000,
  requestHeadersTimeout: '10s',
  requestTimeout: '30s',
  drainDelay: '1s',
  drainTimeout: '10s',
  lbPolicy: 'round_robin',
  registerTtl: '30s',
  registerInterval: '10s',
  logLevel: 'info',
  enableStats: false,
  statsHistograms: false,
  tracing: 'off',
  tracingAddress: DEFAULT_TRACING_ADDRESS,
  tracingSampleRate: 1,
  enableTls: false,
  enableAcme: false,
  acmeDirectory: 'https://acme-v02.api.letsencrypt.org/directory',
  acmeHttpPort: '80',
  maxBodySize: '4MiB',
  address: '127.0.0.1:0',
} as const);

const KNOWN = new Set<string>([
  ...Object.keys(DEFAULT_OPTIONS),
  'registryAddress', 'registryTlsCaFile', 'registryTlsCertFile', 'registryTlsKeyFile',
  'brokerAddress', 'brokerTlsCaFile', 'brokerTlsCertFile', 'brokerTlsKeyFile', 'brokerSecret', 'brokerSecretFile',
  'codecs', 'adminAddress', 'adminToken', 'adminAllowedHosts', 'metricsAddress', 'tlsCertFile', 'tlsKeyFile', 'acmeHosts', 'acmeEmail', 'acmeCache',
  'cors', 'advertise', 'meshHome', 'logFormat', 'accessLog', 'accessLogFormat',
  'protoPath', 'protoFiles',
]);

const show = (v: unknown): string => {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return String(v);
  return Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`;
};

/**
 * Fills the defaults of every option and checks each value. Throws OptionsError naming the first
 * bad option. Resolving resolved options again gives the same options.
 */
export function resolveOptions(options: MeshOptions = {}): ResolvedOptions {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw new OptionsError('options', `must be an object (got ${show(options)})`);
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) throw new OptionsError(key, 'unknown option (see docs/api.md)');
  }
  const o = options as Record<string, unknown>;
  const fail = (name: string, why: string): never => {
    throw new OptionsError(name, `${why} (got ${show(o[name])})`);
  };
  const given = (name: string): unknown => (o[name] === undefined ? (DEFAULT_OPTIONS as Record<string, unknown>)[name] : o[name]);

  const duration = (name: string): number => {
    const v = given(name);
    if (typeof v === 'number') {
      if (!Number.isFinite(v) || v < 0) fail(name, 'must be a non-negative number of milliseconds or a duration like "5s"');
      return v;
    }
    if (typeof v !== 'string') return fail(name, 'must be a duration like "5s" or a number of milliseconds');
    try {
      return parseDuration(v);
    } catch (err) {
      return fail(name, (err as Error).message);
    }
  };
  const size = (name: string): number => {
    const v = given(name);
    if (typeof v === 'number') {
      if (!Number.isSafeInteger(v) || v < 0) fail(name, 'must be a non-negative integer number of bytes or a size like "4MiB"');
      return v;
    }
    if (typeof v !== 'string') return fail(name, 'must be a size like "4MiB" or a number of bytes');
    try {
      return parseSize(v);
    } catch (err) {
      return fail(name, (err as Error).message);
    }
  };
  const int = (name: string): number => {
    const v = given(name);
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(name, 'must be a non-negative integer');
    return v as number;
  };
  const bool = (name: string): boolean => {
    const v = given(name);
    if (typeof v !== 'boolean') fail(name, 'must be true or false');
    return v as boolean;
  };
  const str = (name: string): string | undefined => {
    const v = given(name);
    if (v !== undefined && typeof v !== 'string') fail(name, 'must be a string');
    return v as string | undefined;
  };
  const choice = <T extends string>(name: string, choices: readonly T[]): T => {
    const v = given(name);
    if (typeof v !== 'string' || !choices.includes(v as T)) fail(name, `use one of ${choices.join(', ')}`);
    return v as T;
  };
  const list = (name: string): string[] => {
    const v = given(name) ?? [];
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) fail(name, 'must be an array of strings');
    return (v as string[]).map((s) => s.trim()).filter((s) => s !== '');
  };

  const registryValue = given('registry');
  const registry =
    typeof registryValue === 'string'
      ? choice<RegistryKind>('registry', ['local', 'memory', 'etcd'])
      : isRegistry(registryValue)
        ? registryValue
        : fail('registry', 'use local, memory, etcd or an object implementing Registry');
  const brokerValue = given('broker');
  const broker =
    typeof brokerValue === 'string'
      ? choice<BrokerKind>('broker', ['http', 'memory', 'nats'])
      : isBroker(brokerValue)
        ? brokerValue
        : fail('broker', 'use http, memory, nats or an object implementing Broker');
  const codecsValue = o.codecs ?? [];
  if (!Array.isArray(codecsValue)) fail('codecs', 'must be an array of Codec objects');
  for (const c of codecsValue as unknown[]) {
    const codec = c as Partial<Codec> | null;
    if (!codec || typeof codec !== 'object' || typeof codec.contentType !== 'string' || !/^[\w.+-]+\/[\w.+-]+$/.test(codec.contentType) || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
      throw new OptionsError('codecs', `each codec needs a contentType like "application/x-msgpack", encode() and decode() (got ${show(c)})`);
    }
  }

  const resolved: ResolvedOptions = {
    registry,
    registryAddress: str('registryAddress'),
    registryTlsCaFile: str('registryTlsCaFile'),
    registryTlsCertFile: str('registryTlsCertFile'),
    registryTlsKeyFile: str('registryTlsKeyFile'),
    broker,
    brokerAddress: str('brokerAddress'),
    brokerTlsCaFile: str('brokerTlsCaFile'),
    brokerTlsCertFile: str('brokerTlsCertFile'),
    brokerTlsKeyFile: str('brokerTlsKeyFile'),
    brokerSecret: str('brokerSecret'),
    brokerSecretFile: str('brokerSecretFile'),
    brokerMaxDeliver: int('brokerMaxDeliver'),
    brokerAckWait: duration('brokerAckWait'),
    brokerDlqSuffix: str('brokerDlqSuffix') ?? '.dlq',
    brokerStreamMaxAge: duration('brokerStreamMaxAge'),
    brokerStreamMaxBytes: size('brokerStreamMaxBytes'),
    brokerInactiveThreshold: duration('brokerInactiveThreshold'),
    brokerMaxConsumers: int('brokerMaxConsumers'),
    codecs: [...(codecsValue as Codec[])],
    clientRequestTimeout: duration('clientRequestTimeout'),
    clientRetries: int('clientRetries'),
    clientPerTryTimeout: duration('clientPerTryTimeout'),
    clientHedgeDelay: duration('clientHedgeDelay'),
    protoPath: list('protoPath'),
    protoFiles: list('protoFiles'),
    serverProtocol: choice<ServerProtocol>('serverProtocol', ['mesh', 'grpc']),
    streamIdleTimeout: duration('streamIdleTimeout'),
    maxConnections: int('maxConnections'),
    requestHeadersTimeout: duration('requestHeadersTimeout'),
    requestTimeout: duration('requestTimeout'),
    drainDelay: duration('drainDelay'),
    drainTimeout: duration('drainTimeout'),
    lbPolicy: choice<LbPolicy>('lbPolicy', ['round_robin', 'random', 'least_request']),
    registerTtl: duration('registerTtl'),
    registerInterval: duration('registerInterval'),
    adminAddress: str('adminAddress'),
    adminToken: str('adminToken'),
    adminAllowedHosts: list('adminAllowedHosts'),
    metricsAddress: str('metricsAddress'),
    statsHistograms: bool('statsHistograms'),
    tracing: choice<TracingKind>('tracing', TRACING_KINDS),
    tracingAddress: str('tracingAddress')!,
    tracingSampleRate: given('tracingSampleRate') as number,
    logLevel: str('logLevel') as LogLevel,
    logFormat: str('logFormat') as LogFormat | undefined,
    accessLog: str('accessLog') ?? 'off',
    accessLogFormat: str('accessLogFormat'),
    enableStats: bool('enableStats'),
    enableTls: bool('enableTls'),
    tlsCertFile: str('tlsCertFile'),
    tlsKeyFile: str('tlsKeyFile'),
    enableAcme: bool('enableAcme'),
    acmeHosts: list('acmeHosts'),
    acmeDirectory: str('acmeDirectory')!,
    acmeEmail: str('acmeEmail'),
    acmeHttpPort: str('acmeHttpPort')!,
    acmeCache: str('acmeCache'),
    maxBodySize: size('maxBodySize'),
    cors: list('cors'),
    address: str('address')!,
    advertise: str('advertise'),
    meshHome: str('meshHome'),
  };

  // Values whose strings have rules of their own.
  if (!isLevel(resolved.logLevel)) fail('logLevel', `use one of ${LEVELS.join(', ')}`);
  if (resolved.logFormat !== undefined && !(LOG_FORMATS as readonly string[]).includes(resolved.logFormat)) fail('logFormat', `use one of ${LOG_FORMATS.join(', ')}`);
  if (resolved.accessLog.trim() === '') fail('accessLog', 'use off, stdout or a file path');
  if (resolved.accessLogFormat !== undefined) {
    try {
      compileAccessLogFormat(resolved.accessLogFormat);
    } catch (err) {
      if (!(err instanceof AccessLogFormatError)) throw err;
      fail('accessLogFormat', err.message);
    }
  }
  try {
    resolved.adminAllowedHosts = parseAllowedHosts(resolved.adminAllowedHosts);
  } catch (err) {
    fail('adminAllowedHosts', (err as Error).message);
  }
  try {
    resolved.cors = parseCorsOrigins(resolved.cors);
  } catch (err) {
    fail('cors', (err as Error).message);
  }
  try {
    parseTracingAddress(resolved.tracingAddress);
  } catch (err) {
    fail('tracingAddress', (err as Error).message);
  }
  if (typeof resolved.tracingSampleRate !== 'number') fail('tracingSampleRate', 'must be a number from 0 to 1');
  try {
    parseSampleRate(resolved.tracingSampleRate);
  } catch (err) {
    fail('tracingSampleRate', (err as Error).message);
  }
  checkAddress('address', resolved.address, fail);
  if (resolved.advertise !== undefined && resolved.advertise.trim() !== '') checkAddress('advertise', resolved.advertise, fail);
  if (resolved.adminAddress !== undefined && resolved.adminAddress !== 'off') checkAddress('adminAddress', resolved.adminAddress, fail);
  if (resolved.metricsAddress !== undefined && resolved.metricsAddress !== 'off') checkAddress('metricsAddress', resolved.metricsAddress, fail);
  if (resolved.requestTimeout > 0 && resolved.requestHeadersTimeout > resolved.requestTimeout) {
    fail('requestHeadersTimeout', `longer than requestTimeout (${resolved.requestTimeout}ms)`);
  }
  if (resolved.registry === 'etcd' && !resolved.registryAddress?.trim()) fail('registryAddress', 'the etcd registry needs host:port[,host:port]');
  if (resolved.broker === 'nats' && !resolved.brokerAddress?.trim()) fail('brokerAddress', 'the nats broker needs host:port');
  if (resolved.brokerMaxDeliver < 1 || resolved.brokerMaxDeliver > 1000) fail('brokerMaxDeliver', 'must be from 1 to 1000');
  if (resolved.brokerAckWait < 100 || resolved.brokerAckWait > 3_600_000) fail('brokerAckWait', 'must be from 100ms to 1h');
  if (resolved.brokerInactiveThreshold !== 0 && resolved.brokerInactiveThreshold < 1000) fail('brokerInactiveThreshold', 'must be 0 (never) or from 1s');
  if (resolved.brokerMaxConsumers < 1 || resolved.brokerMaxConsumers > 100_000) fail('brokerMaxConsumers', 'must be from 1 to 100000');
  if (resolved.brokerDlqSuffix === '' || /[\s*>]/.test(resolved.brokerDlqSuffix)) fail('brokerDlqSuffix', "must be non-empty, without whitespace, '*' or '>'");
  checkTls(resolved, fail);
  return resolved;
}

function checkAddress(name: string, value: string, fail: (name: string, why: string) => never): void {
  try {
    if (name === 'advertise') parseAdvertise(value);
    else if (name === 'adminAddress') parseAddress(value, { what: 'admin address' });
    else if (name === 'metricsAddress') parseAddress(value, { what: 'metrics address' });
    else parseAddress(value);
  } catch (err) {
    fail(name, (err as Error).message);
  }
}

function checkTls(o: ResolvedOptions, fail: (name: string, why: string) => never): void {
  if (o.enableTls && o.enableAcme) fail('enableAcme', 'enableAcme and enableTls are exclusive: use certificate files or ACME, not both');
  if (o.enableTls) {
    if (!o.tlsCertFile) fail('tlsCertFile', 'enableTls needs tlsCertFile and tlsKeyFile');
    if (!o.tlsKeyFile) fail('tlsKeyFile', 'enableTls needs tlsCertFile and tlsKeyFile');
  }
  if (!o.enableAcme) return;
  if (o.acmeHosts.length === 0) fail('acmeHosts', 'enableAcme needs the host names this server may get certificates for');
  try {
    parseAcmeHosts(o.acmeHosts);
  } catch (err) {
    fail('acmeHosts', (err as Error).message);
  }
  try {
    parseChallengeAddress(o.acmeHttpPort);
  } catch (err) {
    fail('acmeHttpPort', (err as Error).message);
  }
  let url: URL | undefined;
  try {
    url = new URL(o.acmeDirectory);
  } catch {
    fail('acmeDirectory', 'not a URL');
  }
  if (url!.protocol !== 'https:') fail('acmeDirectory', 'an ACME directory is served over https (RFC 8555)');
  if (o.acmeEmail !== undefined && !/^[^@\s]+@[^@\s]+$/.test(o.acmeEmail)) fail('acmeEmail', 'not an e-mail address');
}

const METHODS_OF_REGISTRY = ['register', 'deregister', 'getService', 'listServices', 'watch', 'revision', 'close'] as const;
const METHODS_OF_BROKER = ['connect', 'publish', 'subscribe', 'close'] as const;

function isRegistry(v: unknown): v is Registry {
  return typeof v === 'object' && v !== null && typeof (v as Registry).name === 'string' && METHODS_OF_REGISTRY.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');
}

function isBroker(v: unknown): v is Broker {
  return typeof v === 'object' && v !== null && typeof (v as Broker).name === 'string' && METHODS_OF_BROKER.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');
}
