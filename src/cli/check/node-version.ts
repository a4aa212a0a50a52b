/**
 * `mesh check`: a Node.js version past its end of life is a warning, which says whether mesh
 * still supports it and which Node.js to use instead (README.md, "Supported Node.js versions",
 * says the same: test/project/node-versions.test.ts holds them together).
 */
import type { Finding } from './finding.js';

/** End-of-life dates of the Node.js major versions (https://nodejs.org/en/about/previous-releases). */
export const NODE_EOL: Readonly<Record<number, string>> = {
  18: '2025-04-30',
  20: '2026-04-30',
  22: '2027-04-30',
  24: '2028-04-30',
};

/** The Node.js majors mesh supports (package.json `engines`: 20.18.1 or later), oldest first. */
export const SUPPORTED_NODE: readonly number[] = [20, 22, 24];

/** The recommended one: CI (.ci/run) runs the whole suite on it, and the image (deploy/Dockerfile) ships it. */
export const RECOMMENDED_NODE = 24;

const pastEol = (major: number, now: number): boolean => {
  const eol = NODE_EOL[major];
  return eol !== undefined && Date.parse(`${eol}T00:00:00Z`) <= now;
};

/** `use Node.js 24 (recommended) or 22`: the recommended major, then the other supported ones still maintained at `now`, newest first. */
export function nodeAdvice(now: number): string {
  const others = SUPPORTED_NODE.filter((m) => m !== RECOMMENDED_NODE && !pastEol(m, now)).sort((a, b) => b - a);
  return `use Node.js ${[`${RECOMMENDED_NODE} (recommended)`, ...others].join(' or ')}`;
}

export function checkNodeVersion(version: string, now: number): Finding[] {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  const support = SUPPORTED_NODE.includes(major) ? 'mesh still supports it' : 'mesh does not support it';
  const eol = NODE_EOL[major];
  if (eol === undefined) {
    if (major < Math.min(...Object.keys(NODE_EOL).map(Number))) return [{ level: 'warning', check: 'node_version', message: `Node.js ${version} is past its end of life (${support}): ${nodeAdvice(now)}` }];
    return [];
  }
  if (!pastEol(major, now)) return [];
  return [{ level: 'warning', check: 'node_version', message: `Node.js ${version} reached its end of life on ${eol} (${support}): ${nodeAdvice(now)}` }];
}
