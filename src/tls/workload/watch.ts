/**
 * Every file mesh watches (route files, the `mesh proxy` configuration, TLS and workload
 * certificate files, auth rules and keys) is noticed and read here:
 *
 * - `watchFiles`: that files changed: `fs.watch` on the directories (which sees files replaced by
 *   rename and Kubernetes-style symlink swaps) plus a periodic look at a signature of the files as
 *   a bounded fallback where watching is unreliable. Change events are settled (several writes
 *   make one call). Timers are unref'd.
 * - `readSettled`: their content, once it has stopped changing (a file rewritten in place is
 *   never taken half-written or empty), for every reload, whatever started it (a change, SIGHUP);
 *   it lives in src/base/config/settled.ts (re-exported here) beside the one read of a file at start.
 * - `serialized`: reloads one at a time, the last change always read.
 */
import { statSync } from 'node:fs';
import { watchDirs } from '../../base/config/watch-dirs.js';

// The settled read is shared with files read once (src/base/config/settled.ts); its importers keep this path.
export { DEFAULT_MAX_READS, DEFAULT_MAX_WATCHED_BYTES, DEFAULT_SETTLE_MS, readSettled, SettledReadError, type SettleOptions } from '../../base/config/settled.js';

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
  // Directories that cannot be watched are left to the poll below.
  const dirs = watchDirs(o.dirs, fire);
  const poll = setInterval(() => {
    if (o.signature() !== last) fire();
  }, o.pollMs);
  poll.unref();
  return () => {
    closed = true;
    dirs.close();
    clearInterval(poll);
    clearTimeout(settle);
  };
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
