/**
 * What /server_info, /hot_restart_version and `mesh --hot-restart-version` say about the build.
 *
 * - version: package.json `version` (found upwards from this file, so src/ and dist/src/ agree);
 * - sha: $MESH_BUILD_SHA, else the commit the package's .git points at, else 40 zeros;
 * - status: $MESH_BUILD_STATUS (`Clean` or `Modified`), else `Modified` (a checkout can't be
 *   assumed clean without asking git, which a server does not run);
 * - type: $MESH_BUILD_TYPE (`RELEASE` or `DEBUG`), else `RELEASE`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../base/util/package-root.js';

export type BuildStatus = 'Clean' | 'Modified';
export type BuildType = 'RELEASE' | 'DEBUG';

export interface BuildInfo {
  version: string;
  sha: string;
  status: BuildStatus;
  type: BuildType;
}

const ZERO_SHA = '0'.repeat(40);

function packageDir(): string | undefined {
  try {
    return packageRoot();
  } catch {
    return undefined;
  }
}

let cachedVersion: string | undefined;

/** The package version, e.g. `0.1.0` (`0.0.0` if package.json cannot be found). */
export function packageVersion(): string {
  if (cachedVersion === undefined) {
    cachedVersion = '0.0.0';
    const dir = packageDir();
    if (dir) {
      try {
        const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: string };
        if (typeof pkg.version === 'string') cachedVersion = pkg.version;
      } catch {
        // keep the default
      }
    }
  }
  return cachedVersion;
}

/** Reads the commit HEAD points at from the files of a .git directory (no git process). */
function gitSha(root: string): string | undefined {
  try {
    const gitDir = join(root, '.git');
    const head = readFileSync(join(gitDir, 'HEAD'), 'utf8').trim();
    if (/^[0-9a-f]{40}$/.test(head)) return head;
    const ref = /^ref: (.+)$/.exec(head)?.[1];
    if (!ref) return undefined;
    const refFile = join(gitDir, ref);
    if (existsSync(refFile)) {
      const sha = readFileSync(refFile, 'utf8').trim();
      return /^[0-9a-f]{40}$/.test(sha) ? sha : undefined;
    }
    const packed = readFileSync(join(gitDir, 'packed-refs'), 'utf8');
    for (const line of packed.split('\n')) {
      const [sha, name] = line.split(' ');
      if (name === ref && sha && /^[0-9a-f]{40}$/.test(sha)) return sha;
    }
  } catch {
    // not a checkout
  }
  return undefined;
}

let cachedBuild: BuildInfo | undefined;

export function buildInfo(env: NodeJS.ProcessEnv = process.env): BuildInfo {
  if (env === process.env && cachedBuild) return cachedBuild;
  const dir = packageDir();
  const envSha = env.MESH_BUILD_SHA?.trim();
  const sha = envSha || (dir ? gitSha(dir) : undefined) || ZERO_SHA;
  const status: BuildStatus = env.MESH_BUILD_STATUS === 'Clean' ? 'Clean' : 'Modified';
  const type: BuildType = env.MESH_BUILD_TYPE === 'DEBUG' ? 'DEBUG' : 'RELEASE';
  const info = { version: packageVersion(), sha, status, type };
  if (env === process.env) cachedBuild = info;
  return info;
}

/**
 * The hot-restart compatibility version. mesh has no hot restart (a new process starts, the old
 * one drains), so the string says so, in the layout of Envoy's
 * (`<format>.<node ABI>.options=<...>`), e.g. `1.115.options=hot_restart=disabled, mesh=0.1.0`.
 * Printed with no trailing newline by admin /hot_restart_version and `mesh --hot-restart-version`.
 */
export function hotRestartVersion(version: string = packageVersion()): string {
  return `1.${process.versions.modules}.options=hot_restart=disabled, mesh=${version}`;
}
