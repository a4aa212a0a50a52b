/**
 * `mesh new service NAME [DIR]`: writes a ready TypeScript service project (templates/service.ts).
 * NAME without a dot gets the go.mesh.srv. prefix; DIR defaults to ./<last part of NAME>.
 * Refuses (exit 2, nothing written) a NAME the registry would refuse, or a DIR that exists and is
 * not empty.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync, rmSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { serviceNameProblem } from '../engines/registry/validate.js';
import { packageVersion } from '../admin/build-info.js';
import { packageRoot } from '../base/util/package-root.js';
import { FlagError } from './flags.js';
import { serviceFiles } from './templates/service.js';

export const NEW_SERVICE_USAGE = 'usage: mesh new service NAME [DIR]   (NAME: go.mesh.srv.hello, or hello for go.mesh.srv.hello)';
export const DEFAULT_NAMESPACE = 'go.mesh.srv';
const PACKAGE_NAME = '@mesh-platform/mesh';

/** Versions of the generated devDependencies (this package's own, so the project builds like it does). */
const FALLBACK_DEV = { typescript: '~5.9.2', '@types/node': '^20.19.0' };

export interface NewServicePlan {
  name: string;
  dir: string;
  files: Record<string, string>;
}

function pascal(word: string): string {
  return word
    .split(/[-_]+/)
    .filter((p) => p !== '')
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('');
}

function devVersions(): { typescript: string; '@types/node': string } {
  try {
    const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { devDependencies?: Record<string, string> };
    return {
      typescript: pkg.devDependencies?.typescript ?? FALLBACK_DEV.typescript,
      '@types/node': pkg.devDependencies?.['@types/node'] ?? FALLBACK_DEV['@types/node'],
    };
  } catch {
    return FALLBACK_DEV;
  }
}

/**
 * `--mesh=PATH|TARBALL`: the dependency on a checkout of this package (a directory whose
 * package.json names it) or on a tarball of `npm pack`, as a `file:` specifier with the absolute path.
 */
function localMesh(given: string, cwd: string): string {
  const path = resolve(cwd, given);
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) throw new FlagError(`invalid value "${given}" for flag --mesh: ${path} does not exist (give a checkout of ${PACKAGE_NAME} or a tarball of npm pack)`);
  if (st.isDirectory()) {
    let name: unknown;
    try {
      name = (JSON.parse(readFileSync(join(path, 'package.json'), 'utf8')) as { name?: unknown }).name;
    } catch {
      name = undefined;
    }
    if (name !== PACKAGE_NAME) throw new FlagError(`invalid value "${given}" for flag --mesh: ${path} is not a checkout of ${PACKAGE_NAME} (its package.json names another package or is missing)`);
  } else if (!/\.(tgz|tar\.gz)$/.test(path)) {
    throw new FlagError(`invalid value "${given}" for flag --mesh: ${path} is neither a directory nor a .tgz tarball of npm pack`);
  }
  return `file:${path}`;
}

/** Works out the name, directory and files, or throws a FlagError (nothing is written). */
export function planNewService(args: string[], cwd = process.cwd(), mesh?: string): NewServicePlan {
  const [rawName, rawDir, ...extra] = args;
  if (!rawName) throw new FlagError(NEW_SERVICE_USAGE);
  if (extra.length > 0) throw new FlagError(`new service takes NAME and DIR only (got "${extra.join(' ')}"); ${NEW_SERVICE_USAGE}`);
  const name = rawName.includes('.') ? rawName : `${DEFAULT_NAMESPACE}.${rawName}`;
  const problem = serviceNameProblem(name);
  if (problem) throw new FlagError(`new service: NAME ${problem}`);
  // The gateway maps /<segment>/<method> to <namespace>.<segment>: keep the name in that alphabet.
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+$/.test(name)) {
    throw new FlagError(`new service: "${name}" is not a valid name for a new service: dot-separated parts of letters, digits, "-" and "_" (e.g. go.mesh.srv.hello)`);
  }
  const short = name.slice(name.lastIndexOf('.') + 1);
  const packageName = short.toLowerCase();
  if (!/^[a-z0-9][a-z0-9_-]*$/.test(packageName) || !/[a-z]/i.test(short.charAt(0)) || pascal(short) === '') {
    throw new FlagError(`new service: the last part of "${name}" ("${short}") must start with a letter (it names the package, the directory and the endpoint)`);
  }
  const dir = resolve(cwd, rawDir ?? short);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new FlagError(`new service: ${dir} exists and is not a directory`);
    if (readdirSync(dir).length > 0) throw new FlagError(`new service: ${dir} exists and is not empty; choose another DIR`);
  }
  const dev = devVersions();
  const files = serviceFiles({
    name,
    packageName,
    endpoint: `${pascal(short)}.Call`,
    path: short,
    meshVersion: mesh === undefined ? `^${packageVersion()}` : localMesh(mesh, cwd),
    typescriptVersion: dev.typescript,
    typesNodeVersion: dev['@types/node'],
  });
  return { name, dir, files };
}

/** Writes the plan; on a failure part-way, removes what it created. */
export function writeNewService(plan: NewServicePlan): void {
  const created = !existsSync(plan.dir);
  try {
    for (const [path, text] of Object.entries(plan.files)) {
      const file = join(plan.dir, path);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, text, { flag: 'wx' });
    }
  } catch (err) {
    if (created) rmSync(plan.dir, { recursive: true, force: true });
    else for (const entry of readdirSync(plan.dir)) rmSync(join(plan.dir, entry), { recursive: true, force: true });
    throw err;
  }
}

export function runNewService(args: string[], io: { out: (t: string) => void; err: (t: string) => void }, mesh?: string): number {
  const plan = planNewService(args, process.cwd(), mesh);
  writeNewService(plan);
  const rel = relative(process.cwd(), plan.dir) || '.';
  if (mesh === undefined) {
    // The package is not on the npm registry yet: the dependency just written cannot install from there.
    io.err(`mesh new service: ${PACKAGE_NAME} is not on the npm registry yet, so npm install in ${rel} answers E404 for it; run again with --mesh=PATH|TARBALL (a built checkout of mesh, or the tarball npm pack writes in one)\n`);
  }
  io.out(
    [
      `created ${plan.name} in ${rel}:`,
      ...Object.keys(plan.files).map((f) => `  ${f}`),
      '',
      'next:',
      `  cd ${rel}`,
      '  npm install',
      '  npm run build',
      '  npm start',
      '',
    ].join('\n'),
  );
  return 0;
}
