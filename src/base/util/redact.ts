/**
 * The one home for showing a URL that may carry a secret: in admin /config_dump, in log lines and
 * in error messages. A URL's user information (`user:password@`), every value of its query and
 * its fragment are replaced by `REDACTED`; its scheme, host, port and path stay, so a reader
 * still sees where it points. Works on a whole text: every URL in it (`scheme://...`, several
 * in a comma list) and every `user:password@host` without a scheme (an etcd address) is redacted.
 * Linear in the text's length (no backtracking regex).
 */

export const REDACTED = 'REDACTED';

/** Characters that end a URL in a text. */
const URL_END = /[\s"'<>`]/;

/** The text with the secrets of every URL in it replaced by REDACTED (see the module comment). */
export function redactUrl(text: string): string {
  if (!text.includes('@') && !text.includes('?') && !text.includes('#')) return text;
  let out = '';
  let token = '';
  for (const c of text) {
    if (URL_END.test(c)) {
      out += redactToken(token) + c;
      token = '';
    } else token += c;
  }
  return out + redactToken(token);
}

/** One run of text without spaces or quotes: the URLs of a comma list, each redacted. */
function redactToken(token: string): string {
  if (token === '' || (!token.includes('@') && !token.includes('?') && !token.includes('#'))) return token;
  // A comma followed by a scheme starts the next URL of a list; any other comma is part of a URL.
  const parts = token.split(/,(?=[a-z][a-z0-9+.-]*:\/\/)/i);
  return parts.map(redactOne).join(',');
}

function redactOne(part: string): string {
  const sep = part.indexOf('://');
  let prefix = '';
  let rest = part;
  if (sep !== -1) {
    prefix = part.slice(0, sep + 3);
    rest = part.slice(sep + 3);
  } else {
    // Not a URL: only user:password@host is redacted; anything else (a path, an e-mail address) stays.
    const at = part.indexOf('@');
    const head = at === -1 ? '' : part.slice(0, at);
    if (!head.includes(':') || /[/?#]/.test(head)) return part;
  }
  // The authority ends at the first /, ? or #; its user information at its last @.
  let end = rest.search(/[/?#]/);
  if (end === -1) end = rest.length;
  const at = rest.lastIndexOf('@', end - 1);
  let authority = rest.slice(0, end);
  if (at !== -1) authority = `${REDACTED}@${rest.slice(at + 1, end)}`;
  if (sep === -1) return authority + rest.slice(end);
  let tail = rest.slice(end);
  const hash = tail.indexOf('#');
  let fragment = '';
  if (hash !== -1) {
    fragment = hash === tail.length - 1 ? '#' : `#${REDACTED}`;
    tail = tail.slice(0, hash);
  }
  const q = tail.indexOf('?');
  if (q !== -1) {
    const query = tail
      .slice(q + 1)
      .split('&')
      .map((pair) => {
        if (pair === '') return pair;
        const eq = pair.indexOf('=');
        if (eq === -1) return REDACTED;
        return eq === pair.length - 1 ? pair : `${pair.slice(0, eq)}=${REDACTED}`;
      })
      .join('&');
    tail = `${tail.slice(0, q)}?${query}`;
  }
  return prefix + authority + tail + fragment;
}
