/**
 * The local registry's store: the open SQLite connection and what is read and written through it
 * (live versions of a service, the revision, the change log), and whether it is failing.
 *
 * - Every write runs in one IMMEDIATE transaction that also purges expired nodes, and, when the
 *   live state changed, bumps the revision (table meta) and logs the names of the changed services
 *   (table changes, bounded to the last changeLogKeep revisions).
 * - Reads never return expired nodes, and a service with no live nodes is not listed.
 * - A store that cannot be written (read-only, I/O error, disk full, unopenable) is "failing":
 *   readers keep the last known good view (the StaleView `view`: time stands still at the last
 *   moment the store was known good, so nothing expires; gauge registry.stale_seconds), writes
 *   reject with a clear error, one error line is logged and the gauge `registry.store_failing` is 1. A write that works again ends it (this process's
 *   registrations are written again first: StoreHooks.rewrite); healing.ts tries fresh connections.
 */
import type pino from 'pino';
import type { Gauge } from '../../../base/stats/store.js';
import type { StaleView } from '../stale-view.js';
import { normalizeService, type Endpoint, type Metadata, type Service } from '../registry.js';
import { byName, byNodeId, byVersion } from '../records.js';
import {
  MAX_NODES_PER_SERVICE,
  RegistryValidationError,
  checkNodesPerService,
  sanitizeStoredService,
  sanitizeStoredVersion,
  shown,
  type InvalidRecordSink,
} from '../validate.js';
import { codeOf, message, parseStored, upsertInto, type DB, type NodeRow, type ServiceRow, type Snapshot, type Statements } from './schema.js';
import type { FileId, Opened } from './file.js';

/** SQLite errors that mean contention, not a broken store: the write is simply tried again later. */
const TRANSIENT = /^SQLITE_(BUSY|LOCKED)/;

/** The live versions of one service and the earliest expiry among their nodes. */
export interface Loaded {
  versions: Service[];
  nextExpiry: number;
}

/**
 * Set while the store refuses writes (the store's view is frozen meanwhile). detached: the open
 * connection is not the file at the path (it could not be opened), so nothing is written to it.
 */
export interface Failing {
  reason: string;
  detached: boolean;
}

/** What the store asks of the rest of the registry. */
export interface StoreHooks {
  /** Writes this process's registrations again (the store takes writes again). */
  rewrite(): void;
  /** A write by this connection changed the live state. */
  committed(): void;
  /** How many registrations this process holds (for the log). */
  registrations(): number;
}

export interface LocalStoreOptions {
  changeLogKeep: number;
  log: pino.Logger;
  failingGauge: Gauge | undefined;
  /** What readers see while the store fails: frozen at the last moment it was known good. */
  view: StaleView;
  onInvalid: InvalidRecordSink;
}

export class LocalStore {
  db: DB;
  st: Statements;
  /** Device and inode of the open database file and of its -shm file, as they were when opened. */
  fileId: FileId | undefined;
  shmId: FileId | undefined;
  /** Bumped at every reopen: a watcher of an older generation rereads everything. */
  generation = 0;
  /** Bumped on every committed change by this connection (data_version does not see our own). */
  localWrites = 0;
  lastRevision = '0';
  closed = false;
  failing: Failing | undefined;
  /**
   * The -shm file refuses writes (src/base/util/sqlite-shm.ts): SQLite is not touched at all, since any
   * access may write through its mapping and kill the process. Reads answer the last view seen.
   */
  frozen = false;
  /** The last view of each service name read (and of the listing): what reads answer while frozen. */
  private readonly lastLoads = new Map<string, Loaded>();
  private lastListing: Service[] = [];
  /** When the store was last known good: opened, written, or swept with nothing expired. */
  goodAt = Date.now();
  hooks: StoreHooks = { rewrite: () => undefined, committed: () => undefined, registrations: () => 0 };
  readonly log: pino.Logger;
  readonly onInvalid: InvalidRecordSink;
  readonly view: StaleView;
  private readonly changeLogKeep: number;
  private readonly failingGauge: Gauge | undefined;

