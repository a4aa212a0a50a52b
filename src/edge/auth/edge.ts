/**
 * Authentication and authorization at the edge (the gateway and the sidecar; docs/security.md).
 *
 * `EdgeAuth` is the process's part, built once from the flags: the credential check (bearer JWT or
 * API key), the rules (reloaded on SIGHUP once the files have settled: a bad or empty file keeps
 * the old rules) and the admin dump.
 * `EdgeGuard` is a front end's part, one step run before its handler on every request and
 * upgrade: the sidecar token, the removal of spoofed `Mesh-Auth-*` headers (always, auth on or
 * off), the credential, then the first matching rule. Its stats are
 * `http.<prefix>.auth.{allowed,denied,unauthenticated}`.
 */
import { ConfigFileError, readConfigFile, readConfigFileSettled } from '../../base/config/reader.js';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import type { JSONWebKeySet } from 'jose';
import { ERROR_IDS, MeshError, rateLimited, rateLimitStoreDown } from '../../base/errors.js';
import { isEdgeSetHeader } from '../../core/transport/headers.js';
import { MemoryRateLimitStore } from '../../base/http/rate-limit-store.js';
import { describePolicy, rateLimitHeaders, rateLimitKey, setAuthSubject, type FrontRateLimit, type RateDecision, type RateLimitStore } from '../../base/http/rate-limit.js';
import { declareStats, type Counter, type StatsStore } from '../../base/stats/store.js';
import { HTTP_AUTH_STATS, HTTP_RATE_LIMIT_STATS, httpStatPrefix } from '../../base/http/stats.js';
import { parseRules, pathKeyOf, ruleJson, ruleMatches, type Access, type Resource, type Rule } from './rules.js';
import { RULES_ERRORS, RULES_RELOAD_ERRORS, RulesError } from './rule-file.js';
import { KeyStore, sha256, type Identity } from './keys.js';
import { checkJwks, JwksSource, JwtError, verifyJwt } from './jwt.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import type { SchemaConfig } from '../../base/options/schema.js';
import { reloadOnSighup } from '../../base/util/sighup.js';
import { serialized, type SettleOptions } from '../../tls/workload/watch.js';

/** The `id` of every error JSON written by the auth step. */
export const AUTH_ERROR_ID = ERROR_IDS.auth;
export const HEADER_AUTH_SUBJECT = 'Mesh-Auth-Subject';
export const HEADER_AUTH_SCOPES = 'Mesh-Auth-Scopes';
export const HEADER_SIDECAR_TOKEN = 'mesh-sidecar-token';
export const REALM = 'Bearer realm="mesh"';

export type AuthMode = 'off' | 'jwt' | 'key';

/** The auth options, as the CLI parsed them (their types come from the option schema). */
export type AuthFlags = Pick<SchemaConfig, 'auth' | 'auth_jwks' | 'auth_issuer' | 'auth_audience' | 'auth_clock_skew' | 'auth_jwks_timeout' | 'auth_jwks_cooldown' | 'auth_jwks_refresh' | 'auth_keys' | 'auth_rules' | 'auth_default'>;

/** A bad auth option or file at start, by the option's schema key: the CLI turns it into a flag error (exit 2). */
export class AuthSetupError extends SchemaOptionError {
  constructor(key: string, value: string, why: string) {
    super(key, why, value);
    this.name = 'AuthSetupError';
  }
}

/** A refusal: the MeshError plus the WWW-Authenticate challenge of a 401 (or a 403 for a scope). */
export class AuthError extends MeshError {
  constructor(
    code: number,
    detail: string,
    readonly challenge?: string,
  ) {
    super(AUTH_ERROR_ID, code, detail);
  }
}

/** A file of the auth options, read at start by the config reader; a file that cannot be read is an AuthSetupError of its flag. */
function readText(flag: string, file: string): string {
  try {
    return readConfigFile(file, RULES_ERRORS);
  } catch (err) {
    if (err instanceof ConfigFileError) throw new AuthSetupError(flag, file, err.problem);
    throw err;
  }
}

