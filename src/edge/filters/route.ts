/** The route phase: the front end decides once what serves the request, from its target (normal form). */
import type { FrontRequest } from '../../base/http/front-types.js';
import type { RequestTarget } from '../../base/http/target.js';
import type { EdgeFilter } from './filter.js';

export type RouteDecision<R> = (req: FrontRequest, target: RequestTarget, upgrade: boolean) => R;

export function route<R>(decide: RouteDecision<R> | undefined, onRoute?: (req: FrontRequest) => void): EdgeFilter<R> {
  return (next) => (ex) => {
    onRoute?.(ex.req);
    if (decide) {
      try {
        ex.route = decide(ex.req, ex.target, ex.upgrade !== undefined);
      } catch (err) {
        return ex.fail(err);
      }
    }
    next(ex);
  };
}