  constructor(
    readonly file: string,
    opened: Opened,
    options: LocalStoreOptions,
  ) {
    this.changeLogKeep = options.changeLogKeep;
    this.log = options.log;
    this.failingGauge = options.failingGauge;
    this.onInvalid = options.onInvalid;
    this.view = options.view;
    this.db = opened.db;
    this.st = opened.st;
    this.fileId = opened.fileId;
    this.shmId = opened.shmId;
    this.lastRevision = String(this.readRevision());
  }

  /** The time reads use: now, or while the store is failing the last moment it was known good. */
  viewNow(): number {
    return this.view.now();
  }

  readRevision(): number {
    if (this.frozen) return Number(this.lastRevision);
    return this.st.revision.get()?.value ?? 0;
  }

  /** data_version changes when another connection committed. */
  dataVersion(): number {
    return this.db.pragma('data_version', { simple: true }) as number;
  }

  /** Runs fn in one read transaction. */
  read<T>(fn: () => T): T {
    return this.db.transaction(fn).deferred();
  }

  /** Changes past `since`, or 'resync' when the log no longer reaches back that far. */
  changesSince(since: number, current: number): Map<string, number> | 'resync' {
    if (current < since) return 'resync';
    if (current === since) return new Map();
    const min = this.st.minChange.get()?.m ?? null;
    if (min === null || min > since + 1) return 'resync';
    const out = new Map<string, number>();
    for (const row of this.st.changesSince.all(since)) out.set(row.service, row.revision);
    return out;
  }

  allNames(): string[] {
    return this.st.allNames.all().map((r) => r.name);
  }

  /**
   * Live versions of one service at `now`, sorted; nodes sorted by id. Rows that break the
   * registry rules (written by another tool) are skipped node by node and reported.
   */
  load(name: string, now: number): Loaded {
    if (this.frozen) return this.lastLoads.get(name) ?? { versions: [], nextExpiry: Infinity };
    const loaded = this.loadRows(name, now);
    if (loaded.versions.length > 0) this.lastLoads.set(name, loaded);
    else this.lastLoads.delete(name);
    return loaded;
  }

  private loadRows(name: string, now: number): Loaded {
    const nodes = this.st.liveNodes.all({ name, now });
    if (nodes.length === 0) return { versions: [], nextExpiry: Infinity };
    const rows = new Map(this.st.serviceRows.all(name).map((r) => [r.version, r]));
    const grouped = new Map<string, NodeRow[]>();
    let nextExpiry = Infinity;
    for (const n of nodes) {
      if (!rows.has(n.version)) continue; // cannot happen: written together
      let list = grouped.get(n.version);
      if (!list) grouped.set(n.version, (list = []));
      list.push(n);
      if (n.expires_at !== null && n.expires_at < nextExpiry) nextExpiry = n.expires_at;
    }
    const versions: Service[] = [];
    for (const [version, list] of grouped) {
      versions.push(
        this.rowToService(
          rows.get(version)!,
          list.map((n) => ({
            id: n.id,
            address: n.address,
            port: n.port,
            metadata: parseStored(n.metadata) as Metadata,
          })),
        ),
      );
    }
    versions.sort(byVersion);
    const usable = sanitizeStoredService('local', name, versions, this.onInvalid).map((v) => {
      const s = normalizeService(v);
      s.nodes.sort(byNodeId);
      return s;
    });
    return { versions: usable, nextExpiry };
  }

  /** One entry per live service name (its lowest version, no nodes), sorted by name. */
  listServices(): Service[] {
    if (this.frozen) return this.lastListing;
    this.lastListing = this.listRows();
    return this.lastListing;
  }

  private listRows(): Service[] {
    const rows = this.st.liveServiceRows.all({ now: this.viewNow() });
    const byNameMap = new Map<string, Service>();
    for (const row of rows) {
      const checked = sanitizeStoredVersion(this.rowToService(row, []));
      if (checked.dropped > 0) this.onInvalid({ backend: 'local', service: shown(row.name), dropped: checked.dropped, problem: checked.problem ?? 'invalid' });
      if (!checked.service) continue;
      const s = normalizeService(checked.service);
      const prev = byNameMap.get(s.name);
      if (!prev || byVersion(s, prev) < 0) byNameMap.set(s.name, s);
    }
    return [...byNameMap.values()].sort(byName);
  }

  /** The live rows of the open file (or none when it cannot be read): carried into a new, empty file. */
  snapshot(): Snapshot | undefined {
    try {
      return this.read(() => {
        const now = this.viewNow();
        return { services: this.st.liveServiceRows.all({ now }), nodes: this.st.allLiveNodes.all({ now }) };
      });
    } catch {
      return undefined;
    }
  }