function loadRules(file: string, text = readText('auth_rules', file)): Rule[] {
  try {
    return parseRules(text, /\.json$/i.test(file));
  } catch (err) {
    if (err instanceof RulesError) throw new AuthSetupError('auth_rules', file, err.message);
    throw err;
  }
}

function loadKeys(file: string, text = readText('auth_keys', file)): KeyStore {
  try {
    return KeyStore.parse(text, file);
  } catch (err) {
    if (err instanceof RulesError) throw new AuthSetupError('auth_keys', file, err.message);
    throw err;
  }
}

function loadJwksFile(file: string, text = readText('auth_jwks', file)): JSONWebKeySet {
  try {
    return checkJwks(JSON.parse(text));
  } catch (err) {
    throw new AuthSetupError('auth_jwks', file, (err as Error).message);
  }
}

/** Everything of the auth flags that can be checked before a process starts (files read and parsed). */
export interface AuthSetup {
  flags: AuthFlags;
  rules: Rule[];
  defaultAccess: Access;
  keys?: KeyStore;
  jwks?: JSONWebKeySet;
  jwksUrl?: string;
}

/** Checks the auth flags and reads their files; undefined when auth is off and there are no rules. Throws AuthSetupError. */
export function readAuthSetup(flags: AuthFlags): AuthSetup | undefined {
  const mode = flags.auth;
  if (flags.auth_jwks !== undefined && mode !== 'jwt') throw new AuthSetupError('auth_jwks', flags.auth_jwks, 'needs {auth}=jwt');
  if (flags.auth_keys !== undefined && mode !== 'key') throw new AuthSetupError('auth_keys', flags.auth_keys, 'needs {auth}=key');
  if (mode === 'jwt' && !flags.auth_jwks) throw new AuthSetupError('auth', mode, '{auth}=jwt needs {auth_jwks}=FILE|URL');
  if (mode === 'key' && !flags.auth_keys) throw new AuthSetupError('auth', mode, '{auth}=key needs {auth_keys}=FILE');
  if (mode === 'off' && flags.auth_rules === undefined) {
    if (flags.auth_default !== undefined) throw new AuthSetupError('auth_default', flags.auth_default, 'needs {auth} or {auth_rules}');
    return undefined;
  }
  const setup: AuthSetup = {
    flags,
    rules: flags.auth_rules !== undefined ? loadRules(flags.auth_rules) : [],
    defaultAccess: flags.auth_default ?? (mode === 'off' ? 'public' : 'authenticated'),
  };
  if (mode === 'key') setup.keys = loadKeys(flags.auth_keys!);
  if (mode === 'jwt') {
    const where = flags.auth_jwks!;
    if (/^https?:\/\//i.test(where)) {
      try {
        new URL(where);
      } catch {
        throw new AuthSetupError('auth_jwks', where, 'not a valid URL');
      }
      setup.jwksUrl = where;
      if (!(flags.auth_jwks_timeout > 0)) throw new AuthSetupError('auth_jwks_timeout', String(flags.auth_jwks_timeout), 'must be more than 0 (a fetch needs time)');
      if (!(flags.auth_jwks_refresh > 0)) throw new AuthSetupError('auth_jwks_refresh', String(flags.auth_jwks_refresh), 'must be more than 0');
    } else setup.jwks = loadJwksFile(where);
  }
  return setup;
}

export interface EdgeAuthDeps {
  stats: StatsStore;
  log: Logger;
  /** How a reload reads the files (src/base/config/reader.ts readConfigFileSettled, by readSettled). */
  settle?: SettleOptions;
}

/** A file of a reload, read once settled (readConfigFileSettled, by readSettled); a file that is not is an AuthSetupError of its flag. */
async function readSettledText(key: string, file: string, settle: SettleOptions | undefined): Promise<string> {
  try {
    return await readConfigFileSettled(file, RULES_RELOAD_ERRORS, settle);
  } catch (err) {
    if (err instanceof ConfigFileError) throw new AuthSetupError(key, file, err.problem);
    throw err;
  }
}

