/**
 * The `mesh` command of the package (bin/mesh.js, package.json "bin"): it runs the built CLI, and
 * in a checkout that is not built yet it says what to do. The trap it closes: npx links a
 * project's command once, at its first use, so with the built file itself as the command an
 * `npx mesh` before the first build left `sh: 1: mesh: not found` in npx's cache for good. Checked
 * with the real npm on a copy of the checkout's launcher and package.json, and a cache of its own.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers.js';

const ROOT = join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..', '..');
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const NOT_BUILT = 'mesh: this checkout is not built yet: run `npm run build` in it (`npm start` builds it too), then run mesh again\n';

describe('the mesh command (bin/mesh.js)', () => {
  const tmp = tempDir('mesh-bin-');
  after(() => tmp.cleanup());

  /** A checkout as a fresh clone has it before any build: the package's manifest and its launcher, no dist/. */
  const checkout = (name: string): string => {
    const dir = join(tmp.path, name);
    mkdirSync(join(dir, 'bin'), { recursive: true });
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string; type: string; bin: Record<string, string> };
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: pkg.name, version: pkg.version, type: pkg.type, bin: pkg.bin }));
    copyFileSync(join(ROOT, pkg.bin.mesh!), join(dir, pkg.bin.mesh!));
    return dir;
  };
  /** The build's output, standing in for dist/src/cli/main.js: prints its arguments. */
  const build = (dir: string): void => {
    mkdirSync(join(dir, 'dist/src/cli'), { recursive: true });
    writeFileSync(join(dir, 'dist/src/cli/main.js'), "process.stdout.write(`built: ${process.argv.slice(2).join(' ')}\\n`);\n");
  };

  it('is the package\'s command, and runs the built CLI with its arguments', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string>; files: string[] };
    assert.deepEqual(pkg.bin, { mesh: 'bin/mesh.js' });
    assert.ok(pkg.files.includes('bin/mesh.js'));
    const real = spawnSync(process.execPath, [join(ROOT, 'bin/mesh.js'), 'version'], { encoding: 'utf8' });
    assert.equal(real.status, 0, real.stderr);
    assert.match(real.stdout, /^mesh \d+\.\d+\.\d+/);
  });

  it('in a checkout not built yet: says so on stderr and exits 1', () => {
    const dir = checkout('unbuilt');
    const r = spawnSync(process.execPath, [join(dir, 'bin/mesh.js'), 'version'], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.equal(r.stderr, NOT_BUILT);
    assert.equal(r.stdout, '');
  });

  it('npx mesh before the first build says to build, and works once it is built (npx keeps its first link)', () => {
    const dir = checkout('clone');
    const npx = (...args: string[]) =>
      spawnSync(NPM, ['exec', '--offline', '--no-audit', '--no-fund', '--loglevel=error', '--', 'mesh', ...args], {
        cwd: dir,
        encoding: 'utf8',
        env: { ...process.env, npm_config_cache: join(tmp.path, 'npm-cache'), npm_config_update_notifier: 'false' },
        timeout: 120_000,
      });
    const before = npx('version');
    assert.equal(before.status, 1, before.stderr);
    assert.equal(before.stderr, NOT_BUILT);
    build(dir);
    const afterBuild = npx('list', 'services');
    assert.equal(afterBuild.status, 0, afterBuild.stderr);
    assert.equal(afterBuild.stdout, 'built: list services\n');
  });
});
