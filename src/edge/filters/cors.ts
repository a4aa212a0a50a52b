/** `--cors` (src/base/http/cors.ts): the CORS headers of every answer; a preflight is answered here. */
import type { CorsPolicy } from '../../base/http/cors.js';
import type { EdgeFilter } from './filter.js';

export function cors<R>(policy: CorsPolicy): EdgeFilter<R> {
  return (next) => (ex) => {
    if (!policy.apply(ex.req, ex.res!)) next(ex);
  };
}
