/**
 * A route file's Gateway documents at work (docs/routing.md, "Gateways and listeners"): which
 * routes each listener serves, and which listener a request is for. Pure: computed from the
 * parsed file (./file.ts); the gateway front (src/fronts/gateway/listeners.ts) listens.
 *
 * - A route (an HTTPRoute or a GRPCRoute) attaches through its `parentRefs` to the listeners of a
 *   Gateway of the file: every listener of the Gateway, or the one `sectionName` names, or those
 *   on `port`; only listeners whose `allowedRoutes.kinds` allow its kind (both by default); and
 *   only where its hostnames meet the
 *   listener's (below). A route without `parentRefs` is served on the process's own listener
 *   (`--address`), as in a file without Gateways, where `parentRefs` are ignored.
 * - Hostnames, as the Gateway API intersects them: a listener without a hostname takes the route's
 *   as written; a route without hostnames takes the listener's; otherwise the names both accept
 *   (`*.example.com` and `foo.example.com` give `foo.example.com`; two wildcards the narrower).
 *   None: the route is not attached to that listener.
 * - A request is for the listener of its port whose hostname is the most specific that matches the
 *   Host (an exact name, then the longest wildcard, then none); no such listener: 404. Over TLS the
 *   certificate was chosen the same way from the SNI name; when the two choose different
 *   listeners the answer is 421 (Misdirected Request).
 */
import type { GatewaySpec, GrpcRouteSpec, ListenerSpec, ListenerProtocol, ParentRefSpec, RouteFile, RouteSpec } from './file.js';
import { CompiledRoutes, hostOf } from './table.js';
import { CompiledGrpcRoutes } from './grpc-route.js';

const GATEWAY_GROUP = 'gateway.networking.k8s.io';

/** Why a parentRef attached to nothing: the Gateway API's reasons of a route's `Accepted: False`. */
export type NotAcceptedReason = 'NoMatchingParent' | 'NotAllowedByListeners' | 'NoMatchingListenerHostname';

export interface Attachment {
  gateway: string;
  listener: ListenerSpec;
  /** The route's hostnames on this listener ([]: any host). */
  hostnames: string[];
}

export interface RouteAttachments {
  attached: Attachment[];
  /** One per parentRef that attached to nothing. */
  refused: Array<{ reason: NotAcceptedReason; message: string }>;
}

/** Whether `host` is under the wildcard `*.suffix` (one label or more before it). */
function underWildcard(wildcard: string, host: string): boolean {
  const suffix = wildcard.slice(1); // `.example.com`
  return host.length > suffix.length && host.endsWith(suffix);
}

/** The hostname both accept, or undefined. */
function meet(a: string, b: string): string | undefined {
  if (a === b) return a;
  const wa = a.startsWith('*.');
  const wb = b.startsWith('*.');
  if (wa && wb) return a.endsWith(b.slice(1)) ? a : b.endsWith(a.slice(1)) ? b : undefined;
  if (wa) return underWildcard(a, b) ? b : undefined;
  if (wb) return underWildcard(b, a) ? a : undefined;
  return undefined;
}

/** A route's hostnames on a listener ([]: any host); undefined: none in common. */
export function intersectHostnames(listener: string | undefined, route: readonly string[]): string[] | undefined {
  if (listener === undefined) return [...route];
  if (route.length === 0) return [listener];
  const out = new Set<string>();
  for (const h of route) {
    const both = meet(listener, h);
    if (both !== undefined) out.add(both);
  }
  return out.size > 0 ? [...out] : undefined;
}

function describe(ref: ParentRefSpec, i: number): string {
  const parts = [`parentRefs[${i}] (${ref.kind} ${ref.name}`];
  if (ref.sectionName !== undefined) parts.push(` sectionName ${ref.sectionName}`);
  if (ref.port !== undefined) parts.push(` port ${ref.port}`);
  return `${parts.join('')})`;
}

/** What attaching reads of a route: where it asks to go, and for which hosts. */
export type AttachableRoute = Pick<RouteSpec | GrpcRouteSpec, 'parentRefs' | 'hostnames'>;

/** Where a route of `kind` attaches (see the module comment); only for a file with Gateways. */
export function attachRoute(route: AttachableRoute, gateways: readonly GatewaySpec[], kind: 'HTTPRoute' | 'GRPCRoute' = 'HTTPRoute'): RouteAttachments {
  const attached: Attachment[] = [];
  const refused: RouteAttachments['refused'] = [];
  route.parentRefs.forEach((ref, i) => {
    const where = describe(ref, i);
    const gateway = ref.group === GATEWAY_GROUP && ref.kind === 'Gateway' ? gateways.find((g) => g.name === ref.name) : undefined;
    if (!gateway) return refused.push({ reason: 'NoMatchingParent', message: `${where}: no Gateway of that name in the file` });
    const listeners = gateway.listeners.filter((l) => (ref.sectionName === undefined || l.name === ref.sectionName) && (ref.port === undefined || l.port === ref.port));
    if (listeners.length === 0) return refused.push({ reason: 'NoMatchingParent', message: `${where}: Gateway ${gateway.name} has no such listener` });
    const allowing = listeners.filter((l) => l.kinds.includes(kind));
    if (allowing.length === 0) return refused.push({ reason: 'NotAllowedByListeners', message: `${where}: no listener allows a${kind === 'HTTPRoute' ? 'n' : ''} ${kind} (allowedRoutes.kinds)` });
    let any = false;
    for (const listener of allowing) {
      const hostnames = intersectHostnames(listener.hostname, route.hostnames);
      if (hostnames === undefined) continue;
      any = true;
      if (!attached.some((a) => a.listener === listener)) attached.push({ gateway: gateway.name, listener, hostnames });
    }
    if (!any) refused.push({ reason: 'NoMatchingListenerHostname', message: `${where}: the route's hostnames meet no listener's hostname` });
  });
  return { attached, refused };
}

