/**
 * A rules file: YAML or JSON (a `.json` file is held to strict JSON), a list of rules or
 * `{rules: [...]}`, each rule a mapping. Every error names its line and the rule's 1-based index.
 * The edge's `--auth_rules` (rules.ts) and the services' `--authz_rules` (authz.ts) read their
 * files with it; each parses the fields of a rule its own way.
 */
import { LineCounter, isMap, isScalar, isSeq, type Node } from 'yaml';
import { parseConfigDocument } from '../../base/util/config-yaml.js';

export class RulesError extends Error {
  constructor(
    readonly line: number | undefined,
    readonly why: string,
  ) {
    super(line === undefined ? why : `line ${line}: ${why}`);
    this.name = 'RulesError';
  }
}

/** Most rules a file may hold. */
export const MAX_RULES = 10_000;
/** Longest glob (or other text field) of a rule. */
export const MAX_GLOB = 256;

/** The 1-based line of a character offset. */
export function lineOf(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

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
  const doc = parseConfigDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const syntax = doc.errors[0];
  if (syntax) {
    throw new RulesError(syntax.linePos?.[0]?.line ?? lines.linePos(syntax.pos[0]).line, syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, ''));
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
  return list.items.map((node, i) => {
    const index = i + 1;
    const line = lineAt(node) ?? 1;
    const where = `rule ${index}`;
    if (!isMap(node)) throw new RulesError(line, `${where}: must be a mapping (${spec.mappingHint})`);
    const raw = (node.toJSON(doc) ?? {}) as Record<string, unknown>;
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
