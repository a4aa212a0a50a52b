/**
 * `npm run bench:idle`: the resident memory of an idle mesh process, two builds side by side. Each
 * round starts every process kind once per build (A then B, then B then A in the next round, so a
 * drift of the machine touches both alike), waits until it listens, then BENCH_IDLE_SETTLE seconds
 * more, reads VmRSS and stops it. It prints, per kind, each build's median and range over the
 * rounds and B's ratio to A; then the same for the time from the spawn to listening (polled every
 * 50 ms). See bench/README.md ("Idle memory") for the variables.
 */
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, killAllSync, rssKiB, startProcess, stopAll, waitForPort } from './lib/proc.js';
import { fixed, markdownTable, max, median, min, parseSeconds, ratio } from './lib/stats.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const B = join(ROOT, 'dist/src/cli/main.js');
/** Build A: another checkout's dist/src/cli/main.js; without it, only this build is measured. */
const A = process.env.BENCH_IDLE_A;
const NODE = process.env.BENCH_IDLE_NODE ?? process.execPath;
const NODE_SQLITE = process.env.BENCH_IDLE_NODE_SQLITE;
const ROUNDS = Math.max(1, Number(process.env.BENCH_IDLE_ROUNDS ?? 5));
const SETTLE_MS = parseSeconds(process.env.BENCH_IDLE_SETTLE, 2) * 1000;
/** Services called through the sidecar by the rows with `calls`, and the calls to each before RSS is read. */
const CALLED = 3;
const CALLS_EACH = 100;
const SERVICES = Number(process.env.BENCH_IDLE_SERVICES ?? 1000);
/**
 * `registry`: services × nodes filled in before the process starts (bench/servers/register-nodes.ts);
 * `calls`: after the settle, CALLS_EACH calls to each of the first CALLED services through the
 * process (to the bench backend), then the settle again, then RSS.
 */
interface KindSpec {
  command: string;
  flags: string[];
  registry?: { services: number; nodes: number };
  calls?: boolean;
}
const KINDS: Record<string, KindSpec> = {
  sidecar: { command: 'sidecar', flags: [] },
  'sidecar-mtls': { command: 'sidecar', flags: ['--mtls=strict'] },
  api: { command: 'api', flags: [] },
  // Opt-in: what a big registry adds to a sidecar that calls a few of its services (the same calls in both).
  'sidecar-3-services': { command: 'sidecar', flags: [], registry: { services: CALLED, nodes: 10 }, calls: true },
  'sidecar-many-services': { command: 'sidecar', flags: [], registry: { services: SERVICES, nodes: 10 }, calls: true },
};
type Kind = string;
const WANTED = (process.env.BENCH_IDLE_KINDS ?? 'sidecar,sidecar-mtls,api').split(',').filter(Boolean);
for (const k of WANTED) if (!(k in KINDS)) throw new Error(`BENCH_IDLE_KINDS: unknown kind ${k} (${Object.keys(KINDS).join(', ')})`);
/** Flags added to every process (e.g. --semi_space_mb=0). */
const EXTRA = (process.env.BENCH_IDLE_FLAGS ?? '').split(/\s+/).filter(Boolean);

const tmp = mkdtempSync(join(tmpdir(), 'mesh-idle-'));
const caDir = join(tmp, 'ca');
process.on('exit', () => {
  killAllSync();
  rmSync(tmp, { recursive: true, force: true });
});

/** The bench backend the rows with `calls` reach, started once. */
let backendPort: number | undefined;

async function backend(): Promise<number> {
  if (backendPort !== undefined) return backendPort;
  const port = await freePort();
  const proc = startProcess('backend', process.execPath, ['--import', 'tsx', join(ROOT, 'bench/servers/backend.ts'), String(port)], { cwd: ROOT });
  await waitForPort(proc, port);
  return (backendPort = port);
}

/** CALLS_EACH POSTs to each of the first CALLED services through the sidecar at `port`; throws unless every one is 200. */
async function callThrough(port: number): Promise<void> {
  for (let i = 0; i < CALLED; i++) {
    for (let n = 0; n < CALLS_EACH; n++) {
      const res = await fetch(`http://127.0.0.1:${port}/s${i}/svc/call`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`a call to go.mesh.srv.s${i} through the sidecar answered ${res.status}`);
    }
  }
}

