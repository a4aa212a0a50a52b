/**
 * The OpenTelemetry SDK's environment variables for traces (OTEL_*), read and checked in this one
 * place. They are foreign names (mesh's own variables are MESH_<FLAG>): the process options call
 * readOtelEnv() and let an explicit option or flag win over what it found.
 *
 * A malformed value is an OtelEnvError naming the variable; nothing is silently ignored.
 */

/** The OTLP transports mesh speaks. */
export const OTLP_PROTOCOLS = ['http/protobuf', 'grpc'] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** OTEL_TRACES_SAMPLER's values. */
export const OTEL_SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
export type OtelSampler = (typeof OTEL_SAMPLERS)[number];

/** Where spans go by default for each protocol (the specification's defaults). */
export const DEFAULT_OTLP_ENDPOINTS: Readonly<Record<OtlpProtocol, string>> = {
  'http/protobuf': 'http://127.0.0.1:4318/v1/traces',
  grpc: 'http://127.0.0.1:4317',
};

/** What the OTEL_* variables say about tracing; a field is undefined when no variable set it. */
export interface OtelEnv {
  /** `otlp` (OTEL_TRACES_EXPORTER=otlp, or an endpoint variable set), `off` (OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true). */
  tracing?: 'otlp' | 'off';
  /** The traces endpoint: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, or OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces for http). */
  endpoint?: string;
  protocol?: OtlpProtocol;
  /** OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS (which wins key by key). */
  headers: Record<string, string>;
  /** OTEL_RESOURCE_ATTRIBUTES, with OTEL_SERVICE_NAME as service.name. */
  resource: Record<string, string>;
  /** The share of new traces recorded (from OTEL_TRACES_SAMPLER and _ARG). */
  sampleRate?: number;
  /** Whether a trace that came with a traceparent follows its sampled flag (the parentbased_* samplers). */
  parentBased?: boolean;
}

/** A malformed OTEL_* variable. */
export class OtelEnvError extends Error {
  constructor(
    readonly variable: string,
    readonly value: string,
    readonly reason: string,
  ) {
    super(`invalid value "${value}" for ${variable}: ${reason}`);
    this.name = 'OtelEnvError';
  }
}

const set = (env: NodeJS.ProcessEnv, name: string): string | undefined => {
  const v = env[name]?.trim();
  return v === undefined || v === '' ? undefined : v;
};

function decode(variable: string, raw: string, text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new OtelEnvError(variable, raw, `"${text}" is not valid percent-encoding`);
  }
}

/** A `key=value,key=value` list (W3C Baggage-like, percent-decoded), as OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES write it. */
export function parseKeyValueList(variable: string, raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of raw.split(',')) {
    if (item.trim() === '') continue;
    const eq = item.indexOf('=');
    if (eq <= 0) throw new OtelEnvError(variable, raw, `"${item.trim()}" is not key=value (a comma-separated list of key=value pairs)`);
    const key = decode(variable, raw, item.slice(0, eq).trim());
    if (key === '') throw new OtelEnvError(variable, raw, `"${item.trim()}" has an empty key`);
    out[key] = decode(variable, raw, item.slice(eq + 1).trim());
  }
  return out;
}

function endpointUrl(variable: string, raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OtelEnvError(variable, raw, 'not a URL: use http://host:port or https://host:port');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new OtelEnvError(variable, raw, `${url.protocol} is not supported: use an http:// or https:// URL`);
  if (url.hostname === '') throw new OtelEnvError(variable, raw, 'no host');
  return url;
}

function protocolOf(variable: string, raw: string): OtlpProtocol {
  if ((OTLP_PROTOCOLS as readonly string[]).includes(raw)) return raw as OtlpProtocol;
  if (raw === 'http/json') throw new OtelEnvError(variable, raw, 'http/json is not supported: use http/protobuf or grpc');
  throw new OtelEnvError(variable, raw, `use ${OTLP_PROTOCOLS.join(' or ')}`);
}