  /** Writes a service version's row and its nodes' rows (inside a write transaction). */
  upsert(s: Service, expiresAt: number | null): void {
    upsertInto(this.st, s, expiresAt);
  }

  /** Refuses a registration that would take the service past MAX_NODES_PER_SERVICE nodes: a count first, the ids only near the limit. */
  checkServiceSize(s: Service): void {
    if (this.frozen) return; // the write is refused anyway
    const now = Date.now();
    if ((this.st.countLiveNodes.get({ name: s.name, now })?.n ?? 0) + s.nodes.length <= MAX_NODES_PER_SERVICE) return;
    checkNodesPerService(s.name, this.st.liveNodes.all({ name: s.name, now }).map((n) => n.id), s.nodes.map((n) => n.id));
  }

  /** A write on behalf of a caller: refused at once while the open file is not the one at the path. */
  writeChecked(fn: (now: number) => string[]): void {
    if (this.failing?.detached) {
      throw new Error(`registry local (${this.file}): store failing, write refused: ${this.failing.reason}`);
    }
    this.write(fn);
  }

  /**
   * One IMMEDIATE write transaction: purge expired nodes, run fn (which returns the names whose
   * live state it changed), then bump the revision and log every changed name, if any.
   */
  write(fn: (now: number) => string[]): void {
    const tx = this.db.transaction(() => {
      const now = Date.now();
      const changed = new Set<string>();
      const expired = this.st.expiredNames.all({ now }).map((r) => r.service);
      if (expired.length > 0) {
        this.st.deleteExpired.run({ now });
        for (const name of expired) {
          this.st.deleteEmptyVersions.run(name);
          changed.add(name);
        }
      }
      for (const name of fn(now)) changed.add(name);
      if (changed.size === 0) return 0;
      const rev = this.st.bump.get()!.value;
      for (const name of changed) this.st.logChange.run(rev, name);
      if (rev > this.changeLogKeep) this.st.trimChanges.run(rev - this.changeLogKeep);
      return rev;
    });
    let rev: number;
    try {
      rev = tx.immediate();
    } catch (err) {
      // fn refused the write by the rules (rolled back): the store is fine.
      if (err instanceof RegistryValidationError) throw err;
      if (!TRANSIENT.test(codeOf(err))) this.markFailing(err, Date.now(), false);
      throw new Error(`registry local (${this.file}): write failed: ${message(err)}`, { cause: err });
    }
    const wasFailing = this.failing;
    if (wasFailing && !wasFailing.detached) {
      // The store takes writes again (on this connection): everything of ours goes back in.
      this.failing = undefined;
      try {
        this.hooks.rewrite();
        this.failing = wasFailing;
        this.markGood();
      } catch {
        // failing again (markFailing ran); the view was never thawed: it stays as of when it first failed
      }
    } else this.goodAt = Date.now();
    if (rev > 0) {
      this.lastRevision = String(Math.max(rev, Number(this.lastRevision) || 0));
      this.localWrites++;
      this.hooks.committed();
    }
  }

  markFailing(err: unknown, asOf: number, detached: boolean): void {
    if (this.failing) {
      this.failing.detached ||= detached;
      return;
    }
    this.failing = { reason: message(err), detached };
    this.view.freeze(asOf);
    this.failingGauge?.set(1);
    this.log.error(
      { path: this.file, err: this.failing.reason },
      'registry store failing: writes are refused; readers keep the last known view (nothing expires) until it recovers',
    );
  }

  markGood(): void {
    this.goodAt = Date.now();
    if (!this.failing) return;
    this.failing = undefined;
    this.view.thaw();
    this.failingGauge?.set(0);
    this.log.info({ path: this.file, registrations: this.hooks.registrations() }, "registry store recovered: this process's registrations were written again");
  }

  /** A stored row as it is, not yet checked (see sanitizeStoredService). */
  private rowToService(row: ServiceRow, nodes: Service['nodes']): Service {
    return {
      name: row.name,
      version: row.version,
      metadata: parseStored(row.metadata) as Metadata,
      endpoints: parseStored(row.endpoints) as Endpoint[],
      nodes,
    };
  }
}
