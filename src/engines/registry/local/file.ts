/**
 * The registry file on disk: its identity (device and inode, of the database and of its -shm
 * file), opening the database at the path, creating a missing one atomically (built whole in a
 * temporary file, linked under the directory lock), and the side files and marker that lock
 * guards. Deciding when to reopen is healing.ts's job.
 *
 * - A missing file is never created in place: the first process to notice builds the whole new
 *   database in a temporary file of the directory and links it to the path; the others find it
 *   there and open it. Nobody ever reads it empty or half made.
 * - Side files (`-wal`, `-shm`) left by a deleted or replaced database are removed before anyone
 *   opens the new one (SQLite would replay a stale WAL into it, and share a stale -shm with the
 *   processes still on the old one); those of a database in use are never removed. A marker file
 *   `registry.db-id` says which database they belong to. Removing them, writing the marker and
 *   linking a new file happen only under a lock file, `registry.db-lock` (held for a few file
 *   operations), and the marker is written before the link, so a process that finds a new file
 *   with the old marker can only be looking at a replaced one.
 */
import { shmWriteProblem } from '../../../base/util/sqlite-shm.js';
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  linkSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { SCHEMA, codeOf, prepareStatements, type DB, type Statements } from './schema.js';
import { PRIVATE_FILE_MODE } from '../../../base/util/private-files.js';

const BUSY_TIMEOUT_MS = 5000;
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

export type FileId = { dev: number; ino: number };

/** A connection, its statements, and the identity of the files it opened. */
export interface Opened {
  db: DB;
  st: Statements;
  fileId: FileId | undefined;
  shmId: FileId | undefined;
}

/** Writes the content of a new database (inside its temporary file, before it is published). */
export type Fill = (db: DB, st: Statements) => void;

export function idOf(st: Stats | undefined): FileId | undefined {
  return st && st.isFile() ? { dev: st.dev, ino: st.ino } : undefined;
}

export function sameId(a: FileId | undefined, b: FileId | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.dev === b.dev && a.ino === b.ino);
}

export function closeQuietly(db: DB): void {
  try {
    db.close();
  } catch {
    // ignore
  }
}

/**
 * Whether the path still names the open file: 'deleted', 'replaced' (another file there, or its
 * -shm file changed: another process removed a stale one), undefined when unchanged, 'unknown'
 * when it cannot even be stat'ed. Two stat calls when nothing happened.
 */
export function fileMoved(file: string, fileId: FileId | undefined, shmId: FileId | undefined): 'deleted' | 'replaced' | 'unknown' | undefined {
  try {
    const st = statSync(file, { throwIfNoEntry: false });
    if (!st) return 'deleted';
    if (!sameId(idOf(st), fileId)) return 'replaced';
    if (shmId && !sameId(idOf(statSync(`${file}-shm`, { throwIfNoEntry: false })), shmId)) return 'replaced';
    return undefined;
  } catch {
    return 'unknown';
  }
}

/**
 * Opens the database at `file`. A missing file is published whole (see publish): nobody ever
 * sees it empty or half made. Side files (-wal, -shm) are removed only where the marker says they
 * belong to another database, under the directory lock (see adopt), never those of a file in use.
 * `fill`: the content of a new file, written when this process publishes it.
 */
export function openDatabase(file: string, fill: Fill): Opened {
  for (let attempt = 1; ; attempt++) {
    const before = statSync(file, { throwIfNoEntry: false });
    if (before && !before.isFile()) throw new Error(`${file}: not a regular file`);
    const ready = before ? adopt(file, before) : publish(file, fill);
    const checked = ready ? idOf(statSync(file, { throwIfNoEntry: false })) : undefined;
    if (checked) {
      let opened: Opened;
      try {
        opened = connect(file);
      } catch (err) {
        // deleted again between the check and the open: start over
        if (attempt >= OPEN_ATTEMPTS || statSync(file, { throwIfNoEntry: false })) throw err;
        continue;
      }
      // The connection is to the file that was checked, unless the path changed in between.
      if (sameId(opened.fileId, checked)) return opened;
      closeQuietly(opened.db);
    }
    if (attempt >= OPEN_ATTEMPTS) {
      throw new Error(`${file}: kept changing while it was being opened`);
    }
  }
}

/** The native build missing or built for another Node.js: what better-sqlite3's loader throws then. */
const MISSING_BUILD = /Could not locate the bindings file|NODE_MODULE_VERSION|ERR_DLOPEN_FAILED/;

/**
 * better-sqlite3's constructor, whose first call loads the native build: when that build is
 * missing (npm 11 runs no install script it was not allowed to) or made for another Node.js, one
 * line that says what to run instead of the loader's list of paths tried.
 */
function newDatabase(file: string, options: Database.Options): DB {
  try {
    return new Database(file, options);
  } catch (err) {
    const text = `${(err as { code?: string }).code ?? ''} ${(err as Error).message}`;
    if (!MISSING_BUILD.test(text)) throw err;
    throw new Error(
      `the embedded registry needs better-sqlite3's native build, which is missing or was built for another Node.js (${process.version}): run \`npm rebuild better-sqlite3\` in the project that installed it (npm 11 runs its build only when allowed: \`npm install --allow-scripts=better-sqlite3\`)`,
      { cause: err },
    );
  }
}

