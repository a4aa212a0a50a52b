/**
 * Noticing that files changed, for the workload certificate sources: `fs.watch` on the
 * directories (which sees files replaced by rename and Kubernetes-style symlink swaps) plus a
 * periodic look at a signature of the files as a bounded fallback where watching is unreliable.
 * Change events are settled (several writes make one call). Timers are unref'd.
 */
import { statSync, watch, type FSWatcher } from 'node:fs';

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
