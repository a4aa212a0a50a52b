/** A malformed `Mesh-Timeout` is a 400 at the door (the handlers' calls read the budget: src/core/transport/headers.ts). */
import { badRequest } from '../../base/errors.js';
import { meshTimeoutOf } from '../../core/transport/headers.js';
import type { EdgeFilter } from './filter.js';

export function meshTimeout<R>(errorId: string): EdgeFilter<R> {
  return (next) => (ex) => {
    try {
      meshTimeoutOf(ex.req.headers);
    } catch (err) {
      return ex.refuse(badRequest(errorId, (err as Error).message));
    }
    next(ex);
  };
}