/** A listener and the routes it serves. */
export interface ListenerTable {
  gateway: string;
  listener: ListenerSpec;
  table: CompiledRoutes;
  /** Its GRPCRoutes: the native gRPC and gRPC-Web calls it serves. */
  grpc: CompiledGrpcRoutes;
}

/** How specific a listener's hostname is: exact names first, then the longer wildcard, then none. */
function specificity(hostname: string | undefined): number {
  if (hostname === undefined) return 0;
  return hostname.startsWith('*.') ? hostname.length : 1_000;
}

/** The listeners of one port, the most specific hostname first. */
export class PortListeners {
  readonly listeners: ListenerTable[];

  constructor(
    readonly port: number,
    readonly protocol: ListenerProtocol,
    listeners: ListenerTable[],
  ) {
    this.listeners = [...listeners].sort((a, b) => specificity(b.listener.hostname) - specificity(a.listener.hostname));
  }

  /** The listener a host name (lower case, no port) is for; undefined: none. */
  forName(name: string | undefined): ListenerTable | undefined {
    for (const l of this.listeners) {
      const h = l.listener.hostname;
      if (h === undefined) return l;
      if (name !== undefined && (h === name || (h.startsWith('*.') && underWildcard(h, name)))) return l;
    }
    return undefined;
  }

  /** The listener a request's Host header is for. */
  forHost(host: string | undefined): ListenerTable | undefined {
    return this.forName(hostOf(host));
  }
}

/** A route file compiled for the gateway: its own listener's table, and each Gateway port's listeners. */
export interface GatewayTables {
  /** The routes of the process's own listener (`--address`). */
  main: CompiledRoutes;
  /** By the port as the Gateway writes it; empty without Gateways. */
  ports: Map<number, PortListeners>;
  /** The GRPCRoutes of the process's own listener: all of them without Gateways, else those without parentRefs. */
  grpc: CompiledGrpcRoutes;
}

/** Each listener's routes of one kind, as it serves them: their hostnames intersected with its own. */
function perListener<R extends AttachableRoute>(routes: readonly R[], gateways: readonly GatewaySpec[], kind: 'HTTPRoute' | 'GRPCRoute'): Map<ListenerSpec, R[]> {
  const out = new Map<ListenerSpec, R[]>();
  for (const route of routes) {
    for (const a of attachRoute(route, gateways, kind).attached) {
      const list = out.get(a.listener) ?? [];
      list.push({ ...route, hostnames: a.hostnames });
      out.set(a.listener, list);
    }
  }
  return out;
}

/** Compiles a file: without Gateways every route is the main listener's (parentRefs ignored). */
export function compileTables(file: RouteFile, random?: () => number): GatewayTables {
  if (file.gateways.length === 0) return { main: new CompiledRoutes(file, random), ports: new Map(), grpc: new CompiledGrpcRoutes(file.grpcRoutes, random) };
  const main = new CompiledRoutes(file, random, file.routes.filter((r) => r.parentRefs.length === 0));
  const grpc = new CompiledGrpcRoutes(file.grpcRoutes.filter((r) => r.parentRefs.length === 0), random);
  const http = perListener(file.routes, file.gateways, 'HTTPRoute');
  const grpcOf = perListener(file.grpcRoutes, file.gateways, 'GRPCRoute');
  const byPort = new Map<number, ListenerTable[]>();
  for (const gateway of file.gateways) {
    for (const listener of gateway.listeners) {
      const tables = byPort.get(listener.port) ?? [];
      tables.push({ gateway: gateway.name, listener, table: new CompiledRoutes(file, random, http.get(listener) ?? []), grpc: new CompiledGrpcRoutes(grpcOf.get(listener) ?? [], random) });
      byPort.set(listener.port, tables);
    }
  }
  const ports = new Map<number, PortListeners>();
  for (const [port, tables] of byPort) ports.set(port, new PortListeners(port, tables[0]!.listener.protocol, tables));
  return { main, ports, grpc };
}

/** The ports (as written) and their protocols, in order: what a reload may not change. */
export function listenerPorts(file: RouteFile): string {
  const ports = new Map<number, ListenerProtocol>();
  for (const g of file.gateways) for (const l of g.listeners) ports.set(l.port, l.protocol);
  return [...ports].sort((a, b) => a[0] - b[0]).map(([p, proto]) => `${p}/${proto}`).join(',');
}
