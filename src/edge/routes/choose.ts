/**
 * What a front end other than the gateway (the sidecar, `mesh proxy`) does with a route file:
 * match the request, apply the matched rule (routeAction: its redirect, or its backend with the
 * policy the handler follows), and begin the rule before the handler (its stats, access log
 * name and fault). The gateway does the same steps in its own route phase.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { RequestTarget } from '../../base/http/target.js';
import type { RouteHandler } from './file.js';
import type { CompiledRoutes } from './table.js';
import { routeAction, type RouteEffectsCache, type RoutePolicy } from './effects.js';

/** A route matched: its backend and handler, a redirect, or a rule with no backend to send to. */
export type FileRouteAnswer =
  /** `path`: the path after the rule's URLRewrite (what an rpc or api path mapping reads). */
  | { kind: 'backend'; route: string; service: string; handler: RouteHandler | undefined; path: string; policy: RoutePolicy }
  | { kind: 'redirect'; status: number; location: string; policy: RoutePolicy }
  | { kind: 'preflight'; headers: Array<[string, string]>; policy: RoutePolicy }
  | { kind: 'no-backend'; route: string; why: string; policy: RoutePolicy };

/** The first route of `table` matching the request, applied; undefined: none matches. */
/** `errorId`: the front end's, for the 400 of a redirect whose request's Host is not a host[:port]. */
export function chooseFileRoute(table: CompiledRoutes, effects: RouteEffectsCache, secure: boolean, req: FrontRequest, target: Pick<RequestTarget, 'path' | 'query'>, errorId: string): FileRouteAnswer | undefined {
  const choice = table.match({ method: req.method ?? 'GET', host: req.headers.host, path: target.path, query: target.query, headers: req.headers });
  if (!choice) return undefined;
  const action = routeAction(choice, effects.of(choice), { secure, host: req.headers.host, path: target.path, query: target.query, errorId, method: req.method, headers: req.headers });
  if (action.kind === 'redirect' || action.kind === 'preflight') return action;
  if (action.kind === 'no-backend') return { kind: 'no-backend', route: choice.route.name, why: action.why, policy: action.policy };
  return { kind: 'backend', route: choice.route.name, service: action.backend.name, handler: choice.route.handler, path: action.path, policy: action.policy };
}

/** The rule takes the request before its handler (stats, access log name, fault): a promise only when a delay was drawn. */
export function beginRule(policy: RoutePolicy | undefined, req: FrontRequest, res: FrontResponse, errorId: string): Promise<void> | undefined {
  return policy?.effects?.begin(req, res, errorId);
}

/** A RequestRedirect's answer: the status and Location, an empty body. */
export function sendRedirect(req: FrontRequest, res: FrontResponse, redirect: { status: number; location: string }): void {
  req.resume();
  res.writeHead(redirect.status, { location: redirect.location, 'content-length': '0' });
  res.end();
}

/** A CORS preflight a rule's CORS filter answers: 200, its headers, an empty body. */
export function sendPreflight(req: FrontRequest, res: FrontResponse, preflight: { headers: Array<[string, string]> }): void {
  req.resume();
  const head: Record<string, string> = { 'content-length': '0' };
  for (const [name, value] of preflight.headers) head[name] = value;
  res.writeHead(200, head);
  res.end();
}
