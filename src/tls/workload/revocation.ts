/**
 * Revocations of the mesh CA's signing service: `<ca_dir>/revoked`, one JSON object a line,
 * `{"kind":"serial"|"service"|"token","value":…,"at":ISO}`, appended by `mesh ca revoke` and read
 * again by `mesh ca serve` when it changes (a stat at each request; at most MAX_REVOCATION_BYTES).
 *
 * - serial: renewals of the certificate with that serial, or of every certificate of the join
 *   whose first certificate has it, are refused;
 * - service: renewals of the service's certificates whose join is older than the revocation;
 * - token: joins with the token (by its id), and renewals of every join made with it.
 *
 * A list that cannot be read, is too large or holds a line that does not parse refuses every
 * certificate (fail closed): the error says which file and why.
 */
import { appendFileSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { PRIVATE_FILE_MODE } from '../../base/util/private-files.js';
import { CaError } from './ca.js';

export const REVOKED_FILE = 'revoked';
/** The largest revocation list read (a line is under 200 bytes: thousands of entries). */
export const MAX_REVOCATION_BYTES = 1024 * 1024;

export type RevocationKind = 'serial' | 'service' | 'token';

export interface Revocation {
  kind: RevocationKind;
  value: string;
  /** When it was revoked (ms since the epoch). */
  at: number;
}

const VALUE: Record<RevocationKind, { pattern: RegExp; what: string }> = {
  serial: { pattern: /^[0-9a-f]{1,40}$/, what: 'a certificate serial (hex, as mesh ca serve logs it)' },
  service: { pattern: /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/, what: 'a service name (letters, digits, ".", "-" and "_")' },
  token: { pattern: /^[0-9a-f]{16}$/, what: 'a join token id (16 hex digits, as mesh ca token --output=json and mesh ca serve\'s log print it)' },
};

export function revokedPath(caDir: string): string {
  return join(caDir, REVOKED_FILE);
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** Normalizes `value` for `kind` (a serial lower-case, without colons); throws a CaError saying what it must be. */
export function revocationValue(kind: RevocationKind, value: string): string {
  const v = kind === 'serial' ? value.trim().replace(/:/g, '').toLowerCase().replace(/^0+(?=.)/, '') : value.trim();
  if (!VALUE[kind].pattern.test(v)) throw new CaError(`--${kind}: ${JSON.stringify(value)} is not ${VALUE[kind].what}`);
  return v;
}

/** `mesh ca revoke`: appends one revocation to the CA directory's list. */
export function revoke(caDir: string, kind: RevocationKind, value: string, now = Date.now()): Revocation {
  const r: Revocation = { kind, value: revocationValue(kind, value), at: now };
  try {
    appendFileSync(revokedPath(caDir), JSON.stringify({ kind, value: r.value, at: new Date(now).toISOString() }) + '\n', { mode: PRIVATE_FILE_MODE });
  } catch (err) {
    throw new CaError(`cannot write the revocation list ${revokedPath(caDir)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): check --ca_dir and its permissions`);
  }
  return r;
}

/** What a certificate being renewed (or a join) is checked against. */
export interface RevocationSubject {
  service: string;
  /** The certificate shown (a renewal), and the serial of its join's first certificate. */
  serial?: string;
  chain?: string;
  /** The join token: the one shown (a join), or the one the certificate joined with. */
  token?: string;
  /** When the certificate's join was (a renewal). */
  joinedAt?: number;
}

/** The list of a CA directory, read again when the file changes. */
export class RevocationList {
  private key = '';
  private serials = new Map<string, number>();
  private services = new Map<string, number>();
  private tokens = new Map<string, number>();

  constructor(private readonly caDir: string) {}

  /** The revocation that refuses `s`, or undefined; throws a CaError when the list cannot be used. */
  find(s: RevocationSubject): Revocation | undefined {
    this.load();
    const serial = (s.serial && this.serials.has(s.serial) ? s.serial : undefined) ?? (s.chain && this.serials.has(s.chain) ? s.chain : undefined);
    if (serial) return { kind: 'serial', value: serial, at: this.serials.get(serial)! };
    const service = this.services.get(s.service);
    // A service revoked refuses the joins made before; a join made after (with a valid token) is new.
    if (service !== undefined && s.joinedAt !== undefined && s.joinedAt <= service) return { kind: 'service', value: s.service, at: service };
    const token = s.token !== undefined ? this.tokens.get(s.token) : undefined;
    if (token !== undefined) return { kind: 'token', value: s.token!, at: token };
    return undefined;
  }

  /** The detail of a refusal for `r` (the what: "certificate …", "join token …"). */
  static describe(r: Revocation): string {
    return `${r.kind === 'token' ? 'join token' : r.kind} ${r.value} was revoked at ${iso(r.at)}`;
  }

  private load(): void {
    const path = revokedPath(this.caDir);
    let key: string;
    try {
      const st = statSync(path);
      key = `${st.ino}:${st.size}:${st.mtimeMs}`;
      if (st.size > MAX_REVOCATION_BYTES) throw new CaError(`the revocation list ${path} is larger than ${MAX_REVOCATION_BYTES} bytes: certificates are refused until it is shortened`);
    } catch (err) {
      if (err instanceof CaError) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') throw new CaError(`cannot read the revocation list ${path} (${code ?? (err as Error).message}): certificates are refused until it can be read`);
      key = 'none';
    }
    if (key === this.key) return;
    const serials = new Map<string, number>();
    const services = new Map<string, number>();
    const tokens = new Map<string, number>();
    if (key !== 'none') {
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (err) {
        throw new CaError(`cannot read the revocation list ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): certificates are refused until it can be read`);
      }
      if (text.length > MAX_REVOCATION_BYTES) throw new CaError(`the revocation list ${path} is larger than ${MAX_REVOCATION_BYTES} bytes: certificates are refused until it is shortened`);
      const lines = text.split('\n');
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i]!.trim();
        if (line === '') continue;
        let r: { kind?: unknown; value?: unknown; at?: unknown };
        try {
          r = JSON.parse(line) as typeof r;
        } catch {
          r = {};
        }
        const at = typeof r.at === 'string' ? Date.parse(r.at) : NaN;
        const kind = r.kind as RevocationKind;
        if (!(kind in VALUE) || typeof r.value !== 'string' || !VALUE[kind].pattern.test(r.value) || !Number.isFinite(at)) {
          throw new CaError(`the revocation list ${path} line ${i + 1} is not {"kind":"serial"|"service"|"token","value":…,"at":ISO}: certificates are refused until it is fixed (mesh ca revoke writes it)`);
        }
        const map = kind === 'serial' ? serials : kind === 'service' ? services : tokens;
        // The latest revocation of a service counts (its later joins are refused too).
        map.set(r.value, Math.max(map.get(r.value) ?? 0, at));
      }
    }
    this.serials = serials;
    this.services = services;
    this.tokens = tokens;
    this.key = key;
  }
}
