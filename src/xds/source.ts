/**
 * The resources of `mesh xds`, kept current from the registry: reads every service once, then
 * watches the registry and, a short debounce after a change (~100 ms), reads the services that
 * changed and builds (resources.ts) and encodes (protos.ts) their resources again. Resources
 * that are not the registry's (the Envoy HTTP listener and routes of a route file) are set with
 * `setExtra` and served beside them. Listeners are told of each new snapshot; the server pushes
 * what changed.
 */
import type { Registry, Service, Watcher } from '../engines/registry/registry.js';
import type { ResolvedClusterSettings } from '../core/upstream/config.js';
import type { Logger } from 'pino';
import { declareStats, type FamilyStats, type StatsScope } from '../base/stats/store.js';
import { printable } from '../base/util/text.js';
import { buildServiceResources, RESOURCE_KINDS, SNAPSHOT_FIELD, type Message, type ResourceKind, type XdsSnapshot } from './resources.js';
import { versionOf, type EncodedResource, type XdsProtos } from './protos.js';

/** The snapshot as served: each kind's resources by name, encoded, and the version of all of them. */
export interface EncodedSnapshot {
  readonly messages: XdsSnapshot;
  readonly resources: Record<ResourceKind, Map<string, EncodedResource>>;
  /** The version of each kind's full set (what a wildcard subscriber gets). */
  readonly versions: Record<ResourceKind, string>;
  /**
   * What an Envoy subscribed to every listener gets: the listeners it can serve (those with an
   * address, from `setExtra`), not the API listeners of proxyless clients (Envoy takes those from
   * its bootstrap only and skips them over LDS, logging each).
   */
  readonly envoyListeners: { version: string; resources: EncodedResource[] };
}

/** A whole snapshot encoded at once (the source encodes service by service; tests compare both ways). */
export function encodeSnapshot(protos: XdsProtos, messages: XdsSnapshot): EncodedSnapshot {
  const resources = {} as Record<ResourceKind, Map<string, EncodedResource>>;
  const versions = {} as Record<ResourceKind, string>;
  for (const kind of RESOURCE_KINDS) {
    const out = new Map<string, EncodedResource>();
    for (const [name, message] of messages[SNAPSHOT_FIELD[kind]]) out.set(name, protos.encodeResource(kind, name, message));
    resources[kind] = out;
    versions[kind] = versionOf([...out.values()]);
  }
  return { messages, resources, versions, envoyListeners: { version: versionOf([]), resources: [] } };
}

/** The source's stats, below the `xds.` scope. */
export const XDS_SOURCE_STATS = {
  gauges: { skippedNodes: 'skipped_nodes' },
  counters: { buildErrors: 'build_errors' },
} as const;

export interface XdsSourceOptions {
  registry: Registry;
  settings: ResolvedClusterSettings;
  protos: XdsProtos;
  log: Logger;
  stats: StatsScope;
  /** Delay between a registry change and the rebuild. Default 100 ms. */
  debounceMs?: number;
}

export class XdsSource {
  private readonly dirty = new Set<string>();
  private watcher?: Watcher;
  private timer?: NodeJS.Timeout;
  private refreshing?: Promise<void>;
  private closed = false;
  /** The last read of the registry failed (said once until one works). */
  private failing = false;
  private current?: EncodedSnapshot;
  /** Per service name, its four resources as messages and encoded. */
  private readonly built = new Map<string, { messages: Record<ResourceKind, Message>; encoded: Record<ResourceKind, EncodedResource> }>();
  private readonly listeners = new Set<(snapshot: EncodedSnapshot) => void>();
  /** Resources that are not the registry's, by kind and name (setExtra). */
  private extra: Partial<Record<ResourceKind, Map<string, { message: Message; encoded: EncodedResource }>>> = {};
  /**
   * Per service, what its last build said (nodes left out, values corrected), each said once while
   * it stays so; and how many of its nodes were left out.
   */
  private readonly notes = new Map<string, { said: Set<string>; skipped: number }>();
  private readonly stats: FamilyStats<typeof XDS_SOURCE_STATS>;
  /** The registry's resources a route file's of the same kind and name replaces (said once each). */
  private shadowed = new Set<string>();

  constructor(private readonly o: XdsSourceOptions) {
    this.stats = declareStats(o.stats.scope('xds.'), XDS_SOURCE_STATS);
  }

  /** Reads the registry and starts watching it; resolves with the first snapshot. */
  async start(): Promise<EncodedSnapshot> {
    this.watcher = this.o.registry.watch((event) => {
      this.dirty.add(event.service.name);
      this.schedule();
    });
    // A registry that cannot be read fails the start at once (a watch is ready only once it has
    // read the registry, which would wait for it); then the list read after the watch is ready.
    await Promise.all([this.watcher.ready, this.o.registry.listServices()]);
    for (const s of await this.o.registry.listServices()) this.dirty.add(s.name);
    await this.refresh();
    return this.current!;
  }

  get snapshot(): EncodedSnapshot | undefined {
    return this.current;
  }

