/**
 * A rules file: YAML or JSON (a `.json` file is held to strict JSON), a list of rules or
 * `{rules: [...]}`, each rule a mapping. Every error names its line and the rule's 1-based index.
 * The edge's `--auth_rules` (rules.ts) and the services' `--authz_rules` (authz.ts) read their
 * files with it; each parses the fields of a rule its own way.
 */
import { isMap, isScalar, isSeq } from '../../base/util/lazy-packages.js';
import { ConfigFileError, parseConfig, type ConfigErrorStyle } from '../../base/config/reader.js';

/**
 * How the errors of rules and key files are written (src/base/config/reader.ts): `line 3: <problem>`,
 * without the file (the option error around it names it: AuthSetupError, AuthzSetupError).
 */
export const RULES_ERRORS: ConfigErrorStyle = {
  name: 'RulesError',
  withFile: false,
  position: 'line',
  readReason: 'code',
  create: (p) => new RulesError(p.line, p.field ? `${p.field}: ${p.problem}` : p.problem, p.file),
};

/** The same on a reload, whose settled read says why a file cannot be read in words (`cannot read: no such file`). */
export const RULES_RELOAD_ERRORS: ConfigErrorStyle = { ...RULES_ERRORS, readReason: 'words' };

/** A problem of a rules or key file: the config reader's one error type, by its name here. */
export class RulesError extends ConfigFileError {
  constructor(
    line: number | undefined,
    readonly why: string,
    file = '',
  ) {
    super(RULES_ERRORS, { file, line, problem: why });
  }
}

/** Most rules a file may hold. */
export const MAX_RULES = 10_000;
/** Longest glob (or other text field) of a rule. */
export const MAX_GLOB = 256;

/** One rule of a file as its parser sees it: the fields as plain values, and where each is. */
export interface RuleFields {
  /** 1-based position in the file. */
  index: number;
  /** The file's line of the rule. */
  line: number;
  /** `rule <index>`, how every error about the rule starts. */
  where: string;
  /** The rule's fields, as JSON values (every key is one of the known fields). */
  raw: Record<string, unknown>;
  /** The line of a field's value (else of its key, else the rule's). */
  fieldLine(name: string): number;
  /** A text field: undefined when absent; not a non-empty string, or longer than MAX_GLOB: a RulesError. */
  text(name: string): string | undefined;
}

/** What a kind of rules file accepts. */
export interface RuleFileSpec {
  /** The fields a rule may have; any other is an error. */
  fields: ReadonlySet<string>;
  /** How the unknown-field error lists them: `service, endpoint, ...`. */
  fieldList: string;
  /** How the not-a-mapping error names what a rule holds: `service, endpoint, path, access or scopes`. */
  mappingHint: string;
}

/** Parses a rules file's text, each rule by `parseRule`; throws a RulesError naming the line. */
export function parseRuleFile<T>(text: string, json: boolean, spec: RuleFileSpec, parseRule: (rule: RuleFields) => T): T[] {
  const doc = parseConfig(text, { file: '', style: RULES_ERRORS, json });
  const lineAt = (node: unknown) => doc.lineOf(node);
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
  return list.items.map((node, i) => {
    const index = i + 1;
    const line = lineAt(node) ?? 1;
    const where = `rule ${index}`;
    if (!isMap(node)) throw new RulesError(line, `${where}: must be a mapping (${spec.mappingHint})`);
    const raw = (doc.toJS(node) ?? {}) as Record<string, unknown>;
    const fieldLine = (name: string) => {
      const pair = node.items.find((p) => (p.key as { value?: unknown })?.value === name);
      return lineAt(pair?.value) ?? lineAt(pair?.key) ?? line;
    };
    for (const key of Object.keys(raw)) {
      if (!spec.fields.has(key)) throw new RulesError(fieldLine(key), `${where}: unknown field "${key}" (use ${spec.fieldList})`);
    }
    const text = (name: string): string | undefined => {
      const v = raw[name];
      if (v === undefined || v === null) return undefined;
      if (typeof v !== 'string' || v === '') throw new RulesError(fieldLine(name), `${where}: ${name} must be a non-empty string`);
      if (v.length > MAX_GLOB) throw new RulesError(fieldLine(name), `${where}: ${name} longer than ${MAX_GLOB} characters`);
      return v;
    };
    return parseRule({ index, line, where, raw, fieldLine, text });
  });
}
