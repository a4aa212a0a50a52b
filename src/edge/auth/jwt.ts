/**
 * Bearer JWTs (`--auth=jwt`, docs/security.md), verified with jose against a JWKS read from a file
 * or fetched from a URL. Only asymmetric algorithms; `exp` is required; issuer, audience and a
 * clock skew are checked when configured.
 *
 * The fetched JWKS is cached: it is fetched at start, again in the background once older than
 * maxAgeMs (--auth_jwks_refresh), and at once for a key id it does not hold (at most once every
 * cooldownMs, --auth_jwks_cooldown). Each fetch is bounded by timeoutMs (--auth_jwks_timeout) and
 * JWKS_MAX_BYTES. A failed fetch keeps the keys already known: tokens they signed still verify, a
 * new key id gets 401.
 *
 * jose is loaded when the JWKS is first needed (warm(), at start, or the first token): a process
 * without --auth=jwt never loads it (src/base/util/lazy-packages.ts). The JWKS is checked here
 * without it, as jose checks a key set, so a bad file is still a start-up error.
 *
 * A URL with a user and password (`https://user:pw@idp/jwks`) is fetched without them, with
 * `Authorization: Basic` carrying them; logs show the URL redacted (redactUrl).
 */
import type * as Jose from 'jose';
import type { JSONWebKeySet, JWTPayload, JWTVerifyGetKey } from 'jose';
import { jose } from '../../base/util/lazy-packages.js';
import type { Identity } from './keys.js';
import type { Counter } from '../../base/stats/store.js';
import type { Logger } from 'pino';
import { redactUrl } from '../../base/util/redact.js';

export const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
/** The defaults of --auth_jwks_timeout, --auth_jwks_cooldown and --auth_jwks_refresh. */
export const JWKS_TIMINGS: JwksTimings = { timeoutMs: 3000, cooldownMs: 30_000, maxAgeMs: 10 * 60_000 };
export const JWKS_MAX_BYTES = 1024 * 1024;
const MAX_TOKEN_BYTES = 16 * 1024;
/** The time claims, NumericDate (RFC 7519 2): finite numbers of seconds when present. */
const NUMERIC_CLAIMS = ['exp', 'nbf', 'iat'] as const;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A token refused: the detail of the 401 (after "invalid token: "). */
export class JwtError extends Error {}

/**
 * Checks a parsed JWKS document: an object with a `keys` list of public, asymmetric keys. A key
 * that is a list is refused in jose's words (its createLocalJWKSet takes a key set of plain objects).
 */
export function checkJwks(value: unknown): JSONWebKeySet {
  if (!value || typeof value !== 'object' || !Array.isArray((value as { keys?: unknown }).keys)) throw new Error('not a JWKS: needs {"keys": [...]}');
  for (const k of (value as { keys: unknown[] }).keys) {
    if (!k || typeof k !== 'object') throw new Error('not a JWKS: a key is not an object');
    if (Array.isArray(k)) throw new Error('JSON Web Key Set malformed');
    const key = k as Record<string, unknown>;
    if (key.kty === 'oct') throw new Error('the JWKS holds a symmetric (oct) key: only public keys belong there');
    if (key.d !== undefined) throw new Error(`the JWKS holds a private key${typeof key.kid === 'string' ? ` (kid ${key.kid})` : ''}: publish only public keys`);
  }
  return value as JSONWebKeySet;
}

export interface JwksTimings {
  /** Longest wait for one fetch. */
  timeoutMs: number;
  /** Least time between fetches for a key id the keys do not hold. */
  cooldownMs: number;
  /** Keys older than this are fetched again, in the background. */
  maxAgeMs: number;
}

export interface JwksStats {
  fetchSuccess: Counter;
  fetchFailure: Counter;
}

/** The JWKS behind the verifier: fixed (a file) or fetched from a URL and cached. */
export class JwksSource {
  /** jose, once loaded (library()). */
  private lib?: typeof Jose;
  /** The keys (a file, or the last fetch) and jose's key set of them, made at their first use. */
  private keys?: JSONWebKeySet;
  private local?: JWTVerifyGetKey;
  private fetchedAt = 0;
  private lastAttempt = 0;
  private inflight?: Promise<void>;
  /** What is fetched: the URL without its user information, which goes into `headers` instead. */
  private readonly fetchUrl?: string;
  private readonly headers: Record<string, string> = { accept: 'application/json' };

  constructor(
    private readonly url: string | undefined,
    private readonly stats: JwksStats,
    private readonly log: Logger,
    jwks?: JSONWebKeySet,
    private readonly timings: JwksTimings = JWKS_TIMINGS,
  ) {
    if (jwks) this.setKeys(jwks);
    if (url) {
      const parsed = new URL(url);
      if (parsed.username || parsed.password) {
        const credentials = `${decodeURIComponent(parsed.username)}:${decodeURIComponent(parsed.password)}`;
        this.headers.authorization = `Basic ${Buffer.from(credentials, 'utf8').toString('base64')}`;
        parsed.username = '';
        parsed.password = '';
      }
      this.fetchUrl = parsed.href;
    }
  }

  /** Replaces the keys (a file read at start or on SIGHUP). */
  setKeys(jwks: JSONWebKeySet): void {
    this.keys = jwks;
    this.local = undefined;
    this.fetchedAt = Date.now();
  }

  /** jose: at once when loaded, else a promise of it (the first use; two at once share it). */
  library(): typeof Jose | Promise<typeof Jose> {
    return this.lib ?? jose().then((lib) => (this.lib = lib));
  }

  /** Loads jose and fetches now (at start): fetch failures are logged, never thrown. */
  async warm(): Promise<void> {
    await this.library();
    if (this.url) await this.refresh();
  }

