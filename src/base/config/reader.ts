/**
 * The one reader of the files mesh is configured with (route files, auth and authz rules, API
 * keys, `mesh proxy` configs, `mesh run` files): text to validated plain data with positions and
 * errors, the same way for each.
 *
 * - Reading: `readConfigFile` at start (one read, at most MAX_CONFIG_FILE_BYTES), and
 *   `readConfigFileSettled` on a reload (src/base/config/settled.ts readSettled: never taken
 *   half-written, an empty file refused, the same bound).
 * - Parsing: YAML 1.2, so JSON too (`json: true` holds a `.json` file to strict JSON first), with
 *   one set of limits: the size, the nesting depth, the aliases and no custom tags
 *   (src/base/util/config-yaml.ts); a text past one is refused at its line like a syntax error.
 * - Positions: a ConfigDoc gives the line (and column) of a node or of a field path, for the
 *   errors of the validation that follows, and the values (`toJS`, aliases expanded within the bound).
 * - Errors: one type, ConfigFileError, with the file, the line (and column), the field path and
 *   the problem. How its message is written is the reader's own (each kind of file keeps the
 *   form its users know): a ConfigErrorStyle gives the pieces; the kinds of file subclass it
 *   only to keep their names (RouteFileError, ProxyConfigError, RulesError, RunFileError).
 */
import type { Document, LineCounter, Node } from 'yaml';
import { isMap, isScalar, yaml } from '../util/lazy-packages.js';
import { MAX_CONFIG_ALIASES, parseConfigDocument, parseConfigDocuments } from '../util/config-yaml.js';
import { readBounded, readSettled, SettledReadError, type SettleOptions } from './settled.js';

export { MAX_CONFIG_ALIASES, MAX_CONFIG_DEPTH } from '../util/config-yaml.js';

/** Largest configuration file (and text) read. */
export const MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024;

/** A field path: `['listeners', 0, 'routes', 1, 'cluster']`. */
export type FieldPath = ReadonlyArray<string | number>;

/** `listeners[0].routes[1].cluster` */
export function fieldName(path: FieldPath): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? p : `.${p}`;
  return out;
}

/** How the errors of one kind of file are written. */
export interface ConfigErrorStyle {
  /** The error's name (`RouteFileError`). */
  name: string;
  /** Written before the file: `proxy config `. */
  prefix?: string;
  /** Whether the message names the file (the rules' do not: the option error around them does). */
  withFile: boolean;
  /** How a position follows the file: ` line 12` (line), `: line 12` (colon-line), `:12:3` (line-col). */
  position: 'line' | 'colon-line' | 'line-col';
  /** Before the parser's own message: `not valid YAML: `. */
  syntaxPrefix?: string;
  /** Why a file cannot be read: in words (`no such file`, the default) or by its errno code (`ENOENT`). */
  readReason?: 'words' | 'code';
  /** Makes the error (a subclass that keeps the kind's name); default a ConfigFileError. */
  create?: (parts: ConfigErrorParts) => ConfigFileError;
}

export interface ConfigErrorParts {
  file: string;
  /** 1-based; undefined: the problem is the file's (cannot read it, too many routes). */
  line?: number;
  /** 1-based, with line-col styles. */
  col?: number;
  /** The field path as written in the message (`listeners[0].address`, `rule 3`); '' or undefined: none. */
  field?: string;
  problem: string;
  /** Why it could not be read: the errno code, or EMPTY, UNSETTLED, TOO_BIG (see SettledReadError). */
  code?: string;
}

/** The message of an error: `<prefix><file><position>: <field>: <problem>`, by the style. */
export function configErrorMessage(style: ConfigErrorStyle, p: ConfigErrorParts): string {
  let head = `${style.prefix ?? ''}${style.withFile ? p.file : ''}`;
  if (p.line !== undefined) {
    if (style.position === 'line-col') head += `:${p.line}:${p.col ?? 1}`;
    else if (style.position === 'colon-line') head += `: line ${p.line}`;
    else head += `${head === '' ? '' : ' '}line ${p.line}`;
  }
  const body = p.field ? `${p.field}: ${p.problem}` : p.problem;
  return head === '' ? body : `${head}: ${body}`;
}

