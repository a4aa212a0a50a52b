/**
 * The embedded default registry: one SQLite database (better-sqlite3, WAL mode) in a directory,
 * shared by every mesh process on the machine with no server to run.
 *
 * - Every write runs in one IMMEDIATE transaction that also purges expired nodes, and, when the
 *   live state changed, bumps the revision (table meta) and logs the names of the changed services
 *   (table changes, bounded to the last CHANGE_LOG_KEEP revisions).
 * - Watchers poll `PRAGMA data_version` every POLL_MS (unref'd timer). When another connection
 *   committed, they read the change log past the last revision they saw, reload those services
 *   and emit the differences from what they last knew (see diffVersions). A watcher also wakes at
 *   the earliest expiry among the nodes it knows, purges, and reports the expiry.
 * - Reads never return expired nodes, and a service with no live nodes is not listed.
 *
 * The file under the processes (see docs/cluster.md, "The registry file"):
 * - Every poll (and every call) compares the path's device and inode, and those of its `-shm`
 *   file, with the open ones. A deleted or replaced file is reopened (a deleted one created again),
 *   the registrations this process made are written into it at once (with the expiry they had),
 *   and watchers reread everything and report what differs.
 * - A missing file is never created in place: the first process to notice builds the whole new
 *   database (schema, what the deleted file held, its own registrations) in a temporary file of
 *   the directory and links it to the path; the others find it there and open it. Nobody ever
 *   reads it empty or half made.
 * - Side files (`-wal`, `-shm`) left by a deleted or replaced database are removed before anyone
 *   opens the new one (SQLite would replay a stale WAL into it, and share a stale -shm with the
 *   processes still on the old one); those of a database in use are never removed. A marker file
 *   `registry.db-id` says which database they belong to. Removing them, writing the marker and
 *   linking a new file happen only under a lock file, `registry.db-lock` (held for a few file
 *   operations), and the marker is written before the link, so a process that finds a new file
 *   with the old marker can only be looking at a replaced one.
 * - A store that cannot be written (read-only, I/O error, disk full, unopenable) is "failing":
 *   readers and watchers keep the last known good view (time stands still at the last moment the
 *   store was known good, so nothing expires), writes reject with a clear error, one error line is
 *   logged and the gauge `registry.store_failing` is 1. Every RECOVER_MS a fresh connection is tried;
 *   once a write succeeds the gauge goes back to 0 and this process's registrations are written again.
 */
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  closeSync,
  constants,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
  type Stats,
} from 'node:fs';
import type pino from 'pino';
import type { StatsStore, Gauge } from '../stats/store.js';
import { Logging } from '../util/log.js';
import { join, resolve } from 'node:path';
import {
  normalizeService,
  validateService,
  type Endpoint,
  type Metadata,
  type RegisterOptions,
  type Registry,
  type Service,
  type WatchEvent,
  type WatchOptions,
  type Watcher,
} from './registry.js';
import {
  EventQueue,
  byName,
  byNodeId,
  byVersion,
  canonicalJson,
  cloneService,
  diffVersions,
} from './records.js';
import {
  MAX_NODES_PER_SERVICE,
  checkNodesPerService,
  invalidRecordSink,
  sanitizeStoredService,
  sanitizeStoredVersion,
  shown,
  ttlOf,
  validateDeregister,
  type InvalidRecordSink,
} from './validate.js';

type DB = Database.Database;

export const LOCAL_DB_FILE = 'registry.db';
const POLL_MS = 50;
const BUSY_TIMEOUT_MS = 5000;
const CHANGE_LOG_KEEP = 1000;
/** While the store is failing, how often a fresh connection is tried. */
const RECOVER_MS = 500;
/** Marker next to the database: `dev:ino` of the database its -wal and -shm files belong to. */
const ID_SUFFIX = '-id';
/**
 * Lock file next to the database, created exclusively, held for a few file operations: publishing
 * a new file, removing side files, writing the marker. Waited for up to LOCK_WAIT_MS; broken when
 * its process is gone or it is older than LOCK_STALE_MS (its holder died inside those operations).
 */
const LOCK_SUFFIX = '-lock';
const LOCK_WAIT_MS = 3000;
const LOCK_STALE_MS = 2000;
/** A path that keeps changing while it is being opened (deleted, published, replaced) is tried this often. */
const OPEN_ATTEMPTS = 5;
/** SQLite errors that mean contention, not a broken store: the write is simply tried again later. */
const TRANSIENT = /^SQLITE_(BUSY|LOCKED)/;

export interface LocalRegistryOptions {
  /** How many revisions the change log keeps (default 1000); a watcher further behind rereads everything. */
  changeLogKeep?: number;
  /** Watch poll interval in ms (default 50); also how often the file's identity is checked. */
  pollMs?: number;
  /** The process's stats store: gauge `registry.store_failing` (0/1). */
  stats?: StatsStore;
  /** The 'registry' logger; default: one of its own on stderr. */
  logger?: pino.Logger;
  /** Told about stored rows that break the registry rules (they are skipped); default: a process warning. */
  onInvalidRecord?: InvalidRecordSink;
}

