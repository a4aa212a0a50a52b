/**
 * The options of a mesh process (a Mesh, or a CLI front end): camelCase, every one optional, each
 * with the same meaning and default as the command-line flag of the same name in snake_case
 * (`clientRequestTimeout` ↔ `--client_request_timeout`). resolveOptions() fills the defaults and
 * checks every value once; the runtime only ever sees resolved options. See docs/api.md.
 */
import type { Registry } from '../engines/registry/registry.js';
import type { Broker } from '../engines/broker/broker.js';
import type { Codec } from '../base/codec/codec.js';
import { parseDuration, parseSize } from '../base/util/duration.js';
import { isLevel, LEVELS, LOG_FORMATS, type Level, type LogFormat } from '../base/util/levels.js';
import { parseAllowedHosts } from '../base/http/host-check.js';
import { parseCorsOrigins } from '../base/http/cors.js';
import { checkGrpcRetryOn } from '../core/transport/grpc/retry-on.js';
import { compileAccessLogFormat } from '../base/http/access-log.js';
import { parseAcmeHosts } from '../tls/acme/hosts.js';
import { parseChallengeAddress } from '../tls/acme/challenge-server.js';
import { parseAddress, parseAdvertise } from '../base/util/address.js';
import { parseSampleRate, parseTracingAddress } from '../base/tracing/config.js';
import { DEFAULT_OTLP_ENDPOINTS, readOtelEnv, type OtlpProtocol } from '../base/tracing/otel-env.js';
import { OPTIONS, apiName, optionEntries, outOfRange, type Duration, type OptionKey, type OptionSpec, type SchemaApiOptions, type SchemaResolvedOptions, type Size } from '../base/options/schema.js';
import { SchemaOptionError } from '../base/util/option-error.js';

export type { Duration, Size };

export type RegistryKind = NonNullable<SchemaApiOptions['registry']>;
export type BrokerKind = NonNullable<SchemaApiOptions['broker']>;
export type LbPolicy = NonNullable<SchemaApiOptions['lbPolicy']>;
export type ServerProtocol = NonNullable<SchemaApiOptions['serverProtocol']>;
export type LogLevel = Level;

/**
 * Everything a mesh process can be told. Every field is optional; defaults are those of the flags.
 * The fields are the option schema's `api` entries (src/base/options/schema.ts, docs/api.md), in
 * camelCase; what the schema cannot say is added here: your own Registry or Broker instance, codecs.
 */
export interface MeshOptions extends Omit<SchemaApiOptions, 'registry' | 'broker' | 'logLevel' | 'tracingSampleRate'> {
  /** Registry backend by name, or your own Registry instance. Default `'local'`. */
  registry?: RegistryKind | Registry;
  /** Broker backend by name, or your own Broker instance. Default `'http'`. */
  broker?: BrokerKind | Broker;
  /** Extra codecs, chosen by their content type (JSON and protobuf are built in). Default `[]`. */
  codecs?: Codec[];
  /** trace, debug, info, warning, error, critical, off. Default `'info'`. */
  logLevel?: LogLevel;
  /** Share of new traces recorded, 0 to 1 (a trace that came with a traceparent follows its sampled flag). Default `1`. */
  tracingSampleRate?: number;
}

/** MeshOptions after resolveOptions(): defaults filled in, durations in ms, sizes in bytes. */
export interface ResolvedOptions extends Omit<SchemaResolvedOptions, 'registry' | 'broker' | 'logLevel' | 'tracingSampleRate' | 'accessLog'> {
  registry: RegistryKind | Registry;
  broker: BrokerKind | Broker;
  codecs: Codec[];
  logLevel: LogLevel;
  tracingSampleRate: number;
  /** `'off'` unless given. */
  accessLog: string;
  /** How spans are exported with tracing on, beyond tracingAddress (from the OTEL_* variables, src/base/tracing/otel-env.ts). */
  tracingExport: TracingExport;
}

/** What the OTEL_* variables add to the tracing options. */
export interface TracingExport {
  protocol: OtlpProtocol;
  headers: Record<string, string>;
  resource: Record<string, string>;
  parentBased: boolean;
}

