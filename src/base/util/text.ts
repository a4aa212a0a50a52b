/**
 * Text that is printed to a terminal or a line-based format (CLI tables, admin text pages):
 * never a raw control character, so a stored value cannot forge lines or drive the terminal.
 */

/** C0 controls, DEL, C1 controls, the Unicode line/paragraph separators and bidi overrides. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** True when the text holds a character `printable` would escape. */
export function hasControlChars(text: string): boolean {
  CONTROL.lastIndex = 0;
  return CONTROL.test(text);
}

/** The text with each control character written as `\xNN` / `\uNNNN` (a backslash stays as it is). */
export function printable(text: string): string {
  CONTROL.lastIndex = 0;
  if (!CONTROL.test(text)) return text;
  return text.replace(CONTROL, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}

/** How much of one piece of client text a log line holds, unless the caller says otherwise. */
export const CLIENT_TEXT_MAX = 256;

/**
 * Text a client sent, as it goes into a log line: cut to `max` characters first (never between
 * the halves of a surrogate pair), then escaped as `printable` does, then `…(+N)` when N
 * characters were left out. However much the client sent, the result is at most 6 × `max`
 * characters plus the marker (an escape is at most 6), and the work is bounded the same way.
 */
export function clientText(text: string, max = CLIENT_TEXT_MAX): string {
  if (text.length <= max) return printable(text);
  let cut = text.slice(0, max);
  const last = cut.charCodeAt(cut.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
  return `${printable(cut)}…(+${text.length - cut.length})`;
}
