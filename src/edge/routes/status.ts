/**
 * A route file's routes as a Gateway API controller would write their `status`: per HTTPRoute the
 * conditions `Accepted` and `ResolvedRefs` (upstream's condition types and reasons,
 * gateway.networking.k8s.io/v1 RouteConditionType and RouteConditionReason), so that an operator
 * sees why a rule answers 500 (admin /routes and /config_dump, `mesh check --routes`).
 *
 * A GRPCRoute gets the same two conditions (`kind: GRPCRoute` in its status), and attaches to
 * listeners the same way.
 *
 * - `Accepted`: True (reason `Accepted`) for every route of a loaded file: the front end serves it;
 *   with Gateway documents in the file, a route with `parentRefs` only when it attached to a
 *   listener, else False with the reason of its first parentRef (./listeners.ts).
 * - `ResolvedRefs`: False with reason `InvalidKind` for a backendRef of another group or kind than
 *   a mesh service, `BackendNotFound` for a service the registry does not know (only when the
 *   caller gives the registry's view: `known`); the message names each rule and backend, the reason
 *   is the first one's. Else True (reason `ResolvedRefs`).
 * - A rule with no backendRefs (and no RequestRedirect), or whose backends all weigh 0, leaves
 *   ResolvedRefs True, as upstream does, and gets a note of its own: its requests answer 500.
 *
 * Pure: computed from the parsed file (src/edge/routes/file.ts) and the caller's view of the registry.
 */
import type { GrpcRouteSpec, RouteFile, RouteSpec, RuleSpec } from './file.js';
import { attachRoute, type NotAcceptedReason } from './listeners.js';

export type RouteConditionType = 'Accepted' | 'ResolvedRefs';
export type RouteConditionReason = 'Accepted' | NotAcceptedReason | 'ResolvedRefs' | 'InvalidKind' | 'BackendNotFound';

export interface RouteCondition {
  type: RouteConditionType;
  status: 'True' | 'False';
  reason: RouteConditionReason;
  message: string;
}

/** A rule that answers 500 although its refs resolve (no backendRefs, every weight 0). */
export interface RuleNote {
  rule: string;
  index: number;
  line: number;
  note: string;
}

export interface RouteStatus {
  /** Set for a GRPCRoute (else the route is an HTTPRoute). */
  kind?: 'GRPCRoute';
  route: string;
  line: number;
  conditions: RouteCondition[];
  /** With Gateway documents in the file: the listeners the route is attached to, `<gateway>/<listener>`. */
  listeners?: string[];
  /** Only rules with something to say. */
  rules: RuleNote[];
}

/**
 * The registry's view: true when the service is known, false when it is not, undefined when the
 * caller cannot tell (then nothing is said about it).
 */
export type KnownService = (service: string) => boolean | undefined;

/** `rules[2] (nowhere)`: where a message points, as the route file's errors name a rule. */
export function ruleName(rule: Pick<RuleSpec, 'index' | 'name'>): string {
  return `rules[${rule.index}] (${rule.name})`;
}

function unresolvedRefs(route: RouteSpec | GrpcRouteSpec, known: KnownService | undefined): Array<{ reason: 'InvalidKind' | 'BackendNotFound'; message: string }> {
  const out: Array<{ reason: 'InvalidKind' | 'BackendNotFound'; message: string }> = [];
  for (const rule of route.rules) {
    rule.backendRefs.forEach((ref, i) => {
      if (ref.unresolved) out.push({ reason: 'InvalidKind', message: `${ruleName(rule)} backendRefs[${i}]: ${ref.unresolved}` });
      else if (known?.(ref.name) === false) out.push({ reason: 'BackendNotFound', message: `${ruleName(rule)} backendRefs[${i}]: service ${ref.name} is not in the registry` });
    });
    for (const mirror of rule.filters.mirrors) {
      if (known?.(mirror.service) === false) out.push({ reason: 'BackendNotFound', message: `${ruleName(rule)} RequestMirror: service ${mirror.service} is not in the registry` });
    }
  }
  return out;
}

