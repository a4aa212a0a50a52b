/**
 * In-process registry. Also home of the small helpers every backend shares (canonical records,
 * per-version diffs that turn "what a watcher knew" + "what is now" into watch events).
 *
 * Event semantics (all backends): per service version, `create` when a version gains its first
 * live node, `update` when its nodes, metadata or endpoints change, `delete` when its last node
 * goes (deregistered or expired). Registering an identical record again only refreshes the TTL
 * and produces no event.
 */
import {
  RegistryValidationError,
  type Endpoint,
  validateService,
  type Node,
  type RegisterOptions,
  type Registry,
  type Service,
  type WatchAction,
  type WatchEvent,
  type WatchOptions,
  type Watcher,
} from './registry.js';

// ---------------------------------------------------------------------------------------------
// shared helpers

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

import { checkNodesPerService, validateDeregister } from './validate.js';

export { validateDeregister };

/** Validates TTL options; returns the TTL in ms (0: none). */
export function ttlOf(options?: RegisterOptions): number {
  const ttl = options?.ttlMs ?? 0;
  if (typeof ttl !== 'number' || !Number.isFinite(ttl) || ttl < 0) throw new RegistryValidationError(`ttl: must be a non-negative number of milliseconds`);
  return ttl;
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

// ---------------------------------------------------------------------------------------------
// MemoryRegistry

interface StoredNode {
  node: Node;
  /** ms since epoch, or null for no expiry */
  expiresAt: number | null;
}

interface StoredVersion {
  service: Service; // nodes: [] here; the nodes live in `nodes`
  nodes: Map<string, StoredNode>;
}

interface MemoryWatcher {
  fn: (e: WatchEvent) => void;
  service?: string;
  stopped: boolean;
}

export class MemoryRegistry implements Registry {
  readonly name = 'memory';
  private readonly services = new Map<string, Map<string, StoredVersion>>();
  private rev = 0;
  private readonly watchers = new Set<MemoryWatcher>();
  private readonly events = new EventQueue();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private closed = false;

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttl = ttlOf(options);
    const s = cloneService(service);
    this.expire();
    const before = this.live(s.name);
    checkNodesPerService(s.name, before.flatMap((v) => v.nodes.map((n) => n.id)), s.nodes.map((n) => n.id));
    let versions = this.services.get(s.name);
    if (!versions) this.services.set(s.name, (versions = new Map()));
    let stored = versions.get(s.version);
    if (!stored) versions.set(s.version, (stored = { service: { ...s, nodes: [] }, nodes: new Map() }));
    stored.service = { ...s, nodes: [] };
    const expiresAt = ttl > 0 ? Date.now() + ttl : null;
    for (const node of s.nodes) stored.nodes.set(node.id, { node, expiresAt });
    this.commit(s.name, before);
    this.schedule();
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    this.expire();
    const versions = this.services.get(service.name);
    if (!versions) return;
    const before = this.live(service.name);
    const ids = (service.nodes ?? []).map((n) => n.id);
    const version = service.version ?? '';
    for (const [v, stored] of versions) {
      // An empty version means "wherever these node ids are" (node ids are unique).
      if (version !== '' && v !== version) continue;
      for (const id of ids) stored.nodes.delete(id);
      if (stored.nodes.size === 0) versions.delete(v);
    }
    if (versions.size === 0) this.services.delete(service.name);
    this.commit(service.name, before);
  }

  async getService(name: string): Promise<Service[]> {
    this.checkOpen();
    this.expire();
    return this.live(name);
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    this.expire();
    const out: Service[] = [];
    for (const name of [...this.services.keys()].sort()) {
      const first = this.live(name)[0];
      if (first) out.push({ ...first, nodes: [] });
    }
    return out;
  }

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    const w: MemoryWatcher = { fn: onEvent, service: options?.service, stopped: false };
    this.watchers.add(w);
    this.schedule();
    return {
      stop: () => {
        w.stopped = true;
        this.watchers.delete(w);
      },
    };
  }

  revision(): string {
    return String(this.rev);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.watchers.clear();
  }

  // -------------------------------------------------------------------------------------------

  private checkOpen(): void {
    if (this.closed) throw new Error('registry memory: closed');
  }

  /** Live versions of a service, sorted, deep copies. */
  private live(name: string): Service[] {
    const versions = this.services.get(name);
    if (!versions) return [];
    const now = Date.now();
    const out: Service[] = [];
    for (const stored of versions.values()) {
      const nodes = [...stored.nodes.values()]
        .filter((n) => n.expiresAt === null || n.expiresAt > now)
        .map((n) => n.node);
      if (nodes.length === 0) continue;
      out.push(cloneService({ ...stored.service, nodes }));
    }
    return out.sort(byVersion);
  }

  /** When anything visible changed: bumps the revision and emits the events between `before` and now. */
  private commit(name: string, before: Service[]): void {
    const changes = diffVersions(name, before, this.live(name));
    if (changes.length === 0) return;
    this.rev++;
    const revision = String(this.rev);
    for (const change of changes) this.emit({ action: change.action, service: change.service, revision });
  }

  private emit(event: WatchEvent): void {
    for (const w of [...this.watchers]) {
      if (w.service !== undefined && w.service !== event.service.name) continue;
      this.events.push((e) => {
        if (!w.stopped) w.fn(e);
      }, { ...event, service: cloneService(event.service) });
    }
  }

  /** Removes expired nodes, emitting their delete/update events. */
  private expire(): void {
    const now = Date.now();
    for (const [name, versions] of [...this.services]) {
      let hit = false;
      for (const stored of versions.values()) {
        for (const n of stored.nodes.values()) if (n.expiresAt !== null && n.expiresAt <= now) hit = true;
      }
      if (!hit) continue;
      // `before`: what was live until the nodes expired, i.e. including them.
      const before: Service[] = [];
      for (const stored of versions.values()) {
        if (stored.nodes.size > 0)
          before.push(cloneService({ ...stored.service, nodes: [...stored.nodes.values()].map((n) => n.node) }));
      }
      before.sort(byVersion);
      for (const [v, stored] of versions) {
        for (const [id, n] of stored.nodes) if (n.expiresAt !== null && n.expiresAt <= now) stored.nodes.delete(id);
        if (stored.nodes.size === 0) versions.delete(v);
      }
      if (versions.size === 0) this.services.delete(name);
      this.commit(name, before);
    }
  }

  /** Keeps one unref'd timer armed for the next expiry so watchers hear about it on time. */
  private schedule(): void {
    if (this.closed) return;
    let next = Infinity;
    for (const versions of this.services.values())
      for (const stored of versions.values())
        for (const n of stored.nodes.values()) if (n.expiresAt !== null && n.expiresAt < next) next = n.expiresAt;
    if (next === Infinity) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer && this.timerAt <= next) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = next;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      this.expire();
      this.schedule();
    }, Math.max(0, next - Date.now()) + 1);
    this.timer.unref();
  }
}
