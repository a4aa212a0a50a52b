/**
 * Join tokens of the mesh CA's signing service (`mesh ca token`, `mesh ca serve`): a JWS (HS256,
 * made with jose) whose claims name the service globs it may be used for (`svc`), the trust domain
 * (`td`), an id (`jti`, what logs name; the token itself is never logged) and an expiry (`exp`).
 * The HMAC key is `<ca_dir>/token.key` (32 random bytes, hex, 0600), made on first use: only who
 * can read the CA directory can make or check a token, and a token changed in any byte (a wider
 * glob, a later expiry) no longer verifies. jose is loaded at the first token made or checked
 * (src/base/util/lazy-packages.ts): a process that only imports the CA's names does not pay it.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { jose } from '../../base/util/lazy-packages.js';
import { PRIVATE_FILE_MODE } from '../../base/util/private-files.js';
import { CaError } from './ca.js';

/** The `typ` of a join token's header, and its issuer. */
const TOKEN_TYPE = 'mesh-join+jwt';
const ISSUER = 'mesh ca';
/** The longest --ttl of a join token: 7 days (a token is for joining; renewals use the certificate). */
export const MAX_TOKEN_TTL_MS = 7 * 86_400_000;
/** A glob of service names: letters, digits, `.`, `-`, `_`, and the wildcards `*` and `?`. */
const SERVICE_GLOB = /^[A-Za-z0-9._*?-]{1,253}$/;

export function tokenKeyPath(caDir: string): string {
  return join(caDir, 'token.key');
}

/** Why `glob` is not a service glob, or undefined. */
export function serviceGlobProblem(glob: string): string | undefined {
  return SERVICE_GLOB.test(glob) ? undefined : `${JSON.stringify(glob)} is not a service glob (letters, digits, ".", "-", "_", and the wildcards * and ?)`;
}

/** The token key of the CA in `caDir`, made (0600) when there is none yet. */
function tokenKey(caDir: string, create: boolean): Uint8Array {
  const path = tokenKeyPath(caDir);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const hex = readFileSync(path, 'utf8').trim();
      if (!/^[0-9a-f]{64}$/.test(hex)) throw new CaError(`the join token key ${path} is not 64 hex digits: remove it (every token made with it stops working) and make new tokens`);
      return Buffer.from(hex, 'hex');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (err instanceof CaError) throw err;
      if (code !== 'ENOENT') throw new CaError(`cannot read the join token key ${path} (${code ?? (err as Error).message}): check --ca_dir and its permissions`);
      if (!create) throw new CaError(`no join token key in ${caDir}: make a token first (mesh ca token --services=…)`);
      try {
        // 'wx': two processes making it at once keep the first one's.
        writeFileSync(path, randomBytes(32).toString('hex') + '\n', { mode: PRIVATE_FILE_MODE, flag: 'wx' });
      } catch (e) {
        const c = (e as NodeJS.ErrnoException).code;
        if (c !== 'EEXIST') throw new CaError(`cannot write the join token key ${path} (${c ?? (e as Error).message}): check --ca_dir and its permissions`);
      }
    }
  }
  throw new CaError(`cannot read the join token key ${path}`);
}

/** Makes the key of the CA in `caDir` when it has none (mesh ca serve, so tokens can be made later). */
export function ensureTokenKey(caDir: string): void {
  tokenKey(caDir, true);
}

export interface JoinToken {
  token: string;
  id: string;
  services: string[];
  expires: Date;
}

/** `mesh ca token`: a token for `services` (globs) in `trustDomain`, valid for `ttlMs` from `now`. */
export async function makeToken(caDir: string, o: { services: readonly string[]; trustDomain: string; ttlMs: number; now?: number }): Promise<JoinToken> {
  if (o.services.length === 0) throw new CaError('a join token needs --services: the service names (globs) it may be used for, e.g. --services=\'go.mesh.srv.*\'');
  for (const glob of o.services) {
    const problem = serviceGlobProblem(glob);
    if (problem) throw new CaError(`--services: ${problem}`);
  }
  if (!(o.ttlMs >= 1000 && o.ttlMs <= MAX_TOKEN_TTL_MS)) throw new CaError('--ttl: a join token lives from 1s to 168h (7 days)');
  const now = Math.floor((o.now ?? Date.now()) / 1000);
  const exp = now + Math.ceil(o.ttlMs / 1000);
  const id = randomBytes(8).toString('hex');
  const { SignJWT } = await jose();
  const token = await new SignJWT({ svc: [...o.services], td: o.trustDomain })
    .setProtectedHeader({ alg: 'HS256', typ: TOKEN_TYPE })
    .setIssuer(ISSUER)
    .setJti(id)
    .setIssuedAt(now)
    .setExpirationTime(exp)
    .sign(tokenKey(caDir, true));
  return { token, id, services: [...o.services], expires: new Date(exp * 1000) };
}

/** Why a token was refused: the detail of the service's 401. */
export class JoinTokenError extends Error {}

/** Checks a token against the CA's key and trust domain; throws a JoinTokenError saying why it is refused. */
export async function verifyToken(caDir: string, token: string, trustDomain: string): Promise<JoinToken> {
  const { errors: joseErrors, jwtVerify } = await jose();
  let payload;
  try {
    ({ payload } = await jwtVerify(token, tokenKey(caDir, false), { algorithms: ['HS256'], typ: TOKEN_TYPE, issuer: ISSUER, requiredClaims: ['exp', 'jti'] }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) {
      const exp = (err.payload as { exp?: unknown }).exp;
      const when = typeof exp === 'number' ? ` at ${new Date(exp * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z')}` : '';
      throw new JoinTokenError(`join token expired${when}: make a new one with mesh ca token`);
    }
    if (err instanceof CaError) throw err;
    throw new JoinTokenError('join token refused: it was not made by this CA (mesh ca token), or it was changed');
  }
  const services = payload.svc;
  if (!Array.isArray(services) || services.length === 0 || !services.every((s) => typeof s === 'string' && !serviceGlobProblem(s))) {
    throw new JoinTokenError('join token refused: it names no services');
  }
  if (payload.td !== trustDomain) throw new JoinTokenError(`join token refused: it is for the trust domain ${JSON.stringify(payload.td)}, not ${trustDomain}`);
  return { token, id: String(payload.jti), services: services as string[], expires: new Date((payload.exp as number) * 1000) };
}
