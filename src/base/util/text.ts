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
