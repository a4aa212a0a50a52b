/**
 * Loaded (node --import) into every test file of the unit tier (`npm run test:unit`): a unit test
 * spawns no process, so each child_process function throws there. Only in the test runner's own
 * children (NODE_TEST_CONTEXT): the runner itself spawns one process per test file. esbuild, which
 * tsx uses to compile the tests, and the node child in which a workload makes its certificate
 * (src/tls/workload/x509-child.ts) are the programs allowed.
 */
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';

if (process.env.NODE_TEST_CONTEXT) {
  for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
    const real = childProcess[name];
    childProcess[name] = function guarded(file, ...rest) {
      if (typeof file === 'string' && /esbuild/.test(file)) return real.call(this, file, ...rest);
      // mesh's own X.509 step (src/tls/workload/x509-child.ts): a workload's certificate is made
      // in a short-lived node child, with no port and no state of its own.
      if (file === process.execPath && Array.isArray(rest[0]) && rest[0].some((arg) => /[/\\]tls[/\\]workload[/\\]x509-child-main\.(ts|js)$/.test(String(arg)))) return real.call(this, file, ...rest);
      throw new Error(`the unit tier spawns no processes: child_process.${name}(${JSON.stringify(file)}); list this file in the full tier (test/tiers.mjs)`);
    };
  }
  syncBuiltinESMExports();
}
