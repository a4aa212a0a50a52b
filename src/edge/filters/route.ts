/** The route phase: the front end decides once what serves the request, from its target (normal form). */
import type { IncomingMessage } from 'node:http';
import type { RequestTarget } from '../../base/http/target.js';
import type { EdgeFilter } from './filter.js';

export type RouteDecision<R> = (req: IncomingMessage, target: RequestTarget, upgrade: boolean) => R;

export function route<R>(decide: RouteDecision<R> | undefined, onRoute?: (req: IncomingMessage) => void): EdgeFilter<R> {
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
