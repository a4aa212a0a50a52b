/**
 * Authorization rules (`--auth_rules=FILE`, docs/security.md): an ordered list, first match wins.
 * A rule names a resource (service and endpoint globs, a path prefix, or both) and an access:
 * `public`, `authenticated`, `deny`, or `scopes: [..]` (the credential must hold at least one).
 * YAML or JSON (a `.json` file is held to strict JSON); every error names its line.
 */
import { parseRuleFile, RulesError, type RuleFields, type RuleFileSpec } from './rule-file.js';
import { globMatcher } from '../../base/util/regex.js';
import { ratePolicy, type RatePolicy } from '../../base/http/rate-limit.js';
import { asciiLower, configuredPath, decodedPath } from '../../base/http/path.js';

export type Access = 'public' | 'authenticated' | 'deny';

export interface Rule {
  /** 1-based position in the file, for logs and the admin dump. */
  index: number;
  /** The file's line of the rule. */
  line: number;
  name?: string;
  service?: string;
  endpoint?: string;
  path?: string;
  /** The path as rules compare it: normalized, fully decoded (one character per byte), lower case with ignoreCase. */
  pathKey?: string;
  /** `ignore_case: true`: the path matches whatever the case of its ASCII letters. */
  ignoreCase?: boolean;
  access: Access | 'scopes';
  scopes?: string[];
  serviceMatches?: (name: string) => boolean;
  endpointMatches?: (name: string) => boolean;
  /** `rate_limit` (and `rate_limit_burst`): a token bucket of this rule's own, per client key. */
  rateLimit?: RatePolicy;
}

/** What a request asks for: its path, and the service and endpoint once resolved. */
export interface Resource {
  path: string;
  service?: string;
  endpoint?: string;
}

const FIELDS = new Set(['name', 'service', 'endpoint', 'path', 'access', 'scopes', 'rate_limit', 'rate_limit_burst', 'ignore_case']);
const FILE_SPEC: RuleFileSpec = {
  fields: FIELDS,
  fieldList: 'service, endpoint, path, ignore_case, access, scopes, rate_limit, rate_limit_burst, name',
  mappingHint: 'service, endpoint, path, access or scopes',
};

/** Whether a request path is under a rule's prefix: `/a/` covers `/a/x`; `/a` covers `/a` and `/a/x`, not `/ab`. */
export function underPrefix(path: string, prefix: string): boolean {
  if (prefix.endsWith('/')) return path.startsWith(prefix);
  return path === prefix || path.startsWith(`${prefix}/`);
}

/** A request's normalized path as rules compare it (see src/base/http/path.ts): fully decoded. */
export function pathKeyOf(path: string): string {
  return decodedPath(path);
}

/** Whether a rule matches; `key` is pathKeyOf(r.path), worked out once for all the rules. */
export function ruleMatches(rule: Rule, r: Resource, key = pathKeyOf(r.path)): boolean {
  if (rule.pathKey !== undefined && !underPrefix(rule.ignoreCase ? asciiLower(key) : key, rule.pathKey)) return false;
  if (rule.serviceMatches && (r.service === undefined || !rule.serviceMatches(r.service))) return false;
  if (rule.endpointMatches && (r.endpoint === undefined || !rule.endpointMatches(r.endpoint))) return false;
  return true;
}

/** Parses a rules file's text; throws a RulesError naming the line. */
export function parseRules(text: string, json: boolean): Rule[] {
  return parseRuleFile(text, json, FILE_SPEC, parseRule);
}

