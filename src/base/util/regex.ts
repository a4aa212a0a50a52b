/**
 * Regex safety: literal text escaped for the patterns we build (escapeRegExp), and regexes that
 * come from outside (gateway route metadata, `mesh proxy` config files, the admin's
 * `/stats?filter=`), matched in linear time.
 *
 * They are compiled and run by re2js, a port of RE2 (loaded with the first regex,
 * src/base/util/lazy-packages.ts): no backtracking, so a pattern like
 * `^/(a+)+$` or `^/\d+\d+\d+$` costs time proportional to (program size x path length), never
 * exponential or polynomial in the path. What RE2 cannot do in linear time (backreferences,
 * lookahead, lookbehind) is refused at compile time. Three bounds make the cost small:
 *   - the pattern is at most MAX_REGEX_LENGTH characters;
 *   - its compiled program is at most MAX_REGEX_PROGRAM_SIZE instructions (counted repetitions
 *     like `[a-z]{1,500}` expand; the size is estimated before compiling, so compiling is cheap
 *     too, and checked after);
 *   - a path longer than MAX_REGEX_PATH_LENGTH characters does not match any regex (it is not run).
 */
import type { RE2JS } from 're2js';
import { re2js } from './lazy-packages.js';

/**
 * `text` as a regex that matches it literally: every character with a meaning in a JavaScript
 * (or RE2) pattern outside a class, `.*+?^${}()|[]\`, gets a backslash; others are kept
 * (`a.b*` → `a\.b\*`). For literal text inside a pattern we build (route templates, stat
 * prefixes), not inside a character class.
 */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Longest regex source accepted. */
export const MAX_REGEX_LENGTH = 1024;
/** Largest compiled program (RE2 instructions) accepted: bounds the cost per path character. */
export const MAX_REGEX_PROGRAM_SIZE = 400;
/** Longest path a regex runs on; a longer path does not match. */
export const MAX_REGEX_PATH_LENGTH = 2048;

/** A compiled outside regex; it matches the WHOLE path (as if it started with `^` and ended with `$`). */
export interface PathRegex {
  readonly source: string;
  /** True when the whole path matches (always false for a path longer than MAX_REGEX_PATH_LENGTH). */
  test(path: string): boolean;
  /** The named groups that took part in the match when the whole path matches, else undefined. */
  exec(path: string): Record<string, string> | undefined;
}

/**
 * An upper estimate of the RE2 program size of a pattern, computed in one pass without compiling
 * (compiling a pattern that expands to many thousand instructions itself takes long). Counted
 * repetitions multiply the size of what they repeat.
 */
export function estimateProgramSize(source: string): number {
  // One frame per open group: the size so far, and the size of its last atom (what a quantifier applies to).
  const stack: Array<{ size: number; last: number }> = [{ size: 0, last: 0 }];
  const top = () => stack[stack.length - 1]!;
  const atom = (w: number) => {
    const f = top();
    f.size += w;
    f.last = w;
  };
  const requantify = (w: number) => {
    const f = top();
    f.size += w - f.last;
    f.last = w;
  };
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === '\\') {
      // \pL, \p{Greek}, \x{1F600}: one atom.
      const next = source[i + 1];
      if ((next === 'p' || next === 'P' || next === 'x') && source[i + 2] === '{') {
        const end = source.indexOf('}', i);
        i = end < 0 ? source.length : end;
      } else i++;
      atom(1);
      continue;
    }
    if (c === '[') {
      // A class is one instruction.
      i = classEnd(source, i);
      atom(1);
      continue;
    }
    if (c === '(') {
      stack.push({ size: 0, last: 0 });
      continue;
    }
    if (c === ')') {
      if (stack.length > 1) {
        const inner = stack.pop()!;
        atom(inner.size + 2);
      }
      continue;
    }
    if (c === '|') {
      const f = top();
      f.size += 1;
      f.last = 0;
      continue;
    }
    if (c === '*' || c === '+' || c === '?') {
      requantify(top().last + 2);
      continue;
    }
    if (c === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(i, i + 24));
      if (m) {
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === '' ? min + 1 : Number(m[3]);
        requantify(top().last * Math.max(min, max, 1) + Math.max(max - min, 0) + 2);
        i += m[0].length - 1;
        continue;
      }
    }
    atom(1);
  }
  let size = 0;
  for (const f of stack) size += f.size;
  return size + 2;
}

