/**
 * The one reader of the YAML (and JSON) files mesh is configured with: route files, auth rules
 * and API key files, `mesh proxy` configs, `mesh run` files. It is the `yaml` package's
 * parseDocument / parseAllDocuments with one bound: a file nested deeper than MAX_CONFIG_DEPTH
 * levels (mappings and lists inside each other) is refused with the line where it goes too deep,
 * as a syntax error of the document (`doc.errors[0]`, with its `linePos`), so every reader reports
 * it as it reports a syntax error, with its file and line.
 *
 * The parser and composer of `yaml` recurse once per level (its lexer too, for compact lists
 * `- - - x`): a few thousand levels exhaust the stack ("Maximum call stack size exceeded", no
 * file, no line). So the depth is first estimated on the text itself, in one pass without
 * recursion (nestingEstimate): past PARSE_GUARD levels the text is not parsed at all. Below it the
 * document is parsed, and its depth measured exactly on the nodes (without recursion either).
 *
 * The same walk over the nodes holds the other bounds of the document: at most MAX_CONFIG_ALIASES
 * aliases (`*name`; their expansion is bounded where a document becomes values, reader.ts toJS),
 * and no tag but the plain ones of YAML's core schema (`!!str`, `!!int`, ...): a custom tag
 * (`!foo`, `!!binary`, `!!set`) is refused, never read as a string or a Buffer.
 *
 * The readers use this through src/base/config/reader.ts (file read, size bound, positions, errors).
 */
import type { Document, LineCounter, YAMLParseError, Node, DocumentOptions, ParseOptions, SchemaOptions } from 'yaml';
import { isAlias, isMap, isPair, isSeq, yaml } from './lazy-packages.js';

/** Deepest nesting of mappings and lists a configuration file may have. */
export const MAX_CONFIG_DEPTH = 64;

/** Past this estimated depth the text is refused without parsing (the parser is safe far beyond it). */
const PARSE_GUARD = 2 * MAX_CONFIG_DEPTH;

export const TOO_DEEP = `nested deeper than ${MAX_CONFIG_DEPTH} levels`;

/** Most aliases (`*name`) one document may hold; expanding them is bounded by the same number (reader.ts toJS). */
export const MAX_CONFIG_ALIASES = 100;

export const TOO_MANY_ALIASES = `more than ${MAX_CONFIG_ALIASES} aliases`;

/** The tags a node may carry: those of YAML's core schema, which JSON's values are. */
const PLAIN_TAGS = new Set(['str', 'int', 'float', 'bool', 'null', 'map', 'seq'].map((t) => `tag:yaml.org,2002:${t}`));

type Options = ParseOptions & DocumentOptions & SchemaOptions & { lineCounter: LineCounter };

/** Where a text's nesting estimate first goes past `limit`; undefined: it never does. */
export interface DeepAt {
  /** 1-based. */
  line: number;
  /** 1-based. */
  col: number;
  /** The largest estimate seen (a scan stops past PARSE_GUARD). */
  depth: number;
}

/**
 * An estimate of the nesting depth of YAML (or JSON) text, in one pass over its lines with no
 * recursion: block mappings and lists by indentation and their indicators (`key:`, `- `, `? `),
 * flow collections by their brackets, with quoted strings, block scalars (`|`, `>`) and comments
 * skipped. Close to the real depth (within a level or two either way) for any text, so it stands
 * guard in front of the parser; the exact depth is measured on the parsed nodes. Returns where it
 * first exceeds `limit`, and the largest estimate (up to `stopAt`, where the scan stops).
 */