function parseRule({ index, line, where, raw, fieldLine, text }: RuleFields): Rule {
  const rule: Rule = { index, line, access: 'deny' };
  rule.name = text('name');
  rule.service = text('service');
  rule.endpoint = text('endpoint');
  rule.path = text('path');
  if (rule.path !== undefined && !rule.path.startsWith('/')) throw new RulesError(fieldLine('path'), `${where}: path must start with /`);
  const ignoreCase = raw.ignore_case;
  if (ignoreCase !== undefined && ignoreCase !== null) {
    if (typeof ignoreCase !== 'boolean') throw new RulesError(fieldLine('ignore_case'), `${where}: ignore_case must be true or false`);
    if (rule.path === undefined) throw new RulesError(fieldLine('ignore_case'), `${where}: ignore_case needs path`);
    if (ignoreCase) rule.ignoreCase = true;
  }
  if (rule.path !== undefined) {
    // Read like a request path, so the rule covers every spelling a backend decodes the same way.
    const n = configuredPath(rule.path);
    if ('refused' in n) throw new RulesError(fieldLine('path'), `${where}: path "${rule.path}": ${n.refused.replace(/^invalid path: /, '')}`);
    const key = pathKeyOf(n.path);
    rule.pathKey = rule.ignoreCase ? asciiLower(key) : key;
  }
  if (rule.service === undefined && rule.endpoint === undefined && rule.path === undefined) {
    throw new RulesError(line, `${where}: names no resource (give service, endpoint or path; path: / matches every request)`);
  }
  if (rule.service !== undefined) rule.serviceMatches = globMatcher(rule.service);
  if (rule.endpoint !== undefined) rule.endpointMatches = globMatcher(rule.endpoint);
  rule.rateLimit = ruleRate(raw, index, where, fieldLine);
  const access = raw.access;
  const scopes = raw.scopes;
  if (scopes !== undefined) {
    if (access !== undefined) throw new RulesError(fieldLine('access'), `${where}: give access or scopes, not both`);
    if (!Array.isArray(scopes) || scopes.length === 0 || !scopes.every((s) => typeof s === 'string' && s !== '' && !/\s/.test(s))) {
      throw new RulesError(fieldLine('scopes'), `${where}: scopes must be a non-empty list of scope names`);
    }
    rule.access = 'scopes';
    rule.scopes = scopes as string[];
    return rule;
  }
  if (access !== 'public' && access !== 'authenticated' && access !== 'deny') {
    throw new RulesError(
      access === undefined ? line : fieldLine('access'),
      access === undefined ? `${where}: needs access (public, authenticated, deny) or scopes` : `${where}: access "${String(access)}" is not public, authenticated or deny`,
    );
  }
  rule.access = access;
  return rule;
}

/** `rate_limit: 10/s` and `rate_limit_burst: 20` of a rule: its policy, named `rule-<index>`. */
function ruleRate(raw: Record<string, unknown>, index: number, where: string, fieldLine: (name: string) => number): RatePolicy | undefined {
  const rate = raw.rate_limit;
  const burst = raw.rate_limit_burst;
  if (rate === undefined || rate === null) {
    if (burst !== undefined && burst !== null) throw new RulesError(fieldLine('rate_limit_burst'), `${where}: rate_limit_burst needs rate_limit`);
    return undefined;
  }
  if (typeof rate !== 'string' && typeof rate !== 'number') throw new RulesError(fieldLine('rate_limit'), `${where}: rate_limit must be a rate like 10/s`);
  if (burst !== undefined && burst !== null && (typeof burst !== 'number' || !Number.isSafeInteger(burst) || burst < 1)) {
    throw new RulesError(fieldLine('rate_limit_burst'), `${where}: rate_limit_burst must be a whole number of at least 1`);
  }
  try {
    const policy = ratePolicy(String(rate), typeof burst === 'number' ? burst : undefined, `rule-${index}`);
    if (!policy) throw new Error('0 or off: leave rate_limit out instead');
    return policy;
  } catch (err) {
    throw new RulesError(fieldLine('rate_limit'), `${where}: rate_limit "${String(rate)}": ${(err as Error).message}`);
  }
}

/** A rule as admin /auth_rules shows it. */
export function ruleJson(rule: Rule): Record<string, unknown> {
  const out: Record<string, unknown> = { index: rule.index, line: rule.line };
  if (rule.name !== undefined) out.name = rule.name;
  if (rule.service !== undefined) out.service = rule.service;
  if (rule.endpoint !== undefined) out.endpoint = rule.endpoint;
  if (rule.path !== undefined) out.path = rule.path;
  if (rule.ignoreCase) out.ignore_case = true;
  if (rule.access === 'scopes') out.scopes = rule.scopes;
  else out.access = rule.access;
  if (rule.rateLimit) out.rate_limit = { per_second: rule.rateLimit.ratePerSec, burst: rule.rateLimit.burst };
  return out;
}