/** The process's authentication and rules (see the module comment). */
export class EdgeAuth {
  readonly mode: AuthMode;
  private rules: Rule[];
  private readonly defaultAccess: Access;
  private keys?: KeyStore;
  private readonly jwks?: JwksSource;
  private loadedAt = new Date();
  private lastReloadError?: string;
  private readonly reloadOk: Counter;
  private readonly reloadFailed: Counter;
  /** Reloads one at a time (src/tls/workload/watch.ts serialized). */
  private readonly reloadSerial = serialized(() => this.reloadOnce());

  constructor(
    private readonly setup: AuthSetup,
    private readonly deps: EdgeAuthDeps,
  ) {
    this.mode = setup.flags.auth;
    this.rules = setup.rules;
    this.defaultAccess = setup.defaultAccess;
    this.keys = setup.keys;
    this.reloadOk = deps.stats.counter('auth.rules.update_success');
    this.reloadFailed = deps.stats.counter('auth.rules.update_failure');
    if (this.mode === 'jwt') {
      const stats = { fetchSuccess: deps.stats.counter('auth.jwks.fetch_success'), fetchFailure: deps.stats.counter('auth.jwks.fetch_failure') };
      const f = setup.flags;
      const timings = { timeoutMs: f.auth_jwks_timeout, cooldownMs: f.auth_jwks_cooldown, maxAgeMs: f.auth_jwks_refresh };
      this.jwks = new JwksSource(setup.jwksUrl, stats, deps.log, setup.jwks, timings);
      if (setup.flags.auth_issuer.length === 0 || setup.flags.auth_audience.length === 0) {
        deps.log.warn('--auth=jwt without --auth_issuer or --auth_audience: tokens of any issuer or audience signed by the JWKS are accepted');
      }
    }
  }

  /** With --auth=jwt: loads jose and fetches a JWKS URL once now (failures are logged; requests retry later). */
  start(): Promise<void> {
    return this.jwks?.warm() ?? Promise.resolve();
  }

  /**
   * Reads the rules file again (and the key file, and a JWKS file), each once it has settled (a
   * file being rewritten is not taken half-written; an empty file is refused). A file with an
   * error changes nothing: the old rules and keys stay and the error is logged and kept for
   * admin /auth_rules.
   */
  reload(): Promise<boolean> {
    return this.reloadSerial();
  }

  private async reloadOnce(): Promise<boolean> {
    const flags = this.setup.flags;
    const settle = this.deps.settle;
    try {
      const rules = flags.auth_rules !== undefined ? loadRules(flags.auth_rules, await readSettledText('auth_rules', flags.auth_rules, settle)) : this.rules;
      const keys = flags.auth_keys !== undefined ? loadKeys(flags.auth_keys, await readSettledText('auth_keys', flags.auth_keys, settle)) : this.keys;
      const jwks = this.mode === 'jwt' && !this.setup.jwksUrl ? loadJwksFile(flags.auth_jwks!, await readSettledText('auth_jwks', flags.auth_jwks!, settle)) : undefined;
      this.rules = rules;
      this.keys = keys;
      if (jwks) this.jwks?.setKeys(jwks);
      this.loadedAt = new Date();
      this.lastReloadError = undefined;
      this.reloadOk.inc();
      this.deps.log.info({ rules: rules.length }, 'auth configuration reloaded');
      return true;
    } catch (err) {
      const why = err instanceof AuthSetupError ? `--${err.key} ${err.value}: ${err.reason}` : (err as Error).message;
      this.lastReloadError = why;
      this.reloadFailed.inc();
      this.deps.log.error({ err: why }, 'auth reload failed: the previous configuration stays');
      return false;
    }
  }

  /** Reloads on SIGHUP until the returned function is called. */
  reloadOnSighup(): () => void {
    return reloadOnSighup(() => this.reload());
  }

