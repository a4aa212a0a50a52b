/**
 * Authorization rules (`--auth_rules=FILE`, docs/security.md): an ordered list, first match wins.
 * A rule names a resource (service and endpoint globs, a path prefix, or both) and an access:
 * `public`, `authenticated`, `deny`, or `scopes: [..]` (the credential must hold at least one).
 * YAML or JSON (a `.json` file is held to strict JSON); every error names its line.
 */
import { LineCounter, isMap, isScalar, isSeq, parseDocument, type Document, type Node } from 'yaml';
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

export class RulesError extends Error {
  constructor(
    readonly line: number | undefined,
    readonly why: string,
  ) {
    super(line === undefined ? why : `line ${line}: ${why}`);
    this.name = 'RulesError';
  }
}

const MAX_RULES = 10_000;
const MAX_GLOB = 256;
const FIELDS = new Set(['name', 'service', 'endpoint', 'path', 'access', 'scopes', 'rate_limit', 'rate_limit_burst', 'ignore_case']);

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

/** The 1-based line of a character offset. */
export function lineOf(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** Parses a rules file's text; throws a RulesError naming the line. */
export function parseRules(text: string, json: boolean): Rule[] {
  if (json) {
    try {
      JSON.parse(text);
    } catch (err) {
      const message = (err as Error).message;
      const at = /position (\d+)/.exec(message);
      throw new RulesError(at ? lineOf(text, Number(at[1])) : undefined, `not valid JSON: ${message.replace(/ in JSON at position \d+.*$/, '')}`);
    }
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const syntax = doc.errors[0];
  if (syntax) {
    const pos = syntax.linePos?.[0];
    throw new RulesError(pos?.line, syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, ''));
  }
  const lineAt = (node: unknown) => {
    const range = (node as Node | undefined)?.range;
    return range ? lines.linePos(range[0]).line : undefined;
  };
  let list: unknown = doc.contents;
  if (isMap(list)) {
    const map = list;
    for (const item of map.items) {
      const key = String((item.key as { value?: unknown })?.value ?? item.key);
      if (key !== 'rules') throw new RulesError(lineAt(item.key), `unknown field "${key}" (the file is a list of rules, or {rules: [...]})`);
    }
    list = map.get('rules', true);
  }
  if (list === null || list === undefined || (isScalar(list) && (list.value === null || list.value === undefined))) return [];
  if (!isSeq(list)) throw new RulesError(lineAt(list) ?? 1, 'rules: must be a list');
  if (list.items.length > MAX_RULES) throw new RulesError(lineAt(list), `more than ${MAX_RULES} rules`);
  return list.items.map((node, i) => parseRule(doc, node, i + 1, lineAt(node) ?? 1, lineAt));
}

function parseRule(doc: Document, node: unknown, index: number, line: number, lineAt: (n: unknown) => number | undefined): Rule {
  const where = `rule ${index}`;
  if (!isMap(node)) throw new RulesError(line, `${where}: must be a mapping (service, endpoint, path, access or scopes)`);
  const raw = (node.toJSON(doc) ?? {}) as Record<string, unknown>;
  const fieldLine = (name: string) => {
    const pair = node.items.find((p) => (p.key as { value?: unknown })?.value === name);
    return lineAt(pair?.value) ?? lineAt(pair?.key) ?? line;
  };
  for (const key of Object.keys(raw)) {
    if (!FIELDS.has(key)) throw new RulesError(fieldLine(key), `${where}: unknown field "${key}" (use service, endpoint, path, ignore_case, access, scopes, rate_limit, rate_limit_burst, name)`);
  }
  const text = (name: string): string | undefined => {
    const v = raw[name];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string' || v === '') throw new RulesError(fieldLine(name), `${where}: ${name} must be a non-empty string`);
    if (v.length > MAX_GLOB) throw new RulesError(fieldLine(name), `${where}: ${name} longer than ${MAX_GLOB} characters`);
    return v;
  };
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