/**
 * The options whose text has rules of their own beyond the schema's type, choices and range: one
 * check each, by schema key, used by resolveOptions and by the flag parser (src/cli/flags.ts).
 * A check takes the value as the schema's type reads it and returns it as the process uses it,
 * or throws the reason; the front end names the option its own way. Where the flag and the
 * library differ, the flag parser says so before the check (--log_level takes `warn` for `warning`).
 */
export const VALUE_CHECKS = {
  admin_allowed_hosts: (hosts: readonly string[]): string[] => parseAllowedHosts(hosts),
  cors: (origins: readonly string[]): string[] => parseCorsOrigins(origins),
  grpc_retry_on: (names: readonly string[]): string[] => checkGrpcRetryOn(names),
  tracing_address: (url: string): string => (parseTracingAddress(url), url),
  tracing_sample_rate: (rate: string | number): number => parseSampleRate(rate),
  log_level: (level: string): Level => {
    if (!isLevel(level)) throw new Error(`use one of ${LEVELS.join(', ')}`);
    return level;
  },
  access_log_format: (format: string): string => (compileAccessLogFormat(format), format),
  metrics_address: (address: string): string => (address === 'off' ? address : (parseAddress(address, { what: 'metrics address' }), address)),
} as const satisfies Partial<Record<OptionKey, (value: never) => unknown>>;

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

/** An API option's default as MeshOptions writes it: numbers for counts and for a zero duration or size. */
function apiDefault(spec: OptionSpec): string | string[] | number | boolean | undefined {
  if (spec.apiDefault !== undefined) return spec.apiDefault ?? undefined;
  const d = spec.default;
  if (d === undefined) return undefined;
  if (spec.type === 'int') return Number(d);
  if (spec.type === 'bool') return d === 'true';
  if ((spec.type === 'duration' || spec.type === 'size') && d === '0') return 0;
  if (spec.type === 'list') return d.split(',');
  return d;
}

/** The API options of the schema: [schema key, camelCase name, spec]. */
const API_OPTIONS: ReadonlyArray<readonly [OptionKey, string, OptionSpec]> = optionEntries()
  .filter(([, spec]) => spec.api)
  .map(([key, spec]) => [key, apiName(key), spec] as const);

/** The defaults, as the flags have them (from the option schema). */
export const DEFAULT_OPTIONS: Readonly<MeshOptions> = Object.freeze(
  Object.fromEntries(API_OPTIONS.map(([, name, spec]) => [name, apiDefault(spec)]).filter(([, v]) => v !== undefined)) as MeshOptions,
);

