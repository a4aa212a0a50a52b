/**
 * Who may call whom (`--authz_rules=FILE`, `--authz_default`; docs/security.md): rules from the
 * caller's workload identity (the SPIFFE ID of its mesh certificate) to services and endpoints,
 * first match wins, enforced where a call arrives.
 *
 * A rule: `caller` (a glob or a list of globs: a `spiffe://` ID, a bare service name meaning
 * `spiffe://<trust_domain>/svc/<name>`, or `unauthenticated` for a caller without a certificate),
 * `service` and `endpoint` (globs), `action` (`allow` or `deny`) and a free `name`. A field left
 * out matches every call; a rule gives at least one of caller, service and endpoint.
 *
 * `decideAuthz` is the engine, a pure function of (rules, default, caller, service, endpoint), for
 * every place a call arrives (the framework's servers, a sidecar's inbound listener).
 * `ServiceAuthz` is a process's part: the rules of its file (reloaded on SIGHUP once the file has
 * settled: a bad or empty file keeps the old rules), the stats `authz.allowed` and `authz.denied`, and the log of denials, once per
 * caller.
 */
import { clientText } from '../../base/util/text.js';
import { ConfigFileError, readConfigFile, readConfigFileSettled } from '../../base/config/reader.js';
import type { Logger } from 'pino';
import { ERROR_IDS, forbidden, MeshError } from '../../base/errors.js';
import { globMatcher } from '../../base/util/regex.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { declareStats, type FamilyStats, type StatsScope } from '../../base/stats/store.js';
import type { SchemaConfig } from '../../base/options/schema.js';
import { spiffeIdOf } from '../../base/mtls/workload-tls.js';
import { MAX_GLOB, parseRuleFile, RULES_ERRORS, RULES_RELOAD_ERRORS, RulesError, type RuleFields, type RuleFileSpec } from './rule-file.js';
import { reloadOnSighup } from '../../base/util/sighup.js';
import { serialized, type SettleOptions } from '../../tls/workload/watch.js';

export type AuthzAction = 'allow' | 'deny';

/** The caller pattern of a call that came without a workload certificate (plain, or TLS without a client certificate). */
export const UNAUTHENTICATED = 'unauthenticated';

/** The `id` of the error JSON of a denied call. */
export const AUTHZ_ERROR_ID = ERROR_IDS.authz;

export interface AuthzRule {
  /** 1-based position in the file. */
  index: number;
  /** The file's line of the rule. */
  line: number;
  name?: string;
  /** The caller patterns as written. */
  callers?: string[];
  service?: string;
  endpoint?: string;
  action: AuthzAction;
  /** Whether the caller (its SPIFFE ID; undefined without a certificate) is one of `callers`. */
  callerMatches?: (caller: string | undefined) => boolean;
  serviceMatches?: (name: string) => boolean;
  endpointMatches?: (name: string) => boolean;
}

/** What decided a call: the rule (its index), or the default. */
export interface AuthzDecision {
  allowed: boolean;
  /** The index of the rule that matched; undefined: the default decided. */
  rule?: number;
}

const FILE_SPEC: RuleFileSpec = {
  fields: new Set(['name', 'caller', 'service', 'endpoint', 'action']),
  fieldList: 'caller, service, endpoint, action, name',
  mappingHint: 'caller, service, endpoint and action',
};

