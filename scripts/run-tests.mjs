#!/usr/bin/env node
// Runs every test/**/*.test.ts with node's own runner (Node 20 does not expand globs itself).
// Usage: node scripts/run-tests.mjs [--unit] [substring ...]  (only files whose path contains a substring)
// --unit: only the unit tier (test/tiers.mjs): no process spawned (test/unit-guard.mjs makes a
// child_process call fail), no engine addresses in the environment.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

function walk(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

const args = process.argv.slice(2);
const unit = args.includes('--unit');
const filters = args.filter((a) => a !== '--unit');
let tier;
if (unit) {
  tier = (await import('../test/tiers.mjs')).UNIT;
  const missing = tier.filter((f) => !existsSync(f));
  if (missing.length > 0) {
    console.error(`test/tiers.mjs lists files that do not exist: ${missing.join(', ')}`);
    process.exit(1);
  }
}
// Each test file sits in the folder of its part (test/README.md): none directly under test/.
const flat = walk('test').filter((f) => /^test[\\/][^\\/]+\.test\.ts$/.test(f));
if (flat.length > 0) {
  console.error(`test files belong in a folder of test/ (test/README.md), not at its top: ${flat.join(', ')}`);
  process.exit(1);
}
const files = (tier ?? walk('test'))
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort();
if (files.length === 0) {
  console.error('no test files matched');
  process.exit(1);
}
const concurrency = process.env.MESH_TEST_CONCURRENCY ?? '2';
// Each file must finish within the timeout (2 min), except the package test (below) and the soak
// test, which runs for MESH_SOAK_SECONDS (default 120 in CI, i.e. with MESH_TEST_REQUIRE_ENGINES set, 20 otherwise)
// plus its setup and checks.
const soakSeconds = Number(process.env.MESH_SOAK_SECONDS ?? (process.env.MESH_TEST_REQUIRE_ENGINES ? 120 : 20));
const soaking = files.some((f) => f.includes('soak'));
const soakMs = soaking && Number.isFinite(soakSeconds) ? Math.max(120000, (soakSeconds + 180) * 1000) : 120000;
// The package test packs, installs the tarball (better-sqlite3 compiles when no prebuilt binary is
// at hand: minutes on a loaded machine) and builds, tests and runs a generated project: 15 min, as
// its own hooks allow.
const packaging = files.some((f) => f.endsWith('package.test.ts'));
// The docs' samples run one scenario at a time (they use the documented fixed ports): 10 min.
const samples = files.some((f) => f.endsWith('docs-samples.test.ts'));
const timeoutMs = packaging ? Math.max(soakMs, 15 * 60_000) : samples ? Math.max(soakMs, 10 * 60_000) : soakMs;
const env = { ...process.env };
// The unit tier reaches no engine: a unit test that asks for one skips (or fails under MESH_TEST_REQUIRE_ENGINES).
if (unit) for (const name of Object.keys(env)) if (name.startsWith('MESH_TEST_') && name !== 'MESH_TEST_REQUIRE_ENGINES') delete env[name];
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', ...(unit ? ['--import', './test/unit-guard.mjs'] : []), '--test', `--test-concurrency=${concurrency}`, `--test-timeout=${timeoutMs}`, ...files],
  { stdio: 'inherit', env },
);
process.exit(result.status ?? 1);
