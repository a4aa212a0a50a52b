/**
 * Noticing changes in directories with `fs.watch` (inotify on Linux), the one place mesh opens
 * such watches: the files it reloads (src/tls/workload/watch.ts) and the embedded registry's
 * database (src/engines/registry/local/watcher.ts). A watch never keeps the process alive; one
 * that fails later (its directory removed) closes itself. Where a directory cannot be watched
 * (missing, a file system without notifications, the inotify limits reached), `watching` says so
 * and the caller's poll is all that notices changes.
 */
import { watch, type FSWatcher } from 'node:fs';

export interface DirWatch {
  /** How many of the directories are watched (0: none; poll instead). */
  readonly watching: number;
  close(): void;
}

/** Watches `dirs`; `onEvent` gets the name of the entry that changed (null when the system does not say). */
export function watchDirs(dirs: readonly string[], onEvent: (filename: string | null) => void): DirWatch {
  const watchers: FSWatcher[] = [];
  for (const dir of dirs) {
    try {
      const w = watch(dir, { persistent: false }, (_event, filename) => onEvent(filename === null || filename === undefined ? null : String(filename)));
      w.on('error', () => w.close());
      watchers.push(w);
    } catch {
      // Left to the caller's poll.
    }
  }
  return {
    watching: watchers.length,
    close: () => {
      for (const w of watchers) w.close();
    },
  };
}