/**
 * Compiles an outside regex (RE2 syntax) under the bounds above. Throws an Error naming the
 * pattern and saying why it is refused: too long, too large once expanded, invalid, or a construct
 * RE2 does not have (backreferences, lookaround).
 */
function compileBounded(source: string): RE2JS {
  const quoted = JSON.stringify(source.length > 80 ? source.slice(0, 80) + '...' : source);
  if (source.length > MAX_REGEX_LENGTH) throw new Error(`regex ${quoted} is longer than ${MAX_REGEX_LENGTH} characters`);
  const tooLarge = (size: number) =>
    new Error(`regex ${quoted} is too complex: about ${size} instructions once repetitions are expanded (at most ${MAX_REGEX_PROGRAM_SIZE})`);
  const estimate = estimateProgramSize(source);
  if (estimate > MAX_REGEX_PROGRAM_SIZE) throw tooLarge(estimate);
  let re: RE2JS;
  try {
    re = re2js().RE2JS.compile(source);
  } catch (err) {
    const message = (err as Error).message.replace(/^error parsing regexp: /, '');
    const hint = /\\[1-9]|\\k<|\(\?<?[=!]/.test(source) ? ' (RE2 syntax: no backreferences, lookahead or lookbehind)' : '';
    throw new Error(`invalid regex ${quoted}: ${message}${hint}`);
  }
  const size = re.programSize();
  if (size > MAX_REGEX_PROGRAM_SIZE) throw tooLarge(size);
  return re;
}

/**
 * Compiles an outside regex (RE2 syntax) matching whole paths. Throws an Error naming the pattern
 * and saying why it is refused (compileBounded).
 */
export function compilePathRegex(source: string): PathRegex {
  const re = compileBounded(source);
  const names = Object.keys(re.namedGroups());
  return {
    source,
    test: (path) => path.length <= MAX_REGEX_PATH_LENGTH && re.matcher(path).matches(),
    exec: (path) => {
      if (path.length > MAX_REGEX_PATH_LENGTH) return undefined;
      const m = re.matcher(path);
      if (!m.matches()) return undefined;
      const params: Record<string, string> = {};
      for (const name of names) {
        const value = m.group(name);
        if (value !== null) params[name] = value;
      }
      return params;
    },
  };
}

/**
 * The literal text every string a regex matches as a whole (compilePathRegex) starts with:
 * `/svc/items/[0-9]+` → `/svc/items/`, `/a\\.b[cd]` → `/a.b`. Read up to the first character
 * with a meaning (a class, group, alternation, escape of a letter or digit, anchor); a literal a
 * quantifier may apply to (`/ab*`, `/ab?`, `/ab{0,2}`, `/ab+`, `/ab(?i)*`) or before an anchor
 * is left out (`/a/(b|c)` → `/a`), and a pattern with an
 * alternation outside any group (`/a|/b`), or that starts with a group or flags (`(?i)/a`), has
 * none (``), nor one quoting with `\Q...\E`; the prefix ends before the first character past
 * ASCII. A leading `^` is skipped (the whole string is matched anyway). Conservative: any
 * string the regex matches starts with it; it serves as an index of many regexes.
 */
export function literalPrefix(source: string): string {
  // RE2's quoting (`\Q...\E`) can hide a `|` or a `(` from the reading below, and a quantifier
  // after `\E` applies to the quoted text: no prefix is claimed for it.
  if (source.includes('\\Q') || topLevelAlternation(source)) return '';
  let out = '';
  let i = source.startsWith('^') ? 1 : 0;
  for (; i < source.length; i++) {
    const c = source[i]!;
    if (c === '\\') {
      const next = source[i + 1];
      if (next === undefined || /[0-9A-Za-z]/.test(next) || next.charCodeAt(0) > 0x7e) break;
      out += next;
      i++;
      continue;
    }
    if ('.+*?()|[]{}^$'.includes(c)) {
      // A quantifier applies to the last literal: it may be absent (or repeated), so it goes; so
      // does it before a group (flags such as `(?i)` make no operand: `b(?i)*` repeats the `b`)
      // and an anchor.
      if ('*?+{(^$'.includes(c)) out = out.slice(0, -1);
      break;
    }
    // A character past ASCII (an astral one is two code units a quantifier takes whole): stop before it.
    if (c.charCodeAt(0) > 0x7e) break;
    out += c;
  }
  return out;
}

/** True when `source` has a `|` outside every group and class (the prefix of one side says nothing of the other). */
function topLevelAlternation(source: string): boolean {
  let depth = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === '\\') i++;
    else if (c === '[') i = classEnd(source, i);
    else if (c === '(') depth++;
    else if (c === ')') depth = Math.max(0, depth - 1);
    else if (c === '|' && depth === 0) return true;
  }
  return false;
}