const KNOWN = new Set<string>([...API_OPTIONS.map(([, name]) => name), 'codecs', 'tracingExport']);

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
      ? choice<RegistryKind>('registry', OPTIONS.registry.choices)
      : isRegistry(registryValue)
        ? registryValue
        : fail('registry', `use ${OPTIONS.registry.choices.join(', ')} or an object implementing Registry`);
  const brokerValue = given('broker');
  const broker =
    typeof brokerValue === 'string'
      ? choice<BrokerKind>('broker', OPTIONS.broker.choices)
      : isBroker(brokerValue)
        ? brokerValue
        : fail('broker', `use ${OPTIONS.broker.choices.join(', ')} or an object implementing Broker`);
  const codecsValue = o.codecs ?? [];
  if (!Array.isArray(codecsValue)) fail('codecs', 'must be an array of Codec objects');
  for (const c of codecsValue as unknown[]) {
    const codec = c as Partial<Codec> | null;
    if (!codec || typeof codec !== 'object' || typeof codec.contentType !== 'string' || !/^[\w.+-]+\/[\w.+-]+$/.test(codec.contentType) || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
      throw new OptionsError('codecs', `each codec needs a contentType like "application/x-msgpack", encode() and decode() (got ${show(c)})`);
    }
  }

  const values: Record<string, unknown> = { registry, broker, codecs: [...(codecsValue as Codec[])] };
  // The OTEL_* variables fill what was not given (an explicit option wins); not read with tracing: 'off'.
  // Options resolved once already (a Mesh built from a CLI's options) keep what they found.
  const again = o.tracingExport as TracingExport | undefined;
  const otel = o.tracing === 'off' || again ? undefined : readOtelEnv(process.env);
  const protocol = otel?.protocol ?? 'http/protobuf';
  values.tracingExport = again ?? { protocol, headers: otel?.headers ?? {}, resource: otel?.resource ?? {}, parentBased: otel?.parentBased ?? true } satisfies TracingExport;
  if (otel) {
    if (o.tracing === undefined && otel.tracing !== undefined) values.tracing = otel.tracing;
    if (o.tracingAddress === undefined) values.tracingAddress = otel.endpoint ?? (otel.protocol ? DEFAULT_OTLP_ENDPOINTS[protocol] : undefined);
    if (o.tracingSampleRate === undefined && otel.sampleRate !== undefined) values.tracingSampleRate = otel.sampleRate;
  }
  for (const key of ['tracingAddress', 'tracingSampleRate'] as const) if (values[key] === undefined) delete values[key];
  for (const [, name, spec] of API_OPTIONS) {
    if (name in values) continue;
    if (name === 'tracingSampleRate') values[name] = given(name);
    else if (spec.type === 'duration') values[name] = duration(name);
    else if (spec.type === 'size') values[name] = size(name);
    else if (spec.type === 'int') values[name] = int(name);
    else if (spec.type === 'bool') values[name] = bool(name);
    else if (spec.type === 'list') values[name] = list(name);
    else if (spec.choices && given(name) !== undefined) values[name] = choice(name, spec.choices);
    else values[name] = str(name);
  }
  values.accessLog ??= 'off';
  const resolved = values as unknown as ResolvedOptions;

  // Values whose strings have rules of their own.
  const checked = <K extends keyof typeof VALUE_CHECKS>(key: K, run: (check: (typeof VALUE_CHECKS)[K]) => void): void => {
    try {
      run(VALUE_CHECKS[key]);
    } catch (err) {
      fail(apiName(key), (err as Error).message);
    }
  };
  checked('log_level', (check) => check(resolved.logLevel));
  if (resolved.logFormat !== undefined && !(LOG_FORMATS as readonly string[]).includes(resolved.logFormat)) fail('logFormat', `use one of ${LOG_FORMATS.join(', ')}`);
  if (resolved.accessLog.trim() === '') fail('accessLog', 'use off, stdout or a file path');
  if (resolved.accessLogFormat !== undefined) checked('access_log_format', (check) => check(resolved.accessLogFormat!));
  checked('admin_allowed_hosts', (check) => (resolved.adminAllowedHosts = check(resolved.adminAllowedHosts)));
  checked('cors', (check) => (resolved.cors = check(resolved.cors)));
  checked('grpc_retry_on', (check) => (resolved.grpcRetryOn = check(resolved.grpcRetryOn)));
  checked('tracing_address', (check) => check(resolved.tracingAddress));
  if (typeof resolved.tracingSampleRate !== 'number') fail('tracingSampleRate', 'must be a number from 0 to 1');
  checked('tracing_sample_rate', (check) => check(resolved.tracingSampleRate));
  checkAddress('address', resolved.address, fail);
  if (resolved.advertise !== undefined && resolved.advertise.trim() !== '') checkAddress('advertise', resolved.advertise, fail);
  if (resolved.adminAddress !== undefined && resolved.adminAddress !== 'off') checkAddress('adminAddress', resolved.adminAddress, fail);
  if (resolved.metricsAddress !== undefined) checked('metrics_address', (check) => check(resolved.metricsAddress!));
  if (resolved.requestTimeout > 0 && resolved.requestHeadersTimeout > resolved.requestTimeout) {
    fail('requestHeadersTimeout', `longer than requestTimeout (${resolved.requestTimeout}ms)`);
  }
  if (resolved.registry === 'etcd' && !resolved.registryAddress?.trim()) fail('registryAddress', 'the etcd registry needs host:port[,host:port]');
  if (resolved.broker === 'nats' && !resolved.brokerAddress?.trim()) fail('brokerAddress', 'the nats broker needs host:port');
  for (const [key, name] of API_OPTIONS) {
    const why = typeof values[name] === 'number' ? outOfRange(key, values[name]) : undefined;
    if (why !== undefined) fail(name, why);
  }
  if (resolved.brokerDlqSuffix === '' || /[\s*>]/.test(resolved.brokerDlqSuffix)) fail('brokerDlqSuffix', "must be non-empty, without whitespace, '*' or '>'");
  checkTls(resolved, fail);
  return resolved;
}

