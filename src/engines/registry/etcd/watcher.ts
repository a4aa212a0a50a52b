/**
 * Watching the etcd registry: a prefix watch per watcher, regrouping only the services an event
 * touched, timers for TTL expiry, and a full resynchronisation (read + diff + new watch) whenever
 * the watch stream breaks. Writes wait for watchers still reading their starting state (settle).
 *
 * Nothing is expired on this process's clock alone: when a record's TTL runs out the watcher
 * resynchronises first (a silent watch stream may have missed the refresh). While etcd cannot be
 * read, the view is kept as of etcd's last answer (the store's StaleView: time stands still, the
 * gauge registry.stale_seconds rises) and the read is retried; once it works, the full read is the
 * truth and what etcd no longer holds is dropped.
 *
 * A watcher is ready (Watcher.ready) once it has read its starting state and asked for the changes
 * after it, not after a first attempt that failed: a change made before that first read would be
 * part of the starting state and never reported. Writes wait only for the first attempt (settle),
 * so that while etcd is away they fail at once instead of waiting for it.
 */
import type { IRangeResponse, IWatchResponse, Watcher as EtcdWatch } from 'etcd3';
import type { Service, WatchEvent, Watcher } from '../registry.js';
import { EventQueue, diffVersions } from '../records.js';
import { decode, group, isLive, type EtcdStore, type StoredRecord } from './store.js';
import { EtcdContact } from './contact.js';

/** The watchers of one registry and the queue that delivers their events. */
export class EtcdWatchers {
  private readonly watchers = new Set<EtcdWatcher>();
  /** Watchers still reading their initial state: writes wait for them so they see every change. */
  private readonly settling = new Set<Promise<void>>();
  private readonly events = new EventQueue();
  /** Asks etcd when it has been silent, while there are watchers (contact.ts). */
  private readonly contact: EtcdContact;

  constructor(private readonly store: EtcdStore) {
    this.contact = new EtcdContact(store, () => {
      for (const w of this.watchers) w.resync();
    });
  }

  add(onEvent: (event: WatchEvent) => void, service: string | undefined): Watcher {
    const w = new EtcdWatcher(this.store, this.events, onEvent, service);
    this.watchers.add(w);
    this.contact.start();
    const settled = w.start().finally(() => this.settling.delete(settled));
    this.settling.add(settled);
    return {
      stop: () => {
        this.watchers.delete(w);
        if (this.watchers.size === 0) this.contact.stop();
        void w.stop();
      },
      ready: w.ready,
    };
  }

  /** Resolves once every watcher has read its starting state. */
  async settle(): Promise<void> {
    if (this.settling.size > 0) await Promise.allSettled([...this.settling]);
  }

  /** Cancels the watch streams (an open one keeps the process alive), waiting up to a second. */
  async close(): Promise<void> {
    this.contact.stop();
    const stopping = [...this.watchers].map((w) => w.stop());
    this.watchers.clear();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(stopping), new Promise((r) => (timer = setTimeout(r, 1000)))]);
    clearTimeout(timer);
  }
}

class EtcdWatcher {
  private stopped = false;
  private generation = 0;
  private records = new Map<string, StoredRecord>();
  /** The keys of `records` per service name, so an event regroups only the services it touched. */
  private keysOf = new Map<string, Set<string>>();
  /** The earliest expiry among the records of each service name. */
  private expiryOf = new Map<string, number>();
  private known = new Map<string, Service[]>();
  private current: EtcdWatch | undefined;
  private started = false;
  private lastRev = 0n;
  private expiryTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly keyPrefix: string;
  private markReady!: () => void;
  /** Resolves once the starting state was read and the watch asked for what follows (or on stop). */
  readonly ready = new Promise<void>((resolve) => (this.markReady = resolve));

  constructor(
    private readonly store: EtcdStore,
    private readonly events: EventQueue,
    private readonly onEvent: (event: WatchEvent) => void,
    private readonly service: string | undefined,
  ) {
    this.keyPrefix = service !== undefined ? store.servicePrefix(service) : store.prefix;
  }

  /**
   * Reads the current state and opens the watch; on failure keeps retrying in the background.
   * Resolves after this first attempt, whether it worked or not (see `ready`).
   */
  async start(): Promise<void> {
    try {
      await this.sync();
    } catch {
      this.retryLater();
    }
  }

  /** Reads etcd afresh and watches again (etcd answered after a silence: the stream may have missed events). */
  resync(): void {
    if (this.stopped || this.store.closed) return;
    this.start().catch(() => undefined);
  }

  /** Stops events at once; resolves when the etcd watch is cancelled. */
  stop(): Promise<void> {
    if (!this.stopped) {
      this.stopped = true;
      this.markReady();
      this.generation++;
      if (this.expiryTimer) clearTimeout(this.expiryTimer);
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.dropCurrent();
    }
    return Promise.allSettled([...this.cancelling]).then(() => undefined);
  }

  private readonly cancelling = new Set<Promise<void>>();

  private dropCurrent(): void {
    const w = this.current;
    this.current = undefined;
    if (!w) return;
    const p: Promise<void> = w
      .cancel()
      .catch(() => undefined)
      .finally(() => this.cancelling.delete(p));
    this.cancelling.add(p);
  }

