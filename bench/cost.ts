/**
 * `npm run bench:cost`: what a sidecar (and the gateway) costs, at fixed request rates, with an
 * open-loop load (bench/servers/open-loop.ts: requests sent on schedule whatever the answers do,
 * latency counted from when each was due). For each path and rate: the latency the client sees
 * (p50, p90, p99) and what it adds over the direct path of the same kind at the same rate, and
 * for each mesh process on the path its CPU per request and its resident memory idle, median and
 * peak under the load. See bench/README.md ("The cost of a sidecar") for the paths and variables.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir, cpus, release } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { cpuMicros, freePort, killAllSync, rssKiB, startProcess, stopAll, waitForPort, type Proc } from './lib/proc.js';
import { fixed, markdownTable, median, parseSeconds } from './lib/stats.js';
import { BACKEND_SERVICE, PATH, REQUEST_BODY } from './lib/payload.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const MAIN = process.env.BENCH_MESH_MAIN ?? join(ROOT, 'dist/src/cli/main.js');
/** The Node that runs the mesh processes (default this one) and, for another Node, the better_sqlite3.node built for it. */
const MESH_NODE = process.env.BENCH_COST_NODE ?? process.execPath;
const MESH_NODE_SQLITE = process.env.BENCH_COST_NODE_SQLITE;
const QUICK = process.env.BENCH_QUICK === '1';
const RATES = (process.env.BENCH_COST_RATES ?? (QUICK ? '200' : '100,1000,5000')).split(',').map(Number).filter((n) => n > 0);
const SECONDS = parseSeconds(process.env.BENCH_COST_SECONDS, QUICK ? 3 : 10);
const WARMUP = parseSeconds(process.env.BENCH_COST_WARMUP, QUICK ? 1 : 2);
const WANTED = (process.env.BENCH_COST_PATHS ?? '').split(',').filter(Boolean);
const OUT = process.env.BENCH_OUT ?? (QUICK ? join(tmpdir(), 'mesh-bench-RESULTS.cost.quick.md') : join(ROOT, 'bench', 'RESULTS.cost.md'));
/** The gRPC service of the gRPC paths: its nodes serve bench.Bench. */
const GRPC_SERVICE = 'go.mesh.srv.gbench';
const GRPC_PATH = '/bench.Bench/Call';

type Target = { kind: 'http'; url: string } | { kind: 'grpc'; target: string; metadata?: Record<string, string> };

interface Setup {
  target: Target;
  /** The mesh processes on the path, in the order a request passes them. */
  measured: Array<{ name: string; proc: Proc }>;
  /** Everything started for the path (stopped after it). */
  all: Proc[];
}

interface PathSpec {
  id: string;
  label: string;
  kind: 'http' | 'grpc';
  setup(): Promise<Setup>;
}

const tmp = mkdtempSync(join(tmpdir(), 'mesh-cost-'));
const caDir = join(tmp, 'ca');

function mesh(args: string[]): void {
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, MESH_HOME: tmp } });
  if (r.status !== 0) throw new Error(`mesh ${args.slice(0, 2).join(' ')}: ${(r.stderr || r.stdout).trim().split('\n')[0]}`);
}

function tsx(name: string, script: string, args: string[]): Proc {
  return startProcess(name, process.execPath, ['--import', 'tsx', join(ROOT, 'bench', script), ...args], { cwd: ROOT });
}

