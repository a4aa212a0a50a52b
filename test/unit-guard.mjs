/**
 * Loaded (node --import) into every test file of the unit tier (`npm run test:unit`): a unit test
 * spawns no process, so each child_process function throws there. Only in the test runner's own
 * children (NODE_TEST_CONTEXT): the runner itself spawns one process per test file. esbuild, which
 * tsx uses to compile the tests, is the one program allowed.
 */
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';

if (process.env.NODE_TEST_CONTEXT) {
  for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
    const real = childProcess[name];
    childProcess[name] = function guarded(file, ...rest) {
      if (typeof file === 'string' && /esbuild/.test(file)) return real.call(this, file, ...rest);
      throw new Error(`the unit tier spawns no processes: child_process.${name}(${JSON.stringify(file)}); list this file in the full tier (test/tiers.mjs)`);
    };
  }
  syncBuiltinESMExports();
}