  /** What admin /auth_rules shows. */
  dump(): Record<string, unknown> {
    const flags = this.setup.flags;
    return {
      auth: this.mode,
      rules_file: flags.auth_rules ?? null,
      default: this.defaultAccess,
      loaded_at: this.loadedAt.toISOString(),
      last_reload_error: this.lastReloadError ?? null,
      rules: this.rules.map(ruleJson),
    };
  }

  /**
   * The identity of the request's credential; undefined when it sent none. A credential that is
   * sent but not valid is a 401, whatever the rules say.
   */
  async authenticate(req: FrontRequest): Promise<Identity | undefined> {
    if (this.mode === 'off') return undefined;
    const header = req.headers.authorization;
    if (header === undefined || header.trim() === '') return undefined;
    const m = /^Bearer +(\S+) *$/i.exec(header);
    if (!m) throw new AuthError(401, 'Authorization: use the Bearer scheme', `${REALM}, error="invalid_request"`);
    const credential = m[1]!;
    if (this.mode === 'key') {
      const identity = this.keys!.lookup(credential);
      if (!identity) throw new AuthError(401, 'invalid API key', `${REALM}, error="invalid_token"`);
      return identity;
    }
    try {
      const f = this.setup.flags;
      return await verifyJwt(credential, this.jwks!, { issuer: f.auth_issuer, audience: f.auth_audience, clockSkewMs: f.auth_clock_skew });
    } catch (err) {
      if (err instanceof JwtError) throw new AuthError(401, `invalid token: ${err.message}`, `${REALM}, error="invalid_token"`);
      throw err;
    }
  }

  /** The missing-credential 401. */
  private required(): AuthError {
    const what = this.mode === 'key' ? 'an API key is required (Authorization: Bearer <key>)' : this.mode === 'jwt' ? 'a bearer token is required (Authorization: Bearer <token>)' : 'authentication required, but no --auth is configured';
    return new AuthError(401, what, REALM);
  }

  /** The first rule matching the resource decides; none: --auth_default. Throws the 401 or 403. */
  /** Decides a request (throws 401/403); returns the rule that allowed it, if one did. */
  decide(identity: Identity | undefined, r: Resource): Rule | undefined {
    const key = pathKeyOf(r.path);
    const rule = this.rules.find((x) => ruleMatches(x, r, key));
    const access = rule ? rule.access : this.defaultAccess;
    const what = r.service !== undefined ? `${r.service}${r.endpoint !== undefined ? ` ${r.endpoint}` : ''}` : r.path;
    const by = rule ? `rule ${rule.index}` : '--auth_default';
    switch (access) {
      case 'public':
        return rule;
      case 'deny':
        throw new AuthError(403, `access to ${what} denied by ${by}`);
      case 'authenticated':
        if (!identity) throw this.required();
        return rule;
      case 'scopes': {
        if (!identity) throw this.required();
        const need = rule!.scopes!;
        if (need.some((s) => identity.scopes.includes(s))) return rule;
        throw new AuthError(403, `access to ${what} needs scope ${need.join(' or ')} (${by})`, `${REALM}, error="insufficient_scope", scope="${need.join(' ')}"`);
      }
    }
  }
}

const UNRESERVED = /^[A-Za-z0-9\-._~]*$/;

/**
 * A subject or a scope as a Mesh-Auth-* header value: every UTF-8 byte outside RFC 3986's
 * unreserved set (letters, digits, `-` `.` `_` `~`) percent-encoded, `%` included, so one
 * percent-decoding gives the value back and no two values share an encoding (`bób` is
 * `b%C3%B3b`, `b%C3%B3b` is `b%25C3%25B3b`).
 */
export function encodeAuthValue(text: string): string {
  if (UNRESERVED.test(text)) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += UNRESERVED.test(c) ? c : `%${byte < 16 ? '0' : ''}${byte.toString(16).toUpperCase()}`;
  }
  return out;
}

/** Headers only the edge sets (Mesh-Auth-*, Mesh-Peer-Identity), and the sidecar token: the caller's own are removed from every request, auth on or off. */
const isEdgeHeader = (name: string): boolean => isEdgeSetHeader(name) || name === HEADER_SIDECAR_TOKEN;