export function nestingEstimate(text: string, limit: number, stopAt = Infinity): DeepAt | undefined {
  let found: DeepAt | undefined;
  /** Lines of block context above this one: their indentation and depth. */
  const stack: Line[] = [];
  let flow = 0;
  let flowBase = 0;
  let quote: '"' | "'" | undefined;
  let quoteDepth = 0;
  /** Inside a block scalar: the indentation its content must exceed. */
  let scalarIndent = -1;
  let lineNo = 0;
  let start = 0;
  const note = (depth: number, col: number): boolean => {
    if (depth > limit) {
      if (!found) found = { line: lineNo, col: col + 1, depth };
      if (depth > found.depth) found.depth = depth;
    }
    return depth > stopAt;
  };
  while (start <= text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const line = text.charCodeAt(end - 1) === 13 ? text.slice(start, end - 1) : text.slice(start, end);
    start = end + 1;
    lineNo++;
    let i = 0;
    while (i < line.length && (line[i] === ' ' || line[i] === '\t')) i++;
    const indent = i;
    const blank = i === line.length;
    if (scalarIndent >= 0) {
      if (blank || indent > scalarIndent) continue;
      scalarIndent = -1;
    }
    let depth: number;
    /** A line that starts in block context is a parent of the more indented lines after it. */
    const startsInBlock = flow === 0 && quote === undefined;
    if (quote !== undefined) {
      i = closeQuote(line, 0, quote);
      if (i < 0) continue;
      depth = quoteDepth;
    } else if (flow > 0) {
      depth = flowBase;
    } else {
      if (blank || line[i] === '#' || (indent === 0 && line[0] === '%')) continue;
      if (indent === 0 && (line.startsWith('---') || line.startsWith('...')) && (line.length === 3 || line[3] === ' ' || line[3] === '\t')) {
        stack.length = 0;
        i = 3;
      }
      let sibling: Line | undefined;
      while (stack.length > 0 && stack[stack.length - 1]!.col >= indent) sibling = stack.pop();
      const parent = stack[stack.length - 1];
      // Under a line that opened nodes inline (`- name: x`), a line at the column of one of them
      // is in it (`  image: y` is in the mapping of `name`); a list at the column of a key
      // left open (`key:` then `- a`) is its value.
      const inline = parent?.inline.find((n) => n.col === indent);
      if (sibling?.openKey && sibling.col === indent && line[i] === '-') depth = sibling.depth;
      else depth = inline ? inline.before : (parent?.depth ?? 0);
    }
    const here: Line = { col: indent, depth: 0, inline: [], openKey: false };
    /** Where the token being read began, and the depth before it. */
    let tokenCol = -1;
    let tokenBefore = 0;
    /** At a place where a value (or key) may start: block indicators, brackets and quotes count. */
    let atValue = quote === undefined;
    quote = undefined;
    let stop = false;
    for (; i < line.length && !stop; i++) {
      const c = line[i]!;
      if (c === ' ' || c === '\t') continue;
      const next = line[i + 1];
      const spaceNext = next === undefined || next === ' ' || next === '\t';
      const prevSpace = i === 0 || line[i - 1] === ' ' || line[i - 1] === '\t';
      if (c === '#' && prevSpace) break;
      if (flow > 0) {
        if (c === '[' || c === '{') {
          flow++;
          stop = note(flowBase + flow, i);
          atValue = true;
        } else if (c === ']' || c === '}') {
          flow--;
          atValue = false;
          if (flow === 0) depth = flowBase;
        } else if (c === ',' || c === ':' || c === '?') atValue = true;
        else if ((c === '"' || c === "'") && atValue) {
          const close = closeQuote(line, i + 1, c);
          if (close < 0) {
            quote = c;
            quoteDepth = flowBase;
            break;
          }
          i = close - 1;
          atValue = false;
        } else atValue = false;
        continue;
      }
      // Block context.
      here.openKey = false;
      if (atValue && (c === '-' || c === '?' || c === ':') && spaceNext) {
        if (here.inline.length < MAX_INLINE) here.inline.push({ col: i, before: depth });
        depth++;
        stop = note(depth, i);
        continue;
      }
      if (c === ':' && spaceNext) {
        if (tokenCol >= 0 && here.inline.length < MAX_INLINE) here.inline.push({ col: tokenCol, before: tokenBefore });
        depth = (tokenCol >= 0 ? tokenBefore : depth) + 1;
        tokenCol = -1;
        stop = note(depth, i);
        atValue = true;
        here.openKey = true;
        continue;
      }
      if (!atValue) continue;
      tokenCol = i;
      tokenBefore = depth;
      if (c === '[' || c === '{') {
        flow = 1;
        flowBase = depth;
        stop = note(depth + 1, i);
        atValue = true;
        continue;
      }
      if (c === '"' || c === "'") {
        const close = closeQuote(line, i + 1, c);
        if (close < 0) {
          quote = c;
          quoteDepth = depth;
          break;
        }
        i = close - 1;
        atValue = false;
        continue;
      }
      if (c === '|' || c === '>') {
        scalarIndent = indent;
        break;
      }
      if (c === '&' || c === '!') {
        while (i + 1 < line.length && line[i + 1] !== ' ' && line[i + 1] !== '\t') i++;
        continue;
      }
      atValue = false; // a plain scalar (its `: ` still counts, above)
    }
    if (stop) return found;
    if (startsInBlock) {
      here.depth = depth;
      stack.push(here);
    }
  }
  return found;
}

/** A line of block context, as a parent of the lines under it. */
interface Line {
  /** Its indentation. */
  col: number;
  /** The depth its last node reached (a line under it starts there). */
  depth: number;
  /** The nodes it opened after its first, by column: the depth before each. */
  inline: Array<{ col: number; before: number }>;
  /** It ends with a key whose value is on the lines below (`key:`). */
  openKey: boolean;
}

/** Most inline nodes remembered of one line (a line opening more is past any limit anyway). */
const MAX_INLINE = 256;

/** The index after the closing quote of a quoted scalar opened before `from`; -1: not on this line. */
function closeQuote(line: string, from: number, q: string): number {
  for (let i = from; i < line.length; i++) {
    const c = line[i];
    if (q === '"' && c === '\\') i++;
    else if (c === q) {
      if (q === "'" && line[i + 1] === "'") i++;
      else return i + 1;
    }
  }
  return -1;
}

