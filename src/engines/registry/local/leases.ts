/**
 * TTLs of the local registry: expiring nodes (purgeExpired), and the registrations this process
 * made, remembered with their expiry so that a refresh that failed, a recovered store or a new
 * file gets them back (rewrite, fill).
 */
import type { Service } from '../registry.js';
import { canonicalJson } from '../records.js';
import { upsertInto, type DB, type Snapshot, type Statements } from './schema.js';
import type { LocalStore } from './store.js';

/** How often registrations whose TTL passed are forgotten. */
const PRUNE_MS = 5_000;

/** One node this process registered, as it asked: written again into a new or recovered file. */
interface Remembered {
  service: Service;
  /** Absolute expiry (ms since the epoch), null for none. */
  expiresAt: number | null;
}

/**
 * The content of a new file: what the deleted one held (`carried`), then `registrations`, the
 * revision raised to `lastRevision` at least.
 */
export function fillNewFile(db: DB, st: Statements, carried: Snapshot | undefined, registrations: Iterable<Remembered>, lastRevision: number): void {
  const at = Date.now();
  const last = lastRevision;
  db.transaction(() => {
    st.raiseRevision.run({ rev: last });
    const names = new Set<string>();
    if (carried) {
      for (const row of carried.services) st.upsertService.run(row);
      for (const { service, ...n } of carried.nodes) {
        if (n.expires_at !== null && n.expires_at <= at) continue;
        st.upsertNode.run({ ...n, service });
        names.add(service);
      }
    }
    for (const { service: s, expiresAt } of registrations) {
      if (expiresAt !== null && expiresAt <= at) continue;
      upsertInto(st, s, expiresAt);
      names.add(s.name);
    }
    if (names.size === 0) return;
    const rev = st.bump.get()!.value;
    for (const name of names) st.logChange.run(rev, name);
  })();
}

function rememberKey(name: string, version: string, id: string): string {
  return `${name}\0${version}\0${id}`;
}

export class Leases {
  /** The nodes this process registered (key: name, version, node id), written again into a new or recovered file. */
  private readonly remembered = new Map<string, Remembered>();
  private nextPrune = 0;

  constructor(private readonly store: LocalStore) {}

  get size(): number {
    return this.remembered.size;
  }

  /** Remembers the nodes of `s` with their expiry; `onlyKnown`: only those already remembered (a refresh). */
  remember(s: Service, expiresAt: number | null, onlyKnown: boolean): void {
    for (const n of s.nodes) {
      const key = rememberKey(s.name, s.version, n.id);
      if (onlyKnown && !this.remembered.has(key)) continue;
      this.remembered.set(key, { service: { ...s, nodes: [n] }, expiresAt });
    }
  }

  /** Forgets nodes of a service; an empty version means "wherever these node ids are". */
  forget(name: string, version: string, ids: string[]): void {
    for (const [key, r] of this.remembered) {
      if (r.service.name === name && (version === '' || r.service.version === version) && ids.includes(r.service.nodes[0]!.id))
        this.remembered.delete(key);
    }
  }

  /** Every PRUNE_MS, forgets the registrations whose TTL passed; true when it did. */
  prune(now: number): boolean {
    if (now < this.nextPrune) return false;
    this.nextPrune = now + PRUNE_MS;
    this.dropExpired(now);
    return true;
  }

  clear(): void {
    this.remembered.clear();
  }

  /**
   * Deletes expired nodes (a write only when there are some). When the store refuses the write,
   * it is failing as of just before the first of them expired (or the last moment it was known
   * good, if later): they stay visible, since nobody could have refreshed them.
   */
  purgeExpired(): void {
    const store = this.store;
    if (store.closed || store.failing) return;
    const now = Date.now();
    const first = store.st.minExpired.get({ now })?.m ?? null;
    if (first === null) {
      store.goodAt = now;
      return;
    }
    try {
      store.write(() => []);
    } catch (err) {
      store.view.backdate(Math.max(store.goodAt, first - 1));
      throw err;
    }
  }

  /** A read's chance to find that the store stopped taking writes before it drops expired nodes. */
  sweep(): void {
    try {
      this.purgeExpired();
    } catch {
      // failing (now reads see the last known view) or busy (the expired nodes are simply not listed)
    }
  }

  /**
   * Writes this process's registrations that have not expired, in one transaction, keeping the
   * revision from going back. `carried`: what the deleted file held, written first when the file
   * is empty (just created), so readers see no gap until the other processes write theirs again.
   */
  rewrite(carried?: Snapshot): void {
    const store = this.store;
    this.dropExpired(Date.now());
    const last = Number(store.lastRevision) || 0;
    const entries = [...this.remembered.values()];
    store.write((at) => {
      store.st.touch.run();
      store.st.raiseRevision.run({ rev: last });
      const carry = carried && !store.st.anyNode.get() ? carried : undefined;
      const names = new Set([...entries.map((r) => r.service.name), ...(carry?.services.map((r) => r.name) ?? [])]);
      const before = new Map([...names].map((name) => [name, canonicalJson(store.load(name, at).versions)]));
      if (carry) {
        for (const row of carry.services) store.st.upsertService.run(row);
        for (const { service, ...n } of carry.nodes) {
          if (n.expires_at !== null && n.expires_at <= at) continue;
          store.st.upsertNode.run({ ...n, service });
        }
      }
      for (const { service: s, expiresAt } of entries) {
        if (expiresAt !== null && expiresAt <= at) continue;
        store.upsert(s, expiresAt);
      }
      return [...names].filter((name) => before.get(name) !== canonicalJson(store.load(name, at).versions));
    });
  }

  /** The content of a new file: what the deleted one held, then this process's registrations. */
  fill(db: DB, st: Statements, carried: Snapshot | undefined): void {
    fillNewFile(db, st, carried, this.remembered.values(), Number(this.store.lastRevision) || 0);
  }

  private dropExpired(now: number): void {
    for (const [key, r] of this.remembered) if (r.expiresAt !== null && r.expiresAt <= now) this.remembered.delete(key);
  }
}