/** One node this process registered, as it asked: written again into a new or recovered file. */
interface Remembered {
  service: Service;
  /** Absolute expiry (ms since the epoch), null for none. */
  expiresAt: number | null;
}

type FileId = { dev: number; ino: number };

interface Opened {
  db: DB;
  st: Statements;
  fileId: FileId | undefined;
  shmId: FileId | undefined;
}

/** The live rows of a file, as stored. */
interface Snapshot {
  services: ServiceRow[];
  nodes: Array<NodeRow & { service: string }>;
}

function idOf(st: Stats | undefined): FileId | undefined {
  return st && st.isFile() ? { dev: st.dev, ino: st.ino } : undefined;
}

function sameId(a: FileId | undefined, b: FileId | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.dev === b.dev && a.ino === b.ino);
}

/** A lock file left by a process that is gone, or held far longer than its few file operations take. */
function lockIsStale(lock: string): boolean {
  let text: string;
  let st: Stats | undefined;
  try {
    st = statSync(lock, { throwIfNoEntry: false });
    if (!st) return true; // released meanwhile: try again at once
    text = readFileSync(lock, 'utf8');
  } catch {
    return false;
  }
  if (Date.now() - st.mtimeMs > LOCK_STALE_MS) return true;
  const pid = Number.parseInt(text, 10);
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return codeOf(err) === 'ESRCH';
  }
}

function codeOf(err: unknown): string {
  const c = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  return typeof c === 'string' ? c : '';
}

