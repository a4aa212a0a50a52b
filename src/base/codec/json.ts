/**
 * JSON that keeps integers beyond 2^53 exact: they decode as BigInt and encode back as the same
 * digits. Everything else behaves like JSON.parse / JSON.stringify, except that arrays and objects
 * nested deeper than MAX_JSON_DEPTH are refused (JsonDepthError): code that walks a decoded value
 * recursively (JSON.stringify, protobuf encoding) then never overflows the stack.
 */

/** Deepest nesting of arrays and objects accepted when parsing (`[[1]]` is 2 deep). */
export const MAX_JSON_DEPTH = 64;

export class JsonSyntaxError extends SyntaxError {
  constructor(message: string, readonly position: number) {
    super(`${message} at position ${position}`);
    this.name = 'JsonSyntaxError';
  }
}

/** Arrays and objects nested deeper than MAX_JSON_DEPTH. */
export class JsonDepthError extends SyntaxError {
  constructor(readonly limit: number = MAX_JSON_DEPTH) {
    super(`JSON nesting deeper than ${limit} levels of arrays and objects`);
    this.name = 'JsonDepthError';
  }
}

/**
 * True when brackets outside strings nest deeper than max. A scan without parsing, cheap next to
 * JSON.parse (long strings are skipped with indexOf); the text need not be valid JSON. A Buffer
 * is scanned as bytes (UTF-8 never hides a quote, a backslash or a bracket in a multi-byte character).
 */
export function jsonNestingExceeds(input: string | Uint8Array, max: number = MAX_JSON_DEPTH): boolean {
  // Deeper than max needs more than max opening brackets (and as many characters).
  if (input.length <= max) return false;
  const text = typeof input === 'string' ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength).toString('latin1');
  return (scanJson(text, max) & TOO_DEEP) !== 0;
}

/** scanJson: brackets nest deeper than max. */
const TOO_DEEP = 1;
/** scanJson: a run of 16 or more digits outside strings, the only way to write an integer beyond 2^53. */
const LONG_DIGITS = 2;

/**
 * One pass over JSON text outside its strings: TOO_DEEP (then it stops) and LONG_DIGITS. Digits
 * inside strings do not count, so an id or a timestamp in a string keeps the native parser.
 */
function scanJson(text: string, max: number): number {
  const n = text.length;
  let depth = 0;
  let digits = 0;
  let found = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x30 && c <= 0x39) {
      if (++digits >= 16) found |= LONG_DIGITS;
      continue;
    }
    digits = 0;
    if (c === 0x22) {
      // A string: a short one char by char, then indexOf for the closing quote that is not
      // escaped (preceded by an even run of backslashes).
      let j = i + 1;
      const stop = Math.min(n, j + 64);
      for (; j < stop; j++) {
        const d = text.charCodeAt(j);
        if (d === 0x5c) j++;
        else if (d === 0x22) break;
      }
      if (j < stop) {
        i = j;
        continue;
      }
      for (;;) {
        const q = text.indexOf('"', j);
        if (q < 0) return found; // unterminated: the parser says so
        let b = q - 1;
        while (text.charCodeAt(b) === 0x5c) b--;
        j = q + 1;
        if ((q - 1 - b) % 2 === 0) break;
      }
      i = j - 1;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return found | TOO_DEEP;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return found;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Parses JSON text; throws a JsonSyntaxError, or a JsonDepthError beyond MAX_JSON_DEPTH. */
export function parseJson(text: string): unknown {
  const scan = scanJson(text, MAX_JSON_DEPTH);
  if (scan & TOO_DEEP) throw new JsonDepthError();
  // Fast path: when no long integer literal can be present, the native parser is exact.
  if (!(scan & LONG_DIGITS)) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new JsonSyntaxError((err as Error).message.replace(/ at position \d+.*$/s, ''), 0);
    }
  }
  let i = 0;
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else break;
    }
  };
  const fail = (what: string): never => {
    throw new JsonSyntaxError(i >= text.length ? 'Unexpected end of JSON input' : `${what} "${text[i]}"`, i);
  };
  const value = (depth: number): unknown => {
    if (depth > MAX_JSON_DEPTH) throw new JsonDepthError();
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      const obj: Record<string, unknown> = {};
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('Expected property name, found');
        const key = string();
        ws();
        if (text[i] !== ':') fail('Expected ":", found');
        i++;
        const v = value(depth + 1);
        // As JSON.parse: "__proto__" is an own property, never the object's prototype.
        if (key === '__proto__') Object.defineProperty(obj, key, { value: v, writable: true, enumerable: true, configurable: true });
        else obj[key] = v;
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        fail('Expected "," or "}", found');
      }
    }
    if (c === '[') {
      i++;
      const arr: unknown[] = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        fail('Expected "," or "]", found');
      }
    }
    if (c === '"') return string();
    if (text.startsWith('true', i)) return (i += 4), true;
    if (text.startsWith('false', i)) return (i += 5), false;
    if (text.startsWith('null', i)) return (i += 4), null;
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) return fail('Unexpected token');
    i += m[0].length;
    const literal = m[0];
    if (/^-?\d+$/.test(literal)) {
      const n = Number(literal);
      return Number.isSafeInteger(n) ? n : BigInt(literal);
    }
    return Number(literal);
  };
  const string = (): string => {
    const start = i;
    i++;
    let escaped = false;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x5c) {
        escaped = true;
        i += 2;
        continue;
      }
      if (c === 0x22) break;
      if (c < 0x20) fail('Bad control character in string literal');
      i++;
    }
    if (i >= text.length) fail('Unterminated string');
    i++;
    const raw = text.slice(start, i);
    return escaped ? (JSON.parse(raw) as string) : raw.slice(1, -1);
  };
  const result = value(0);
  ws();
  if (i < text.length) fail('Unexpected non-whitespace character after JSON');
  return result;
}

/**
 * JSON.stringify, except that BigInt values are written as their digits. Plain JSON.stringify (the
 * native fast path) first; only a value it cannot serialise (a BigInt: "Do not know how to
 * serialize a BigInt") takes the slower replacer path, which also reproduces any other TypeError.
 */
export function stringifyJson(value: unknown): string {
  let out: string | undefined;
  try {
    out = JSON.stringify(value);
  } catch (err) {
    if (err instanceof TypeError) return stringifyWithBigInt(value);
    throw err;
  }
  return out === undefined ? 'null' : out;
}

function stringifyWithBigInt(value: unknown): string {
  let hasBig = false;
  const out = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === 'bigint') {
      hasBig = true;
      return `\u0000big:${v.toString()}\u0000`;
    }
    return v;
  });
  if (out === undefined) return 'null';
  return hasBig ? out.replace(/"\\u0000big:(-?\d+)\\u0000"/g, '$1') : out;
}