  /** The key resolver jose calls. */
  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    const lib = await this.library();
    if (this.url) {
      if (!this.keys) await this.refresh();
      else if (Date.now() - this.fetchedAt > this.timings.maxAgeMs) void this.refresh();
    }
    if (!this.keys) throw new JwtError('the JWKS is not available');
    try {
      return await this.keySet(lib)(header, token);
    } catch (err) {
      if (!(err instanceof lib.errors.JWKSNoMatchingKey) || !this.url || Date.now() - this.lastAttempt < this.timings.cooldownMs) throw err;
      // A key id not seen yet: the keys may have rotated. Fetch once (bounded), then look again.
      await this.refresh();
      return await this.keySet(lib)(header, token);
    }
  };

  /** jose's key set of the current keys (made once per keys). */
  private keySet(lib: typeof Jose): JWTVerifyGetKey {
    return (this.local ??= lib.createLocalJWKSet(this.keys!));
  }

  private refresh(): Promise<void> {
    this.inflight ??= this.fetchOnce().finally(() => (this.inflight = undefined));
    return this.inflight;
  }

  private async fetchOnce(): Promise<void> {
    this.lastAttempt = Date.now();
    try {
      const res = await fetch(this.fetchUrl!, { signal: AbortSignal.timeout(this.timings.timeoutMs), headers: this.headers, redirect: 'error' });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      const declared = Number(res.headers.get('content-length'));
      if (declared > JWKS_MAX_BYTES) throw new Error(`larger than ${JWKS_MAX_BYTES} bytes`);
      const chunks: Uint8Array[] = [];
      let size = 0;
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        size += chunk.length;
        if (size > JWKS_MAX_BYTES) throw new Error(`larger than ${JWKS_MAX_BYTES} bytes`);
        chunks.push(chunk);
      }
      const jwks = checkJwks(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      this.setKeys(jwks);
      this.stats.fetchSuccess.inc();
    } catch (err) {
      this.stats.fetchFailure.inc();
      const e = err as Error;
      const why = e.name === 'TimeoutError' ? `no answer within ${this.timings.timeoutMs} ms` : e.cause instanceof Error ? e.cause.message : e.message;
      this.log.warn({ url: redactUrl(this.url!), err: redactUrl(why), keys_kept: this.keys !== undefined }, 'JWKS fetch failed');
    }
  }
}

export interface JwtOptions {
  issuer: string[];
  audience: string[];
  clockSkewMs: number;
}

/** Verifies a bearer token; the identity on success, a JwtError naming why otherwise. */
export async function verifyJwt(token: string, jwks: JwksSource, options: JwtOptions): Promise<Identity> {
  if (token.length > MAX_TOKEN_BYTES) throw new JwtError('too large');
  const lib = await jwks.library();
  let alg: unknown;
  let kid: unknown;
  try {
    ({ alg, kid } = lib.decodeProtectedHeader(token));
  } catch {
    throw new JwtError('malformed');
  }
  if (typeof alg !== 'string' || !ALGORITHMS.includes(alg)) throw new JwtError(`algorithm ${String(alg)} is not allowed`);
  let payload: JWTPayload;
  try {
    ({ payload } = await lib.jwtVerify(token, jwks.getKey, {
      algorithms: ALGORITHMS,
      issuer: options.issuer.length ? options.issuer : undefined,
      audience: options.audience.length ? options.audience : undefined,
      clockTolerance: Math.round(options.clockSkewMs / 1000),
      requiredClaims: ['exp'],
    }));
  } catch (err) {
    throw new JwtError(reason(lib.errors, err, kid));
  }
  // jose takes any JSON number; 1e400 parses as Infinity and would never expire.
  for (const claim of NUMERIC_CLAIMS) {
    const value = payload[claim];
    if (value !== undefined && !Number.isFinite(value)) throw new JwtError(`"${claim}" is not a finite number`);
  }
  const subject = typeof payload.sub === 'string' && payload.sub !== '' ? payload.sub : undefined;
  if (!subject) throw new JwtError('no "sub" claim');
  // A lone surrogate has no UTF-8 form: it would reach the backend as U+FFFD, like another subject.
  if (LONE_SURROGATE.test(subject)) throw new JwtError('"sub" is not valid Unicode');
  return { subject, scopes: scopesOf(payload) };
}

/** Scopes from `scope` (space-separated, OAuth 2) or `scp`/`scopes` (a list or a string). */
function scopesOf(payload: JWTPayload): string[] {
  for (const claim of ['scope', 'scp', 'scopes']) {
    const v = payload[claim];
    if (typeof v === 'string') return v.split(/\s+/).filter((s) => s !== '');
    if (Array.isArray(v)) return v.filter((s): s is string => typeof s === 'string' && s !== '' && !/\s/.test(s));
  }
  return [];
}

function reason(errors: typeof Jose.errors, err: unknown, kid: unknown): string {
  if (err instanceof JwtError) return err.message;
  if (err instanceof errors.JWTExpired) return 'expired';
  if (err instanceof errors.JWTClaimValidationFailed) {
    switch (err.claim) {
      case 'iss':
        return 'issuer not accepted';
      case 'aud':
        return 'audience not accepted';
      case 'nbf':
        return 'not valid yet';
      case 'exp':
        return 'no "exp" claim';
      default:
        return `claim "${err.claim}" not accepted`;
    }
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'signature verification failed';
  if (err instanceof errors.JWKSNoMatchingKey) return typeof kid === 'string' ? `no key with kid "${kid.slice(0, 64)}" in the JWKS` : 'no matching key in the JWKS';
  if (err instanceof errors.JWKSMultipleMatchingKeys) return 'several keys of the JWKS match: give the token a kid';
  if (err instanceof errors.JOSEAlgNotAllowed) return 'algorithm not allowed';
  return 'malformed';
}
