/**
 * The one place where the CLI's parsed flags (Config, snake_case) become the options of a mesh
 * process (MeshOptions, camelCase): every front end (api, sidecar, proxy, dev), the platform
 * commands and runService build their runtime from optionsFromFlags().
 */
import type { Config } from './flags.js';
import { OptionsError, resolveOptions, type MeshOptions, type ResolvedOptions } from '../process/options.js';
import { frontRateLimit, type FrontRateLimit } from '../base/http/rate-limit.js';
import { apiName, keyOfApiName, optionEntries } from '../base/options/schema.js';

/** The flag of an option: `clientRequestTimeout` → `--client_request_timeout`. */
export function flagOf(option: string): string {
  return `--${keyOfApiName(option)}`;
}

/**
 * The framework flags as MeshOptions (durations already in ms, sizes in bytes): every `api` option
 * of the schema, by its camelCase name. `--address` is left out: it is the listen address of
 * whatever the command starts (a gateway, a sidecar), and only runService makes it the services' address.
 */
export function meshOptionsFromFlags(config: Config): MeshOptions {
  const options: Record<string, unknown> = {};
  for (const [key, spec] of optionEntries()) {
    if (spec.api && key !== 'address') options[apiName(key)] = (config as Record<string, unknown>)[key];
  }
  return options as MeshOptions;
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
