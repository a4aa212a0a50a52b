/**
 * SQLite's `-shm` file (the WAL index every connection maps into memory): a write through that
 * mapping into a file that cannot be written (`chattr +i`) is not an error SQLite can return: the
 * kernel kills the process with SIGBUS. So before it touches the database (and before it opens
 * it), a store asks here whether the -shm file takes writes; a missing one is fine (SQLite
 * creates it, and an error there is an ordinary one).
 *
 * access(2), not open(2): closing any descriptor of the -shm file would drop the POSIX locks
 * SQLite holds on it in this process.
 */
import { accessSync, constants } from 'node:fs';

/** undefined when `${dbFile}-shm` can be written or does not exist; else why not. */
export function shmWriteProblem(dbFile: string): Error | undefined {
  const shm = `${dbFile}-shm`;
  try {
    accessSync(shm, constants.W_OK);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    return new Error(`${shm} cannot be written (${code ?? (err as Error).message}): SQLite would be killed writing its shared memory`);
  }
}
