/**
 * The checks of the tracing settings, shared by the flags (--tracing_address,
 * --tracing_sample_rate: a FlagError) and the options (tracingAddress, tracingSampleRate: an
 * OptionsError). Each throws an Error saying what is wrong; the caller names the flag or option.
 */

export const TRACING_KINDS = ['off', 'otlp'] as const;
export type TracingKind = (typeof TRACING_KINDS)[number];

/** Where spans go unless told otherwise: an OpenTelemetry Collector on this machine (OTLP/HTTP). */
export const DEFAULT_TRACING_ADDRESS = 'http://127.0.0.1:4318/v1/traces';

/** An OTLP/HTTP endpoint: an absolute http:// or https:// URL with a host (the path is kept as given). */
export function parseTracingAddress(value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error('not a URL: use an OTLP/HTTP endpoint such as http://127.0.0.1:4318/v1/traces');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`${url.protocol} is not supported: use an http:// or https:// OTLP/HTTP endpoint`);
  if (url.hostname === '') throw new Error('no host: use an OTLP/HTTP endpoint such as http://127.0.0.1:4318/v1/traces');
  return url;
}

/** A sample rate: a number from 0 to 1 (a string such as `0.25`, or a number). */
export function parseSampleRate(value: string | number): number {
  const n = typeof value === 'number' ? value : value.trim() === '' ? NaN : Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new Error('must be a number from 0 to 1 (the share of new traces recorded)');
  return n;
}