/** A compiled outside regex searched anywhere in a name (anchor it with `^...$` for the whole name). */
export interface SearchRegex {
  readonly source: string;
  /** True when the regex matches somewhere in `name`. */
  test(name: string): boolean;
}

/**
 * Compiles an outside regex (RE2 syntax) that is searched in names rather than matched against a
 * whole path: the admin's `/stats?filter=`, as Envoy's `std::regex_search`/RE2 `PartialMatch`. Same
 * bounds and errors as compilePathRegex. The names it runs on are the process's own (stat and
 * metric names), not request input, so they are not length-capped: a test costs at most
 * (program size x name length).
 */
export function compileSearchRegex(source: string): SearchRegex {
  const re = compileBounded(source);
  return { source, test: (name) => re.test(name) };
}

/**
 * A glob over names (service names, hosts): `*` matches any run of characters (dots included),
 * `?` one character, everything else itself; the whole name must match. Matched by the classic
 * two-pointer walk (back to the last `*` on a mismatch): time at most pattern × name, no regex.
 */
export function globMatcher(pattern: string): (name: string) => boolean {
  if (!pattern.includes('*') && !pattern.includes('?')) return (name) => name === pattern;
  return (name) => {
    let p = 0;
    let n = 0;
    let star = -1;
    let mark = 0;
    while (n < name.length) {
      const c = pattern[p];
      if (c === '?' || (c !== undefined && c !== '*' && c === name[n])) {
        p++;
        n++;
      } else if (c === '*') {
        star = p++;
        mark = n;
      } else if (star !== -1) {
        p = star + 1;
        n = ++mark;
      } else return false;
    }
    while (pattern[p] === '*') p++;
    return p === pattern.length;
  };
}

/** A matcher of several globs: true when any matches. */
export function globsMatcher(patterns: readonly string[]): (name: string) => boolean {
  const matchers = patterns.map(globMatcher);
  return (name) => matchers.some((m) => m(name));
}

/**
 * The index of the `]` that ends the character class opening at `start` (or the end of the
 * source): a `]` first in the class (or after `^`), an escaped one, and those of `[:alpha:]` are
 * part of it.
 */
function classEnd(source: string, start: number): number {
  let j = start + 1;
  if (source[j] === '^') j++;
  if (source[j] === ']') j++;
  for (; j < source.length && source[j] !== ']'; j++) {
    if (source[j] === '\\') j++;
    else if (source[j] === '[' && source[j + 1] === ':') {
      const end = source.indexOf(':]', j + 2);
      if (end > 0) j = end + 1;
    }
  }
  return j;
}