function ruleNote(rule: RuleSpec): string | undefined {
  if (rule.filters.redirect) return undefined;
  if (rule.backendRefs.length === 0) return 'no backendRefs (and no RequestRedirect): its requests answer 500';
  if (rule.backendRefs.every((r) => r.weight === 0)) return 'every backend has weight 0: its requests answer 500';
  return undefined;
}

/** The `Accepted` condition; with Gateways and `parentRefs`, records the route's listeners in `status`. */
function accepted(route: RouteSpec | GrpcRouteSpec, file: RouteFile, status: RouteStatus, kind: 'HTTPRoute' | 'GRPCRoute', use = 'in use'): RouteCondition {
  const inUse: RouteCondition = { type: 'Accepted', status: 'True', reason: 'Accepted', message: `the route is ${use}` };
  if (file.gateways.length === 0) return kind === 'GRPCRoute' ? { ...inUse, message: `the route is ${use} on the front end's own listener` } : inUse;
  if (route.parentRefs.length === 0) return { ...inUse, message: `the route is ${use} on the front end's own listener (no parentRefs)` };
  const { attached, refused } = attachRoute(route, file.gateways, kind);
  status.listeners = attached.map((a) => `${a.gateway}/${a.listener.name}`);
  if (attached.length === 0) return { type: 'Accepted', status: 'False', reason: refused[0]!.reason, message: refused.map((r) => r.message).join('; ') };
  return { ...inUse, message: `the route is ${use} on ${status.listeners.join(', ')}` };
}

function resolvedRefs(route: RouteSpec | GrpcRouteSpec, known: KnownService | undefined): RouteCondition {
  const bad = unresolvedRefs(route, known);
  return bad.length === 0
    ? { type: 'ResolvedRefs', status: 'True', reason: 'ResolvedRefs', message: known ? 'every backendRef is a mesh service the registry knows' : 'every backendRef is a mesh service' }
    : { type: 'ResolvedRefs', status: 'False', reason: bad[0]!.reason, message: bad.map((b) => b.message).join('; ') };
}

/**
 * A GRPCRoute's status: Accepted as an HTTPRoute's (for its gRPC calls), ResolvedRefs as an
 * HTTPRoute's, and a note for a rule whose calls answer UNAVAILABLE although its refs resolve.
 */
function grpcRouteStatus(route: GrpcRouteSpec, file: RouteFile, known: KnownService | undefined): RouteStatus {
  const rules: RuleNote[] = [];
  for (const rule of route.rules) {
    const note = rule.backendRefs.length === 0 ? 'no backendRefs: its calls answer UNAVAILABLE' : rule.backendRefs.every((r) => r.weight === 0) ? 'every backend has weight 0: its calls answer UNAVAILABLE' : undefined;
    if (note) rules.push({ rule: rule.name, index: rule.index, line: rule.line, note });
  }
  const status: RouteStatus = { kind: 'GRPCRoute', route: route.name, line: route.line, conditions: [], rules };
  status.conditions.push(accepted(route, file, status, 'GRPCRoute', 'in use for gRPC calls'), resolvedRefs(route, known));
  return status;
}

/** The status of each route of `file`, in the file's order: its HTTPRoutes, then its GRPCRoutes. */
export function routeStatus(file: RouteFile, known?: KnownService): RouteStatus[] {
  const http = file.routes.map((route) => {
    const resolved = resolvedRefs(route, known);
    const rules: RuleNote[] = [];
    for (const rule of route.rules) {
      const note = ruleNote(rule);
      if (note) rules.push({ rule: rule.name, index: rule.index, line: rule.line, note });
    }
    const status: RouteStatus = { route: route.name, line: route.line, conditions: [], rules };
    status.conditions.push(accepted(route, file, status, 'HTTPRoute'), resolved);
    return status;
  });
  return [...http, ...file.grpcRoutes.map((route) => grpcRouteStatus(route, file, known))];
}