/** A problem with a configuration file: where it is (file, line, field path) and what it is. */
export class ConfigFileError extends Error {
  readonly file: string;
  readonly line?: number;
  readonly col?: number;
  /** The field path, as the message writes it; '' when the problem is not a field's. */
  readonly field: string;
  readonly problem: string;
  /** The reason a file could not be read (SettledReadError's codes), else undefined. */
  readonly code?: string;

  constructor(
    readonly style: ConfigErrorStyle,
    parts: ConfigErrorParts,
  ) {
    super(configErrorMessage(style, parts));
    this.name = style.name;
    this.file = parts.file;
    this.line = parts.line;
    this.col = parts.col;
    this.field = parts.field ?? '';
    this.problem = parts.problem;
    this.code = parts.code;
  }

  /** The error of a style, of its own subclass when it has one. */
  static of(style: ConfigErrorStyle, parts: ConfigErrorParts): ConfigFileError {
    return style.create ? style.create(parts) : new ConfigFileError(style, parts);
  }
}

/** The `cannot read: ...` problem of a file, in the style's words. */
function readError(style: ConfigErrorStyle, file: string, err: SettledReadError): ConfigFileError {
  const problem = style.readReason === 'code' && err.reason.startsWith('cannot read: ') && !['TOO_BIG', 'EMPTY', 'UNSETTLED'].includes(err.code) ? `cannot read: ${err.code}` : err.reason;
  return ConfigFileError.of(style, { file, problem, code: err.code });
}

/** Reads a configuration file once (at start): its text, at most MAX_CONFIG_FILE_BYTES; else a ConfigFileError (`cannot read: no such file`). */
export function readConfigFile(file: string, style: ConfigErrorStyle, maxBytes = MAX_CONFIG_FILE_BYTES): string {
  try {
    return readBounded(file, maxBytes).toString('utf8');
  } catch (err) {
    if (err instanceof SettledReadError) throw readError(style, file, err);
    throw err;
  }
}

/**
 * Reads a configuration file again (a reload) once it has settled (readSettled: never taken
 * half-written, an empty file refused, at most MAX_CONFIG_FILE_BYTES); else a ConfigFileError.
 */
export async function readConfigFileSettled(file: string, style: ConfigErrorStyle, settle: SettleOptions = {}, maxBytes = MAX_CONFIG_FILE_BYTES): Promise<string> {
  try {
    return (await readSettled([file], { ...settle, maxBytes }))[0]!.toString('utf8');
  } catch (err) {
    if (err instanceof SettledReadError) throw readError(style, file, err);
    throw err;
  }
}

/** A parsed document of a configuration file, with the positions of its nodes. */
export class ConfigDoc {
  constructor(
    readonly file: string,
    readonly style: ConfigErrorStyle,
    readonly doc: Document.Parsed,
    private readonly lines: LineCounter,
  ) {}

  /** The document's root node (null: an empty document). */
  get contents(): Node | null {
    return this.doc.contents as Node | null;
  }

  /** Line and column (1-based) of a node; undefined: it has none (absent, or made up). */
  positionOf(node: unknown): { line: number; col: number } | undefined {
    const range = (node as Node | null | undefined)?.range;
    return range ? this.lines.linePos(range[0]) : undefined;
  }

  /** Line (1-based) of a node. */
  lineOf(node: unknown): number | undefined {
    return this.positionOf(node)?.line;
  }

  /**
   * Line and column of the node at a field path, or of its nearest ancestor that exists; with
   * `atKey`, of the key of the last step (an unknown field) when there is one.
   */
  positionAt(path: FieldPath, atKey = false): { line: number; col: number } | undefined {
    if (atKey && path.length > 0) {
      const parent = path.length === 1 ? this.doc.contents : this.doc.getIn(path.slice(0, -1), true);
      if (isMap(parent)) {
        const last = path[path.length - 1];
        const pair = parent.items.find((p) => (isScalar(p.key) ? p.key.value : p.key) === last);
        const at = isScalar(pair?.key) ? this.positionOf(pair.key) : undefined;
        if (at) return at;
      }
    }
    for (let n = path.length; n >= 0; n--) {
      const at = this.positionOf(n === 0 ? this.doc.contents : this.doc.getIn(path.slice(0, n), true));
      if (at) return at;
    }
    return undefined;
  }

