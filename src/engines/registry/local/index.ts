/**
 * The embedded default registry: one SQLite database (better-sqlite3, WAL mode) in a directory,
 * shared by every mesh process on the machine with no server to run. LocalRegistry composes the
 * parts, each in its own module:
 *
 * - schema.ts: the tables, rows and prepared statements;
 * - store.ts: reads, writes, the revision and change log, the failing/recovered state;
 * - leases.ts: TTL expiry and the registrations this process made (written again when needed);
 * - file.ts: the file's identity, opening it, atomic re-creation under the directory lock;
 * - healing.ts: noticing a deleted, replaced or failing file and reopening it;
 * - watcher.ts: the poll timer and the watchers (data_version, change log, diffs, events).
 */
import { accessSync, constants } from 'node:fs';
import { join, resolve } from 'node:path';
import type pino from 'pino';
import type { StatsStore } from '../../../base/stats/store.js';
import { Logging } from '../../../base/util/log.js';
import type {
  RegisterOptions,
  Registry,
  Service,
  WatchEvent,
  WatchOptions,
  Watcher,
} from '../registry.js';
import { canonicalJson, cloneService } from '../records.js';
import { RegistryValidationError, checkServiceBytes, invalidRecordSink, isListedService, listedEvents, ttlOf, validateDeregister, validateService, type InvalidRecordSink } from '../validate.js';
import { openDatabase, type Opened } from './file.js';
import { FileHealer } from './healing.js';
import { Leases, fillNewFile } from './leases.js';
import { message } from './schema.js';
import { LocalStore } from './store.js';
import { Poller } from './watcher.js';
import { privateDirectory, privateFiles } from '../../../base/util/private-files.js';
import { STALE_SECONDS_STAT, StaleView } from '../stale-view.js';

export const LOCAL_DB_FILE = 'registry.db';
const POLL_MS = 50;
const CHANGE_LOG_KEEP = 1000;

export interface LocalRegistryOptions {
  /** How many revisions the change log keeps (default 1000); a watcher further behind rereads everything. */
  changeLogKeep?: number;
  /**
   * Watch poll interval in ms (default 50) where the registry's directory cannot be watched; also
   * how often the file's identity is checked then. Where it can, a change wakes the watchers and
   * the poll runs every second at most (./watcher.ts).
   */
  pollMs?: number;
  /** The process's stats store: gauges `registry.store_failing` (0/1) and `registry.stale_seconds`. */
  stats?: StatsStore;
  /** The 'registry' logger; default: one of its own on stderr. */
  logger?: pino.Logger;
  /** Told about stored rows that break the registry rules (they are skipped); default: a process warning. */
  onInvalidRecord?: InvalidRecordSink;
}

export class LocalRegistry implements Registry {
  readonly name = 'local';
  readonly directory: string;
  readonly file: string;
  private readonly store: LocalStore;
  private readonly leases: Leases;
  private readonly healer: FileHealer;
  private readonly poller: Poller;

