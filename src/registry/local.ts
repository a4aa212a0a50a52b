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
 */
import Database from 'better-sqlite3';
import { accessSync, constants, mkdirSync } from 'node:fs';
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
  ttlOf,
  validateDeregister,
} from './memory.js';
import { MAX_NODES_PER_SERVICE, checkNodesPerService, invalidRecordSink, sanitizeStoredService, sanitizeStoredVersion, shown, type InvalidRecordSink } from './validate.js';

type DB = Database.Database;

export const LOCAL_DB_FILE = 'registry.db';
const POLL_MS = 50;
const BUSY_TIMEOUT_MS = 5000;
const CHANGE_LOG_KEEP = 1000;

export interface LocalRegistryOptions {
  /** How many revisions the change log keeps (default 1000); a watcher further behind rereads everything. */
  changeLogKeep?: number;
  /** Watch poll interval in ms (default 50). */
  pollMs?: number;
  /** Told about stored rows that break the registry rules (they are skipped); default: a process warning. */
  onInvalidRecord?: InvalidRecordSink;
}

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
  };
}

type Statements = ReturnType<typeof prepareStatements>;

export class LocalRegistry implements Registry {
  readonly name = 'local';
  readonly directory: string;
  readonly file: string;
  private readonly db: DB;
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

  private readonly st: Statements;

  private readonly changeLogKeep: number;
  private readonly pollMs: number;
  private readonly onInvalid: InvalidRecordSink;

  constructor(directory: string, options: LocalRegistryOptions = {}) {
    this.changeLogKeep = Math.max(1, Math.floor(options.changeLogKeep ?? CHANGE_LOG_KEEP));
    this.pollMs = Math.max(1, options.pollMs ?? POLL_MS);
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
    let db: DB | undefined;
    try {
      db = new Database(this.file, { timeout: BUSY_TIMEOUT_MS });
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      db.exec(SCHEMA);
    } catch (err) {
      try {
        db?.close();
      } catch {
        // ignore
      }
      throw new Error(`registry directory ${this.directory}: cannot open ${this.file}: ${message(err)}`);
    }
    this.db = db;
    this.st = prepareStatements(db);
    this.lastRevision = String(this.readRevision());
  }

  // -------------------------------------------------------------------------------------------
  // Registry

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttl = ttlOf(options);
    const s = cloneService(service);
    this.checkServiceSize(s);
    this.write((now) => {
      const before = this.load(s.name, now).versions;
      this.st.upsertService.run({
        name: s.name,
        version: s.version,
        metadata: JSON.stringify(s.metadata),
        endpoints: JSON.stringify(s.endpoints),
      });
      const expiresAt = ttl > 0 ? now + ttl : null;
      for (const n of s.nodes) {
        this.st.upsertNode.run({
          service: s.name,
          version: s.version,
          id: n.id,
          address: n.address,
          port: n.port,
          metadata: JSON.stringify(n.metadata),
          expires_at: expiresAt,
        });
      }
      const after = this.load(s.name, now).versions;
      return canonicalJson(before) === canonicalJson(after) ? [] : [s.name];
    });
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    const name = service.name;
    const version = service.version ?? '';
    const ids = (service.nodes ?? []).map((n) => n.id);
    this.write((now) => {
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
    return this.load(name, Date.now()).versions;
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    const rows = this.st.liveServiceRows.all({ now: Date.now() });
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
    const w = new LocalWatcher(this, onEvent, options?.service);
    this.watchers.add(w);
    if (!this.timer) {
      this.timer = setInterval(() => this.tick(), this.pollMs);
      this.timer.unref();
    }
    return {
      stop: () => {
        w.stopped = true;
        this.watchers.delete(w);
        if (this.watchers.size === 0 && this.timer) {
          clearInterval(this.timer);
          this.timer = undefined;
        }
      },
    };
  }

  revision(): string {
    if (this.closed) return this.lastRevision;
    try {
      this.lastRevision = String(this.readRevision());
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
    this.db.close();
  }

  // -------------------------------------------------------------------------------------------
  // internals used by LocalWatcher

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

  /** @internal Deletes expired nodes (a write only when there are some). */
  purgeExpired(): void {
    if (this.closed) return;
    const now = Date.now();
    if (this.st.expiredNames.all({ now }).length === 0) return;
    this.write(() => []);
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
      throw new Error(`registry local (${this.file}): write failed: ${message(err)}`, { cause: err });
    }
    if (rev > 0) {
      this.lastRevision = String(rev);
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
      do {
        this.tickAgain = false;
        for (const w of [...this.watchers]) {
          if (this.closed) return;
          try {
            w.tick();
          } catch (err) {
            // SQLITE_BUSY beyond the busy timeout or similar: try again on the next tick.
            w.failures++;
            if (w.failures === 1 || w.failures % 100 === 0)
              process.emitWarning(`registry local: watcher poll failed: ${message(err)}`);
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

  private countNodes?: Database.Statement<{ name: string; now: number }, { n: number }>;

  /** Refuses a registration that would take the service past MAX_NODES_PER_SERVICE nodes: a count first, the ids only near the limit. */
  private checkServiceSize(s: Service): void {
    this.countNodes ??= this.db.prepare<{ name: string; now: number }, { n: number }>(
      `SELECT COUNT(*) AS n FROM nodes WHERE service = @name AND (expires_at IS NULL OR expires_at > @now)`,
    );
    const now = Date.now();
    if ((this.countNodes.get({ name: s.name, now })?.n ?? 0) + s.nodes.length <= MAX_NODES_PER_SERVICE) return;
    checkNodesPerService(s.name, this.st.liveNodes.all({ name: s.name, now }).map((n) => n.id), s.nodes.map((n) => n.id));
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

  constructor(
    private readonly reg: LocalRegistry,
    readonly onEvent: (event: WatchEvent) => void,
    private readonly service: string | undefined,
  ) {
    this.lastLocalWrites = reg.localWrites;
    this.lastDataVersion = reg.dataVersion();
    this.lastRev = reg.read(() => {
      const now = Date.now();
      for (const name of this.names()) this.remember(name, reg.load(name, now));
      return reg.readRevision();
    });
  }

  tick(): void {
    if (this.stopped) return;
    const now = Date.now();
    const expiring = now >= this.nextExpiry;
    if (expiring) {
      try {
        this.reg.purgeExpired();
      } catch {
        // another process holds the write lock too long: report the expiry without purging
      }
    }
    const dv = this.reg.dataVersion();
    const changedHere = this.reg.localWrites !== this.lastLocalWrites;
    if (!expiring && !changedHere && dv === this.lastDataVersion) return;
    this.lastDataVersion = dv;
    this.lastLocalWrites = this.reg.localWrites;

    const events = this.reg.read(() => {
      const at = Date.now();
      const current = this.reg.readRevision();
      const dirty = new Map<string, number>();
      const changes = this.reg.changesSince(this.lastRev, current);
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
