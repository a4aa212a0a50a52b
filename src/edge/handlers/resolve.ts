/**
 * Path → service mapping of SPEC 4.4, shared by the gateway and the sidecar.
 *
 *   /foo/bar          <ns>.foo       Foo.Bar
 *   /foo/bar/baz      <ns>.foo       Bar.Baz
 *   /foo/bar/baz/cat  <ns>.foo.bar   Baz.Cat
 *   /v1/foo/bar       <ns>.v1.foo    Foo.Bar
 *   /v1/foo/bar/baz   <ns>.v1.foo    Bar.Baz
 *
 * `-` in a segment becomes CamelCase in the method (`/foo/get-user` → `Foo.GetUser`).
 */
import { splitTarget } from '../../base/http/target.js';

export interface RpcRoute {
  service: string;
  /** `Endpoint.Method` */
  method: string;
}

const VERSION = /^v\d+$/;
const SEGMENT = /^[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*$/;

/** `get-user` → `GetUser`, `hello` → `Hello`. */
export function toCamel(segment: string): string {
  return segment
    .split('-')
    .map((p) => (p ? p[0]!.toUpperCase() + p.slice(1) : ''))
    .join('');
}

/** The path's segments, without the query; undefined when a segment is empty or not a name. */
export function pathSegments(url: string): string[] | undefined {
  const path = splitTarget(url).path;
  const trimmed = path.replace(/^\/+/, '').replace(/\/+$/, '');
  if (trimmed === '') return [];
  const parts = trimmed.split('/');
  for (const p of parts) if (!SEGMENT.test(p)) return undefined;
  return parts;
}

/** RPC and api handler mapping; undefined when the path names no method. */
export function resolveRpcPath(url: string, namespace: string): RpcRoute | undefined {
  const parts = pathSegments(url);
  if (!parts || parts.length < 2) return undefined;
  if (parts.length === 2) return { service: `${namespace}.${parts[0]}`, method: `${toCamel(parts[0]!)}.${toCamel(parts[1]!)}` };
  if (parts.length === 3 && VERSION.test(parts[0]!))
    return { service: `${namespace}.${parts[0]}.${parts[1]}`, method: `${toCamel(parts[1]!)}.${toCamel(parts[2]!)}` };
  const n = parts.length;
  return { service: `${namespace}.${parts.slice(0, n - 2).join('.')}`, method: `${toCamel(parts[n - 2]!)}.${toCamel(parts[n - 1]!)}` };
}

/** Proxy handler mapping: the first element (or `v1/foo`) names the service; the path is kept. */
export function resolveProxyPath(url: string, namespace: string): { service: string } | undefined {
  const parts = splitTarget(url).path.split('/').filter((p) => p !== '');
  const first = parts[0];
  if (!first || !SEGMENT.test(first)) return undefined;
  const second = parts[1];
  if (VERSION.test(first) && second && SEGMENT.test(second)) return { service: `${namespace}.${first}.${second}` };
  return { service: `${namespace}.${first}` };
}

/** Event handler mapping: `/<topic>/<event>[/more]` → topic `<ns>.<topic>`, name `event[.more]`. */
export function resolveEventPath(url: string, namespace: string): { topic: string; name: string } | undefined {
  const parts = pathSegments(url);
  if (!parts || parts.length < 2) return undefined;
  if (VERSION.test(parts[0]!) && parts.length >= 3) return { topic: `${namespace}.${parts[0]}.${parts[1]}`, name: parts.slice(2).join('.') };
  return { topic: `${namespace}.${parts[0]}`, name: parts.slice(1).join('.') };
}

/**
 * resolveRpcPath for one front end, remembering its answers: the same few paths come again and
 * again, and this runs on every request. Bounded: the memory is dropped when it fills up.
 */
export class RpcPathResolver {
  private readonly seen = new Map<string, RpcRoute | null>();

  constructor(
    readonly namespace: string,
    private readonly max = 4096,
  ) {}

  /** The route of a URL (the query is ignored); undefined when the path names no method. */
  resolve(url: string): RpcRoute | undefined {
    const path = splitTarget(url).path;
    let route = this.seen.get(path);
    if (route === undefined) {
      route = resolveRpcPath(path, this.namespace) ?? null;
      if (this.seen.size >= this.max) this.seen.clear();
      this.seen.set(path, route);
    }
    return route ?? undefined;
  }
}