function checkAddress(name: string, value: string, fail: (name: string, why: string) => never): void {
  try {
    if (name === 'advertise') parseAdvertise(value);
    else if (name === 'adminAddress') parseAddress(value, { what: 'admin address' });
    else parseAddress(value);
  } catch (err) {
    fail(name, (err as Error).message);
  }
}

function checkTls(o: ResolvedOptions, fail: (name: string, why: string) => never): void {
  try {
    checkAcme(o);
  } catch (err) {
    if (!(err instanceof SchemaOptionError)) throw err;
    // A refused element of a list is named in the reason: the "(got ...)" of the message shows the whole list.
    const element = err.value != null && Array.isArray(o[apiName(err.key) as keyof ResolvedOptions]) ? `"${err.value}": ` : '';
    fail(apiName(err.key), element + err.reasonIn('api'));
  }
  if (o.enableTls) {
    if (!o.tlsCertFile) fail('tlsCertFile', 'enableTls needs tlsCertFile and tlsKeyFile');
    if (!o.tlsKeyFile) fail('tlsKeyFile', 'enableTls needs tlsCertFile and tlsKeyFile');
  }
}

/** The ACME options a process is started with (and whether certificate files are used instead). */
export type AcmeSettings = Pick<ResolvedOptions, 'enableTls' | 'enableAcme' | 'acmeHosts' | 'acmeHttpPort' | 'acmeDirectory' | 'acmeEmail'>;

/**
 * The checks of the ACME options, shared by resolveOptions and the server commands' flags
 * (src/cli/tls-flags.ts): a SchemaOptionError naming the option by its key, other options as `{key}`.
 */
export function checkAcme(o: AcmeSettings): void {
  if (!o.enableAcme) return;
  if (o.enableTls) throw new SchemaOptionError('enable_acme', '{enable_acme} and {enable_tls} are exclusive: use certificate files or ACME, not both');
  if (o.acmeHosts.length === 0) throw new SchemaOptionError('acme_hosts', '{enable_acme} needs the host names this server may get certificates for');
  parseAcmeHosts(o.acmeHosts);
  parseChallengeAddress(o.acmeHttpPort);
  let url: URL;
  try {
    url = new URL(o.acmeDirectory);
  } catch {
    throw new SchemaOptionError('acme_directory', 'not a URL', o.acmeDirectory);
  }
  if (url.protocol !== 'https:') throw new SchemaOptionError('acme_directory', 'an ACME directory is served over https (RFC 8555)', o.acmeDirectory);
  if (o.acmeEmail !== undefined && !/^[^@\s]+@[^@\s]+$/.test(o.acmeEmail)) throw new SchemaOptionError('acme_email', 'not an e-mail address', o.acmeEmail);
}

const METHODS_OF_REGISTRY = ['register', 'deregister', 'getService', 'listServices', 'watch', 'revision', 'close'] as const;
const METHODS_OF_BROKER = ['connect', 'publish', 'subscribe', 'close'] as const;

function isRegistry(v: unknown): v is Registry {
  return typeof v === 'object' && v !== null && typeof (v as Registry).name === 'string' && METHODS_OF_REGISTRY.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');
}

function isBroker(v: unknown): v is Broker {
  return typeof v === 'object' && v !== null && typeof (v as Broker).name === 'string' && METHODS_OF_BROKER.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');
}
