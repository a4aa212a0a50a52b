/**
 * The resources of `mesh xds`, kept current from the registry: reads every service once, then
 * watches the registry and, a short debounce after a change (~100 ms), reads the services that
 * changed, rebuilds the snapshot (resources.ts) and encodes it (protos.ts). Listeners are told of
 * each new snapshot; the server pushes what changed.
 */
import type { Registry, Service, Watcher } from '../engines/registry/registry.js';
import type { ResolvedClusterSettings } from '../core/upstream/config.js';
import type { Logger } from 'pino';
import { buildSnapshot, RESOURCE_KINDS, SNAPSHOT_FIELD, type Message, type ResourceKind, type XdsSnapshot } from './resources.js';
import { versionOf, type EncodedResource, type XdsProtos } from './protos.js';

/** The snapshot as served: each kind's resources by name, encoded, and the version of all of them. */
export interface EncodedSnapshot {
  readonly messages: XdsSnapshot;
  readonly resources: Record<ResourceKind, Map<string, EncodedResource>>;
  /** The version of each kind's full set (what a wildcard subscriber gets). */
  readonly versions: Record<ResourceKind, string>;
}

export function encodeSnapshot(protos: XdsProtos, messages: XdsSnapshot, previous?: EncodedSnapshot): EncodedSnapshot {
  const resources = {} as Record<ResourceKind, Map<string, EncodedResource>>;
  const versions = {} as Record<ResourceKind, string>;
  for (const kind of RESOURCE_KINDS) {
    const out = new Map<string, EncodedResource>();
    const before = previous?.messages[SNAPSHOT_FIELD[kind]];
    for (const [name, message] of messages[SNAPSHOT_FIELD[kind]]) {
      // The builder returns new objects each time; an unchanged service's resource is reused.
      const old = before?.get(name);
      const reused = old === message ? previous!.resources[kind].get(name) : undefined;
      out.set(name, reused ?? protos.encodeResource(kind, name, message));
    }
    resources[kind] = out;
    versions[kind] = versionOf([...out.values()]);
  }
  return { messages, resources, versions };
}

export interface XdsSourceOptions {
  registry: Registry;
  settings: ResolvedClusterSettings;
  protos: XdsProtos;
  log: Logger;
  /** Delay between a registry change and the rebuild. Default 100 ms. */
  debounceMs?: number;
}

export class XdsSource {
  private readonly services = new Map<string, Service[]>();
  private readonly dirty = new Set<string>();
  private watcher?: Watcher;
  private timer?: NodeJS.Timeout;
  private refreshing?: Promise<void>;
  private closed = false;
  private current?: EncodedSnapshot;
  /** Per service name, its four messages, reused while its record is the same. */
  private readonly built = new Map<string, { key: string; messages: Record<ResourceKind, Message> }>();
  private readonly listeners = new Set<(snapshot: EncodedSnapshot) => void>();

  constructor(private readonly o: XdsSourceOptions) {}

  /** Reads the registry and starts watching it; resolves with the first snapshot. */
  async start(): Promise<EncodedSnapshot> {
    this.watcher = this.o.registry.watch((event) => {
      this.dirty.add(event.service.name);
      this.schedule();
    });
    await this.watcher.ready;
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

  close(): void {
    this.closed = true;
    this.watcher?.stop();
    if (this.timer) clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh().catch((err: Error) => {
        this.o.log.warn({ err: err.message }, 'xDS: reading the registry failed; retrying');
        this.schedule();
      });
    }, this.o.debounceMs ?? 100);
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
    try {
      const read = await Promise.all(names.map(async (name) => [name, await this.o.registry.getService(name)] as const));
      for (const [name, versions] of read) {
        if (versions.length === 0) this.services.delete(name);
        else this.services.set(name, versions);
      }
    } catch (err) {
      for (const n of names) this.dirty.add(n);
      throw err;
    }
    if (this.closed) return;
    const all = [...this.services.values()].flat();
    const messages = this.reuse(buildSnapshot({ services: all, settings: this.o.settings }));
    const next = encodeSnapshot(this.o.protos, messages, this.current);
    const changed = !this.current || RESOURCE_KINDS.some((k) => next.versions[k] !== this.current!.versions[k]);
    this.current = next;
    if (changed) for (const fn of this.listeners) fn(next);
  }

  /** The messages of services whose resources did not change are the previous objects, so encoding reuses their bytes. */
  private reuse(snapshot: XdsSnapshot): XdsSnapshot {
    const seen = new Set<string>();
    for (const name of snapshot.clusters.keys()) {
      seen.add(name);
      const messages = {} as Record<ResourceKind, Message>;
      for (const kind of RESOURCE_KINDS) messages[kind] = snapshot[SNAPSHOT_FIELD[kind]].get(name)!;
      const key = JSON.stringify(messages);
      const old = this.built.get(name);
      if (old && old.key === key) {
        for (const kind of RESOURCE_KINDS) snapshot[SNAPSHOT_FIELD[kind]].set(name, old.messages[kind]);
      } else {
        this.built.set(name, { key, messages });
      }
    }
    for (const name of [...this.built.keys()]) if (!seen.has(name)) this.built.delete(name);
    return snapshot;
  }
}
