#!/usr/bin/env node
// Wall time of `mesh --version`, `mesh --help` and `mesh api --help` against bare `node -e 0`
// (mean and min over N runs, sequential). Usage: node scripts/measure-cli.mjs [N]  (after a build)
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const n = Number(process.argv[2] ?? 20);
const cli = join(import.meta.dirname, '..', 'dist/src/cli/main.js');
const cases = [
  ['node -e 0', ['-e', '0']],
  ['mesh --version', [cli, '--version']],
  ['mesh --help', [cli, '--help']],
  ['mesh api --help', [cli, 'api', '--help']],
  ['mesh completion bash', [cli, 'completion', 'bash']],
];
for (const [label, args] of cases) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(process.execPath, args, { stdio: 'ignore' });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (r.status !== 0) throw new Error(`${label} exited ${r.status}`);
  }
  const mean = times.reduce((a, b) => a + b, 0) / n;
  console.log(`${label.padEnd(22)} mean ${mean.toFixed(1)} ms  min ${Math.min(...times).toFixed(1)} ms  (${n} runs)`);
}