function ratioOf(raw: string): number {
  const n = Number(raw);
  if (raw === '' || !Number.isFinite(n) || n < 0 || n > 1) throw new OtelEnvError('OTEL_TRACES_SAMPLER_ARG', raw, 'must be a number from 0 to 1 (the share of new traces recorded)');
  return n;
}

/** Reads the OTEL_* variables of traces; throws an OtelEnvError naming the first malformed one. */
export function readOtelEnv(env: NodeJS.ProcessEnv): OtelEnv {
  const out: OtelEnv = { headers: {}, resource: {} };

  const disabled = set(env, 'OTEL_SDK_DISABLED');
  if (disabled !== undefined && !['true', 'false'].includes(disabled.toLowerCase())) throw new OtelEnvError('OTEL_SDK_DISABLED', disabled, 'use true or false');

  const exporter = set(env, 'OTEL_TRACES_EXPORTER');
  if (exporter !== undefined && exporter !== 'otlp' && exporter !== 'none') throw new OtelEnvError('OTEL_TRACES_EXPORTER', exporter, 'use otlp or none');

  const protocolVar = set(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocolRaw = set(env, protocolVar);
  if (protocolRaw !== undefined) out.protocol = protocolOf(protocolVar, protocolRaw);
  // The generic protocol variable must be valid even when the signal one overrides it.
  const generic = set(env, 'OTEL_EXPORTER_OTLP_PROTOCOL');
  if (generic !== undefined) protocolOf('OTEL_EXPORTER_OTLP_PROTOCOL', generic);

  const tracesEndpoint = set(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const baseEndpoint = set(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (baseEndpoint !== undefined) endpointUrl('OTEL_EXPORTER_OTLP_ENDPOINT', baseEndpoint);
  if (tracesEndpoint !== undefined) {
    endpointUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', tracesEndpoint);
    out.endpoint = tracesEndpoint;
  } else if (baseEndpoint !== undefined) {
    out.endpoint = (out.protocol ?? 'http/protobuf') === 'grpc' ? baseEndpoint : baseEndpoint.replace(/\/+$/, '') + '/v1/traces';
  }

  const headers = set(env, 'OTEL_EXPORTER_OTLP_HEADERS');
  if (headers !== undefined) Object.assign(out.headers, parseKeyValueList('OTEL_EXPORTER_OTLP_HEADERS', headers));
  const tracesHeaders = set(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS');
  if (tracesHeaders !== undefined) Object.assign(out.headers, parseKeyValueList('OTEL_EXPORTER_OTLP_TRACES_HEADERS', tracesHeaders));
  for (const [name, value] of Object.entries(out.headers)) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new OtelEnvError(tracesHeaders !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_HEADERS' : 'OTEL_EXPORTER_OTLP_HEADERS', `${name}=${value}`, `"${name}" is not a header name`);
  }

  const resource = set(env, 'OTEL_RESOURCE_ATTRIBUTES');
  if (resource !== undefined) Object.assign(out.resource, parseKeyValueList('OTEL_RESOURCE_ATTRIBUTES', resource));
  const serviceName = set(env, 'OTEL_SERVICE_NAME');
  if (serviceName !== undefined) out.resource['service.name'] = serviceName;

  const sampler = set(env, 'OTEL_TRACES_SAMPLER');
  const arg = set(env, 'OTEL_TRACES_SAMPLER_ARG');
  if (sampler !== undefined) {
    if (!(OTEL_SAMPLERS as readonly string[]).includes(sampler)) throw new OtelEnvError('OTEL_TRACES_SAMPLER', sampler, `use one of ${OTEL_SAMPLERS.join(', ')}`);
    out.parentBased = sampler.startsWith('parentbased_');
    const root = sampler.replace(/^parentbased_/, '');
    out.sampleRate = root === 'always_on' ? 1 : root === 'always_off' ? 0 : arg === undefined ? 1 : ratioOf(arg);
  } else if (arg !== undefined) {
    ratioOf(arg);
  }

  if (disabled?.toLowerCase() === 'true' || exporter === 'none') out.tracing = 'off';
  else if (exporter === 'otlp' || out.endpoint !== undefined) out.tracing = 'otlp';
  return out;
}
