/**
 * Every file mesh watches (route files, the `mesh proxy` configuration, TLS and workload
 * certificate files, auth rules and keys) is noticed and read here:
 *
 * - `watchFiles`: that files changed: `fs.watch` on the directories (which sees files replaced by
 *   rename and Kubernetes-style symlink swaps) plus a periodic look at a signature of the files as
 *   a bounded fallback where watching is unreliable. Change events are settled (several writes
 *   make one call). Timers are unref'd.
 * - `readSettled`: their content, once it has stopped changing (a file rewritten in place is
 *   never taken half-written or empty), for every reload, whatever started it (a change, SIGHUP).
 * - `serialized`: reloads one at a time, the last change always read.
 */
import { readFileSync, statSync, watch, type FSWatcher } from 'node:fs';

/** ino, size and times of a file, or its error code: what changes when the file does. */
export function fileSignature(path: string): string {
  try {
    const st = statSync(path);
    return `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  } catch (err) {
    return `error:${(err as NodeJS.ErrnoException).code ?? 'unknown'}`;
  }
}

export interface WatchOptions {
  /** Directories to watch (missing ones are left to the poll). */
  dirs: string[];
  /** What the poll compares; a change calls onChange. */
  signature: () => string;
  onChange: () => void;
  /** Period of the fallback poll (ms). */
  pollMs: number;
  /** Wait after an event before calling onChange (ms). */
  settleMs: number;
}

/** Starts watching; returns what stops it. */
export function watchFiles(o: WatchOptions): () => void {
  let last = o.signature();
  let settle: NodeJS.Timeout | undefined;
  let closed = false;
  const fire = () => {
    if (closed || settle) return;
    settle = setTimeout(() => {
      settle = undefined;
      if (closed) return;
      last = o.signature();
      o.onChange();
    }, o.settleMs);
    settle.unref();
  };
  const watchers: FSWatcher[] = [];
  for (const dir of o.dirs) {
    try {
      const w = watch(dir, { persistent: false }, fire);
      w.on('error', () => w.close());
      watchers.push(w);
    } catch {
      // The poll below still notices changes.
    }
  }
  const poll = setInterval(() => {
    if (o.signature() !== last) fire();
  }, o.pollMs);
  poll.unref();
  return () => {
    closed = true;
    for (const w of watchers) w.close();
    clearInterval(poll);
    clearTimeout(settle);
  };
}

/** Tuning of a settled read (see readSettled); every consumer of a watched file takes one. */
export interface SettleOptions {
  /** Wait between two reads that must agree (ms); also the wait after a change event. */
  settleMs?: number;
  /** Most reads of one settle before the update is given up (default 10). */
  maxReads?: number;
  /** Told after each read of a settle (the first is 1), before the wait: tests drive a rewrite by it. */
  onRead?: (read: number, paths: readonly string[]) => void;
}

/**
 * Why a settled read gave no content: `code` is the file's errno code, or EMPTY, UNSETTLED, TOO_BIG;
 * `reason` says it without the path (`cannot read: no such file`, `is empty: ...`).
 */
export class SettledReadError extends Error {
  constructor(
    readonly path: string,
    readonly code: string,
    readonly reason: string,
  ) {
    super(`${path}: ${reason}`);
    this.name = 'SettledReadError';
  }
}

/** The default settle: 50 ms between reads, at most 10 reads. */
export const DEFAULT_SETTLE_MS = 50;
export const DEFAULT_MAX_READS = 10;
/** Largest watched file read by default (bytes): a bound on what one read holds in memory. */
export const DEFAULT_MAX_WATCHED_BYTES = 16 * 1024 * 1024;

type Snapshot = { sig: string; bytes?: Buffer; error?: SettledReadError };

function snapshot(path: string, maxBytes: number): Snapshot {
  try {
    const st = statSync(path);
    const sig = `${st.ino}:${st.size}:${st.mtimeMs}`;
    if (st.isDirectory()) return { sig, error: new SettledReadError(path, 'EISDIR', 'cannot read: is a directory') };
    if (st.size > maxBytes) return { sig, error: new SettledReadError(path, 'TOO_BIG', `cannot read: larger than ${maxBytes} bytes`) };
    const bytes = readFileSync(path);
    if (bytes.length > maxBytes) return { sig, error: new SettledReadError(path, 'TOO_BIG', `cannot read: larger than ${maxBytes} bytes`) };
    return { sig: `${sig}:${bytes.length}`, bytes };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'unknown';
    const reason = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : (err as Error).message;
    return { sig: `error:${code}`, error: new SettledReadError(path, code, `cannot read: ${reason}`) };
  }
}

function agree(a: Snapshot[], b: Snapshot[]): boolean {
  return a.every((s, i) => s.sig === b[i]!.sig && (s.bytes === undefined ? b[i]!.bytes === undefined : b[i]!.bytes !== undefined && s.bytes.equals(b[i]!.bytes!)));
}

/**
 * Reads watched files once they have settled, for a reload: the files are read, and read again
 * `settleMs` later, until two reads in a row agree on every file (size, mtime, inode and bytes).
 * A file caught while it is being rewritten in place (truncated, then written in parts) therefore
 * changes between the two reads and is read again. Rejects with a SettledReadError when a file
 * cannot be read (in both reads), is empty (an empty file is never taken as an empty
 * configuration), is larger than `maxBytes`, or is still changing after `maxReads` reads: the
 * caller then keeps what it has.
 */
export async function readSettled(paths: readonly string[], o: SettleOptions & { maxBytes?: number } = {}): Promise<Buffer[]> {
  const settleMs = o.settleMs ?? DEFAULT_SETTLE_MS;
  const maxReads = Math.max(2, o.maxReads ?? DEFAULT_MAX_READS);
  const maxBytes = o.maxBytes ?? DEFAULT_MAX_WATCHED_BYTES;
  const take = () => paths.map((p) => snapshot(p, maxBytes));
  let prev = take();
  for (let read = 1; ; read++) {
    o.onRead?.(read, paths);
    if (read >= maxReads) {
      throw new SettledReadError(paths.join(', '), 'UNSETTLED', `still changing after ${maxReads} reads ${settleMs} ms apart (a file being written): the update is left out until it changes again`);
    }
    await new Promise((resolve) => setTimeout(resolve, settleMs));
    const next = take();
    if (agree(prev, next)) {
      for (const s of next) if (s.error) throw s.error;
      const out = next.map((s) => s.bytes!);
      out.forEach((b, i) => {
        if (b.length === 0) throw new SettledReadError(paths[i]!, 'EMPTY', 'is empty: an empty file is refused on a reload (write the configuration in full, or an explicitly empty one)');
      });
      return out;
    }
    prev = next;
  }
}

/**
 * One run of `task` at a time: a call while it runs asks for one more run after it (calls in
 * between share that run), so the last change is always read and reloads never overlap.
 */
export function serialized<T>(task: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined;
  let queued: Promise<T> | undefined;
  const run = (): Promise<T> => {
    if (!running) {
      running = task().finally(() => {
        running = undefined;
      });
      return running;
    }
    queued ??= running
      .catch(() => undefined)
      .then(() => {
        queued = undefined;
        return run();
      });
    return queued;
  };
  return run;
}
