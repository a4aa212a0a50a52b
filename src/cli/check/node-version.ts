/** `mesh check`: a Node.js version past its end of life is a warning. */
import type { Finding } from './finding.js';

/** End-of-life dates of the Node.js major versions (https://nodejs.org/en/about/previous-releases). */
export const NODE_EOL: Readonly<Record<number, string>> = {
  18: '2025-04-30',
  20: '2026-04-30',
  22: '2027-04-30',
  24: '2028-04-30',
};

export function checkNodeVersion(version: string, now: number): Finding[] {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  const eol = NODE_EOL[major];
  if (eol === undefined) {
    if (major < Math.min(...Object.keys(NODE_EOL).map(Number))) return [{ level: 'warning', check: 'node_version', message: `Node.js ${version} is past its end of life: use Node.js 22 or 24` }];
    return [];
  }
  if (Date.parse(`${eol}T00:00:00Z`) > now) return [];
  return [{ level: 'warning', check: 'node_version', message: `Node.js ${version} reached its end of life on ${eol}: use Node.js 22 or 24` }];
}
