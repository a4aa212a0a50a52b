/**
 * Watching the local registry: one poll timer per registry (unref'd, every pollMs while there
 * are watchers or registrations to keep) and the watchers it drives.
 *
 * Watchers poll `PRAGMA data_version`. When another connection committed, they read the change
 * log past the last revision they saw, reload those services and emit the differences from what
 * they last knew (see diffVersions). A watcher also wakes at the earliest expiry among the nodes
 * it knows, purges, and reports the expiry. After a reopen (a new store generation) it rereads
 * everything. Each tick first lets the registry keep its file (healing.ts) and its registrations.
 */
import type pino from 'pino';
import type { Service, WatchEvent, Watcher } from '../registry.js';
import { EventQueue, diffVersions } from '../records.js';
import { message } from './schema.js';
import type { Leases } from './leases.js';
import type { LocalStore, Loaded } from './store.js';

export class Poller {
  private readonly watchers = new Set<LocalWatcher>();
  private readonly events = new EventQueue();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private tickAgain = false;
  private kickQueued = false;

  constructor(
    private readonly store: LocalStore,
    private readonly leases: Leases,
    private readonly pollMs: number,
    /** Keeps the store on the file at its path (FileHealer.maintain). */
    private readonly maintain: () => void,
    private readonly log: pino.Logger,
  ) {}

  /** A new watcher, which has read its starting state. */
  add(onEvent: (event: WatchEvent) => void, service: string | undefined): Watcher {
    const w = new LocalWatcher(this.store, this.leases, (event) => this.emit(w, event), onEvent, service);
    this.watchers.add(w);
    this.startTimer();
    return {
      stop: () => {
        w.stopped = true;
        this.watchers.delete(w);
        this.stopTimerIfIdle();
      },
    };
  }

  /** Stops the timer and every watcher (the registry is closing). */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const w of this.watchers) w.stopped = true;
    this.watchers.clear();
  }

  startTimer(): void {
    if (this.timer || this.store.closed) return;
    this.timer = setInterval(() => this.tick(), this.pollMs);
    this.timer.unref();
  }

  private stopTimerIfIdle(): void {
    if (this.watchers.size === 0 && this.leases.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Lets this process's watchers see its own write right away (after the caller's turn). */
  kick(): void {
    if (this.watchers.size === 0 || this.kickQueued) return;
    this.kickQueued = true;
    queueMicrotask(() => {
      this.kickQueued = false;
      this.tick();
    });
  }

  private emit(w: LocalWatcher, event: WatchEvent): void {
    this.events.push((e) => {
      if (!w.stopped) w.onEvent(e);
    }, event);
  }

  private tick(): void {
    if (this.store.closed) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = true;
    try {
      this.maintain();
      // A frozen store (its -shm refuses writes) is not read: the watchers keep their last view.
      if (this.store.frozen) return;
      if (this.leases.prune(Date.now())) this.stopTimerIfIdle();
      do {
        this.tickAgain = false;
        for (const w of [...this.watchers]) {
          if (this.store.closed) return;
          try {
            w.tick();
          } catch (err) {
            // SQLITE_BUSY beyond the busy timeout or similar: try again on the next tick.
            w.failures++;
            if (w.failures === 1 || w.failures % 100 === 0) this.log.warn({ path: this.store.file, err: message(err) }, 'registry local: watcher poll failed');
          }
        }
      } while (this.tickAgain && !this.store.closed);
    } finally {
      this.ticking = false;
    }
  }
}

class LocalWatcher {
  stopped = false;
  failures = 0;
  private readonly known = new Map<string, Service[]>();
  private readonly expiryOf = new Map<string, number>();
  private nextExpiry = Infinity;
  private lastRev: number;
  private lastDataVersion: number;
  private lastLocalWrites: number;
  private generation: number;

  constructor(
    private readonly store: LocalStore,
    private readonly leases: Leases,
    private readonly emit: (event: WatchEvent) => void,
    readonly onEvent: (event: WatchEvent) => void,
    private readonly service: string | undefined,
  ) {
    this.lastLocalWrites = store.localWrites;
    this.generation = store.generation;
    this.lastDataVersion = store.dataVersion();
    this.lastRev = store.read(() => {
      const now = store.viewNow();
      for (const name of this.names()) this.remember(name, store.load(name, now));
      return store.readRevision();
    });
  }

  tick(): void {
    if (this.stopped) return;
    const store = this.store;
    let expiring = store.viewNow() >= this.nextExpiry;
    if (expiring) {
      try {
        this.leases.purgeExpired();
      } catch {
        // another process holds the write lock too long: report the expiry without purging;
        // or the store is failing: then time stands still for readers and nothing expires
      }
      expiring = store.viewNow() >= this.nextExpiry;
    }
    // A reopened file (deleted or replaced under us): its revisions are not ours, reread everything.
    const resync = this.generation !== store.generation;
    const dv = store.dataVersion();
    const changedHere = store.localWrites !== this.lastLocalWrites;
    if (!expiring && !changedHere && !resync && dv === this.lastDataVersion) return;
    this.lastDataVersion = dv;
    this.lastLocalWrites = store.localWrites;
    this.generation = store.generation;

    const events = store.read(() => {
      const at = store.viewNow();
      const current = store.readRevision();
      const dirty = new Map<string, number>();
      const changes = resync ? 'resync' : store.changesSince(this.lastRev, current);
      if (changes === 'resync') {
        for (const name of [...this.names(), ...this.known.keys()]) dirty.set(name, current);
      } else {
        for (const [name, rev] of changes) if (this.wants(name)) dirty.set(name, rev);
      }
      if (expiring) {
        for (const [name, versions] of this.known) {
          if (!dirty.has(name) && versions.some((v) => v.nodes.length > 0)) dirty.set(name, current);
        }
      }
      this.lastRev = current;
      const out: WatchEvent[] = [];
      this.nextExpiry = Infinity;
      for (const [name, rev] of dirty) {
        const loaded = store.load(name, at);
        for (const change of diffVersions(name, this.known.get(name) ?? [], loaded.versions))
          out.push({ action: change.action, service: change.service, revision: String(rev) });
        this.remember(name, loaded);
      }
      for (const name of this.known.keys()) if (!dirty.has(name)) this.nextExpiry = Math.min(this.nextExpiry, this.expiryOf.get(name) ?? Infinity);
      return out;
    });
    for (const event of events) this.emit(event);
  }

  private remember(name: string, loaded: Loaded): void {
    if (loaded.versions.length === 0) {
      this.known.delete(name);
      this.expiryOf.delete(name);
      return;
    }
    this.known.set(name, loaded.versions);
    this.expiryOf.set(name, loaded.nextExpiry);
    if (loaded.nextExpiry < this.nextExpiry) this.nextExpiry = loaded.nextExpiry;
  }

  private wants(name: string): boolean {
    return this.service === undefined || this.service === name;
  }

  private names(): string[] {
    return this.service !== undefined ? [this.service] : this.store.allNames();
  }
}
