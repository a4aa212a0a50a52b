/**
 * The request target of a front-end request, parsed once (the front server's `target` phase):
 * the target as received, its path and query, and the normal form of the path (src/base/http/path.ts).
 * Everything after that phase (the rate limit's route key, the auth rules, the route, the
 * handlers, the span and the access log) reads this object instead of splitting `req.url` again.
 */
import type { FrontRequest } from './front-types.js';
import { normalizePath } from './path.js';

export interface RequestTarget {
  /** The target as received (`req.url` before the front server rewrote it to `url`). */
  readonly received: string;
  /** The path as received, without the query. */
  readonly receivedPath: string;
  /** The query as received, without `?`; undefined when the target has none. */
  readonly query: string | undefined;
  /** The normal form of the target (path and query as sent); the received target when refused. */
  readonly url: string;
  /** The normal form of the path; the received path when refused. */
  readonly path: string;
  /** Why the path cannot be normalized (the detail of the 400); undefined when it can. */
  readonly refused: string | undefined;
}

const TARGET = Symbol('mesh.requestTarget');
type WithTarget = { [TARGET]?: RequestTarget };

/**
 * A request target (or a URL's path and query, as a handler rewrote it) split at its first `?`:
 * the path, and the search (the query with its `?`; '' when there is none). The one place a
 * target's query is split off; everything else calls this or reads targetOf(req).
 */
export function splitTarget(target: string): { path: string; search: string } {
  const q = target.indexOf('?');
  return q === -1 ? { path: target, search: '' } : { path: target.slice(0, q), search: target.slice(q) };
}

/** Parses a request target (path, query, normal form). */
export function parseTarget(received: string): RequestTarget {
  const { path: receivedPath, search } = splitTarget(received);
  const query = search === '' ? undefined : search.slice(1);
  const n = normalizePath(receivedPath);
  if ('refused' in n) return { received, receivedPath, query, url: received, path: receivedPath, refused: n.refused };
  const url = n.path === receivedPath ? received : n.path + search;
  return { received, receivedPath, query, url, path: n.path, refused: undefined };
}

/** Parses the target of `req` and keeps it on the request (the front server, once per request). */
export function attachTarget(req: FrontRequest): RequestTarget {
  const target = parseTarget(req.url ?? '/');
  (req as WithTarget)[TARGET] = target;
  return target;
}

/**
 * The target of a request: the one its front server parsed; for a request that came another way
 * (a test, a handler called directly), parsed now from `req.url` and kept.
 */
export function targetOf(req: FrontRequest): RequestTarget {
  return (req as WithTarget)[TARGET] ?? attachTarget(req);
}

const ROUTE = Symbol('mesh.httpRoute');
type WithRoute = { [ROUTE]?: string };

/**
 * Marks the route a handler resolved the request to (the `http.route` of its server span): the
 * path of a service's method for the rpc and api handlers. A request answered 404 (no such
 * service or method) keeps no route, so the names of spans stay as few as the methods served.
 */
export function setRoute(req: FrontRequest, route: string): void {
  (req as WithRoute)[ROUTE] = route;
}

/** The route setRoute marked, if any. */
export function routeOf(req: FrontRequest): string | undefined {
  return (req as WithRoute)[ROUTE];
}