  /** Line of the node at a field path (or of its nearest ancestor). */
  lineAt(path: FieldPath, atKey = false): number | undefined {
    return this.positionAt(path, atKey)?.line;
  }

  /**
   * The values of a node (default: the document), aliases expanded: at most MAX_CONFIG_ALIASES
   * expansions counted the way `yaml` counts them (a billion laughs is refused, not expanded).
   * Throws a ConfigFileError (at the node's position, none for the document: the syntax prefix and yaml's reason).
   */
  toJS(node?: Node | null): unknown {
    try {
      if (node === undefined) return this.doc.toJS({ maxAliasCount: MAX_CONFIG_ALIASES });
      if (node === null) return null;
      return node.toJS(this.doc, { maxAliasCount: MAX_CONFIG_ALIASES });
    } catch (err) {
      // yaml's ReferenceError of an alias expanded too often, or anything else it cannot turn into values.
      if (!(err instanceof Error) || err instanceof ConfigFileError) throw err;
      const at = node ? this.positionOf(node) : undefined;
      throw ConfigFileError.of(this.style, { file: this.file, line: at?.line, col: at?.col, problem: `${this.style.syntaxPrefix ?? ''}${err.message}` });
    }
  }

  /** An error at a node (its line and column) or at no position. */
  error(node: unknown, problem: string, field?: string): ConfigFileError {
    const at = this.positionOf(node);
    return ConfigFileError.of(this.style, { file: this.file, line: at?.line, col: at?.col, field, problem });
  }
}

export interface ParseConfigOptions {
  /** Names the file in errors. */
  file: string;
  style: ConfigErrorStyle;
  /** A `.json` file: held to strict JSON (JSON.parse) before it is read as YAML. */
  json?: boolean;
  maxBytes?: number;
}

/** The line (1-based) of a character offset of a text. */
function lineOfOffset(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** The text's own bounds: its size, strict JSON when asked. */
function checkText(text: string, o: ParseConfigOptions): void {
  const max = o.maxBytes ?? MAX_CONFIG_FILE_BYTES;
  if (text.length > max && Buffer.byteLength(text, 'utf8') > max) throw ConfigFileError.of(o.style, { file: o.file, problem: `larger than ${max} bytes`, code: 'TOO_BIG' });
  if (o.json) {
    try {
      JSON.parse(text);
    } catch (err) {
      const message = (err as Error).message;
      const at = /position (\d+)/.exec(message);
      throw ConfigFileError.of(o.style, { file: o.file, line: at ? lineOfOffset(text, Number(at[1])) : undefined, problem: `not valid JSON: ${message.replace(/ in JSON at position \d+.*$/, '')}` });
    }
  }
}

/** A document's first error (syntax, or past a bound of config-yaml.ts) as a ConfigFileError; undefined: none. */
function syntaxError(doc: Document.Parsed, lines: LineCounter, o: ParseConfigOptions): ConfigFileError | undefined {
  const syntax = doc.errors[0];
  if (!syntax) return undefined;
  const pos = syntax.linePos?.[0] ?? lines.linePos(syntax.pos[0]);
  const message = syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
  return ConfigFileError.of(o.style, { file: o.file, line: pos.line, col: pos.col, problem: `${o.style.syntaxPrefix ?? ''}${message}` });
}

/** Parses a configuration text of one document (YAML or JSON) within the limits; throws a ConfigFileError. */
export function parseConfig(text: string, o: ParseConfigOptions): ConfigDoc {
  checkText(text, o);
  const lines = new (yaml().LineCounter)();
  const doc = parseConfigDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const err = syntaxError(doc, lines, o);
  if (err) throw err;
  return new ConfigDoc(o.file, o.style, doc, lines);
}

/** Parses a configuration text of several documents (`---` between them) within the limits; throws a ConfigFileError for the first error. */
export function parseConfigAll(text: string, o: ParseConfigOptions): ConfigDoc[] {
  checkText(text, o);
  const lines = new (yaml().LineCounter)();
  const docs = parseConfigDocuments(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  for (const doc of docs) {
    const err = syntaxError(doc, lines, o);
    if (err) throw err;
  }
  return docs.map((doc) => new ConfigDoc(o.file, o.style, doc, lines));
}