function registryDir(id: string): string {
  const dir = join(tmp, `registry-${id}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/** A mesh server command as a user starts it (default flags but ports, registry and log level), on a free port. */
async function meshServer(name: string, command: 'sidecar' | 'api', registry: string, flags: string[]): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const preload = MESH_NODE_SQLITE ? ['--require', join(ROOT, 'bench/servers/sqlite-addon.cjs')] : [];
  const proc = startProcess(name, MESH_NODE, [...preload, MAIN, command, `--address=127.0.0.1:${port}`, '--admin_address=127.0.0.1:0', `--registry_address=${registry}`, '--log_level=warning', ...flags], {
    cwd: ROOT,
    env: { MESH_HOME: tmp, ...(MESH_NODE_SQLITE ? { BENCH_SQLITE_ADDON: MESH_NODE_SQLITE } : {}) },
  });
  await waitForPort(proc, port, 30_000);
  return { proc, port };
}

async function httpBackend(mtls = false): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const proc = tsx(mtls ? 'backend-mtls' : 'backend', 'servers/backend.ts', mtls ? [String(port), '--mtls', caDir, join(ROOT, 'dist')] : [String(port)]);
  await waitForPort(proc, port);
  return { proc, port };
}

/** The gRPC Node floor (bench/servers/node-floor-grpc.ts) in front of UPSTREAM_PORT, with mutual TLS in front or behind as asked. */
async function grpcFloor(name: string, upstreamPort: number, tls: { serve?: boolean; upstream?: boolean } = {}): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const dist = join(ROOT, 'dist');
  const args = [String(port), String(upstreamPort), ...(tls.serve ? ['--serve-mtls', caDir, dist] : []), ...(tls.upstream ? ['--upstream-mtls', caDir, dist] : [])];
  const proc = tsx(name, 'servers/node-floor-grpc.ts', args);
  await waitForPort(proc, port);
  return { proc, port };
}

async function grpcNode(): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const proc = tsx('grpc-node', 'servers/grpc-node.ts', [String(port)]);
  await waitForPort(proc, port);
  return { proc, port };
}

function register(registry: string, name: string, port: number, metadata: Record<string, string> = {}): void {
  mesh(['register', 'service', JSON.stringify({ Name: name, Nodes: [{ Id: `${name}-1`, Address: '127.0.0.1', Port: port, Metadata: metadata }] }), `--registry_address=${registry}`]);
}

/** Sidecar B of a two-sidecar path: registers the app behind its inbound listener (mutual TLS), which is up once its registration is. */
async function inboundSidecar(name: string, registry: string, app: string, appPort: number, flags: string[] = []): Promise<Proc> {
  const s = await meshServer(name, 'sidecar', registry, [`--server_name=${app}`, `--server_address=127.0.0.1:${appPort}`, '--mtls=strict', `--ca_dir=${caDir}`, ...flags]);
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = spawnSync(process.execPath, [MAIN, 'get', 'service', app, `--registry_address=${registry}`, '-o', 'json'], { encoding: 'utf8', env: { ...process.env, MESH_HOME: tmp } });
    if (r.status === 0 && /"mtls":\s*"true"/.test(r.stdout)) return s.proc;
    if (Date.now() > deadline) throw new Error(`${name}: ${app} not registered behind the inbound listener:\n${s.proc.output()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const PATHS: PathSpec[] = [
  {
    id: 'direct',
    label: 'client → node (HTTP)',
    kind: 'http',
    async setup() {
      const b = await httpBackend();
      return { target: { kind: 'http', url: `http://127.0.0.1:${b.port}${PATH}` }, measured: [], all: [b.proc] };
    },
  },
  {
    id: 'sidecar',
    label: 'client → sidecar → node',
    kind: 'http',
    async setup() {
      const reg = registryDir('sidecar');
      const b = await httpBackend();
      register(reg, BACKEND_SERVICE, b.port);
      const s = await meshServer('sidecar', 'sidecar', reg, []);
      return { target: { kind: 'http', url: `http://127.0.0.1:${s.port}${PATH}` }, measured: [{ name: 'sidecar', proc: s.proc }], all: [b.proc, s.proc] };
    },
  },
  {
    id: 'sidecar-mtls',
    label: 'client → sidecar → (mutual TLS) → node',
    kind: 'http',
    async setup() {
      const reg = registryDir('sidecar-mtls');
      const b = await httpBackend(true);
      register(reg, BACKEND_SERVICE, b.port, { mtls: 'true' });
      const s = await meshServer('sidecar-mtls', 'sidecar', reg, ['--mtls=strict', `--ca_dir=${caDir}`]);
      return { target: { kind: 'http', url: `http://127.0.0.1:${s.port}${PATH}` }, measured: [{ name: 'sidecar', proc: s.proc }], all: [b.proc, s.proc] };
    },
  },
  {
    id: 'two-sidecars',
    label: 'client → sidecar → (mutual TLS) → sidecar inbound → app',
    kind: 'http',
    async setup() {
      const reg = registryDir('two-sidecars');
      const app = await httpBackend();
      const b = await inboundSidecar('sidecar-b', reg, BACKEND_SERVICE, app.port);
      const a = await meshServer('sidecar-a', 'sidecar', reg, ['--mtls=strict', `--ca_dir=${caDir}`]);
      return { target: { kind: 'http', url: `http://127.0.0.1:${a.port}${PATH}` }, measured: [{ name: 'sidecar A', proc: a.proc }, { name: 'sidecar B', proc: b }], all: [app.proc, b, a.proc] };
    },
  },
  {
    id: 'gateway',
    label: 'client → gateway (rpc handler) → node',
    kind: 'http',
    async setup() {
      const reg = registryDir('gateway');
      const b = await httpBackend();
      register(reg, BACKEND_SERVICE, b.port);
      const g = await meshServer('gateway', 'api', reg, ['--handler=rpc', '--namespace=go.mesh.srv']);
      return { target: { kind: 'http', url: `http://127.0.0.1:${g.port}${PATH}` }, measured: [{ name: 'gateway', proc: g.proc }], all: [b.proc, g.proc] };
    },
  },
  {
    id: 'grpc-direct',
    label: 'gRPC client → node',
    kind: 'grpc',
    async setup() {
      const n = await grpcNode();
      return { target: { kind: 'grpc', target: `127.0.0.1:${n.port}` }, measured: [], all: [n.proc] };
    },
  },
  {
    id: 'grpc-sidecar',
    label: 'gRPC client → sidecar (h2c) → node',
    kind: 'grpc',
    async setup() {
      const reg = registryDir('grpc-sidecar');
      const n = await grpcNode();
      register(reg, GRPC_SERVICE, n.port, { protocol: 'grpc', grpc_service: 'bench.Bench' });
      const s = await meshServer('sidecar', 'sidecar', reg, ['--enable_http2']);
      return { target: { kind: 'grpc', target: `127.0.0.1:${s.port}` }, measured: [{ name: 'sidecar', proc: s.proc }], all: [n.proc, s.proc] };
    },
  },
  {
    id: 'grpc-two-sidecars',
    label: 'gRPC client → sidecar → (mutual TLS, h2) → sidecar inbound → app',
    kind: 'grpc',
    async setup() {
      const reg = registryDir('grpc-two-sidecars');
      const app = await grpcNode();
      const b = await inboundSidecar('sidecar-b', reg, GRPC_SERVICE, app.port, ['--enable_http2']);
      const a = await meshServer('sidecar-a', 'sidecar', reg, ['--enable_http2', '--mtls=strict', `--ca_dir=${caDir}`]);
      return {
        target: { kind: 'grpc', target: `127.0.0.1:${a.port}`, metadata: { 'mesh-service': GRPC_SERVICE } },
        measured: [{ name: 'sidecar A', proc: a.proc }, { name: 'sidecar B', proc: b }],
        all: [app.proc, b, a.proc],
      };
    },
  },
  {
    id: 'floor',
    label: 'client → Node floor → node',
    kind: 'http',
    async setup() {
      const b = await httpBackend();
      const port = await freePort();
      const f = tsx('floor', 'servers/node-floor.ts', [String(port), String(b.port)]);
      await waitForPort(f, port);
      return { target: { kind: 'http', url: `http://127.0.0.1:${port}${PATH}` }, measured: [{ name: 'floor', proc: f }], all: [b.proc, f] };
    },
  },
  {
    id: 'grpc-floor',
    label: 'gRPC client → Node floor (h2c) → node',
    kind: 'grpc',
    async setup() {
      const n = await grpcNode();
      const f = await grpcFloor('floor', n.port);
      return { target: { kind: 'grpc', target: `127.0.0.1:${f.port}` }, measured: [{ name: 'floor', proc: f.proc }], all: [n.proc, f.proc] };
    },
  },
  {
    id: 'grpc-two-floors',
    label: 'gRPC client → Node floor → (mutual TLS, h2) → Node floor → app',
    kind: 'grpc',
    async setup() {
      const app = await grpcNode();
      const b = await grpcFloor('floor-b', app.port, { serve: true });
      const a = await grpcFloor('floor-a', b.port, { upstream: true });
      return { target: { kind: 'grpc', target: `127.0.0.1:${a.port}` }, measured: [{ name: 'floor A', proc: a.proc }, { name: 'floor B', proc: b.proc }], all: [app.proc, b.proc, a.proc] };
    },
  },
];

/** The Node floor of a mesh path: the least a Node proxy does on the same hops (bench/servers/node-floor.ts, node-floor-grpc.ts). */
const FLOOR_OF: Record<string, string> = { sidecar: 'floor', 'grpc-sidecar': 'grpc-floor', 'grpc-two-sidecars': 'grpc-two-floors' };

interface Load {
  sent: number;
  ok: number;
  failed: number;
  /** What the failed requests got (an HTTP status, a gRPC status and message), and how many each. */
  errors?: Record<string, number>;
  late: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

async function openLoop(target: Target, rate: number, seconds: number): Promise<Load> {
  const spec = target.kind === 'http' ? { kind: 'http', url: target.url, body: REQUEST_BODY, connections: Math.max(8, Math.ceil(rate / 100)), rate, seconds } : { kind: 'grpc', target: target.target, path: GRPC_PATH, metadata: target.metadata, rate, seconds };
  let line = '';
  const p = startProcess('open-loop', process.execPath, ['--import', 'tsx', join(ROOT, 'bench/servers/open-loop.ts'), JSON.stringify(spec)], { cwd: ROOT, onLine: (l) => (line = l) });
  await p.waitExit();
  try {
    return JSON.parse(line) as Load;
  } catch {
    throw new Error(`open-loop gave no result:\n${p.output()}`);
  }
}

interface ProcessCost {
  name: string;
  cpuPerRequestUs: number;
  idleMiB: number;
  medianMiB: number;
  peakMiB: number;
}

interface Measured {
  path: PathSpec;
  rate: number;
  load: Load;
  processes: ProcessCost[];
}

const mib = (kib: number | undefined) => (kib ?? 0) / 1024;

async function measurePath(path: PathSpec, results: Measured[]): Promise<void> {
  let setup: Setup;
  try {
    setup = await path.setup();
  } catch (err) {
    console.log(`${path.id}: not available: ${(err as Error).message.split('\n')[0]}`);
    return;
  }
  try {
    // One call first: the path answers, and the answer is the node's.
    const check = await openLoop(setup.target, 5, 1);
    if (check.ok === 0) throw new Error(`${path.id}: no good answer (${JSON.stringify(check)})`);
    const idle = setup.measured.map((m) => mib(rssKiB(m.proc.pid)));
    for (const rate of RATES) {
      await openLoop(setup.target, rate, WARMUP);
      const pids = setup.measured.map((m) => m.proc.pid);
      const samples: number[][] = pids.map(() => []);
      const sampler = setInterval(() => pids.forEach((pid, i) => samples[i]!.push(mib(rssKiB(pid)))), 100);
      const cpu0 = pids.map((pid) => cpuMicros([pid]) ?? 0);
      const load = await openLoop(setup.target, rate, SECONDS);
      const cpu1 = pids.map((pid) => cpuMicros([pid]) ?? 0);
      clearInterval(sampler);
      const processes = setup.measured.map((m, i) => ({
        name: m.name,
        cpuPerRequestUs: (cpu1[i]! - cpu0[i]!) / Math.max(1, load.ok),
        idleMiB: idle[i]!,
        medianMiB: median(samples[i]!),
        peakMiB: Math.max(...samples[i]!, 0),
      }));
      results.push({ path, rate, load, processes });
      if (load.failed > 0) console.log(`${path.id} @ ${rate}/s: ${load.failed} failed: ${JSON.stringify(load.errors ?? {})}`);
      console.log(`${path.id} @ ${rate}/s: ok ${load.ok}/${load.sent}, p50 ${fixed(load.p50 / 1000)} ms, p99 ${fixed(load.p99 / 1000)} ms${processes.map((p) => `; ${p.name} ${fixed(p.cpuPerRequestUs, 0)} µs/req, ${fixed(p.medianMiB, 0)} MiB`).join('')}`);
    }
  } finally {
    for (const p of setup.all.reverse()) await p.stop();
  }
}

function report(results: Measured[]): string {
  const direct = (m: Measured) => results.find((r) => r.rate === m.rate && r.path.id === (m.path.kind === 'grpc' ? 'grpc-direct' : 'direct'));
  const ms = (us: number) => fixed(us / 1000);
  const added = (m: Measured, key: 'p50' | 'p99') => {
    const d = direct(m);
    return d && m !== d ? ms(m.load[key] - d.load[key]) : '–';
  };
  const rows = results.map((m) => [
    m.path.label,
    String(m.rate),
    `${m.load.ok}/${m.load.sent}`,
    ms(m.load.p50),
    ms(m.load.p90),
    ms(m.load.p99),
    added(m, 'p50'),
    added(m, 'p99'),
    m.processes.map((p) => `${p.name}: ${fixed(p.cpuPerRequestUs, 0)}`).join(', ') || '–',
    m.processes.map((p) => `${p.name}: ${fixed(p.idleMiB, 0)} / ${fixed(p.medianMiB, 0)} / ${fixed(p.peakMiB, 0)}`).join(', ') || '–',
  ]);
  const targets: string[] = [];
  const at = (id: string, rate: number) => results.find((r) => r.path.id === id && r.rate === rate);
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
  for (const id of ['two-sidecars', 'grpc-two-sidecars']) {
    const m = at(id, 1000);
    const d = m && direct(m);
    if (m && d) {
      const p99 = (m.load.p99 - d.load.p99) / 1000;
      targets.push(`- ${m.path.label} at 1,000/s adds ${fixed(p99)} ms at p99 (target ≤ 1 ms): ${verdict(p99 <= 1)}`);
      for (const p of m.processes) targets.push(`- ${id}: ${p.name} costs ${fixed(p.cpuPerRequestUs, 0)} µs of CPU per request with mutual TLS (target ≤ ${id.startsWith('grpc') ? 100 : 75} µs): ${verdict(p.cpuPerRequestUs <= (id.startsWith('grpc') ? 100 : 75))}`);
    }
  }
  for (const [id, floorId] of Object.entries(FLOOR_OF)) {
    for (const rate of RATES) {
      const m = at(id, rate);
      const f = at(floorId, rate);
      if (!m || !f) continue;
      m.processes.forEach((p, i) => {
        const fp = f.processes[i];
        if (fp) targets.push(`- ${id} at ${rate}/s: ${p.name} ${fixed(p.cpuPerRequestUs, 0)} µs of CPU per request, the Node floor's ${fp.name} ${fixed(fp.cpuPerRequestUs, 0)} µs (${fixed(p.cpuPerRequestUs / Math.max(1, fp.cpuPerRequestUs))}× the floor)`);
      });
      const d = direct(m);
      if (d) targets.push(`- ${id} at ${rate}/s adds ${fixed((m.load.p99 - d.load.p99) / 1000)} ms at p99, the Node floor ${fixed((f.load.p99 - d.load.p99) / 1000)} ms`);
    }
  }
  const sc = at('sidecar-mtls', 1000);
  if (sc) {
    const p = sc.processes[0]!;
    targets.push(`- sidecar with mutual TLS at 1,000/s: idle ${fixed(p.idleMiB, 0)} MiB (target ≤ 50): ${verdict(p.idleMiB <= 50)}; median ${fixed(p.medianMiB, 0)} MiB (target ≤ 64): ${verdict(p.medianMiB <= 64)}; peak ${fixed(p.peakMiB, 0)} MiB (target ≤ 80): ${verdict(p.peakMiB <= 80)}`);
  }
  const gw = at('gateway', 1000);
  if (gw) targets.push(`- gateway at 1,000/s: peak ${fixed(gw.processes[0]!.peakMiB, 0)} MiB (target ≤ 80): ${verdict(gw.processes[0]!.peakMiB <= 80)}`);
  return [
    '# The cost of a sidecar',
    '',
    `Made by \`npm run bench:cost\` on ${new Date().toISOString().slice(0, 10)}: ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Linux ${release()}, mesh processes on Node ${spawnSync(MESH_NODE, ['--version'], { encoding: 'utf8' }).stdout.trim()}; ${SECONDS} s per rate after a ${WARMUP} s warm-up, open loop (latency from when each request was due), one process per program on loopback, not pinned.`,
    '',
    'Memory columns: resident set of each mesh process in MiB, idle (after one request) / median / peak under the load. CPU: user + system time of each mesh process per answered request, in µs. "Added": the path\'s latency minus the direct path\'s of the same kind at the same rate.',
    '',
    markdownTable(['path', 'rate/s', 'ok/sent', 'p50 ms', 'p90 ms', 'p99 ms', 'added p50 ms', 'added p99 ms', 'CPU µs/request', 'MiB idle / median / peak'], rows, ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l', 'l']),
    '',
    '## Targets',
    '',
    ...(targets.length ? targets : ['- (no path of a target was measured)']),
    '',
  ].join('\n');
}

async function main(): Promise<void> {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} not built: npm run build`);
  mesh(['ca', 'init', `--ca_dir=${caDir}`]);
  const results: Measured[] = [];
  for (const path of PATHS) if (WANTED.length === 0 || WANTED.includes(path.id)) await measurePath(path, results);
  const text = report(results);
  writeFileSync(OUT, text);
  console.log(`\n${text}\nwritten to ${OUT}`);
}

process.on('SIGINT', () => {
  killAllSync();
  process.exit(130);
});
main()
  .catch((err: unknown) => {
    console.error(`bench:cost: ${(err as Error).stack ?? String(err)}`);
    process.exitCode = 1;
  })
  .finally(async () => {
    await stopAll();
    rmSync(tmp, { recursive: true, force: true });
  });