/** Removes the headers whose lower-case name `drop` picks from both req.headers and req.rawHeaders. */
export function removeHeaders(req: FrontRequest, drop: (lower: string) => boolean): void {
  let found = false;
  for (const name in req.headers) {
    if (drop(name)) {
      delete req.headers[name];
      found = true;
    }
  }
  if (!found) return;
  const raw = req.rawHeaders;
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!drop(raw[i]!.toLowerCase())) kept.push(raw[i]!, raw[i + 1]!);
  raw.length = 0;
  raw.push(...kept);
}

/** Adds a header to both req.headers and req.rawHeaders (after removeHeaders took out any of that name). */
export function addHeader(req: FrontRequest, name: string, value: string): void {
  req.headers[name.toLowerCase()] = value;
  req.rawHeaders.push(name, value);
}

/** What a front end authorizes a request as: a resource, or `call` for /rpc (decided once the body names the service). */
export type EdgeTarget = Resource | { path: string; call: true };

export interface EdgeGuardOptions {
  stats: StatsStore;
  /** `http.<prefix>.auth.*` */
  statPrefix: string;
  /** The sidecar's token (--sidecar_token): every request through the guard must carry it. */
  sidecarToken?: string;
  /** The front end's error id: a rule's rate limit answers 429 with it. */
  errorId: string;
  /** The front end's `--rate_limit` (its limiter keeps the rules' buckets too, apart, and its key kind applies). */
  rateLimit?: FrontRateLimit;
}

/** One front end's auth step (see the module comment). */
export class EdgeGuard {
  private readonly allowed: Counter;
  private readonly denied: Counter;
  private readonly unauthenticated: Counter;
  private readonly tokenHash?: Buffer;
  private readonly identities = new WeakMap<FrontRequest, Identity>();
  /** The buckets of rules with a rate_limit: the front end's store, or a limiter of the guard's own (made when first needed). */
  private ruleLimiter?: RateLimitStore;
  private readonly rateOk: Counter;
  private readonly rateOver: Counter;
  private readonly rateError: Counter;

  constructor(
    private readonly auth: EdgeAuth | undefined,
    private readonly options: EdgeGuardOptions,
  ) {
    this.ruleLimiter = options.rateLimit?.store;
    const scope = options.stats.scope(httpStatPrefix(options.statPrefix));
    ({ ok: this.rateOk, overLimit: this.rateOver, error: this.rateError } = declareStats(scope, HTTP_RATE_LIMIT_STATS));
    ({ allowed: this.allowed, denied: this.denied, unauthenticated: this.unauthenticated } = declareStats(scope, HTTP_AUTH_STATS));
    if (options.sidecarToken !== undefined) this.tokenHash = sha256(options.sidecarToken);
  }

  /** False with no auth rules and no sidecar token: checkRequest() passes every request at once (and logs nothing). */
  get enforcing(): boolean {
    return this.auth !== undefined || this.tokenHash !== undefined;
  }

  /**
   * check() for the step before every request of a front end: with no auth rules and no sidecar
   * token nothing can refuse the request, so the caller's headers are stripped now and the answer
   * is undefined (go on at once: no promise, and `target` is never worked out); otherwise check()'s
   * promise.
   */
  checkRequest(req: FrontRequest, res: FrontResponse, target: () => EdgeTarget): Promise<void> | undefined {
    if (this.auth || this.tokenHash) return this.check(req, res, target());
    removeHeaders(req, isEdgeHeader);
    return undefined;
  }

  /**
   * The step before a front end's handler: throws an AuthError (401/403), with the challenge
   * header set on `res` when there is one. The path is already normalized (src/base/http/path.ts).
   */
  async check(req: FrontRequest, res: FrontResponse | undefined, target: EdgeTarget): Promise<void> {
    try {
      await this.limit(req, res, await this.run(req, target));
    } catch (err) {
      if (err instanceof AuthError) {
        (err.code === 401 ? this.unauthenticated : this.denied).inc();
        if (err.challenge && res && !res.headersSent) res.setHeader('www-authenticate', err.challenge);
        req.resume();
      }
      throw err;
    }
  }

