/**
 * What a front end other than the gateway (the sidecar, `mesh proxy`) does with a route file's
 * match: the route's backend and the policy its handler sends the request with. One home for
 * the step from a RouteChoice to a RoutePolicy, so every front end applies a route the same way.
 */
import type { IncomingMessage } from 'node:http';
import type { RequestTarget } from '../../base/http/target.js';
import type { RoutePolicy } from '../handlers/front-end.js';
import type { RouteHandler } from './file.js';
import type { CompiledRoutes } from './table.js';

/** A route matched: its backend (service), its handler, its policy; or a route whose backends all weigh 0. */
export type FileRouteAnswer =
  | { kind: 'backend'; route: string; service: string; handler: RouteHandler | undefined; policy: RoutePolicy }
  | { kind: 'no-backend'; route: string };

/** The policy a rule gives the request that goes to `version` (its timeouts; 0 is no bound of its own). */
export function routePolicy(version: string | undefined, rule: { requestTimeoutMs?: number; backendRequestTimeoutMs?: number }): RoutePolicy {
  return { version, requestTimeoutMs: rule.requestTimeoutMs || undefined, tryTimeoutMs: rule.backendRequestTimeoutMs || undefined };
}

/** The first route of `table` matching the request (a backend chosen by weight); undefined: none matches. */
export function chooseFileRoute(table: CompiledRoutes, req: IncomingMessage, target: Pick<RequestTarget, 'path' | 'query'>): FileRouteAnswer | undefined {
  const choice = table.match({ method: req.method ?? 'GET', host: req.headers.host, path: target.path, query: target.query, headers: req.headers });
  if (!choice) return undefined;
  const backend = choice.backend;
  if (!backend) return { kind: 'no-backend', route: choice.route.name };
  return { kind: 'backend', route: choice.route.name, service: backend.name, handler: choice.route.handler, policy: routePolicy(backend.version, choice.rule) };
}
