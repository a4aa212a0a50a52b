/** Build identity, read once from package.json and git (when available) for /server_info and --version. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { packageRoot } from './codec/api-proto.js';

function readVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

function readGit(): { sha: string; modified: boolean } {
  try {
    const root = packageRoot();
    const sha = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
    return { sha: /^[0-9a-f]{40}$/.test(sha) ? sha : '0'.repeat(40), modified: dirty !== '' };
  } catch {
    return { sha: '0'.repeat(40), modified: false };
  }
}

export const VERSION = readVersion();

let build: { sha: string; modified: boolean } | undefined;
/** Git SHA and whether the tree was modified; computed on first use (it runs git). */
export function buildInfo(): { sha: string; modified: boolean; version: string } {
  build ??= readGit();
  return { ...build, version: VERSION };
}