  onSnapshot(fn: (snapshot: EncodedSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * Serves these resources besides the registry's, in place of the last ones set (they win over a
   * registry resource of the same kind and name, said once). Encodes them first: a message the protos cannot encode throws and changes
   * nothing. Announces the snapshot when a version moved.
   */
  setExtra(resources: Partial<Record<ResourceKind, ReadonlyMap<string, Message>>>): void {
    const next: typeof this.extra = {};
    for (const kind of RESOURCE_KINDS) {
      const given = resources[kind];
      if (!given) continue;
      const out = new Map<string, { message: Message; encoded: EncodedResource }>();
      for (const [name, message] of given) out.set(name, { message, encoded: this.o.protos.encodeResource(kind, name, message) });
      next[kind] = out;
    }
    this.extra = next;
    if (this.current) this.announce(this.assemble());
  }

  close(): void {
    this.closed = true;
    this.watcher?.stop();
    if (this.timer) clearTimeout(this.timer);
  }

  /** Reads the dirty services after the debounce; after a failed read, every second until one works (said once). */
  private schedule(delayMs = this.o.debounceMs ?? 100): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh().then(
        () => {
          if (this.failing) this.o.log.info('xDS: reading the registry works again');
          this.failing = false;
        },
        (err: Error) => {
          if (!this.failing) this.o.log.warn({ err: err.message }, 'xDS: reading the registry failed; serving the last snapshot and retrying every second');
          this.failing = true;
          this.schedule(1_000);
        },
      );
    }, delayMs);
    this.timer.unref?.();
  }

  /** Reads the dirty services, rebuilds and announces the snapshot. One at a time. */
  private async refresh(): Promise<void> {
    while (this.refreshing) await this.refreshing;
    if (this.closed) return;
    const run = this.doRefresh();
    this.refreshing = run;
    try {
      await run;
    } finally {
      this.refreshing = undefined;
    }
  }

  private async doRefresh(): Promise<void> {
    const names = [...this.dirty];
    this.dirty.clear();
    let read: (readonly [string, Service[]])[];
    try {
      read = await Promise.all(names.map(async (name) => [name, await this.o.registry.getService(name)] as const));
    } catch (err) {
      for (const n of names) this.dirty.add(n);
      throw err;
    }
    if (this.closed) return;
    // Only the services that changed are built and encoded again.
    for (const [name, versions] of read) this.build(name, versions);
    this.stats.skippedNodes.set([...this.notes.values()].reduce((sum, n) => sum + n.skipped, 0));
    this.announce(this.assemble());
  }

  /**
   * Builds and encodes one service's resources. One that fails (a bug, or a value the protos cannot
   * encode) keeps its last built resources, is logged with its name and counted in
   * `xds.build_errors`, and is built again at its next change; the other services go on.
   */
  private build(name: string, versions: Service[]): void {
    const said = new Set<string>();
    let skipped = 0;
    const before = this.notes.get(name)?.said;
    const say = (message: string, fields: Record<string, unknown>) => {
      said.add(message);
      if (!before?.has(message)) this.o.log.warn({ service: name, ...fields }, `xDS: ${message}`);
    };
    try {
      const messages = buildServiceResources(name, versions, this.o.settings, {
        skipped: (node, reason) => {
          skipped++;
          say(`node ${node.id} of service ${name} left out: ${reason}`, { node: node.id, address: node.address });
        },
        warn: (message) => say(message, {}),
      });
      if (!messages) {
        this.built.delete(name);
      } else {
        const encoded = {} as Record<ResourceKind, EncodedResource>;
        for (const kind of RESOURCE_KINDS) encoded[kind] = this.o.protos.encodeResource(kind, name, messages[kind]);
        this.built.set(name, { messages, encoded });
      }
    } catch (err) {
      this.stats.buildErrors.inc();
      const message = printable((err as Error).message ?? String(err));
      this.o.log.error({ service: name, err: message }, `xDS: building the resources of service ${name} failed (serving its last ones): ${message}`);
      return;
    }
    if (said.size > 0 || skipped > 0) this.notes.set(name, { said, skipped });
    else this.notes.delete(name);
  }

  private announce(next: EncodedSnapshot): void {
    const changed = !this.current || RESOURCE_KINDS.some((k) => next.versions[k] !== this.current!.versions[k]);
    this.current = next;
    if (changed) for (const fn of this.listeners) fn(next);
  }

  /** The snapshot of every service built so far, by name, and the extra resources. */
  private assemble(): EncodedSnapshot {
    const messages: XdsSnapshot = { clusters: new Map(), endpoints: new Map(), listeners: new Map(), routes: new Map() };
    const resources = {} as Record<ResourceKind, Map<string, EncodedResource>>;
    for (const kind of RESOURCE_KINDS) resources[kind] = new Map();
    for (const name of [...this.built.keys()].sort()) {
      const b = this.built.get(name)!;
      for (const kind of RESOURCE_KINDS) {
        messages[SNAPSHOT_FIELD[kind]].set(name, b.messages[kind]);
        resources[kind].set(name, b.encoded[kind]);
      }
    }
    const envoyListeners: EncodedResource[] = [];
    const shadowed = new Set<string>();
    for (const kind of RESOURCE_KINDS) {
      for (const [name, e] of this.extra[kind] ?? []) {
        // The route file's own wins over a registry service of the same name (its API listener or routes).
        if (resources[kind].has(name)) {
          const key = `${kind} ${name}`;
          shadowed.add(key);
          if (!this.shadowed.has(key)) {
            this.o.log.warn({ service: name, kind }, `xDS: the ${kind} of registry service ${name} is not served: the route file's ${kind} of that name is`);
          }
        }
        messages[SNAPSHOT_FIELD[kind]].set(name, e.message);
        resources[kind].set(name, e.encoded);
        if (kind === 'listener') envoyListeners.push(e.encoded);
      }
    }
    this.shadowed = shadowed;
    const versions = {} as Record<ResourceKind, string>;
    for (const kind of RESOURCE_KINDS) versions[kind] = versionOf([...resources[kind].values()]);
    return { messages, resources, versions, envoyListeners: { version: versionOf(envoyListeners), resources: envoyListeners } };
  }
}
