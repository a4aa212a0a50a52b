/** A malformed `Mesh-Timeout` is a 400 at the door (the handlers' calls read the budget: src/core/transport/headers.ts). */
import { MeshError } from '../../base/errors.js';
import { meshTimeoutOf } from '../../core/transport/headers.js';
import type { EdgeFilter } from './filter.js';

export function meshTimeout<R>(errorId: string): EdgeFilter<R> {
  return (next) => (ex) => {
    try {
      meshTimeoutOf(ex.req.headers);
    } catch (err) {
      return ex.refuse(new MeshError(errorId, 400, (err as Error).message));
    }
    next(ex);
  };
}