async function idleRss(main: string, kind: Kind, round: number): Promise<{ mib: number; ms: number }> {
  const { command, flags, registry: fill, calls } = KINDS[kind]!;
  const registry = join(tmp, `registry-${round}-${kind}-${main === B ? 'b' : 'a'}`);
  mkdirSync(registry, { recursive: true, mode: 0o700 });
  if (fill) {
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/servers/register-nodes.ts'), registry, String(fill.services), String(fill.nodes), String(CALLED), String(await backend())], { cwd: ROOT, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`register-nodes failed: ${r.stderr}`);
  }
  const port = await freePort();
  const preload = NODE_SQLITE ? ['--require', join(ROOT, 'bench/servers/sqlite-addon.cjs')] : [];
  const mtls = flags.includes('--mtls=strict') ? [`--ca_dir=${caDir}`] : [];
  const started = performance.now();
  const proc = startProcess(kind, NODE, [...preload, main, command, `--address=127.0.0.1:${port}`, '--admin_address=127.0.0.1:0', `--registry_address=${registry}`, '--log_level=warning', ...flags, ...mtls, ...EXTRA], {
    cwd: ROOT,
    env: { MESH_HOME: tmp, ...(NODE_SQLITE ? { BENCH_SQLITE_ADDON: NODE_SQLITE } : {}) },
  });
  try {
    await waitForPort(proc, port, 30_000);
    const ms = performance.now() - started;
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    if (calls) {
      await callThrough(port);
      await new Promise((r) => setTimeout(r, SETTLE_MS));
    }
    const kib = rssKiB(proc.pid);
    if (kib === undefined) throw new Error(`no VmRSS for ${kind} (pid ${proc.pid})`);
    return { mib: kib / 1024, ms };
  } finally {
    await proc.stop();
  }
}

async function main(): Promise<void> {
  if (WANTED.includes('sidecar-mtls')) {
    const r = spawnSync(NODE, [B, 'ca', 'init', `--ca_dir=${caDir}`], { encoding: 'utf8', env: { ...process.env, MESH_HOME: tmp } });
    if (r.status !== 0) throw new Error(`mesh ca init failed: ${r.stderr}`);
  }
  const builds = A ? [A, B] : [B];
  const mib: Record<string, number[]> = {};
  const ms: Record<string, number[]> = {};
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const kind of WANTED) {
      for (const build of order) {
        const v = await idleRss(build, kind, round);
        (mib[`${kind} ${build}`] ??= []).push(v.mib);
        (ms[`${kind} ${build}`] ??= []).push(v.ms);
        process.stderr.write(`round ${round + 1}/${ROUNDS} ${kind} ${build === B ? 'B' : 'A'}: ${fixed(v.mib, 1)} MiB, listening after ${fixed(v.ms, 0)} ms\n`);
      }
    }
  }
  const table = (values: Record<string, number[]>, digits: number) => {
    const range = (v: number[]) => `${fixed(median(v), digits)} (${fixed(min(v), digits)}–${fixed(max(v), digits)})`;
    const rows = WANTED.map((kind) => {
      const b = values[`${kind} ${B}`]!;
      if (!A) return [kind, range(b)];
      const a = values[`${kind} ${A}`]!;
      return [kind, range(a), range(b), fixed(median(b) - median(a), digits), ratio(median(b) / median(a))];
    });
    return A ? markdownTable(['process', 'A', 'B', 'B − A', 'B ÷ A'], rows, ['l', 'r', 'r', 'r', 'r']) : markdownTable(['process', 'B'], rows, ['l', 'r']);
  };
  const version = spawnSync(NODE, ['-v'], { encoding: 'utf8' }).stdout.trim();
  console.log(`Idle RSS in MiB, median (min–max) of ${ROUNDS} rounds, ${SETTLE_MS / 1000} s after listening; Node ${version}${EXTRA.length ? `; flags ${EXTRA.join(' ')}` : ''}`);
  console.log(`A: ${A ?? '–'}\nB: ${B}\n`);
  console.log(table(mib, 1));
  console.log(`\nStart-up: ms from the spawn to listening (polled every 50 ms), median (min–max)\n`);
  console.log(table(ms, 0));
}

main()
  .catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exitCode = 1;
  })
  .finally(() => void stopAll());
