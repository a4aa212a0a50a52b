/**
 * The ACME cache (`--acme_cache`, default `$MESH_HOME/acme`, else `~/.mesh/acme`): one directory
 * per ACME directory URL, so certificates from a staging CA are never served in production:
 *
 *   <cache>/<directory key>/account.key     the account's private key (PEM)
 *   <cache>/<directory key>/<host>.crt      certificate chain (PEM), leaf first
 *   <cache>/<directory key>/<host>.key      its private key (PEM)
 *
 * Directories are created 0700 and files written 0600, atomically (a temporary file renamed).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** `--acme_cache`, else `$MESH_HOME/acme` (or `--mesh_home`), else `~/.mesh/acme`. */
export function defaultAcmeCacheDir(flag: string | undefined, meshHome: string | undefined): string {
  if (flag) return flag;
  const home = meshHome || process.env.MESH_HOME || join(homedir(), '.mesh');
  return join(home, 'acme');
}

/** A file-system-safe name for an ACME directory URL: `acme-v02.api.letsencrypt.org-directory`. */
export function directoryKey(directoryUrl: string): string {
  const url = new URL(directoryUrl);
  const port = url.port ? `_${url.port}` : '';
  const path = url.pathname.replace(/[^A-Za-z0-9.]+/g, '-').replace(/-+$/, '');
  return `${url.hostname}${port}${path}`.replace(/[^A-Za-z0-9._-]/g, '_');
}

export interface CachedCertificate {
  cert: string;
  key: string;
}

export class AcmeCache {
  /** The directory of this ACME directory URL's account and certificates. */
  readonly dir: string;

  constructor(
    readonly root: string,
    directoryUrl: string,
  ) {
    this.dir = join(root, directoryKey(directoryUrl));
  }

  certPath(host: string): string {
    return join(this.dir, `${host}.crt`);
  }

  keyPath(host: string): string {
    return join(this.dir, `${host}.key`);
  }

  get accountKeyPath(): string {
    return join(this.dir, 'account.key');
  }

  /** Creates the cache directory (0700); throws an Error naming it when that is impossible. */
  ensureDir(): void {
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new Error(`cannot create the ACME cache directory ${this.dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  /** The account key, created with `create` and saved on first use. */
  async accountKey(create: () => Promise<Buffer>): Promise<{ key: Buffer; created: boolean }> {
    const path = this.accountKeyPath;
    if (existsSync(path)) return { key: readFileSync(path), created: false };
    const key = await create();
    this.ensureDir();
    this.write(path, key);
    return { key, created: true };
  }

  /** The cached pair for a host, or undefined (missing or unreadable: the caller orders a new one). */
  read(host: string): CachedCertificate | undefined {
    try {
      return { cert: readFileSync(this.certPath(host), 'utf8'), key: readFileSync(this.keyPath(host), 'utf8') };
    } catch {
      return undefined;
    }
  }

  /** Saves a pair: the key first, so a certificate on disk always has its key. */
  write(path: string, data: string | Buffer): void {
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, data, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, path);
  }

  save(host: string, pair: CachedCertificate): void {
    this.ensureDir();
    this.write(this.keyPath(host), pair.key);
    this.write(this.certPath(host), pair.cert);
  }
}