  /**
   * /rpc, once the body (or an upgrade's query) named the service and method. Throws like check();
   * a promise when the rule's rate limit had to ask a shared store.
   */
  authorizeCall(req: FrontRequest, res: FrontResponse | undefined, service: string, endpoint: string): void | Promise<void> {
    if (!this.auth) return;
    try {
      const rule = this.auth.decide(this.identities.get(req), { path: '/rpc', service, endpoint });
      this.allowed.inc();
      return this.limit(req, res, rule);
    } catch (err) {
      if (err instanceof AuthError) {
        (err.code === 401 ? this.unauthenticated : this.denied).inc();
        if (err.challenge && res && !res.headersSent) res.setHeader('www-authenticate', err.challenge);
      }
      throw err;
    }
  }

  private async run(req: FrontRequest, target: EdgeTarget): Promise<Rule | undefined> {
    if (this.tokenHash) {
      const sent = req.headers[HEADER_SIDECAR_TOKEN];
      const challenge = 'Mesh-Sidecar-Token realm="mesh"';
      if (typeof sent !== 'string' || sent === '') throw new AuthError(401, 'a sidecar token is required (Mesh-Sidecar-Token)', challenge);
      if (!timingSafeEqual(sha256(sent), this.tokenHash)) throw new AuthError(401, 'wrong sidecar token', challenge);
    }
    // Always, auth on or off: only the edge says who the caller is, and the sidecar token stops here.
    removeHeaders(req, isEdgeHeader);
    const auth = this.auth;
    if (!auth) return undefined;
    const identity = await auth.authenticate(req);
    if (identity) {
      this.identities.set(req, identity);
      setAuthSubject(req, identity.subject);
      addHeader(req, HEADER_AUTH_SUBJECT, encodeAuthValue(identity.subject));
      addHeader(req, HEADER_AUTH_SCOPES, identity.scopes.map(encodeAuthValue).join(' '));
      // An API key is for the edge alone: backends never see it.
      if (auth.mode === 'key') removeHeaders(req, (name) => name === 'authorization');
    }
    if ('call' in target) return undefined;
    const rule = auth.decide(identity, target);
    this.allowed.inc();
    return rule;
  }

  /**
   * A rule's own rate limit (`rate_limit` in the rules file): a token bucket per rule and client key
   * (the front end's `--rate_limit_key`, else the address), on top of `--rate_limit`. Over it: 429
   * with Retry-After and the RateLimit fields, counted with the front end's rate limit stats.
   */
  private limit(req: FrontRequest, res: FrontResponse | undefined, rule: Rule | undefined): void | Promise<void> {
    const policy = rule?.rateLimit;
    if (!policy) return;
    this.ruleLimiter ??= new MemoryRateLimitStore({ policy, stats: this.options.stats });
    const decision = this.ruleLimiter.take(rateLimitKey(req, this.options.rateLimit?.key ?? 'address'), policy, 'rule');
    if (decision instanceof Promise) return decision.then((d) => this.answer(req, res, rule!, d));
    this.answer(req, res, rule!, decision);
  }

  private answer(req: FrontRequest, res: FrontResponse | undefined, rule: Rule, decision: RateDecision): void {
    if (res && !res.headersSent) for (const [k, v] of Object.entries(rateLimitHeaders(decision))) res.setHeader(k, v);
    // A decision of the failure mode (the shared store down) is an `error`, a refused one not `over_limit`.
    if (decision.storeDown) this.rateError.inc();
    if (decision.allowed) {
      this.rateOk.inc();
      return;
    }
    if (!decision.storeDown) this.rateOver.inc();
    req.resume();
    if (decision.storeDown) throw rateLimitStoreDown(this.options.errorId);
    throw rateLimited(this.options.errorId, describePolicy(decision.policy), decision.retryAfterSec, rule.index);
  }
}
