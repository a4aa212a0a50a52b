/**
 * `mesh check`: the shared rate limit store of `--rate_limit_store=redis://…` answers PING (with the
 * TLS files and password given); an error when it does not. The local store needs nothing.
 */
import type { Config } from '../flags.js';
import { RedisBuckets } from '../../engines/ratelimit/redis.js';
import { errorOf, type Finding } from './finding.js';

export async function checkRateLimitStore(config: Config, timeoutMs: number): Promise<Finding[]> {
  if (config.rate_limit_store === 'local') return [];
  let redis: RedisBuckets;
  try {
    redis = new RedisBuckets({ address: config.rate_limit_store, tls: { caFile: config.rate_limit_store_tls_ca_file, certFile: config.rate_limit_store_tls_cert_file, keyFile: config.rate_limit_store_tls_key_file } });
  } catch (err) {
    return [{ level: 'error', check: 'rate_limit_store', message: errorOf(err) }];
  }
  try {
    await redis.ping(timeoutMs);
    return [];
  } catch (err) {
    return [{ level: 'error', check: 'rate_limit_store', message: `${redis.address} unreachable: ${errorOf(err)} (requests then follow --rate_limit_failure_mode)` }];
  } finally {
    await redis.close();
  }
}