/** The error of a text nested too deeply, at a 1-based line and column. */
function tooDeep(lines: LineCounter, offset: number | undefined, at?: { line: number; col: number }): YAMLParseError {
  const err = new (yaml().YAMLParseError)([offset ?? 0, (offset ?? 0) + 1], 'BAD_INDENT', TOO_DEEP);
  err.linePos = [at ?? lines.linePos(offset ?? 0)];
  return err;
}

/** The first node of a document past a bound (too deep, one alias too many, a custom tag): its offset and why; undefined: none. */
function beyondBounds(doc: Document): { offset: number; why: string } | undefined {
  const todo: Array<{ node: unknown; depth: number }> = [{ node: doc.contents, depth: 0 }];
  let aliases = 0;
  while (todo.length > 0) {
    const { node, depth } = todo.pop()!;
    if (isAlias(node)) {
      if (++aliases > MAX_CONFIG_ALIASES) return { offset: node.range?.[0] ?? 0, why: TOO_MANY_ALIASES };
      continue;
    }
    const tag = (node as { tag?: string } | null | undefined)?.tag;
    if (tag !== undefined && !PLAIN_TAGS.has(tag)) return { offset: (node as Node).range?.[0] ?? 0, why: `tag ${tag.replace(/^tag:yaml\.org,2002:/, '!!')} is not allowed (plain YAML or JSON values only)` };
    if (isMap(node) || isSeq(node)) {
      if (depth + 1 > MAX_CONFIG_DEPTH) return { offset: node.range?.[0] ?? 0, why: TOO_DEEP };
      for (let k = node.items.length - 1; k >= 0; k--) {
        const item: unknown = node.items[k];
        if (isPair(item)) {
          todo.push({ node: item.value, depth: depth + 1 });
          todo.push({ node: item.key, depth: depth + 1 });
        } else todo.push({ node: item, depth: depth + 1 });
      }
    }
  }
  return undefined;
}

/** The error of a document past a bound, at the node's line and column. */
function beyond(lines: LineCounter, at: { offset: number; why: string }): YAMLParseError {
  const err = new (yaml().YAMLParseError)([at.offset, at.offset + 1], 'BAD_INDENT', at.why);
  err.linePos = [lines.linePos(at.offset)];
  return err;
}

/** A document that stands for a text refused before parsing: no contents, the one error. */
function refused(options: Options, err: YAMLParseError): Document.Parsed {
  const doc = new (yaml().Document)(null, options) as Document.Parsed;
  doc.errors.push(err);
  return doc;
}

/** A guess made on the text that the parser could not confirm: the parser ran out of stack. */
function isStackOverflow(err: unknown): boolean {
  return err instanceof RangeError && /call stack/i.test(err.message);
}

/**
 * `yaml`'s parseDocument with the nesting bound: a text nested deeper than MAX_CONFIG_DEPTH is a
 * document whose first error says so, at its line.
 */
export function parseConfigDocument(text: string, options: Options): Document.Parsed {
  const guess = nestingEstimate(text, MAX_CONFIG_DEPTH, PARSE_GUARD);
  if (guess && guess.depth > PARSE_GUARD) return refused(options, tooDeep(options.lineCounter, undefined, guess));
  let doc: Document.Parsed;
  try {
    doc = yaml().parseDocument(text, options);
  } catch (err) {
    if (!isStackOverflow(err)) throw err;
    return refused(options, tooDeep(options.lineCounter, undefined, guess ?? { line: 1, col: 1 }));
  }
  if (doc.errors.length > 0) return doc;
  const bad = beyondBounds(doc);
  if (bad !== undefined) doc.errors.unshift(beyond(options.lineCounter, bad));
  return doc;
}

/**
 * `yaml`'s parseAllDocuments with the nesting bound: a text nested deeper than MAX_CONFIG_DEPTH
 * gives one document (the first that goes too deep, or one standing for the text) whose first
 * error says so, at its line.
 */
export function parseConfigDocuments(text: string, options: Options): Document.Parsed[] {
  const guess = nestingEstimate(text, MAX_CONFIG_DEPTH, PARSE_GUARD);
  if (guess && guess.depth > PARSE_GUARD) return [refused(options, tooDeep(options.lineCounter, undefined, guess))];
  let docs: Document.Parsed[];
  try {
    const all = yaml().parseAllDocuments(text, options);
    docs = Array.isArray(all) ? all : [];
  } catch (err) {
    if (!isStackOverflow(err)) throw err;
    return [refused(options, tooDeep(options.lineCounter, undefined, guess ?? { line: 1, col: 1 }))];
  }
  for (const doc of docs) {
    if (doc.errors.length > 0) return docs;
    const bad = beyondBounds(doc);
    if (bad !== undefined) {
      doc.errors.unshift(beyond(options.lineCounter, bad));
      return docs;
    }
  }
  return docs;
}