/** A service or endpoint name glob: the characters of the names, and the wildcards `*` (any run of characters) and `?` (one). */
const NAME_GLOB = /^[A-Za-z0-9._:/*?-]+$/;
/** A SPIFFE ID glob: `spiffe://`, then a trust domain and a path (RFC 3986 unreserved characters, `/`, and the wildcards). */
const SPIFFE_GLOB = /^spiffe:\/\/[A-Za-z0-9._~*?-]+(?:\/[A-Za-z0-9._~:@%+*?/-]*)?$/;

/** Parses an authz rules file's text; bare caller names are services of `trustDomain`. Throws a RulesError naming the line. */
export function parseAuthzRules(text: string, json: boolean, trustDomain: string): AuthzRule[] {
  return parseRuleFile(text, json, FILE_SPEC, (fields) => parseAuthzRule(fields, trustDomain));
}

function parseAuthzRule({ index, line, where, raw, fieldLine, text }: RuleFields, trustDomain: string): AuthzRule {
  const rule: AuthzRule = { index, line, action: 'deny' };
  rule.name = text('name');
  rule.service = text('service');
  rule.endpoint = text('endpoint');
  if (rule.service !== undefined) {
    if (!NAME_GLOB.test(rule.service)) throw new RulesError(fieldLine('service'), `${where}: service "${rule.service}" is not a service name glob (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)`);
    rule.serviceMatches = globMatcher(rule.service);
  }
  if (rule.endpoint !== undefined) {
    if (!NAME_GLOB.test(rule.endpoint)) throw new RulesError(fieldLine('endpoint'), `${where}: endpoint "${rule.endpoint}" is not an endpoint name glob like Say.* (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)`);
    rule.endpointMatches = globMatcher(rule.endpoint);
  }
  const caller = raw.caller;
  if (caller !== undefined && caller !== null) {
    const list = typeof caller === 'string' ? [caller] : caller;
    if (!Array.isArray(list) || list.length === 0 || !list.every((c) => typeof c === 'string' && c !== '')) {
      throw new RulesError(fieldLine('caller'), `${where}: caller must be a caller glob or a non-empty list of them`);
    }
    const matchers = (list as string[]).map((pattern) => callerMatcher(pattern, trustDomain, (why) => new RulesError(fieldLine('caller'), `${where}: caller "${pattern}": ${why}`)));
    rule.callers = list as string[];
    rule.callerMatches = (id) => matchers.some((m) => m(id));
  }
  if (rule.callers === undefined && rule.service === undefined && rule.endpoint === undefined) {
    throw new RulesError(line, `${where}: names no call (give caller, service or endpoint; a call no rule matches gets --authz_default)`);
  }
  const action = raw.action;
  if (action !== 'allow' && action !== 'deny') {
    throw new RulesError(
      action === undefined || action === null ? line : fieldLine('action'),
      action === undefined || action === null ? `${where}: needs action (allow or deny)` : `${where}: action "${String(action)}" is not allow or deny`,
    );
  }
  rule.action = action;
  return rule;
}

/** The matcher of one caller pattern (see the module comment); `bad` makes the error of a pattern that is not one. */
function callerMatcher(pattern: string, trustDomain: string, bad: (why: string) => Error): (caller: string | undefined) => boolean {
  if (pattern.length > MAX_GLOB) throw bad(`longer than ${MAX_GLOB} characters`);
  if (pattern === UNAUTHENTICATED) return (caller) => caller === undefined;
  let glob: string;
  if (pattern.startsWith('spiffe://')) {
    if (!SPIFFE_GLOB.test(pattern)) throw bad('not a SPIFFE ID glob like spiffe://mesh.local/svc/go.mesh.srv.* (a trust domain, then a path; the wildcards * and ?)');
    glob = pattern;
  } else {
    if (pattern.includes('://')) throw bad(`a caller is a service name glob, a spiffe:// ID glob or ${UNAUTHENTICATED}`);
    if (!NAME_GLOB.test(pattern)) throw bad('not a service name glob (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)');
    glob = spiffeIdOf(trustDomain, pattern);
  }
  const matches = globMatcher(glob);
  return (caller) => caller !== undefined && matches(caller);
}

/** Whether a rule matches a call. */
export function authzRuleMatches(rule: AuthzRule, caller: string | undefined, service: string, endpoint: string | undefined): boolean {
  if (rule.callerMatches && !rule.callerMatches(caller)) return false;
  if (rule.serviceMatches && !rule.serviceMatches(service)) return false;
  if (rule.endpointMatches && (endpoint === undefined || !rule.endpointMatches(endpoint))) return false;
  return true;
}

/**
 * The engine: the first rule that matches the call decides; none, `defaultAction`. `caller` is
 * the SPIFFE ID of the caller's certificate, or undefined for a caller without one.
 */
export function decideAuthz(rules: readonly AuthzRule[], defaultAction: AuthzAction, caller: string | undefined, service: string, endpoint: string | undefined): AuthzDecision {
  for (const rule of rules) {
    if (authzRuleMatches(rule, caller, service, endpoint)) return { allowed: rule.action === 'allow', rule: rule.index };
  }
  return { allowed: defaultAction === 'allow' };
}

/** The authz options, as the process has them (their types come from the option schema). */
export type AuthzFlags = Pick<SchemaConfig, 'authz_rules' | 'authz_default' | 'trust_domain'>;

/** A bad authz option or file, by the option's schema key: the CLI prints it as a flag error (exit 2), the library as an option error. */
export class AuthzSetupError extends SchemaOptionError {
  constructor(key: string, value: string, why: string) {
    super(key, why, value);
    this.name = 'AuthzSetupError';
  }
}

/** Reads and parses the rules file. Throws AuthzSetupError naming the file and the line. */
export function loadAuthzRules(file: string, trustDomain: string, text?: string): AuthzRule[] {
  if (text === undefined) {
    try {
      text = readConfigFile(file, RULES_ERRORS);
    } catch (err) {
      if (err instanceof ConfigFileError) throw new AuthzSetupError('authz_rules', file, err.problem);
      throw err;
    }
  }
  try {
    return parseAuthzRules(text, /\.json$/i.test(file), trustDomain);
  } catch (err) {
    if (err instanceof RulesError) throw new AuthzSetupError('authz_rules', file, err.message);
    throw err;
  }
}

/** The rules of a process: undefined when there is no rules file (every call is allowed). */
export interface AuthzSetup {
  file: string;
  trustDomain: string;
  rules: AuthzRule[];
  defaultAction: AuthzAction;
}

/** Checks the authz options and reads the rules file; undefined without one. Throws AuthzSetupError. */
export function readAuthzSetup(flags: AuthzFlags): AuthzSetup | undefined {
  const defaultAction = flags.authz_default ?? 'allow';
  if (defaultAction !== 'allow' && defaultAction !== 'deny') throw new AuthzSetupError('authz_default', String(defaultAction), 'use allow or deny');
  if (flags.authz_rules === undefined) {
    if (defaultAction === 'deny') throw new AuthzSetupError('authz_default', defaultAction, 'needs {authz_rules} (without rules every call would be denied)');
    return undefined;
  }
  return { file: flags.authz_rules, trustDomain: flags.trust_domain, rules: loadAuthzRules(flags.authz_rules, flags.trust_domain), defaultAction };
}

export interface ServiceAuthzDeps {
  /** Where the AUTHZ_STATS are kept (the process's store). */
  stats: StatsScope;
  log: Logger;
  /** How a reload reads the file (src/base/config/reader.ts readConfigFileSettled, by readSettled). */
  settle?: SettleOptions;
}

/** Most callers whose denial was logged that a process remembers; past it the oldest is forgotten (and logged again when denied again). */
export const MAX_LOGGED_CALLERS = 1024;

/** The stats of the process's authorization. */
export const AUTHZ_STATS = {
  counters: { allowed: 'authz.allowed', denied: 'authz.denied', updateSuccess: 'authz.rules.update_success', updateFailure: 'authz.rules.update_failure' },
} as const;

/** How a denial names a caller: its SPIFFE ID, or `unauthenticated`. */
export function callerName(caller: string | undefined): string {
  return caller ?? UNAUTHENTICATED;
}

/** The process's authorization (see the module comment). */
export class ServiceAuthz {
  private rules: AuthzRule[];
  private loadedAt = new Date();
  private lastReloadError?: string;
  private readonly stats: FamilyStats<typeof AUTHZ_STATS>;
  /** The callers whose denial was logged (insertion order: the oldest first). */
  private readonly logged = new Set<string>();
  /** Reloads one at a time (src/tls/workload/watch.ts serialized). */
  private readonly reloadSerial = serialized(() => this.reloadOnce());

  constructor(
    private readonly setup: AuthzSetup,
    private readonly deps: ServiceAuthzDeps,
  ) {
    this.rules = setup.rules;
    this.stats = declareStats(deps.stats, AUTHZ_STATS);
  }

  /** Decides a call without counting or logging it. */
  decide(caller: string | undefined, service: string, endpoint: string | undefined): AuthzDecision {
    return decideAuthz(this.rules, this.setup.defaultAction, caller, service, endpoint);
  }

  /**
   * Decides a call, counts it, and logs a denial (once per caller). Returns the 403 to answer a
   * denied call with (error JSON naming the caller, the service and the endpoint), or undefined.
   */
  check(caller: string | undefined, service: string, endpoint: string | undefined): MeshError | undefined {
    const decision = this.decide(caller, service, endpoint);
    if (decision.allowed) {
      this.stats.allowed.inc();
      return undefined;
    }
    this.stats.denied.inc();
    const who = callerName(caller);
    const by = decision.rule !== undefined ? `rule ${decision.rule}` : '--authz_default';
    const what = endpoint !== undefined ? `${service} ${endpoint}` : service;
    if (!this.logged.has(who)) {
      if (this.logged.size >= MAX_LOGGED_CALLERS) this.logged.delete(this.logged.values().next().value!);
      this.logged.add(who);
      this.deps.log.warn({ caller: clientText(who), service: clientText(service), endpoint: endpoint === undefined ? undefined : clientText(endpoint), rule: decision.rule ?? null }, `call denied by ${by}: further denials of this caller are counted in ${AUTHZ_STATS.counters.denied}, not logged`);
    }
    return forbidden(AUTHZ_ERROR_ID, `caller ${who} may not call ${what} (denied by ${by})`);
  }

  /**
   * Reads the rules file again once it has settled (a file being rewritten is not taken
   * half-written; an empty file is refused). A file with an error changes nothing: the old rules
   * stay, and the error is logged and kept (dump()). Callers denied before are logged again under
   * the new rules.
   */
  reload(): Promise<boolean> {
    return this.reloadSerial();
  }

  private async reloadOnce(): Promise<boolean> {
    const file = this.setup.file;
    try {
      let text: string;
      try {
        text = await readConfigFileSettled(file, RULES_RELOAD_ERRORS, this.deps.settle);
      } catch (err) {
        if (err instanceof ConfigFileError) throw new AuthzSetupError('authz_rules', file, err.problem);
        throw err;
      }
      this.rules = loadAuthzRules(file, this.setup.trustDomain, text);
      this.loadedAt = new Date();
      this.lastReloadError = undefined;
      this.logged.clear();
      this.stats.updateSuccess.inc();
      this.deps.log.info({ file: this.setup.file, rules: this.rules.length }, 'authorization rules reloaded');
      return true;
    } catch (err) {
      const why = err instanceof AuthzSetupError ? err.format('flag') : (err as Error).message;
      this.lastReloadError = why;
      this.stats.updateFailure.inc();
      this.deps.log.error({ err: why }, 'authorization rules reload failed: the previous rules stay');
      return false;
    }
  }

  /** Reloads on SIGHUP until the returned function is called. */
  reloadOnSighup(): () => void {
    return reloadOnSighup(() => this.reload());
  }

  /** The loaded rules, for an admin dump. */
  dump(): Record<string, unknown> {
    return {
      authz_rules: this.setup.file,
      default: this.setup.defaultAction,
      loaded_at: this.loadedAt.toISOString(),
      last_reload_error: this.lastReloadError ?? null,
      rules: this.rules.map((r) => ({
        index: r.index,
        line: r.line,
        ...(r.name !== undefined ? { name: r.name } : {}),
        ...(r.callers !== undefined ? { caller: r.callers } : {}),
        ...(r.service !== undefined ? { service: r.service } : {}),
        ...(r.endpoint !== undefined ? { endpoint: r.endpoint } : {}),
        action: r.action,
      })),
    };
  }
}
