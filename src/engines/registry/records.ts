/**
 * Registry records, shared by every backend (memory, local, etcd): canonical JSON and deep copies
 * of service records, their sort orders, the per-version diffs that turn "what a watcher knew" +
 * "what is now" into watch events, and the queue that delivers those events.
 *
 * Event semantics (all backends): per service version, `create` when a version gains its first
 * live node, `update` when its nodes, metadata or endpoints change, `delete` when its last node
 * goes (deregistered or expired). Registering an identical record again only refreshes the TTL
 * and produces no event.
 *
 * What a record may hold is decided in validate.ts.
 */
import type { Endpoint, Node, Service, WatchAction, WatchEvent } from './registry.js';

/** JSON with object keys sorted, so equal records compare equal whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value as Record<string, unknown>).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = sortKeys(v);
    }
    return out;
  }
  return value;
}

/**
 * A deep copy of a record with the full shape (only the record's own fields) and nodes sorted
 * by id. Field by field, not a JSON round trip: a service of thousands of nodes is copied on
 * every change a watcher sees.
 */
export function cloneService(service: Service): Service {
  const s: Service = {
    name: service.name,
    version: service.version ?? '',
    metadata: { ...(service.metadata ?? {}) },
    endpoints: (service.endpoints ?? []).map(cloneEndpoint),
    nodes: (service.nodes ?? []).map((n) => ({ id: n.id, address: n.address, port: n.port, metadata: { ...(n.metadata ?? {}) } })),
  };
  s.nodes.sort(byNodeId);
  return s;
}

function cloneEndpoint(e: Endpoint): Endpoint {
  const out: Endpoint = { name: e.name, metadata: { ...(e.metadata ?? {}) } };
  if (e.request !== undefined) out.request = JSON.parse(JSON.stringify(e.request)) as unknown;
  if (e.response !== undefined) out.response = JSON.parse(JSON.stringify(e.response)) as unknown;
  return out;
}

function sameStrings(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) if (a[k] !== b[k] || !Object.prototype.hasOwnProperty.call(b, k)) return false;
  return true;
}

/** True when two versions of a service hold the same record (node order aside); linear in the nodes. */
export function sameVersion(a: Service, b: Service): boolean {
  if (a.nodes.length !== b.nodes.length) return false;
  if (!sameStrings(a.metadata ?? {}, b.metadata ?? {})) return false;
  if (canonicalJson(a.endpoints ?? []) !== canonicalJson(b.endpoints ?? [])) return false;
  const others = new Map(b.nodes.map((n) => [n.id, n]));
  if (others.size !== b.nodes.length) return canonicalJson(a) === canonicalJson(b);
  for (const n of a.nodes) {
    const o = others.get(n.id);
    if (!o || o.address !== n.address || o.port !== n.port || !sameStrings(n.metadata ?? {}, o.metadata ?? {})) return false;
  }
  return true;
}

export function byNodeId(a: Node, b: Node): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

export function byVersion(a: Service, b: Service): number {
  return a.version < b.version ? -1 : a.version > b.version ? 1 : 0;
}

export function byName(a: Service, b: Service): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** A version with no nodes left, as delete events carry it. */
export function emptyVersion(name: string, version: string, like?: Service): Service {
  return {
    name,
    version,
    metadata: { ...(like?.metadata ?? {}) },
    endpoints: like ? cloneService(like).endpoints : [],
    nodes: [],
  };
}

/**
 * Events that turn `before` into `after` (both: the live versions of one service). Versions are
 * compared by their canonical JSON; output is ordered deletes, then creates/updates by version.
 */
export function diffVersions(
  name: string,
  before: readonly Service[],
  after: readonly Service[],
): { action: WatchAction; service: Service }[] {
  const old = new Map(before.map((s) => [s.version, s]));
  const now = new Map(after.map((s) => [s.version, s]));
  const out: { action: WatchAction; service: Service }[] = [];
  for (const [version, s] of old) {
    if (!now.has(version)) out.push({ action: 'delete', service: emptyVersion(name, version, s) });
  }
  for (const s of [...after].sort(byVersion)) {
    const prev = old.get(s.version);
    if (!prev) out.push({ action: 'create', service: cloneService(s) });
    else if (!sameVersion(prev, s)) out.push({ action: 'update', service: cloneService(s) });
  }
  return out;
}

/** Delivers events to callbacks in order, never re-entrantly, isolating callback errors. */
export class EventQueue {
  private readonly queue: { fn: (e: WatchEvent) => void; event: WatchEvent }[] = [];
  private draining = false;

  push(fn: (e: WatchEvent) => void, event: WatchEvent): void {
    this.queue.push({ fn, event });
    if (this.draining) return;
    this.draining = true;
    try {
      for (let item = this.queue.shift(); item; item = this.queue.shift()) {
        try {
          item.fn(item.event);
        } catch (err) {
          // A watcher's bug must not break the registry or other watchers.
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    } finally {
      this.draining = false;
    }
  }
}