/**
 * A connection to the file at the path, which must exist (never created here: see publish).
 * SQLite does not call its busy handler everywhere: several processes opening a file at once (one
 * turning it to WAL, or a write whose read snapshot went stale) can get SQLITE_BUSY at once. The open is
 * tried again then, for as long as the busy timeout.
 */
function connect(file: string): Opened {
  const deadline = performance.now() + BUSY_TIMEOUT_MS;
  for (;;) {
    try {
      return connectOnce(file);
    } catch (err) {
      if (!codeOf(err).startsWith('SQLITE_BUSY') || performance.now() > deadline) throw err;
      pauseSync(5 + Math.floor(Math.random() * 10));
    }
  }
}

function connectOnce(file: string): Opened {
  let db: DB | undefined;
  // The open writes (the schema): never through the mapping of a -shm file that refuses writes.
  const shm = shmWriteProblem(file);
  if (shm) throw shm;
  try {
    db = newDatabase(file, { timeout: BUSY_TIMEOUT_MS, fileMustExist: true });
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    if (db.pragma('journal_mode', { simple: true }) !== 'wal') db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    // A write (the schema's INSERT OR IGNORE) on every open: it also proves the store takes writes
    // again when healing.ts tries a fresh connection. Racing openers can get SQLITE_BUSY_SNAPSHOT
    // here without the busy handler: connect() tries again.
    db.exec(SCHEMA);
    const st = prepareStatements(db);
    const fileId = idOf(statSync(file, { throwIfNoEntry: false }));
    const shmId = idOf(statSync(`${file}-shm`, { throwIfNoEntry: false }));
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
 * Creates the missing file atomically: the whole database (schema and what `fill` writes) is
 * built in a temporary file of the directory in rollback-journal mode, so it is complete in
 * itself, then linked to the path under the directory lock, after removing the side files of the
 * deleted database (SQLite would otherwise replay its WAL into the new file, and share its -shm
 * with the processes still on the deleted one). When another process published first, its file
 * is used. Returns false when the path changed meanwhile.
 */
function publish(file: string, fill: Fill): boolean {
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const db = newDatabase(tmp, { timeout: BUSY_TIMEOUT_MS });
    try {
      chmodSync(tmp, PRIVATE_FILE_MODE); // before anything is in it; its -wal and -shm follow its mode
      db.pragma('journal_mode = DELETE');
      db.exec(SCHEMA);
      fill(db, prepareStatements(db));
    } finally {
      db.close();
    }
    const id = idOf(statSync(tmp));
    return withLock(file, () => {
      if (statSync(file, { throwIfNoEntry: false })) return true; // another process published first
      removeSideFiles(file);
      if (id) writeMarker(file, id);
      try {
        linkSync(tmp, file);
      } catch (err) {
        const code = codeOf(err);
        if (code === 'EEXIST') return true; // made by something that does not take the lock
        // A file system without hard links: under the lock, with the path missing, a rename does the same.
        if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS') renameSync(tmp, file);
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

/**
 * Before opening an existing file: when the marker names another database (the file was
 * replaced), its side files are that database's; they are removed and the marker is set, under
 * the directory lock, re-checked there (a process publishing the file sets the marker before it
 * links it, under the lock too). A file without a marker keeps its side files (they may be in
 * use) and gets one.
 * Returns false when the path changed meanwhile.
 */
function adopt(file: string, before: Stats): boolean {
  const id = idOf(before);
  const marker = readMarker(file);
  if (sameId(marker, id)) return true;
  return withLock(file, () => {
    const now = idOf(statSync(file, { throwIfNoEntry: false }));
    if (!sameId(now, id)) return false;
    const current = readMarker(file);
    if (sameId(current, id)) return true;
    if (current !== undefined) removeSideFiles(file);
    writeMarker(file, id!);
    return true;
  });
}

function removeSideFiles(file: string): void {
  for (const side of [`${file}-wal`, `${file}-shm`]) {
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
function withLock<T>(file: string, fn: () => T): T {
  const lock = `${file}${LOCK_SUFFIX}`;
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (;;) {
    let fd: number | undefined;
    try {
      fd = openSync(lock, 'wx', PRIVATE_FILE_MODE);
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
    pauseSync(1);
  }
}

/** Blocks the thread for `ms` (the open path is synchronous, as better-sqlite3 is). */
function pauseSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
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

function readMarker(file: string): FileId | undefined {
  try {
    const m = /^(\d+):(\d+)\s*$/.exec(readFileSync(`${file}${ID_SUFFIX}`, 'utf8'));
    return m ? { dev: Number(m[1]), ino: Number(m[2]) } : undefined;
  } catch {
    return undefined;
  }
}

/** Written whole, then renamed over (under the directory lock); throws when it cannot be written. */
function writeMarker(file: string, id: FileId): void {
  const tmp = `${file}${ID_SUFFIX}.${process.pid}.tmp`;
  try {
    writeFileSync(tmp, `${id.dev}:${id.ino}\n`, { mode: PRIVATE_FILE_MODE });
    renameSync(tmp, `${file}${ID_SUFFIX}`);
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {
      // ignore
    }
    throw err;
  }
}
