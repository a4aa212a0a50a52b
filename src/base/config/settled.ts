/**
 * The settled read of a file mesh reads again while it runs (a reload: a change noticed by
 * src/tls/workload/watch.ts watchFiles, or SIGHUP): `readSettled` takes the content once it has
 * stopped changing, so a file rewritten in place is never taken half-written, and an empty file is
 * refused. `readBounded` is one read of a file with the same bound and the same reasons, for a
 * file read once (at start). Configuration files go through src/base/config/reader.ts, which uses
 * both; certificate files call readSettled directly.
 */
import { readFileSync, statSync } from 'node:fs';

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
 * One read of a file (for a file read once, at start): its bytes, or a SettledReadError with the
 * same codes and reasons as readSettled (`cannot read: no such file`, `cannot read: larger than N
 * bytes`). An empty file is returned as it is: at start the reader decides what empty means.
 */
export function readBounded(path: string, maxBytes: number = DEFAULT_MAX_WATCHED_BYTES): Buffer {
  const s = snapshot(path, maxBytes);
  if (s.error) throw s.error;
  return s.bytes!;
}