  private retryLater(delayMs = 500): void {
    if (this.stopped || this.store.closed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.start();
    }, delayMs);
    this.retryTimer.unref();
  }

  /**
   * Full read, diff against what we knew, then a watch from the next revision. When that watch's
   * stream breaks it is dropped and this runs again: etcd may have come back as another cluster
   * (wiped data, revisions from 1), where resuming at the old revision would miss everything.
   */
  private async sync(): Promise<void> {
    const gen = ++this.generation;
    this.dropCurrent();
    let res: IRangeResponse;
    try {
      res = await this.store.client.getAll().prefix(this.keyPrefix).exec();
    } catch (err) {
      if (gen !== this.generation || this.stopped) return;
      // Keep what we know (nothing expires meanwhile) and try again.
      this.store.watchersCutOff(err);
      this.retryLater();
      return;
    }
    if (gen !== this.generation || this.stopped) return;
    this.store.noteHeader(res.header);
    this.store.watchersBack();
    this.records = new Map();
    this.keysOf = new Map();
    this.expiryOf = new Map();
    for (const kv of res.kvs) {
      const rec = decode(kv, this.store.onInvalid);
      if (rec && this.wants(rec.service.name)) this.setRecord(kv.key.toString(), rec);
    }
    const rev = BigInt(res.header.revision);
    this.lastRev = rev;
    // The first read is the baseline; a later one (a resync) reports what changed meanwhile.
    const baseline = !this.started;
    this.started = true;
    this.refresh(undefined, String(rev), baseline);
    const w = this.store.client
      .watch()
      .prefix(this.keyPrefix)
      .startRevision(String(rev + 1n))
      .watcher();
    this.current = w;
    const lost = () => {
      if (gen !== this.generation || this.stopped) return;
      this.generation++; // ignore anything more from this watch
      this.dropCurrent();
      this.retryLater(250);
    };
    w.on('disconnected', lost);
    w.on('error', lost);
    w.on('data', (r: IWatchResponse) => {
      if (gen !== this.generation || this.stopped) return;
      this.apply(r);
    });
    // Whatever happens to this watch now, what changed since `rev` is reported: by this watch, or
    // by the full read (diffed against this one) that follows its loss.
    this.markReady();
  }

  private apply(res: IWatchResponse): void {
    this.store.noteHeader(res.header);
    if (res.events.length === 0) return;
    const dirty = new Set<string>();
    for (const ev of res.events) {
      const key = ev.kv.key.toString();
      const prev = this.records.get(key);
      if (prev) dirty.add(prev.service.name);
      if (ev.type === 'Put') {
        const rec = decode(ev.kv, this.store.onInvalid);
        if (rec && this.wants(rec.service.name)) {
          this.setRecord(key, rec);
          dirty.add(rec.service.name);
        } else this.deleteRecord(key);
      } else {
        this.deleteRecord(key);
      }
    }
    const rev = BigInt(res.header.revision);
    if (rev > this.lastRev) this.lastRev = rev;
    this.refresh(dirty, String(rev));
  }

  private setRecord(key: string, rec: StoredRecord): void {
    const prev = this.records.get(key);
    if (prev && prev.service.name !== rec.service.name) this.keysOf.get(prev.service.name)?.delete(key);
    this.records.set(key, rec);
    let keys = this.keysOf.get(rec.service.name);
    if (!keys) this.keysOf.set(rec.service.name, (keys = new Set()));
    keys.add(key);
  }

  private deleteRecord(key: string): void {
    const prev = this.records.get(key);
    if (!prev) return;
    this.records.delete(key);
    const keys = this.keysOf.get(prev.service.name);
    keys?.delete(key);
    if (keys?.size === 0) this.keysOf.delete(prev.service.name);
  }

  /** The records of one service name. */
  private *recordsOf(name: string): Iterable<StoredRecord> {
    for (const key of this.keysOf.get(name) ?? []) {
      const rec = this.records.get(key);
      if (rec) yield rec;
    }
  }

  /**
   * Emits the differences for `names` (all when undefined) and re-arms the expiry timer. Only the
   * named services are regrouped: an event costs the size of the services it touched.
   */
  private refresh(names: Set<string> | undefined, revision: string, silent = false): void {
    // While etcd cannot be read, time stands still at its last answer.
    const now = this.store.view.now();
    const all = names ?? new Set([...this.known.keys(), ...this.keysOf.keys()]);
    for (const name of all) {
      const after = group(this.recordsOf(name), now, this.store.onInvalid).get(name) ?? [];
      if (!silent) {
        for (const change of diffVersions(name, this.known.get(name) ?? [], after))
          this.events.push((e) => {
            if (!this.stopped) this.onEvent(e);
          }, { action: change.action, service: change.service, revision });
      }
      if (after.length > 0) this.known.set(name, after);
      else this.known.delete(name);
      // drop records that expired: they will not come back unless written again
      let next = Infinity;
      for (const key of [...(this.keysOf.get(name) ?? [])]) {
        const rec = this.records.get(key)!;
        if (!isLive(rec, now)) this.deleteRecord(key);
        else if (rec.expiresAt !== null && rec.expiresAt < next) next = rec.expiresAt;
      }
      if (next === Infinity) this.expiryOf.delete(name);
      else this.expiryOf.set(name, next);
    }
    this.armExpiry();
  }

  private armExpiry(): void {
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    if (this.stopped) return;
    let next = Infinity;
    for (const at of this.expiryOf.values()) if (at < next) next = at;
    if (next === Infinity) return;
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      if (this.stopped) return;
      // Expire only what etcd confirms: read everything again (a full read + a new watch); while
      // etcd cannot be read nothing expires (refresh's time stands still).
      void this.start();
    }, Math.max(0, next - Date.now()) + 1);
    this.expiryTimer.unref();
  }

  private wants(name: string): boolean {
    return this.service === undefined || this.service === name;
  }
}
