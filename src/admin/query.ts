/**
 * Admin query strings, parsed like Envoy's parseAndDecodeQueryString: split on `&`, a key with no
 * `=` gets the value "", the first of duplicate keys wins, keys and values are percent-decoded
 * (`+` stays a plus: it is a regex operator in `filter=`); a malformed escape is kept as it is.
 */
export type Query = ReadonlyMap<string, string>;

function decode(text: string): string {
  if (!text.includes('%')) return text;
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

export function parseQuery(raw: string): Query {
  const out = new Map<string, string>();
  if (!raw) return out;
  for (const part of raw.split('&')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    const key = decode(eq < 0 ? part : part.slice(0, eq));
    const value = eq < 0 ? '' : decode(part.slice(eq + 1));
    if (!out.has(key)) out.set(key, value);
  }
  return out;
}
