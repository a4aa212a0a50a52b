/**
 * Request paths as the front ends see them (docs/security.md, "How paths are matched"): one
 * normal form, made once per request before the rate limit, the auth rules, the route match and
 * the forwarded request, so all of them read the path a decoding backend will read.
 *
 * The target as a whole (path, query, normal form) is parsed once per request by target.ts.
 *
 * The normal form (RFC 3986 6.2.2): percent-encoded unreserved characters (ALPHA DIGIT - . _ ~)
 * decoded, the hex of every other escape in upper case, dot segments removed (RFC 3986 5.2.4,
 * `%2e` included). What cannot be normalized safely is refused: an encoded `/`, `\` or NUL, an
 * invalid escape, a backslash, `;` (path parameters, raw or encoded), an empty segment (`//`),
 * `..` above the root, a fragment, and a target that is not a path. The query is never touched.
 *
 * Rules compare paths fully decoded (`decodedPath`, one character per byte), so a rule covers
 * every spelling of its path.
 */

/** A path the normalizer refuses, with the reason (the detail of the 400). */
export interface PathRefusal {
  refused: string;
}

export type NormalizedPath = { path: string } | PathRefusal;

export const PATH_REFUSALS = {
  notAPath: 'invalid path: the request target must be a path starting with "/"',
  character: 'invalid path: a space, control or non-ASCII character must be percent-encoded',
  backslash: 'invalid path: a backslash is refused',
  fragment: 'invalid path: "#" is refused (a fragment is never sent)',
  escape: 'invalid path: "%" must be followed by two hex digits',
  slash: 'invalid path: an encoded "/" (%2F) is refused',
  encodedBackslash: 'invalid path: an encoded backslash (%5C) is refused',
  nul: 'invalid path: an encoded NUL (%00) is refused',
  parameters: 'invalid path: ";" (path parameters) is refused',
  encodedParameters: 'invalid path: an encoded ";" (%3B) is refused',
  emptySegment: 'invalid path: an empty segment ("//") is refused',
  aboveRoot: 'invalid path: ".." climbs above the root',
} as const;

/** Anything that may need work: a non-path, a character to check, an escape, a dot segment, `//`. */
const NEEDS_WORK = /^[^/]|[^\x21-\x7e]|[%;\\#]|\/\.|\/\//;

function isUnreserved(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2e || c === 0x5f || c === 0x7e;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  return l >= 0x61 && l <= 0x66 ? l - 0x61 + 10 : -1;
}

const refuse = (why: keyof typeof PATH_REFUSALS): PathRefusal => ({ refused: PATH_REFUSALS[why] });

/** The normal form of a path (no query), or why it is refused. */
export function normalizePath(raw: string): NormalizedPath {
  if (!NEEDS_WORK.test(raw)) return { path: raw };
  if (raw.charCodeAt(0) !== 0x2f) return refuse('notAPath');
  let out = '';
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return refuse('character');
    if (c === 0x5c) return refuse('backslash');
    if (c === 0x23) return refuse('fragment');
    if (c === 0x3b) return refuse('parameters');
    if (c !== 0x25) {
      out += raw[i];
      continue;
    }
    const hi = hexValue(raw.charCodeAt(i + 1));
    const lo = hexValue(raw.charCodeAt(i + 2));
    if (hi < 0 || lo < 0) return refuse('escape');
    const b = hi * 16 + lo;
    if (b === 0x2f) return refuse('slash');
    if (b === 0x5c) return refuse('encodedBackslash');
    if (b === 0x00) return refuse('nul');
    if (b === 0x3b) return refuse('encodedParameters');
    out += isUnreserved(b) ? String.fromCharCode(b) : `%${raw.slice(i + 1, i + 3).toUpperCase()}`;
    i += 2;
  }
  // Dot segments (RFC 3986 5.2.4), except that `..` at the root is refused, not dropped.
  const segments = out.split('/');
  const kept: string[] = [];
  for (let k = 1; k < segments.length; k++) {
    const s = segments[k]!;
    const last = k === segments.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') {
        if (kept.length === 0) return refuse('aboveRoot');
        kept.pop();
      }
      if (last) kept.push('');
      continue;
    }
    if (s === '' && !last) return refuse('emptySegment');
    kept.push(s);
  }
  return { path: `/${kept.join('/')}` };
}

/** A normalized path fully percent-decoded: one character per byte (a backend's view, as WSGI's PATH_INFO). */
export function decodedPath(path: string): string {
  return path.includes('%') ? path.replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))) : path;
}

/** ASCII letters in lower case, every other character kept (for rules that match without case). */
export function asciiLower(text: string): string {
  return /[A-Z]/.test(text) ? text.replace(/[A-Z]+/g, (m) => m.toLowerCase()) : text;
}

/**
 * A path written by an operator (a rule's `path`): its characters as UTF-8, the ones a request
 * cannot carry as they are (space, controls, non-ASCII) percent-encoded, then normalized like a
 * request path.
 */
export function configuredPath(text: string): NormalizedPath {
  const bytes = Buffer.from(text, 'utf8').toString('latin1');
  const escaped = bytes.replace(/[^\x21-\x7e]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
  return normalizePath(escaped);
}
