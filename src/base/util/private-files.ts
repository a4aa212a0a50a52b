/**
 * A mesh state directory ($MESH_HOME, the local registry's directory) belongs to one user: the
 * directory is 0700 and its files (registry.db, broker.db, their -wal and -shm, the broker secret)
 * are 0600, so no other user of the machine can read subscriber addresses or forge deliveries.
 * New ones are created with those modes; existing ones with group or other bits lose them at start
 * (logged, since it changes what other users could do), or are reported when they cannot be.
 */
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import type pino from 'pino';

export const PRIVATE_DIRECTORY_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

const octal = (mode: number) => `0${(mode & 0o7777).toString(8)}`;

/**
 * Creates the directory (and missing parents) with mode 0700, or tightens an existing one that
 * this user owns. A directory with the sticky bit (a shared one such as /tmp) is never changed.
 */
export function privateDirectory(directory: string, logger?: pino.Logger): void {
  mkdirSync(directory, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  tighten(directory, PRIVATE_DIRECTORY_MODE, logger);
}

/** Gives each existing file of the list mode 0600 when it has group or other bits (missing ones are skipped). */
export function privateFiles(files: string[], logger?: pino.Logger): void {
  for (const file of files) tighten(file, PRIVATE_FILE_MODE, logger);
}

function tighten(path: string, mode: number, logger: pino.Logger | undefined): void {
  let st;
  try {
    st = statSync(path, { throwIfNoEntry: false });
  } catch {
    return;
  }
  if (!st || (st.mode & 0o077) === 0) return;
  const mine = typeof process.getuid !== 'function' || st.uid === process.getuid();
  if (!mine || (st.mode & 0o1000) !== 0) {
    logger?.warn({ path, mode: octal(st.mode) }, 'state file or directory is open to other users and not ours to change: give each user a MESH_HOME of their own');
    return;
  }
  try {
    chmodSync(path, mode);
    logger?.warn({ path, was: octal(st.mode), now: octal(mode) }, 'state file or directory was open to other users: tightened its mode');
  } catch (err) {
    logger?.warn({ path, mode: octal(st.mode), err: (err as Error).message }, 'state file or directory is open to other users and its mode cannot be changed');
  }
}
