/** The Host check of the sidecar's app-facing listener (src/base/http/host-check.ts): first on every request, a refusal answers it. */
import type { MeshError } from '../../base/errors.js';
import type { FrontRequest } from '../../base/http/front-types.js';
import type { EdgeFilter } from './filter.js';

export function hostCheck<R>(refuse: (req: FrontRequest) => MeshError | undefined): EdgeFilter<R> {
  return (next) => (ex) => {
    const refusal = refuse(ex.req);
    if (refusal) return ex.refuse(refusal);
    next(ex);
  };
}
