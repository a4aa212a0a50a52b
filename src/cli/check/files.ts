/**
 * `mesh check`: the mesh state directory ($MESH_HOME, the local registry's directory) and its
 * files must not be open to other users (0700 directory, 0600 files; see base/util/private-files.ts);
 * nor the mesh CA's directory and signing key (its certificates are public).
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { caPaths } from '../../tls/workload/ca.js';
import type { Finding } from './finding.js';

const octal = (mode: number) => `0${(mode & 0o777).toString(8)}`;

/** Warnings for the directory and the files in it with group or other permission bits. */
export function checkFileModes(dir: string): Finding[] {
  const st = statSync(dir, { throwIfNoEntry: false });
  if (!st) return [];
  const found: Finding[] = [];
  const open = (path: string, mode: number, want: string) =>
    found.push({ level: 'warning', check: 'files', message: `${path} is ${octal(mode)}, open to other users: chmod ${want} ${path}` });
  if ((st.mode & 0o077) !== 0) open(dir, st.mode, '700');
  if (!st.isDirectory()) return found;
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (err) {
    return [...found, { level: 'error', check: 'files', message: `cannot read ${dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }];
  }
  for (const name of names) {
    const path = join(dir, name);
    const f = statSync(path, { throwIfNoEntry: false });
    if (!f) continue;
    if (f.isFile() && (f.mode & 0o077) !== 0) open(path, f.mode, '600');
    else if (f.isDirectory() && (f.mode & 0o077) !== 0) open(path, f.mode, '700');
  }
  return found;
}

/**
 * The mesh CA in `dir`: the directory open to others is a warning; the signing key readable by
 * others is an error (whoever reads it can issue any identity).
 */
export function checkCaModes(dir: string): Finding[] {
  const { signerKey } = caPaths(dir);
  const found: Finding[] = [];
  const d = statSync(dir, { throwIfNoEntry: false });
  if (d?.isDirectory() && (d.mode & 0o077) !== 0) found.push({ level: 'warning', check: 'files', message: `${dir} is ${octal(d.mode)}, open to other users: chmod 700 ${dir}` });
  const k = statSync(signerKey, { throwIfNoEntry: false });
  if (k && (k.mode & 0o077) !== 0) found.push({ level: 'error', check: 'files', message: `${signerKey} is ${octal(k.mode)}: other users can read the mesh CA's signing key and issue any identity: chmod 600 ${signerKey}` });
  return found;
}
