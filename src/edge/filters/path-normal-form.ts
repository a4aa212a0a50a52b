/**
 * The path's normal form (src/base/http/target.ts, parsed once): `req.url` rewritten to it, so the
 * rate limit, the auth rules, the route match and the forwarded request all read the same path; a
 * path that cannot be normalized safely is a 400.
 */
import { badRequest } from '../../base/errors.js';
import type { EdgeFilter } from './filter.js';

export function pathNormalForm<R>(errorId: string): EdgeFilter<R> {
  return (next) => (ex) => {
    if (ex.target.refused !== undefined) return ex.refuse(badRequest(errorId, ex.target.refused));
    ex.req.url = ex.target.url;
    next(ex);
  };
}
