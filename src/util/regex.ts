/** Checks on regexes that come from outside (route metadata, config files). */

/** Longest regex source accepted. */
export const MAX_REGEX_LENGTH = 1024;

/**
 * Checks a regex source for what makes backtracking explode: a quantified group that itself
 * contains a quantifier or an alternation (`(a+)+`, `(a|aa)*`), and backreferences. Returns the
 * problem, or undefined when the pattern is acceptable.
 */
export function regexHazard(source: string): string | undefined {
  if (/\\[1-9]|\\k</.test(source)) return 'backreferences are not allowed';
  // A stack of groups: does the group contain a quantifier or an alternation?
  const stack: Array<{ risky: boolean }> = [];
  let inClass = false;
  let lastAtomRisky = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === '\\') {
      i++;
      lastAtomRisky = false;
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
      continue;
    }
    const quantifier = c === '*' || c === '+' || (c === '{' && /^\{\d+(,\d*)?\}/.test(source.slice(i)));
    if (quantifier) {
      if (lastAtomRisky) return 'nested quantifiers (like (a+)+) are not allowed';
      if (stack.length) stack[stack.length - 1]!.risky = true;
      if (c === '{') i = source.indexOf('}', i);
      lastAtomRisky = false;
      continue;
    }
    switch (c) {
      case '[':
        inClass = true;
        lastAtomRisky = false;
        break;
      case '(':
        stack.push({ risky: false });
        lastAtomRisky = false;
        break;
      case ')': {
        const group = stack.pop();
        lastAtomRisky = group?.risky ?? false;
        if (group?.risky && stack.length) stack[stack.length - 1]!.risky = true;
        break;
      }
      case '|':
        if (stack.length) stack[stack.length - 1]!.risky = true;
        lastAtomRisky = false;
        break;
      case '?':
        // `?` after a group is a quantifier too, but bounded: (a+)? is linear.
        break;
      default:
        lastAtomRisky = false;
    }
  }
  return undefined;
}