/** Thrown by a write: the store refused it (not contention). */
class StoreFailure extends Error {}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('schema', 1);
CREATE TABLE IF NOT EXISTS services (
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  metadata TEXT NOT NULL,
  endpoints TEXT NOT NULL,
  PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS nodes (
  service TEXT NOT NULL,
  version TEXT NOT NULL,
  id TEXT NOT NULL,
  address TEXT NOT NULL,
  port INTEGER NOT NULL,
  metadata TEXT NOT NULL,
  expires_at INTEGER,
  PRIMARY KEY (service, version, id)
);
CREATE INDEX IF NOT EXISTS nodes_expires_at ON nodes (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS changes (
  revision INTEGER NOT NULL,
  service TEXT NOT NULL,
  PRIMARY KEY (revision, service)
);
`;

interface NodeRow {
  version: string;
  id: string;
  address: string;
  port: number;
  metadata: string;
  expires_at: number | null;
}

interface ServiceRow {
  name: string;
  version: string;
  metadata: string;
  endpoints: string;
}

/** The live versions of one service and the earliest expiry among their nodes. */
interface Loaded {
  versions: Service[];
  nextExpiry: number;
}

function message(err: unknown): string {
  if (err && typeof err === 'object' && 'code' in err && typeof (err as { code: unknown }).code === 'string') {
    const e = err as { code: string; message?: string };
    return e.message?.startsWith(e.code) ? e.message : `${e.code}: ${e.message ?? ''}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** A stored JSON column; text that is not JSON stays a string, which validation then rejects. */
function parseStored(text: unknown): unknown {
  if (typeof text !== 'string') return text;
  try {
    return JSON.parse(text) ?? undefined;
  } catch {
    return text;
  }
}

function prepareStatements(db: DB) {
  const live = '(expires_at IS NULL OR expires_at > @now)';
  return {
    revision: db.prepare<[], { value: number }>(`SELECT value FROM meta WHERE key = 'revision'`),
    bump: db.prepare<[], { value: number }>(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`),
    logChange: db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, ?)`),
    trimChanges: db.prepare(`DELETE FROM changes WHERE revision <= ?`),
    changesSince: db.prepare<[number], { revision: number; service: string }>(
      `SELECT revision, service FROM changes WHERE revision > ? ORDER BY revision, service`,
    ),
    minChange: db.prepare<[], { m: number | null }>(`SELECT MIN(revision) AS m FROM changes`),
    expiredNames: db.prepare<{ now: number }, { service: string }>(
      `SELECT DISTINCT service FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`,
    ),
    deleteExpired: db.prepare(`DELETE FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`),
    deleteEmptyVersions: db.prepare(
      `DELETE FROM services WHERE name = ? AND NOT EXISTS
         (SELECT 1 FROM nodes n WHERE n.service = services.name AND n.version = services.version)`,
    ),
    upsertService: db.prepare(
      `INSERT INTO services (name, version, metadata, endpoints) VALUES (@name, @version, @metadata, @endpoints)
       ON CONFLICT (name, version) DO UPDATE SET metadata = excluded.metadata, endpoints = excluded.endpoints`,
    ),
    upsertNode: db.prepare(
      `INSERT INTO nodes (service, version, id, address, port, metadata, expires_at)
       VALUES (@service, @version, @id, @address, @port, @metadata, @expires_at)
       ON CONFLICT (service, version, id) DO UPDATE SET address = excluded.address, port = excluded.port,
         metadata = excluded.metadata, expires_at = excluded.expires_at`,
    ),
    deleteNode: db.prepare(`DELETE FROM nodes WHERE service = ? AND version = ? AND id = ?`),
    deleteNodeAnyVersion: db.prepare(`DELETE FROM nodes WHERE service = ? AND id = ?`),
    countLiveNodes: db.prepare<{ name: string; now: number }, { n: number }>(
      `SELECT COUNT(*) AS n FROM nodes WHERE service = @name AND ${live}`,
    ),
    liveNodes: db.prepare<{ name: string; now: number }, NodeRow>(
      `SELECT version, id, address, port, metadata, expires_at FROM nodes WHERE service = @name AND ${live}`,
    ),
    serviceRows: db.prepare<[string], ServiceRow>(`SELECT name, version, metadata, endpoints FROM services WHERE name = ?`),
    liveServiceRows: db.prepare<{ now: number }, ServiceRow>(
      `SELECT s.name, s.version, s.metadata, s.endpoints FROM services s WHERE EXISTS
         (SELECT 1 FROM nodes n WHERE n.service = s.name AND n.version = s.version
            AND (n.expires_at IS NULL OR n.expires_at > @now))`,
    ),
    allNames: db.prepare<[], { name: string }>(`SELECT DISTINCT name FROM services`),
    /** A write that changes nothing: proves the store takes writes. */
    touch: db.prepare(`UPDATE meta SET value = value WHERE key = 'schema'`),
    /** A new file continues the revisions this process saw (watchers elsewhere reread everything). */
    raiseRevision: db.prepare(`UPDATE meta SET value = @rev WHERE key = 'revision' AND value < @rev`),
    allLiveNodes: db.prepare<{ now: number }, NodeRow & { service: string }>(
      `SELECT service, version, id, address, port, metadata, expires_at FROM nodes WHERE ${live}`,
    ),
    anyNode: db.prepare<[], { one: number }>(`SELECT 1 AS one FROM nodes LIMIT 1`),
    minExpired: db.prepare<{ now: number }, { m: number | null }>(
      `SELECT MIN(expires_at) AS m FROM nodes WHERE expires_at IS NOT NULL AND expires_at <= @now`,
    ),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

export class LocalRegistry implements Registry {
  readonly name = 'local';
  readonly directory: string;
  readonly file: string;
  private db: DB;
  private st: Statements;
  /** Device and inode of the open database file and of its -shm file, as they were when opened. */
  private fileId: FileId | undefined;
  private shmId: FileId | undefined;
  /** @internal Bumped at every reopen: a watcher of an older generation rereads everything. */
  generation = 0;
  private readonly watchers = new Set<LocalWatcher>();
  private readonly events = new EventQueue();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private lastRevision = '0';
  /** @internal Bumped on every committed change by this connection (data_version does not see our own). */
  localWrites = 0;
  private ticking = false;
  private tickAgain = false;
  private kickQueued = false;
  /** The nodes this process registered (key: name, version, node id), written again into a new or recovered file. */
  private readonly remembered = new Map<string, Remembered>();
  /**
   * Set while the store refuses writes. asOf: the time reads use meanwhile (the last moment the
   * store was known good), so nothing expires because nobody could refresh it. detached: the open
   * connection is not the file at the path (it could not be opened), so nothing is written to it.
   */
  private failing: { asOf: number; reason: string; detached: boolean } | undefined;
  /** When the store was last known good: opened, written, or swept with nothing expired. */
  private goodAt = Date.now();
  private nextRecovery = 0;
  private nextPrune = 0;
  private readonly log: pino.Logger;
  private readonly failingGauge: Gauge | undefined;

  private readonly changeLogKeep: number;
  private readonly pollMs: number;
  private readonly onInvalid: InvalidRecordSink;

  constructor(directory: string, options: LocalRegistryOptions = {}) {
    this.changeLogKeep = Math.max(1, Math.floor(options.changeLogKeep ?? CHANGE_LOG_KEEP));
    this.pollMs = Math.max(1, options.pollMs ?? POLL_MS);
    this.log = options.logger ?? new Logging().get('registry');
    this.failingGauge = options.stats?.gauge('registry.store_failing');
    this.failingGauge?.set(0);
    this.onInvalid = options.onInvalidRecord ?? invalidRecordSink({});
    this.directory = resolve(directory);
    this.file = join(this.directory, LOCAL_DB_FILE);
    try {
      mkdirSync(this.directory, { recursive: true });
    } catch (err) {
      throw new Error(`registry directory ${this.directory} cannot be created: ${message(err)}`);
    }
    try {
      accessSync(this.directory, constants.W_OK);
    } catch (err) {
      throw new Error(`registry directory ${this.directory} is not writable: ${message(err)}`);
    }
    let opened: Opened;
    try {
      opened = this.open();
    } catch (err) {
      throw new Error(`registry directory ${this.directory}: cannot open ${this.file}: ${message(err)}`);
    }
    this.db = opened.db;
    this.st = opened.st;
    this.fileId = opened.fileId;
    this.shmId = opened.shmId;
    this.lastRevision = String(this.readRevision());
  }

  // -------------------------------------------------------------------------------------------
  // Registry

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttl = ttlOf(options);
    const s = cloneService(service);
    this.maintain();
    this.checkServiceSize(s);
    let expiresAt: number | null = ttl > 0 ? Date.now() + ttl : null;
    const remember = (onlyKnown: boolean) => {
      for (const n of s.nodes) {
        const key = rememberKey(s.name, s.version, n.id);
        if (onlyKnown && !this.remembered.has(key)) continue;
        this.remembered.set(key, { service: { ...s, nodes: [n] }, expiresAt });
      }
    };
    try {
      this.writeChecked((now) => {
        const before = this.load(s.name, now).versions;
        expiresAt = ttl > 0 ? now + ttl : null;
        this.upsert(s, expiresAt);
        const after = this.load(s.name, now).versions;
        return canonicalJson(before) === canonicalJson(after) ? [] : [s.name];
      });
    } catch (err) {
      // A refresh that failed still says the caller wants its nodes: they are written on recovery.
      // A new registration that failed is not remembered (the caller was told).
      remember(true);
      throw err;
    }
    remember(false);
    this.startTimer();
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    const name = service.name;
    const version = service.version ?? '';
    const ids = (service.nodes ?? []).map((n) => n.id);
    // Forgotten whether or not the write works: a recovered store must not get them back.
    for (const [key, r] of this.remembered) {
      if (r.service.name === name && (version === '' || r.service.version === version) && ids.includes(r.service.nodes[0]!.id))
        this.remembered.delete(key);
    }
    this.maintain();
    this.writeChecked((now) => {
      const before = this.load(name, now).versions;
      for (const id of ids) {
        // An empty version means "wherever these node ids are" (node ids are unique).
        if (version === '') this.st.deleteNodeAnyVersion.run(name, id);
        else this.st.deleteNode.run(name, version, id);
      }
      this.st.deleteEmptyVersions.run(name);
      const after = this.load(name, now).versions;
      return canonicalJson(before) === canonicalJson(after) ? [] : [name];
    });
  }

  async getService(name: string): Promise<Service[]> {
    this.checkOpen();
    this.maintain();
    this.sweep();
    return this.load(name, this.viewNow()).versions;
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    this.maintain();
    this.sweep();
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

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    this.maintain();
    const w = new LocalWatcher(this, onEvent, options?.service);
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

  revision(): string {
    if (this.closed) return this.lastRevision;
    try {
      const rev = this.readRevision();
      // A new file starts again from 0 until this process raised it: never report going back.
      if (BigInt(rev) > BigInt(this.lastRevision) || this.generation === 0) this.lastRevision = String(rev);
    } catch {
      // keep the last one seen
    }
    return this.lastRevision;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.revision();
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const w of this.watchers) w.stopped = true;
    this.watchers.clear();
    this.remembered.clear();
    this.db.close();
  }

  /** Whether writes are being refused (the gauge registry.store_failing). */
  get storeFailing(): boolean {
    return this.failing !== undefined;
  }

  // -------------------------------------------------------------------------------------------
  // internals used by LocalWatcher

  /** @internal The time reads use: now, or while the store is failing the last moment it was known good. */
  viewNow(): number {
    return this.failing ? this.failing.asOf : Date.now();
  }

  /** @internal */
  readRevision(): number {
    return this.st.revision.get()?.value ?? 0;
  }

  /** @internal data_version changes when another connection committed. */
  dataVersion(): number {
    return this.db.pragma('data_version', { simple: true }) as number;
  }

  /** @internal Runs fn in one read transaction. */
  read<T>(fn: () => T): T {
    return this.db.transaction(fn).deferred();
  }

  /** @internal Changes past `since`, or 'resync' when the log no longer reaches back that far. */
  changesSince(since: number, current: number): Map<string, number> | 'resync' {
    if (current < since) return 'resync';
    if (current === since) return new Map();
    const min = this.st.minChange.get()?.m ?? null;
    if (min === null || min > since + 1) return 'resync';
    const out = new Map<string, number>();
    for (const row of this.st.changesSince.all(since)) out.set(row.service, row.revision);
    return out;
  }

  /** @internal */
  allNames(): string[] {
    return this.st.allNames.all().map((r) => r.name);
  }

  /**
   * @internal Live versions of one service at `now`, sorted; nodes sorted by id. Rows that break
   * the registry rules (written by another tool) are skipped node by node and reported.
   */
  load(name: string, now: number): Loaded {
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

  /**
   * @internal Deletes expired nodes (a write only when there are some). When the store refuses
   * the write, it is failing as of just before the first of them expired (or the last moment it
   * was known good, if later): they stay visible, since nobody could have refreshed them.
   */
  purgeExpired(): void {
    if (this.closed || this.failing) return;
    const now = Date.now();
    const first = this.st.minExpired.get({ now })?.m ?? null;
    if (first === null) {
      this.goodAt = now;
      return;
    }
    try {
      this.write(() => []);
    } catch (err) {
      const failing = this.failing as LocalRegistry['failing'];
      if (failing) failing.asOf = Math.min(failing.asOf, Math.max(this.goodAt, first - 1));
      throw err;
    }
  }

  /** @internal */
  emit(w: LocalWatcher, event: WatchEvent): void {
    this.events.push((e) => {
      if (!w.stopped) w.onEvent(e);
    }, event);
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

  // -------------------------------------------------------------------------------------------
  // the file under us: identity, reopening, failing and recovering

  /**
   * Opens the database at this.file. A missing file is published whole (see publish): nobody ever
   * sees it empty or half made. Side files (-wal, -shm) are removed only where the marker says they
   * belong to another database, under the directory lock (see adopt), never those of a file in use.
   * `carried`: what a deleted file held, written into the new one when this process publishes it.
   */
  private open(carried?: Snapshot): Opened {
    for (let attempt = 1; ; attempt++) {
      const before = statSync(this.file, { throwIfNoEntry: false });
      if (before && !before.isFile()) throw new Error(`${this.file}: not a regular file`);
      const ready = before ? this.adopt(before) : this.publish(carried);
      const checked = ready ? idOf(statSync(this.file, { throwIfNoEntry: false })) : undefined;
      if (checked) {
        let opened: Opened;
        try {
          opened = this.connect();
        } catch (err) {
          // deleted again between the check and the open: start over
          if (attempt >= OPEN_ATTEMPTS || statSync(this.file, { throwIfNoEntry: false })) throw err;
          continue;
        }
        // The connection is to the file that was checked, unless the path changed in between.
        if (sameId(opened.fileId, checked)) return opened;
        this.closeQuietly(opened.db);
      }
      if (attempt >= OPEN_ATTEMPTS) {
        throw new Error(`${this.file}: kept changing while it was being opened`);
      }
    }
  }

  /** A connection to the file at the path, which must exist (never created here: see publish). */
  private connect(): Opened {
    let db: DB | undefined;
    try {
      db = new Database(this.file, { timeout: BUSY_TIMEOUT_MS, fileMustExist: true });
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      db.exec(SCHEMA);
      const st = prepareStatements(db);
      const fileId = idOf(statSync(this.file, { throwIfNoEntry: false }));
      const shmId = idOf(statSync(`${this.file}-shm`, { throwIfNoEntry: false }));
      return { db, st, fileId, shmId };
    } catch (err) {
      try {
        db?.close();
      } catch {
        // ignore
      }
      throw err;
    }
  }

  /**
   * Creates the missing file atomically: the whole database (schema, `carried`, this process's
   * registrations) is built in a temporary file of the directory in rollback-journal mode, so it
   * is complete in itself, then linked to the path under the directory lock, after removing the
   * side files of the deleted database (SQLite would otherwise replay its WAL into the new file,
   * and share its -shm with the processes still on the deleted one). When another process
   * published first, its file is used. Returns false when the path changed meanwhile.
   */
  private publish(carried: Snapshot | undefined): boolean {
    const tmp = `${this.file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      const db = new Database(tmp, { timeout: BUSY_TIMEOUT_MS });
      try {
        db.pragma('journal_mode = DELETE');
        db.exec(SCHEMA);
        this.fill(db, prepareStatements(db), carried);
      } finally {
        db.close();
      }
      const id = idOf(statSync(tmp));
      return this.withLock(() => {
        if (statSync(this.file, { throwIfNoEntry: false })) return true; // another process published first
        this.removeSideFiles();
        if (id) this.writeMarker(id);
        try {
          linkSync(tmp, this.file);
        } catch (err) {
          const code = codeOf(err);
          if (code === 'EEXIST') return true; // made by something that does not take the lock
          // A file system without hard links: under the lock, with the path missing, a rename does the same.
          if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS') renameSync(tmp, this.file);
          else throw err;
        }
        return true;
      });
    } finally {
      for (const f of [tmp, `${tmp}-journal`]) {
        try {
          unlinkSync(f);
        } catch {
          // gone already
        }
      }
    }
  }

  /** The content of a new file: what the deleted one held, then this process's registrations. */
  private fill(db: DB, st: Statements, carried: Snapshot | undefined): void {
    const at = Date.now();
    const last = Number(this.lastRevision) || 0;
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
      for (const { service: s, expiresAt } of this.remembered.values()) {
        if (expiresAt !== null && expiresAt <= at) continue;
        upsertInto(st, s, expiresAt);
        names.add(s.name);
      }
      if (names.size === 0) return;
      const rev = st.bump.get()!.value;
      for (const name of names) st.logChange.run(rev, name);
    })();
  }

  /**
   * Before opening an existing file: when the marker names another database (the file was
   * replaced), its side files are that database's; they are removed and the marker is set, under
   * the directory lock, re-checked there (a process publishing the file sets the marker before it
   * links it, under the lock too). A file without a marker keeps its side files (they may be in
   * use) and gets one.
   * Returns false when the path changed meanwhile.
   */
  private adopt(before: Stats): boolean {
    const id = idOf(before);
    const marker = this.readMarker();
    if (sameId(marker, id)) return true;
    return this.withLock(() => {
      const now = idOf(statSync(this.file, { throwIfNoEntry: false }));
      if (!sameId(now, id)) return false;
      const current = this.readMarker();
      if (sameId(current, id)) return true;
      if (current !== undefined) this.removeSideFiles();
      this.writeMarker(id!);
      return true;
    });
  }

  private removeSideFiles(): void {
    for (const side of [`${this.file}-wal`, `${this.file}-shm`]) {
      try {
        unlinkSync(side);
      } catch (err) {
        if (codeOf(err) !== 'ENOENT') throw err;
      }
    }
  }

  /**
   * Runs fn holding the directory lock (`registry.db-lock`, created exclusively): the only place
   * where side files are removed, the marker written, or a new file linked. Held for a few file
   * operations; a lock whose process is gone, or older than LOCK_STALE_MS, is broken.
   */
  private withLock<T>(fn: () => T): T {
    const lock = `${this.file}${LOCK_SUFFIX}`;
    const deadline = performance.now() + LOCK_WAIT_MS;
    for (;;) {
      let fd: number | undefined;
      try {
        fd = openSync(lock, 'wx');
      } catch (err) {
        if (codeOf(err) !== 'EEXIST') throw err;
      }
      if (fd !== undefined) {
        try {
          writeSync(fd, `${process.pid}\n`);
          return fn();
        } finally {
          closeSync(fd);
          try {
            unlinkSync(lock);
          } catch {
            // broken by another process meanwhile: nothing to release
          }
        }
      }
      if (lockIsStale(lock)) {
        try {
          unlinkSync(lock);
        } catch {
          // broken by another process
        }
        continue;
      }
      if (performance.now() > deadline) throw new Error(`${lock}: held by another process for more than ${LOCK_WAIT_MS} ms`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }

  private readMarker(): FileId | undefined {
    try {
      const m = /^(\d+):(\d+)\s*$/.exec(readFileSync(`${this.file}${ID_SUFFIX}`, 'utf8'));
      return m ? { dev: Number(m[1]), ino: Number(m[2]) } : undefined;
    } catch {
      return undefined;
    }
  }

  /** Written whole, then renamed over (under the directory lock); throws when it cannot be written. */
  private writeMarker(id: FileId): void {
    const tmp = `${this.file}${ID_SUFFIX}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, `${id.dev}:${id.ino}\n`);
      renameSync(tmp, `${this.file}${ID_SUFFIX}`);
    } catch (err) {
      try {
        unlinkSync(tmp);
      } catch {
        // ignore
      }
      throw err;
    }
  }

  /**
   * Reopens when the path no longer names the open file (deleted, replaced) or its -shm file
   * changed (another process removed a stale one); while failing, tries a fresh connection every
   * RECOVER_MS. Two stat calls when nothing happened.
   */
  private maintain(): void {
    if (this.closed) return;
    let moved: 'deleted' | 'replaced' | undefined;
    try {
      const st = statSync(this.file, { throwIfNoEntry: false });
      if (!st) moved = 'deleted';
      else if (!sameId(idOf(st), this.fileId)) moved = 'replaced';
      else if (this.shmId && !sameId(idOf(statSync(`${this.file}-shm`, { throwIfNoEntry: false })), this.shmId)) moved = 'replaced';
    } catch {
      return; // cannot even stat: leave things as they are
    }
    if (!moved && !this.failing) return;
    if (this.failing && performance.now() < this.nextRecovery) return;
    this.reopen(moved);
  }

  /** Opens the file at the path again; `moved` says why (undefined: recovering from failure). */
  private reopen(moved: 'deleted' | 'replaced' | undefined): void {
    // What the open file holds: written into a new file when this process is the one to publish it.
    const carried = moved ? this.snapshot() : undefined;
    let next: Opened;
    try {
      next = this.open(carried);
    } catch (err) {
      this.nextRecovery = performance.now() + RECOVER_MS;
      this.markFailing(err, Date.now(), moved !== undefined || this.failing?.detached === true);
      return;
    }
    if (!moved) {
      // Recovering: the same file; keep the old connection unless the new one takes writes.
      const old = { db: this.db, st: this.st };
      this.db = next.db;
      this.st = next.st;
      try {
        this.rewriteRemembered();
      } catch (err) {
        this.db = old.db;
        this.st = old.st;
        this.closeQuietly(next.db);
        this.nextRecovery = performance.now() + RECOVER_MS;
        this.markFailing(err, Date.now(), false);
        return;
      }
      this.fileId = next.fileId;
      this.shmId = next.shmId;
      this.closeQuietly(old.db);
      this.generation++;
      this.markGood();
      this.kick();
      return;
    }
    const old = this.db;
    this.db = next.db;
    this.st = next.st;
    this.fileId = next.fileId;
    this.shmId = next.shmId;
    this.generation++;
    // Our connection to a deleted or replaced file: SQLite neither checkpoints nor removes side files then.
    this.closeQuietly(old);
    this.log.warn(
      { path: this.file, reason: moved, registrations: this.remembered.size },
      `registry file was ${moved}: reopened it and wrote this process's registrations again`,
    );
    if (this.failing) this.failing.detached = false;
    try {
      this.rewriteRemembered(carried);
      this.markGood();
    } catch {
      // markFailing has run (a write error); recovery is tried every RECOVER_MS
      this.nextRecovery = performance.now() + RECOVER_MS;
    }
    this.kick();
  }

  /** The live rows of the open file (or none when it cannot be read): carried into a new, empty file. */
  private snapshot(): Snapshot | undefined {
    try {
      return this.read(() => {
        const now = this.viewNow();
        return { services: this.st.liveServiceRows.all({ now }), nodes: this.st.allLiveNodes.all({ now }) };
      });
    } catch {
      return undefined;
    }
  }

  /**
   * Writes this process's registrations that have not expired, in one transaction, keeping the
   * revision from going back. `carried`: what the deleted file held, written first when the file
   * is empty (just created), so readers see no gap until the other processes write theirs again.
   */
  private rewriteRemembered(carried?: Snapshot): void {
    const now = Date.now();
    for (const [key, r] of this.remembered) if (r.expiresAt !== null && r.expiresAt <= now) this.remembered.delete(key);
    const last = Number(this.lastRevision) || 0;
    const entries = [...this.remembered.values()];
    this.write((at) => {
      this.st.touch.run();
      this.st.raiseRevision.run({ rev: last });
      const carry = carried && !this.st.anyNode.get() ? carried : undefined;
      const names = new Set([...entries.map((r) => r.service.name), ...(carry?.services.map((r) => r.name) ?? [])]);
      const before = new Map([...names].map((name) => [name, canonicalJson(this.load(name, at).versions)]));
      if (carry) {
        for (const row of carry.services) this.st.upsertService.run(row);
        for (const { service, ...n } of carry.nodes) {
          if (n.expires_at !== null && n.expires_at <= at) continue;
          this.st.upsertNode.run({ ...n, service });
        }
      }
      for (const { service: s, expiresAt } of entries) {
        if (expiresAt !== null && expiresAt <= at) continue;
        this.upsert(s, expiresAt);
      }
      return [...names].filter((name) => before.get(name) !== canonicalJson(this.load(name, at).versions));
    });
  }

  private markFailing(err: unknown, asOf: number, detached: boolean): void {
    if (this.failing) {
      this.failing.detached ||= detached;
      return;
    }
    this.failing = { asOf, reason: message(err), detached };
    this.failingGauge?.set(1);
    this.log.error(
      { path: this.file, err: this.failing.reason },
      'registry store failing: writes are refused; readers keep the last known view (nothing expires) until it recovers',
    );
  }

  private markGood(): void {
    this.goodAt = Date.now();
    if (!this.failing) return;
    this.failing = undefined;
    this.failingGauge?.set(0);
    this.log.info({ path: this.file, registrations: this.remembered.size }, "registry store recovered: this process's registrations were written again");
  }

  /** A read's chance to find that the store stopped taking writes before it drops expired nodes. */
  private sweep(): void {
    try {
      this.purgeExpired();
    } catch {
      // failing (now reads see the last known view) or busy (the expired nodes are simply not listed)
    }
  }

  private closeQuietly(db: DB): void {
    try {
      db.close();
    } catch {
      // ignore
    }
  }

  private startTimer(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.tick(), this.pollMs);
    this.timer.unref();
  }

  private stopTimerIfIdle(): void {
    if (this.watchers.size === 0 && this.remembered.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** A write on behalf of a caller: refused at once while the open file is not the one at the path. */
  private writeChecked(fn: (now: number) => string[]): void {
    if (this.failing?.detached) {
      throw new Error(`registry local (${this.file}): store failing, write refused: ${this.failing.reason}`);
    }
    this.write(fn);
  }

  /**
   * One IMMEDIATE write transaction: purge expired nodes, run fn (which returns the names whose
   * live state it changed), then bump the revision and log every changed name, if any.
   */
  private write(fn: (now: number) => string[]): void {
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
      if (!TRANSIENT.test(codeOf(err))) this.markFailing(err, Date.now(), false);
      throw new Error(`registry local (${this.file}): write failed: ${message(err)}`, { cause: err });
    }
    const wasFailing = this.failing;
    if (wasFailing && !wasFailing.detached) {
      // The store takes writes again (on this connection): everything of ours goes back in.
      this.failing = undefined;
      try {
        this.rewriteRemembered();
        this.failing = wasFailing;
        this.markGood();
      } catch {
        // failing again (markFailing ran): keep the view of when it first failed
        const now = this.failing as LocalRegistry['failing'];
        if (now) now.asOf = wasFailing.asOf;
      }
    } else this.goodAt = Date.now();
    if (rev > 0) {
      this.lastRevision = String(Math.max(rev, Number(this.lastRevision) || 0));
      this.localWrites++;
      this.kick();
    }
  }

  /** Lets this process's watchers see its own write right away (after the caller's turn). */
  private kick(): void {
    if (this.watchers.size === 0 || this.kickQueued) return;
    this.kickQueued = true;
    queueMicrotask(() => {
      this.kickQueued = false;
      this.tick();
    });
  }

  private tick(): void {
    if (this.closed) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = true;
    try {
      this.maintain();
      const now = Date.now();
      if (now >= this.nextPrune) {
        this.nextPrune = now + 5_000;
        for (const [key, r] of this.remembered) if (r.expiresAt !== null && r.expiresAt <= now) this.remembered.delete(key);
        this.stopTimerIfIdle();
      }
      do {
        this.tickAgain = false;
        for (const w of [...this.watchers]) {
          if (this.closed) return;
          try {
            w.tick();
          } catch (err) {
            // SQLITE_BUSY beyond the busy timeout or similar: try again on the next tick.
            w.failures++;
            if (w.failures === 1 || w.failures % 100 === 0) this.log.warn({ path: this.file, err: message(err) }, 'registry local: watcher poll failed');
          }
        }
      } while (this.tickAgain && !this.closed);
    } finally {
      this.ticking = false;
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`registry local (${this.directory}): closed`);
  }

  /** Writes a service version's row and its nodes' rows (inside a write transaction). */
  private upsert(s: Service, expiresAt: number | null): void {
    upsertInto(this.st, s, expiresAt);
  }

  /** Refuses a registration that would take the service past MAX_NODES_PER_SERVICE nodes: a count first, the ids only near the limit. */
  private checkServiceSize(s: Service): void {
    const now = Date.now();
    if ((this.st.countLiveNodes.get({ name: s.name, now })?.n ?? 0) + s.nodes.length <= MAX_NODES_PER_SERVICE) return;
    checkNodesPerService(s.name, this.st.liveNodes.all({ name: s.name, now }).map((n) => n.id), s.nodes.map((n) => n.id));
  }
}

/** Writes a service version's row and its nodes' rows with the statements of one connection. */
function upsertInto(st: Statements, s: Service, expiresAt: number | null): void {
  st.upsertService.run({ name: s.name, version: s.version, metadata: JSON.stringify(s.metadata), endpoints: JSON.stringify(s.endpoints) });
  for (const n of s.nodes) {
    st.upsertNode.run({
      service: s.name,
      version: s.version,
      id: n.id,
      address: n.address,
      port: n.port,
      metadata: JSON.stringify(n.metadata),
      expires_at: expiresAt,
    });
  }
}

function rememberKey(name: string, version: string, id: string): string {
  return `${name}\0${version}\0${id}`;
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
    private readonly reg: LocalRegistry,
    readonly onEvent: (event: WatchEvent) => void,
    private readonly service: string | undefined,
  ) {
    this.lastLocalWrites = reg.localWrites;
    this.generation = reg.generation;
    this.lastDataVersion = reg.dataVersion();
    this.lastRev = reg.read(() => {
      const now = reg.viewNow();
      for (const name of this.names()) this.remember(name, reg.load(name, now));
      return reg.readRevision();
    });
  }

  tick(): void {
    if (this.stopped) return;
    let expiring = this.reg.viewNow() >= this.nextExpiry;
    if (expiring) {
      try {
        this.reg.purgeExpired();
      } catch {
        // another process holds the write lock too long: report the expiry without purging;
        // or the store is failing: then time stands still for readers and nothing expires
      }
      expiring = this.reg.viewNow() >= this.nextExpiry;
    }
    // A reopened file (deleted or replaced under us): its revisions are not ours, reread everything.
    const resync = this.generation !== this.reg.generation;
    const dv = this.reg.dataVersion();
    const changedHere = this.reg.localWrites !== this.lastLocalWrites;
    if (!expiring && !changedHere && !resync && dv === this.lastDataVersion) return;
    this.lastDataVersion = dv;
    this.lastLocalWrites = this.reg.localWrites;
    this.generation = this.reg.generation;

    const events = this.reg.read(() => {
      const at = this.reg.viewNow();
      const current = this.reg.readRevision();
      const dirty = new Map<string, number>();
      const changes = resync ? 'resync' : this.reg.changesSince(this.lastRev, current);
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
        const loaded = this.reg.load(name, at);
        for (const change of diffVersions(name, this.known.get(name) ?? [], loaded.versions))
          out.push({ action: change.action, service: change.service, revision: String(rev) });
        this.remember(name, loaded);
      }
      for (const name of this.known.keys()) if (!dirty.has(name)) this.nextExpiry = Math.min(this.nextExpiry, this.expiryOf.get(name) ?? Infinity);
      return out;
    });
    for (const event of events) this.reg.emit(this, event);
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
    return this.service !== undefined ? [this.service] : this.reg.allNames();
  }
}
