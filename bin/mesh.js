#!/usr/bin/env node
/**
 * The `mesh` command (package.json "bin"): runs the built CLI, dist/src/cli/main.js. In a checkout
 * that is not built yet it says so and exits 1. (npx links a project's command once, at its first
 * use: were the command the built file itself, an `npx mesh` before the first build would leave
 * `mesh: not found` in npx's cache for good, even after the build.)
 */
import { existsSync } from 'node:fs';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write('mesh: this checkout is not built yet: run `npm run build` in it (`npm start` builds it too), then run mesh again\n');
  process.exit(1);
}
await import(main.href);
