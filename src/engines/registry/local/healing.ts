/**
 * Keeps the local registry on the file at its path (see docs/cluster.md, "The registry file"):
 * every poll (and every call) checks the path's identity; a deleted or replaced file is reopened
 * (a deleted one created again, see file.ts), the registrations this process made are written
 * into it at once (with the expiry they had), and watchers reread everything (the store's
 * generation changes). While the store is failing, a fresh connection is tried every RECOVER_MS;
 * once a write succeeds this process's registrations are written again.
 */
import { closeQuietly, fileMoved, openDatabase, type Opened } from './file.js';
import { shmWriteProblem } from '../../../base/util/sqlite-shm.js';
import type { Leases } from './leases.js';
import type { LocalStore } from './store.js';

/** While the store is failing, how often a fresh connection is tried. */
const RECOVER_MS = 500;

export class FileHealer {
  private nextRecovery = 0;

  constructor(
    private readonly store: LocalStore,
    private readonly leases: Leases,
    /** Lets watchers see the reopened file right away. */
    private readonly kick: () => void,
  ) {}

  /**
   * Reopens when the path no longer names the open file (deleted, replaced) or its -shm file
   * changed (another process removed a stale one); while failing, tries a fresh connection every
   * RECOVER_MS. Two stat calls when nothing happened.
   */
  maintain(): void {
    const store = this.store;
    if (store.closed) return;
    // A -shm file that refuses writes: failing (writes refused, readers keep the last good view),
    // and no reopen or rewrite, which would write through its mapping and kill the process.
    const shm = shmWriteProblem(store.file);
    if (shm) {
      store.frozen = true;
      store.markFailing(shm, Date.now(), true);
      return;
    }
    // Writable again: the recovery below (a fresh connection, our registrations written again) may touch it.
    store.frozen = false;
    const moved = fileMoved(store.file, store.fileId, store.shmId);
    if (moved === 'unknown') return; // cannot even stat: leave things as they are
    if (!moved && !store.failing) return;
    if (store.failing && performance.now() < this.nextRecovery) return;
    this.reopen(moved);
  }

  /** Opens the file at the path again; `moved` says why (undefined: recovering from failure). */
  private reopen(moved: 'deleted' | 'replaced' | undefined): void {
    const store = this.store;
    // What the open file holds: written into a new file when this process is the one to publish it.
    const carried = moved ? store.snapshot() : undefined;
    let next: Opened;
    try {
      next = openDatabase(store.file, (db, st) => this.leases.fill(db, st, carried));
    } catch (err) {
      this.nextRecovery = performance.now() + RECOVER_MS;
      store.markFailing(err, Date.now(), moved !== undefined || store.failing?.detached === true);
      return;
    }
    if (!moved) {
      // Recovering: the same file; keep the old connection unless the new one takes writes.
      const old = { db: store.db, st: store.st };
      store.db = next.db;
      store.st = next.st;
      try {
        this.leases.rewrite();
      } catch (err) {
        store.db = old.db;
        store.st = old.st;
        closeQuietly(next.db);
        this.nextRecovery = performance.now() + RECOVER_MS;
        store.markFailing(err, Date.now(), false);
        return;
      }
      store.fileId = next.fileId;
      store.shmId = next.shmId;
      closeQuietly(old.db);
      store.generation++;
      store.markGood();
      this.kick();
      return;
    }
    const old = store.db;
    store.db = next.db;
    store.st = next.st;
    store.fileId = next.fileId;
    store.shmId = next.shmId;
    store.generation++;
    // Our connection to a deleted or replaced file: SQLite neither checkpoints nor removes side files then.
    closeQuietly(old);
    store.log.warn(
      { path: store.file, reason: moved, registrations: this.leases.size },
      `registry file was ${moved}: reopened it and wrote this process's registrations again`,
    );
    if (store.failing) store.failing.detached = false;
    try {
      this.leases.rewrite(carried);
      store.markGood();
    } catch {
      // markFailing has run (a write error); recovery is tried every RECOVER_MS
      this.nextRecovery = performance.now() + RECOVER_MS;
    }
    this.kick();
  }
}