  constructor(directory: string, options: LocalRegistryOptions = {}) {
    const changeLogKeep = Math.max(1, Math.floor(options.changeLogKeep ?? CHANGE_LOG_KEEP));
    const pollMs = Math.max(1, options.pollMs ?? POLL_MS);
    const log = options.logger ?? new Logging().get('registry');
    const failingGauge = options.stats?.gauge('registry.store_failing');
    failingGauge?.set(0);
    const onInvalid = options.onInvalidRecord ?? invalidRecordSink({});
    this.directory = resolve(directory);
    this.file = join(this.directory, LOCAL_DB_FILE);
    // The directory and its files belong to one user (0700, 0600): made so, or tightened (logged).
    // SQLite gives the -wal and -shm files it makes the database file's mode.
    try {
      privateDirectory(this.directory, log);
    } catch (err) {
      throw new Error(`registry directory ${this.directory} cannot be created: ${message(err)}`);
    }
    privateFiles([this.file, `${this.file}-wal`, `${this.file}-shm`, `${this.file}-id`], log);
    try {
      accessSync(this.directory, constants.W_OK);
    } catch (err) {
      throw new Error(`registry directory ${this.directory} is not writable: ${message(err)}`);
    }
    let opened: Opened;
    try {
      // A new file: nothing registered yet, revision 0.
      opened = openDatabase(this.file, (db, st) => fillNewFile(db, st, undefined, [], 0));
    } catch (err) {
      throw new Error(`registry directory ${this.directory}: cannot open ${this.file}: ${message(err)}`);
    }
    const view = new StaleView(options.stats?.gauge(STALE_SECONDS_STAT));
    this.store = new LocalStore(this.file, opened, { changeLogKeep, log, failingGauge, view, onInvalid });
    this.leases = new Leases(this.store);
    this.healer = new FileHealer(this.store, this.leases, () => this.poller.kick());
    this.poller = new Poller(this.store, this.leases, pollMs, () => this.healer.maintain(), log);
    this.store.hooks = {
      rewrite: () => this.leases.rewrite(),
      committed: () => this.poller.kick(),
      registrations: () => this.leases.size,
    };
  }

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttl = ttlOf(options);
    const s = cloneService(service);
    this.healer.maintain();
    this.store.checkServiceSize(s);
    let expiresAt: number | null = ttl > 0 ? Date.now() + ttl : null;
    try {
      this.store.writeChecked((now) => {
        const before = this.store.load(s.name, now).versions;
        checkServiceBytes(before, s);
        expiresAt = ttl > 0 ? now + ttl : null;
        this.store.upsert(s, expiresAt);
        const after = this.store.load(s.name, now).versions;
        return canonicalJson(before) === canonicalJson(after) ? [] : [s.name];
      });
    } catch (err) {
      // A registration the rules refuse is not the store's failure: nothing to write on recovery.
      if (err instanceof RegistryValidationError) throw err;
      // A refresh that failed still says the caller wants its nodes: they are written on recovery.
      // A new registration that failed is not remembered (the caller was told).
      this.leases.remember(s, expiresAt, true);
      throw err;
    }
    this.leases.remember(s, expiresAt, false);
    this.poller.startTimer();
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    const name = service.name;
    const version = service.version ?? '';
    const ids = (service.nodes ?? []).map((n) => n.id);
    // Forgotten whether or not the write works: a recovered store must not get them back.
    this.leases.forget(name, version, ids);
    this.healer.maintain();
    this.store.writeChecked((now) => {
      const before = this.store.load(name, now).versions;
      for (const id of ids) {
        // An empty version means "wherever these node ids are" (node ids are unique).
        if (version === '') this.store.st.deleteNodeAnyVersion.run(name, id);
        else this.store.st.deleteNode.run(name, version, id);
      }
      this.store.st.deleteEmptyVersions.run(name);
      const after = this.store.load(name, now).versions;
      return canonicalJson(before) === canonicalJson(after) ? [] : [name];
    });
  }

  async getService(name: string): Promise<Service[]> {
    this.checkOpen();
    this.healer.maintain();
    this.leases.sweep();
    return this.store.load(name, this.store.viewNow()).versions;
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    this.healer.maintain();
    this.leases.sweep();
    return this.store.listServices().filter((s) => isListedService(s.name));
  }

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    this.healer.maintain();
    return this.poller.add(listedEvents(onEvent, options?.service), options?.service);
  }

  revision(): string {
    const store = this.store;
    if (store.closed) return store.lastRevision;
    try {
      const rev = store.readRevision();
      // A new file starts again from 0 until this process raised it: never report going back.
      if (BigInt(rev) > BigInt(store.lastRevision) || store.generation === 0) store.lastRevision = String(rev);
    } catch {
      // keep the last one seen
    }
    return store.lastRevision;
  }

  /** How often this registry polls now (ms), undefined while it does not (no watcher, no registration). */
  get pollEveryMs(): number | undefined {
    return this.poller.pollEveryMs;
  }

  async close(): Promise<void> {
    if (this.store.closed) return;
    this.revision();
    this.store.closed = true;
    this.poller.close();
    this.store.view.close();
    this.leases.clear();
    // Closing checkpoints through the -shm mapping: a frozen store's connection is left to the process's exit.
    if (!this.store.frozen) this.store.db.close();
  }

  /** Whether writes are being refused (the gauge registry.store_failing). */
  get storeFailing(): boolean {
    return this.store.failing !== undefined;
  }

  private checkOpen(): void {
    if (this.store.closed) throw new Error(`registry local (${this.directory}): closed`);
  }
}
