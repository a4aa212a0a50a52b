/**
 * The front end's auth step (src/edge/auth/), given the route: a rejection is answered like a
 * handler's error; undefined from `authorize` means the request passed at once (no auth rules), so
 * the next step runs in the same turn.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { EdgeFilter } from './filter.js';

export type Authorize<R> = (req: FrontRequest, res: FrontResponse, route: R) => Promise<void> | undefined;

export function auth<R>(authorize: Authorize<R>, onAuth?: (req: FrontRequest) => void): EdgeFilter<R> {
  return (next) => (ex) => {
    onAuth?.(ex.req);
    let passed: Promise<void> | undefined;
    try {
      passed = authorize(ex.req, ex.res!, ex.route);
    } catch (err) {
      return ex.fail(err);
    }
    if (!passed) return next(ex);
    // As one promise: a failure of what follows (a throw past the edge) is answered like a rejection.
    passed.then(() => next(ex)).catch((err: unknown) => ex.fail(err));
  };
}
