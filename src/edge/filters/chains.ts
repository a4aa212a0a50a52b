/**
 * The chains of the edge, top to bottom: what every front end (the gateway, the sidecar's
 * app-facing and inbound listeners, each `mesh proxy` listener) runs before its handler, and
 * before an upgrade. A front end has the steps its parts give it (a Host check, CORS, a rate limit,
 * an auth step); the order is the same for all. Adding a step: a filter module in this folder and
 * its line here (docs/architecture.md, "A request's phases").
 */
import type { FrontRequest } from '../../base/http/front-types.js';
import type { MeshError } from '../../base/errors.js';
import type { CorsPolicy } from '../../base/http/cors.js';
import type { EdgeFilter } from './filter.js';
import { hostCheck } from './host-check.js';
import { headerCount } from './header-count.js';
import { headerNames, type HeaderNameFilter } from './header-names.js';
import { cors } from './cors.js';
import { pathNormalForm } from './path-normal-form.js';
import { meshTimeout } from './mesh-timeout.js';
import { health } from './health.js';
import { rateLimit, type FrontLimiter } from './rate-limit.js';
import { route, type RouteDecision } from './route.js';
import { auth, type Authorize } from './auth.js';

/** What a front end's chains are made of; each optional part left out leaves its step out. */
export interface ChainParts<R> {
  errorId: string;
  /** The sidecar's Host check. */
  refuse?: (req: FrontRequest) => MeshError | undefined;
  headerNames: HeaderNameFilter;
  /** --cors (not on the mutual TLS listener). */
  cors?: CorsPolicy;
  /** Whether the process is live (the health path answers 503 while it drains). */
  isLive: () => boolean;
  /** --rate_limit. */
  limiter?: FrontLimiter;
  /** Keyed by subject, the limit runs after the auth step (on an upgrade, the handler runs it after its own). */
  limitAfterAuth: boolean;
  route?: RouteDecision<R>;
  authorize?: Authorize<R>;
  /** Reports the phases (tests and debugging). */
  onPhase?: (phase: 'route' | 'auth', req: FrontRequest) => void;
}

/** Keeps the steps a front end has. */
function present<R>(steps: Array<EdgeFilter<R> | false | undefined>): Array<EdgeFilter<R>> {
  return steps.filter((s): s is EdgeFilter<R> => typeof s === 'function');
}

/** The request chain: the edge checks, the route, the auth step (then the handler). */
export function requestChain<R>(p: ChainParts<R>): Array<EdgeFilter<R>> {
  const phase = (name: 'route' | 'auth') => (p.onPhase ? (req: FrontRequest) => p.onPhase!(name, req) : undefined);
  return present<R>([
    p.refuse && hostCheck(p.refuse),
    headerCount(p.errorId),
    headerNames(p.headerNames),
    p.cors && cors(p.cors),
    pathNormalForm(p.errorId),
    meshTimeout(p.errorId),
    health(p.isLive),
    p.limiter && !p.limitAfterAuth && rateLimit(p.limiter),
    route(p.route, phase('route')),
    p.authorize && auth(p.authorize, phase('auth')),
    p.limiter && p.limitAfterAuth && rateLimit(p.limiter),
  ]);
}

/** The upgrade chain: the checks that apply to an upgrade, the route (then the front end's `upgrade`, which runs its auth step on the socket). */
export function upgradeChain<R>(p: ChainParts<R>): Array<EdgeFilter<R>> {
  return present<R>([
    p.refuse && hostCheck(p.refuse),
    headerNames(p.headerNames),
    pathNormalForm(p.errorId),
    meshTimeout(p.errorId),
    p.limiter && !p.limitAfterAuth && rateLimit(p.limiter),
    route(p.route, p.onPhase ? (req) => p.onPhase!('route', req) : undefined),
  ]);
}
