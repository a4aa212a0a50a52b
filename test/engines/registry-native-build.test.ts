/**
 * better-sqlite3 without its native build (an install that ran no build script): a command that
 * opens the embedded registry exits 1 with one line that says what to run. The real package's
 * JavaScript and the real `bindings` loader, from a copy that has no build/ directory.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, realpathSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, runCli, tempDir } from '../helpers.js';

describe('the embedded registry without better-sqlite3\'s native build', () => {
  const tmp = tempDir('mesh-native-build-');
  after(() => tmp.cleanup());

  it('mesh list services exits 1 with one line naming npm rebuild better-sqlite3', async () => {
    const real = realpathSync(join(ROOT, 'node_modules/better-sqlite3'));
    const copy = join(tmp.path, 'node_modules/better-sqlite3');
    mkdirSync(copy, { recursive: true });
    cpSync(join(real, 'package.json'), join(copy, 'package.json'));
    cpSync(join(real, 'lib'), join(copy, 'lib'), { recursive: true });
    symlinkSync(realpathSync(join(ROOT, 'node_modules/bindings')), join(tmp.path, 'node_modules/bindings'), 'dir');
    const hook = pathToFileURL(join(ROOT, 'test/fixtures/no-sqlite-build/register.mjs')).href;
    const { code, stdout, stderr } = await runCli(['list', 'services', `--registry_address=${join(tmp.path, 'registry')}`, '--log_level=error'], {
      NODE_OPTIONS: `--import=${hook}`,
      MESH_TEST_SQLITE_COPY: pathToFileURL(join(copy, 'lib/index.js')).href,
    });
    assert.equal(stdout, '');
    assert.equal(
      stderr,
      `mesh: registry directory ${join(tmp.path, 'registry')}: cannot open ${join(tmp.path, 'registry/registry.db')}: the embedded registry needs better-sqlite3's native build, which is missing or was built for another Node.js (${process.version}): run \`npm rebuild better-sqlite3\` in the project that installed it (npm 11 runs its build only when allowed: \`npm install --allow-scripts=better-sqlite3\`)\n`,
    );
    assert.equal(code, 1);
  });
});
