/**
 * Watching the local registry: one poll timer per registry (unref'd, while there are watchers or
 * registrations to keep) and the watchers it drives. Where the registry's directory can be watched
 * (fs.watch: inotify on Linux), a write by any process wakes the watchers within SETTLE_MS and a
 * watcher's next expiry wakes them when it comes, so the poll is only the fallback, every
 * WATCHED_POLL_MS: an idle process wakes once a second, not twenty times. Where it cannot, the
 * poll runs every pollMs (50 ms).
 *
 * Watchers poll `PRAGMA data_version`. When another connection committed, they read the change
 * log past the last revision they saw, reload those services and emit the differences from what
 * they last knew (see diffVersions). A watcher also wakes at the earliest expiry among the nodes
 * it knows, purges, and reports the expiry. After a reopen (a new store generation) it rereads
 * everything. Each tick first lets the registry keep its file (healing.ts) and its registrations.
 */
import { basename, dirname } from 'node:path';
import type pino from 'pino';
import { watchDirs, type DirWatch } from '../../../base/config/watch-dirs.js';
import type { Service, WatchEvent, Watcher } from '../registry.js';
import { EventQueue, diffVersions } from '../records.js';
import { message } from './schema.js';
import type { Leases } from './leases.js';
import type { LocalStore, Loaded } from './store.js';

/** The fallback poll while the registry's directory is watched (ms). */
export const WATCHED_POLL_MS = 1000;
/** After a change in the directory, the wait that makes one look of a burst of writes (ms). */
const SETTLE_MS = 5;

export class Poller {
  private readonly watchers = new Set<LocalWatcher>();
  private readonly events = new EventQueue();
  private timer: NodeJS.Timeout | undefined;
  /** The watch of the registry's directory while the timer runs; undefined or watching 0: the poll alone. */
  private dirWatch: DirWatch | undefined;
  /** A look soon after a change in the directory. */
  private settle: NodeJS.Timeout | undefined;
  /** A look when the earliest expiry a watcher knows comes (while the directory is watched). */
  private expiry: NodeJS.Timeout | undefined;
  /** The poll's period while the timer runs (ms). */
  private every = 0;
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
    this.scheduleExpiry();
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
    this.stopTimer();
    for (const w of this.watchers) w.stopped = true;
    this.watchers.clear();
  }

  startTimer(): void {
    if (this.timer || this.store.closed) return;
    const file = basename(this.store.file);
    this.dirWatch = watchDirs([dirname(this.store.file)], (name) => {
      // The database, its -wal, -shm and -id files: a write, a checkpoint, the file deleted or replaced.
      if (name === null || name.startsWith(file)) this.soon();
    });
    this.every = this.dirWatch.watching > 0 ? Math.max(this.pollMs, WATCHED_POLL_MS) : this.pollMs;
    this.timer = setInterval(() => this.tick(), this.every);
    this.timer.unref();
  }

  /** How often the poll runs now (ms); undefined while it does not run. */
  get pollEveryMs(): number | undefined {
    return this.timer ? this.every : undefined;
  }

  private stopTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.dirWatch?.close();
    this.dirWatch = undefined;
    clearTimeout(this.settle);
    this.settle = undefined;
    clearTimeout(this.expiry);
    this.expiry = undefined;
  }

  private stopTimerIfIdle(): void {
    if (this.watchers.size === 0 && this.leases.size === 0 && this.timer) this.stopTimer();
  }

  /** A look within SETTLE_MS (one for a burst of changes). */
  private soon(): void {
    if (this.settle || !this.timer) return;
    this.settle = setTimeout(() => {
      this.settle = undefined;
      this.tick();
    }, SETTLE_MS);
    this.settle.unref();
  }

  /** While the directory is watched, a look when the earliest expiry a watcher knows comes (the poll sees it otherwise). */
  private scheduleExpiry(): void {
    clearTimeout(this.expiry);
    this.expiry = undefined;
    if (!this.timer || !this.dirWatch || this.dirWatch.watching === 0) return;
    let next = Infinity;
    for (const w of this.watchers) next = Math.min(next, w.expiresAt);
    if (next === Infinity) return;
    // At least SETTLE_MS away: a store whose time stands still (failing) never makes this a busy loop.
    this.expiry = setTimeout(() => {
      this.expiry = undefined;
      this.tick();
    }, Math.min(2 ** 31 - 1, Math.max(SETTLE_MS, next - this.store.viewNow() + 1)));
    this.expiry.unref();
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
      this.scheduleExpiry();
    }
  }
}

class LocalWatcher {
  stopped = false;
  failures = 0;
  private readonly known = new Map<string, Service[]>();
  private readonly expiryOf = new Map<string, number>();
  private nextExpiry = Infinity;

  /** The earliest expiry among the nodes this watcher knows (the store's view time), Infinity when none. */
  get expiresAt(): number {
    return this.nextExpiry;
  }
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
