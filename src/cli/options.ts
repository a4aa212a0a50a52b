/**
 * The one place where the CLI's parsed flags (Config, snake_case) become the options of a mesh
 * process (MeshOptions, camelCase): every front end (api, sidecar, proxy, dev), the platform
 * commands and runService build their runtime from optionsFromFlags().
 */
import type { Config } from './flags.js';
import { OptionsError, resolveOptions, type MeshOptions, type ResolvedOptions } from '../process/options.js';
import cluster from 'node:cluster';
import { frontRatePolicy, type FrontRateLimit } from '../base/http/rate-limit.js';
import { MemoryRateLimitStore, SharedRateLimitStore, type BucketBackend, type RateLimitFailureMode } from '../base/http/rate-limit-store.js';
import { RedisBuckets, type RedisFront } from '../engines/ratelimit/redis.js';
import { PrimaryBuckets } from './rate-limit-ipc.js';
import type { Runtime } from '../process/runtime.js';
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

/** The edge options every front end (gateway, sidecar) takes from the flags: its rate limits and CORS max age. */
export function frontEdgeFromFlags(config: Config, runtime: Runtime, front: RedisFront): { rateLimit?: FrontRateLimit; corsMaxAgeSec: number } {
  return { rateLimit: rateLimitFromFlags(config, runtime, front), corsMaxAgeSec: config.cors_max_age };
}

/**
 * The rate limits of `--rate_limit*` and their store (`--rate_limit_store`), one per process, closed
 * with the runtime: the process's memory; a worker of `--concurrency` draws from its primary's
 * buckets; `redis://` from Redis's. Undefined when nothing is limited and the store is the process's
 * own (the auth rules' limits then keep their buckets themselves). `front` names the buckets in Redis.
 */
export function rateLimitFromFlags(config: Config, runtime: Runtime, front: RedisFront): FrontRateLimit | undefined {
  const { policy, key } = frontRatePolicy({ rate: config.rate_limit, burst: config.rate_limit_burst, key: config.rate_limit_key });
  const worker = config.concurrency > 1 && cluster.isWorker;
  const local = config.rate_limit_store === 'local';
  if (local && !worker) {
    if (!policy) return undefined;
    const store = new MemoryRateLimitStore({ policy, maxKeys: config.rate_limit_max_keys, stats: runtime.stats });
    runtime.addRateLimitSource(() => [store.status()]);
    return { store, key, policy };
  }
  const backend: BucketBackend = local
    ? new PrimaryBuckets(config.rate_limit_store_timeout)
    : new RedisBuckets({ address: config.rate_limit_store, front, tls: { caFile: config.rate_limit_store_tls_ca_file, certFile: config.rate_limit_store_tls_cert_file, keyFile: config.rate_limit_store_tls_key_file } });
  const store = new SharedRateLimitStore({
    backend,
    failureMode: config.rate_limit_failure_mode as RateLimitFailureMode,
    stats: runtime.stats,
    log: runtime.logging.get('http'),
    maxKeys: config.rate_limit_max_keys,
    timeoutMs: config.rate_limit_store_timeout,
  });
  runtime.onShutdown(() => store.close());
  runtime.addRateLimitSource(() => [store.status()]);
  return { store, key, policy };
}
