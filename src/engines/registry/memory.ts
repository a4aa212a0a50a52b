/**
 * In-process registry. What it shares with the other backends has its own homes: records, diffs,
 * event semantics and delivery in records.ts, validation in validate.ts.
 */
import type {
  Node,
  RegisterOptions,
  Registry,
  Service,
  WatchEvent,
  WatchOptions,
  Watcher,
} from './registry.js';
import { EventQueue, byVersion, cloneService, diffVersions } from './records.js';
import { checkNodesPerService, checkServiceBytes, isListedService, listedEvents, ttlOf, validateDeregister, validateService } from './validate.js';

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
    checkServiceBytes(before, s);
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
      if (!isListedService(name)) continue;
      const first = this.live(name)[0];
      if (first) out.push({ ...first, nodes: [] });
    }
    return out;
  }

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    const w: MemoryWatcher = { fn: listedEvents(onEvent, options?.service), service: options?.service, stopped: false };
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
