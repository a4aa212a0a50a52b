/**
 * `--concurrency=N|auto` of `mesh api`, `mesh sidecar` and `mesh proxy` (docs/architecture.md,
 * "Concurrency"). With N above 1 the command's process becomes the primary of a node:cluster:
 * it forks N workers, each a whole runtime (registry watch, cluster manager, front listeners)
 * started from the same command line, sharing the listening port: on Linux with Node 22.12 or later
 * each worker binds it with reusePort and the kernel spreads the connections (worker 0 starts
 * first, and the ports its port-0 listens got are given to the others: src/base/http/reuse-port.ts);
 * elsewhere the primary accepts the connections and hands them out round-robin (node's default on
 * Linux). The primary serves the
 * one admin interface (and --metrics_address): it asks every worker for a snapshot of its stats,
 * clusters, certificates and routes over IPC and merges them (src/base/stats/merge.ts,
 * src/admin/aggregate.ts); /healthcheck/fail and /healthcheck/ok, /reset_counters, /logging,
 * /quitquitquit and SIGTERM reach every worker. A worker that dies is started again after a
 * backoff and counted in `server.worker_restarts`.
 */
import cluster, { type Worker } from 'node:cluster';
import { FlagError, type Config } from './flags.js';
import { optionsFromFlags } from './options.js';
import type { ResolvedOptions } from '../process/options.js';
import { exitCodeOf, type Runtime } from '../process/runtime.js';
import { Logging, parseLevel, type Subsystem } from '../base/util/log.js';
import { StatsStore } from '../base/stats/store.js';
import { ProcessMetrics, type ProcessFamily } from '../base/stats/process-metrics.js';
import { mergeProcessFamilies, mergeSnapshots, snapshotStore, type StoreSnapshot } from '../base/stats/merge.js';
import { AdminServer, refreshServerStats, TAP_STATS } from '../admin/server.js';
import { TapHub, type TapEvent } from '../base/http/tap.js';
import { TapRelay, type TapFilter } from '../admin/tap.js';
import { mergeTrafficReports, type TrafficReport } from '../admin/traffic.js';
import { MetricsServer } from '../admin/metrics-server.js';
import { ServerState, type CertificateInfo, type RouteTableDump } from '../admin/context.js';
import { clusterView, mergeClusterViews, type AdminAggregate, type ClusterViewSnapshot, type MergedStats } from '../admin/aggregate.js';
import { serverLimits } from '../base/http/lifecycle.js';
import { errorMessage } from '../base/util/option-error.js';
import { parseSharedPorts, probeListen, ReusePortListening, reusePortSupported, type SharedPort } from '../base/http/reuse-port.js';
import { parseAddress } from '../base/util/address.js';
import { servePrimaryBuckets } from './rate-limit-ipc.js';
import { newProcessId } from '../engines/registry/processes.js';

/** Set in a worker's environment: its index (0..N-1), kept across restarts. */
export const WORKER_ENV = 'MESH_CONCURRENCY_WORKER';
/** Set in a worker's environment when it listens with reusePort: the ports to share (JSON SharedPort[]). */
export const REUSE_PORT_ENV = 'MESH_CONCURRENCY_REUSE_PORT';
/** Set in a worker's environment when the primary serves an admin: what worker 0 records of the primary (JSON PrimaryRecord). */
export const PRIMARY_ENV = 'MESH_CONCURRENCY_PRIMARY';

/** The primary as its process record names it (the workers have no admin: the primary's serves them). */
interface PrimaryRecord {
  id: string;
  pid: number;
  startedMs: number;
  admin: { host: string; port: number };
}

function parsePrimaryRecord(raw: string | undefined): PrimaryRecord | undefined {
  if (raw === undefined) return undefined;
  try {
    const r = JSON.parse(raw) as PrimaryRecord;
    return typeof r.id === 'string' && Number.isInteger(r.pid) && Number.isInteger(r.startedMs) && typeof r.admin?.host === 'string' && Number.isInteger(r.admin.port) ? r : undefined;
  } catch {
    return undefined;
  }
}
/** Gauge of the primary: 1 when the workers listen with reusePort, 0 when the primary accepts for them. */
export const REUSE_PORT_STAT = 'server.concurrency_reuse_port';
/** Counter of the workers started again after they died. */
export const WORKER_RESTARTS_STAT = 'server.worker_restarts';
/** Per worker, the requests its front listeners received: `server.worker.<index>.downstream_rq_total`. */
export const workerRequestsStat = (index: number) => `server.worker.${index}.downstream_rq_total`;
/** How long the primary waits for a worker's answer before leaving it out. */
const ANSWER_TIMEOUT_MS = 5000;
/** First restart delay; doubled for each death within CRASH_WINDOW_MS of its start, up to MAX_BACKOFF_MS. */
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 10_000;
const CRASH_WINDOW_MS = 10_000;

type Part = 'stats' | 'clusters' | 'certs' | 'routes' | 'auth' | 'rateLimits' | 'traffic';
type Op = 'fail' | 'ok' | 'reset' | 'logging';

interface WorkerSnapshot {
  stats?: StoreSnapshot;
  process?: ProcessFamily[];
  clusters?: ClusterViewSnapshot;
  certs?: CertificateInfo[];
  routes?: RouteTableDump[];
  auth?: unknown[];
  rateLimits?: unknown[];
  traffic?: TrafficReport;
}

type ToWorker =
  | { mesh: 'snapshot'; id: number; parts: Part[] }
  | { mesh: 'op'; id: number; op: Op; name?: string; level?: string }
  | { mesh: 'shutdown' }
  // A tap of the primary's /tap: attached to the worker's hub until 'untap' (src/admin/tap.ts TapRelay).
  | { mesh: 'tap'; tap: number; filter: TapFilter }
  | { mesh: 'untap'; tap: number };
type FromWorker =
  | { mesh: 'ready'; lines: string[]; hasRoutes: boolean; ports?: SharedPort[] }
  | { mesh: 'reply'; id: number; data?: WorkerSnapshot; error?: string }
  | { mesh: 'tap-events'; tap: number; events: TapEvent[] }
  | { mesh: 'tap-dropped'; tap: number; n: number };

const isMeshMessage = (m: unknown): m is { mesh: string } => typeof m === 'object' && m !== null && typeof (m as { mesh?: unknown }).mesh === 'string';

/**
 * True when this process is to be the primary of --concurrency N > 1 (the command runs
 * runPrimary instead of its runtime). Refuses what workers cannot share: --enable_acme (each
 * worker would order certificates, and the shared challenge port would hand a challenge to a
 * worker that does not know it), and --tap_allowed_identities (the primary's admin has no
 * workload certificate).
 */
export function isPrimaryOf(config: Config): boolean {
  if (config.concurrency <= 1) return false;
  if (config.enable_acme) throw new FlagError(`invalid value "${config.concurrency}" for flag --concurrency: --enable_acme needs a single process (--concurrency=1)`);
  // The primary has no workload certificate of its own to serve its admin over mutual TLS with.
  if (config.tap_allowed_identities.length > 0) throw new FlagError(`invalid value "${config.concurrency}" for flag --concurrency: --tap_allowed_identities needs a single process (--concurrency=1)`);
  return cluster.isPrimary;
}

// ---------------------------------------------------------------- worker side

/**
 * A worker's link to its primary: undefined in a process that is not a worker of --concurrency
 * (the single-process path is then unchanged).
 */
export class WorkerLink {
  private constructor(
    readonly index: number,
    /** Set when the front listeners bind with reusePort (the primary decided: REUSE_PORT_ENV). */
    readonly reusePort?: ReusePortListening,
    /** Set when the primary serves an admin: worker 0 records the primary in the registry (PRIMARY_ENV). */
    private readonly primary?: PrimaryRecord,
  ) {}

  static join(config: Config): WorkerLink | undefined {
    const raw = process.env[WORKER_ENV];
    if (config.concurrency <= 1 || !cluster.isWorker || raw === undefined || !/^\d+$/.test(raw)) return undefined;
    const shared = process.env[REUSE_PORT_ENV];
    return new WorkerLink(Number(raw), shared === undefined ? undefined : new ReusePortListening(parseSharedPorts(shared)), parsePrimaryRecord(process.env[PRIMARY_ENV]));
  }

  /** The worker's options: the command line's, without the admin and metrics listeners (the primary serves them). */
  options(config: Config): ResolvedOptions {
    return optionsFromFlags(config, { adminAddress: 'off', metricsAddress: 'off' });
  }

  /** Answers the primary's requests from this runtime. */
  attach(runtime: Runtime): void {
    const processMetrics = new ProcessMetrics();
    runtime.onShutdown(() => processMetrics.close());
    const reply = (m: FromWorker) => {
      if (process.connected) process.send!(m);
    };
    const taps = new Map<number, { relay: TapRelay; detach: () => void }>();
    const dropped = runtime.stats.counter(TAP_STATS.dropped);
    runtime.onShutdown(() => {
      for (const { relay, detach } of taps.values()) (relay.stop(), detach());
      taps.clear();
    });
    process.on('message', (m: unknown) => {
      if (!isMeshMessage(m)) return;
      const msg = m as ToWorker;
      if (msg.mesh === 'tap') {
        if (taps.has(msg.tap)) return;
        // At most the tap's rate a second (the relay's cap), sent together every TAP_FLUSH_MS.
        const relay = new TapRelay(msg.filter, { events: (events) => reply({ mesh: 'tap-events', tap: msg.tap, events }), dropped: (n) => reply({ mesh: 'tap-dropped', tap: msg.tap, n }) }, { dropped });
        const detach = runtime.tap.attach(relay);
        if (detach) taps.set(msg.tap, { relay, detach });
        else relay.stop();
        return;
      }
      if (msg.mesh === 'untap') {
        const t = taps.get(msg.tap);
        if (t) (t.relay.stop(), t.detach(), taps.delete(msg.tap));
        return;
      }
      if (msg.mesh === 'shutdown') {
        void runtime.shutdown().then(
          (result) => process.exit(exitCodeOf(result)),
          () => process.exit(1),
        );
        return;
      }
      if (msg.mesh === 'snapshot') {
        try {
          reply({ mesh: 'reply', id: msg.id, data: snapshotOf(runtime, processMetrics, msg.parts) });
        } catch (err) {
          reply({ mesh: 'reply', id: msg.id, error: errorMessage(err, 'flag') });
        }
        return;
      }
      if (msg.mesh === 'op') {
        runOp(runtime, msg).then(
          () => reply({ mesh: 'reply', id: msg.id }),
          (err: unknown) => reply({ mesh: 'reply', id: msg.id, error: errorMessage(err, 'flag') }),
        );
      }
    });
  }

  /**
   * Tells the primary the worker serves; `lines` are what the command prints once bound. Worker 0
   * then records the primary (its admin, pid and id) in the registry, as a single process records
   * itself: `mesh ps` lists it and `mesh stop` stops it.
   */
  ready(runtime: Runtime, lines: string[]): void {
    process.send!({ mesh: 'ready', lines, hasRoutes: runtime.hasRouteTables(), ports: this.reusePort?.ports() } satisfies FromWorker);
    const primary = this.primary;
    if (this.index === 0 && primary) void runtime.recordProcess(primary.admin, primary);
  }
}

function snapshotOf(runtime: Runtime, processMetrics: ProcessMetrics, parts: Part[]): WorkerSnapshot {
  const out: WorkerSnapshot = {};
  if (parts.includes('stats')) {
    refreshServerStats({ stats: runtime.stats, server: runtime.state, certs: () => runtime.certificates() });
    out.stats = snapshotStore(runtime.stats);
    out.process = processMetrics.families();
  }
  if (parts.includes('clusters')) out.clusters = { versionInfo: runtime.clusters.versionInfo(), clusters: runtime.clusters.clusters() };
  if (parts.includes('certs')) out.certs = runtime.certificates();
  if (parts.includes('routes')) out.routes = runtime.routeTables();
  if (parts.includes('auth')) out.auth = runtime.authRules();
  if (parts.includes('rateLimits')) out.rateLimits = runtime.rateLimits();
  if (parts.includes('traffic')) out.traffic = runtime.traffic();
  return out;
}

async function runOp(runtime: Runtime, msg: Extract<ToWorker, { mesh: 'op' }>): Promise<void> {
  switch (msg.op) {
    case 'fail':
      return runtime.state.fail();
    case 'ok':
      return runtime.state.ok();
    case 'reset':
      return runtime.stats.resetCounters();
    case 'logging': {
      const level = parseLevel(msg.level!);
      if (msg.name === 'level') runtime.logging.setAll(level);
      else runtime.logging.setLevel(msg.name as Subsystem, level);
    }
  }
}

// ---------------------------------------------------------------- primary side

export interface PrimarySetup {
  /** `api`, `sidecar` or `proxy`: names the process in logs and output (`mesh api ...`). */
  role: string;
  config: Config;
  /** The admin address when --admin_address is not given (the proxy's may come from its file). */
  defaultAdminAddress: string;
  /** The line the command prints about its admin interface (undefined: off). */
  adminLine: (admin: { host: string; port: number } | undefined) => string;
  /** Index of that line in what a worker prints once bound. */
  adminLineIndex: number;
  /** The addresses the workers listen on (host:port), and the start-up error when one is taken. */
  listens: Array<{ address: string; error: (err: NodeJS.ErrnoException) => string }>;
}

interface WorkerSlot {
  index: number;
  worker?: Worker;
  ready: boolean;
  startedAt: number;
  /** Deaths within CRASH_WINDOW_MS of their start, in a row. */
  quickDeaths: number;
  restartTimer?: NodeJS.Timeout;
}

/**
 * Runs the primary of `--concurrency` N > 1: the admin interface, N workers, their restarts and
 * the shutdown. Resolves -1 (keep running) once every worker serves; rejects when a worker dies
 * before it served (its own error is on stderr).
 */
export async function runPrimary(setup: PrimarySetup): Promise<number> {
  const primary = new Primary(setup);
  try {
    await primary.start();
  } catch (err) {
    await primary.shutdown();
    throw err;
  }
  primary.installSignalHandlers();
  return -1;
}

class Primary implements AdminAggregate {
  readonly concurrency: number;
  private readonly options: ResolvedOptions;
  private readonly log_: Logging;
  private readonly own = new StatsStore();
  /** This process's id in its record (written by worker 0) and for /quitquitquit?process=. */
  private readonly processId = newProcessId();
  /** The primary's record for the workers (PRIMARY_ENV); unset without an admin. */
  private primaryRecord?: string;
  private readonly state = new ServerState();
  private readonly processMetrics = new ProcessMetrics();
  private readonly slots: WorkerSlot[] = [];
  private readonly pending = new Map<number, { worker: Worker; done: (data: WorkerSnapshot | undefined) => void; timer: NodeJS.Timeout }>();
  private nextId = 1;
  /** The taps of the admin's /tap, by id: sent to every worker that becomes ready while attached. */
  private readonly taps = new Map<number, { filter: TapFilter; sink: Parameters<AdminAggregate['tap']>[1] }>();
  private hasRoutes = false;
  private stopping?: Promise<number>;
  private readonly closers: Array<() => Promise<void> | void> = [];
  private exitCodes: number[] = [];
  /** Set while starting: settles the start once every worker served, or one died first. */
  private starting?: { resolve: (lines: string[]) => void; reject: (err: Error) => void };
  /** What worker 0 printed once bound. */
  private firstLines: string[] = [];
  private stoppingNow = false;
  /** The workers bind the port themselves with reusePort (else the primary accepts for them). */
  readonly reusePort = reusePortSupported();
  /** With reusePort: the ports worker 0's port-0 listens got, given to every worker forked after it. */
  private sharedPorts?: SharedPort[];

  constructor(private readonly setup: PrimarySetup) {
    this.concurrency = setup.config.concurrency;
    this.options = optionsFromFlags(setup.config);
    this.log_ = new Logging({ level: parseLevel(this.options.logLevel), format: this.options.logFormat });
    this.own.gauge('server.concurrency').set(this.concurrency);
    this.own.gauge(REUSE_PORT_STAT).set(this.reusePort ? 1 : 0);
    this.own.counter(WORKER_RESTARTS_STAT);
    this.state.onFail(() => (this.stoppingNow ? undefined : this.broadcast('fail')));
    this.state.onOk(() => this.broadcast('ok'));
    this.closers.push(() => this.processMetrics.close());
  }

  private log() {
    return this.log_.get('main');
  }

  async start(): Promise<void> {
    const options = this.options;
    const limits = serverLimits(options);
    const adminAddress = options.adminAddress ?? this.setup.defaultAdminAddress;
    let admin: { host: string; port: number } | undefined;
    if (adminAddress !== 'off') {
      const server = new AdminServer({
        stats: this.own,
        logging: this.log_,
        server: this.state,
        // Route tables exist when the workers have some; the aggregate reads them.
        routes: () => [],
        hasRoutes: () => this.hasRoutes,
        // --auth or --auth_rules: every worker loads them; /auth_rules shows worker 0's.
        ...(this.setup.config.auth !== 'off' || this.setup.config.auth_rules !== undefined ? { authRules: () => this.authRules(), hasAuthRules: () => true } : {}),
        // The rate limit store: worker 0's view of it (with the local store, the workers draw from this primary).
        rateLimits: () => this.rateLimits(),
        hasRateLimits: () => true,
        token: options.adminToken,
        allowedHosts: options.adminAllowedHosts,
        histograms: options.statsHistograms || options.statsEndpoints,
        limits,
        processMetrics: this.processMetrics,
        aggregate: this,
        // The workers serve the requests: a tap here is relayed to each of them (tap()); this hub holds the streams.
        tap: new TapHub({ bodiesMaxBytes: options.tapBodiesMaxBytes }),
        traffic: () => this.traffic(),
        processId: this.processId,
        quit: async () => process.exit(await this.shutdown()),
      });
      this.closers.push(() => server.close());
      admin = await server.listen(adminAddress);
      this.primaryRecord = JSON.stringify({ id: this.processId, pid: process.pid, startedMs: this.state.startedAt, admin } satisfies PrimaryRecord);
    }
    if (options.metricsAddress !== undefined && options.metricsAddress !== 'off') {
      const metrics = new MetricsServer({
        stats: this.own,
        logging: this.log_,
        server: this.state,
        limits,
        processMetrics: this.processMetrics,
        histograms: options.statsHistograms || options.statsEndpoints,
        aggregate: this,
      });
      this.closers.push(() => metrics.close());
      await metrics.listen(options.metricsAddress);
    }

    // A port another process holds is the start-up error it is without --concurrency (with
    // reusePort the workers would share it silently with whatever holds it).
    for (const { address, error } of this.setup.listens) {
      const { host, port } = parseAddress(address);
      if (port === 0) continue;
      const err = await probeListen(host, port);
      if (err) throw new Error(error(err));
    }
    // Structured clone over IPC: Dates (certificates) and non-finite numbers survive.
    cluster.setupPrimary({ serialization: 'advanced' });
    // One rate limit budget for all the workers: they draw from the primary's buckets (src/cli/rate-limit-ipc.ts).
    if (this.setup.config.rate_limit_store === 'local') this.closers.push(servePrimaryBuckets(this.setup.config.rate_limit_max_keys));
    cluster.on('exit', (worker, code, signal) => this.exited(worker, code, signal));
    const started = new Promise<string[]>((resolve, reject) => (this.starting = { resolve, reject }));
    for (let i = 0; i < this.concurrency; i++) this.slots.push({ index: i, ready: false, startedAt: 0, quickDeaths: 0 });
    // With reusePort worker 0 binds first; the others follow once its ports are known (a port 0 is shared).
    for (const slot of this.reusePort ? this.slots.slice(0, 1) : this.slots) this.fork(slot);
    const lines = await started;
    this.starting = undefined;
    const out = [...lines];
    out[this.setup.adminLineIndex] = this.setup.adminLine(admin);
    out.push(
      `mesh ${this.setup.role} concurrency ${this.concurrency} (worker pids ${this.workers().map((w) => w.pid).join(' ')}; ${this.reusePort ? 'each worker listens with reusePort' : 'the primary accepts the connections'})`,
    );
    process.stdout.write(out.join('\n') + '\n');
  }

  private fork(slot: WorkerSlot): void {
    slot.ready = false;
    slot.startedAt = Date.now();
    const worker = cluster.fork({
      [WORKER_ENV]: String(slot.index),
      ...(this.reusePort ? { [REUSE_PORT_ENV]: JSON.stringify(this.sharedPorts ?? []) } : {}),
      ...(this.primaryRecord ? { [PRIMARY_ENV]: this.primaryRecord } : {}),
    });
    slot.worker = worker;
    // A send to a worker that is going away fails on its channel: logged, never an uncaught error of the primary.
    worker.on('error', (err: Error) => this.log().warn({ worker: slot.index, worker_pid: worker.process.pid, err: err.message }, 'worker channel error'));
    worker.on('message', (m: unknown) => {
      if (!isMeshMessage(m)) return;
      const msg = m as FromWorker;
      if (msg.mesh === 'ready') {
        slot.ready = true;
        this.hasRoutes ||= msg.hasRoutes;
        // A worker started while the server fails its health checks fails them too.
        if (this.state.state === 'draining' && !this.stoppingNow) void this.request(worker, { mesh: 'op', id: 0, op: 'fail' });
        if (this.stoppingNow) worker.send({ mesh: 'shutdown' } satisfies ToWorker);
        if (slot.index === 0) this.firstLines = msg.lines;
        // A worker started again while taps are attached is tapped too.
        for (const [tap, { filter }] of this.taps) this.sendTo(worker, { mesh: 'tap', tap, filter });
        if (this.reusePort && this.sharedPorts === undefined) {
          this.sharedPorts = msg.ports ?? [];
          for (const other of this.slots.slice(1)) this.fork(other);
        }
        if (this.starting && this.slots.every((s) => s.ready)) this.starting.resolve(this.firstLines);
      } else if (msg.mesh === 'tap-events') {
        const sink = this.taps.get(msg.tap)?.sink;
        if (sink) for (const event of msg.events) sink.deliver(event);
      } else if (msg.mesh === 'tap-dropped') {
        this.taps.get(msg.tap)?.sink.dropped(msg.n);
      } else if (msg.mesh === 'reply') {
        const p = this.pending.get(msg.id);
        if (!p) return;
        this.pending.delete(msg.id);
        clearTimeout(p.timer);
        if (msg.error) this.log().warn({ worker: slot.index, err: msg.error }, 'worker request failed');
        p.done(msg.error ? undefined : (msg.data ?? {}));
      }
    });
  }

  private exited(worker: Worker, code: number | null, signal: string | null): void {
    for (const [id, p] of this.pending) {
      if (p.worker !== worker) continue;
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.done(undefined);
    }
    const slot = this.slots.find((s) => s.worker === worker);
    if (!slot) return;
    slot.worker = undefined;
    const wasReady = slot.ready;
    slot.ready = false;
    if (this.stoppingNow) {
      this.exitCodes.push(code ?? 1);
      return;
    }
    if (this.starting && !wasReady) {
      this.starting.reject(new Error(`worker ${slot.index} exited (${signal ?? `code ${code}`}) before it served; see its error above`));
      return;
    }
    slot.quickDeaths = Date.now() - slot.startedAt < CRASH_WINDOW_MS ? slot.quickDeaths + 1 : 0;
    const delay = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.max(0, slot.quickDeaths - 1));
    this.own.counter(WORKER_RESTARTS_STAT).inc();
    this.log().error({ worker: slot.index, worker_pid: worker.process.pid, code, signal, restart_in_ms: delay }, 'worker died; starting it again');
    slot.restartTimer = setTimeout(() => {
      slot.restartTimer = undefined;
      if (!this.stoppingNow) this.fork(slot);
    }, delay);
  }

  /** Sends msg (with a fresh id) to one worker; resolves with its answer, undefined when it fails or is late. */
  private request(worker: Worker, msg: Extract<ToWorker, { id: number }>): Promise<WorkerSnapshot | undefined> {
    return new Promise((resolve) => {
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        this.log().warn({ worker_pid: worker.process.pid }, 'worker did not answer in time');
        resolve(undefined);
      }, ANSWER_TIMEOUT_MS);
      this.pending.set(id, { worker, done: resolve, timer });
      try {
        worker.send({ ...msg, id });
      } catch {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(undefined);
      }
    });
  }

  /** Sends a message that wants no answer; a worker going away is left out (its exit is handled). */
  private sendTo(worker: Worker, msg: ToWorker): void {
    try {
      if (worker.isConnected()) worker.send(msg);
    } catch {
      // The channel closed: the worker is exiting.
    }
  }

  private readyWorkers(): Array<{ slot: WorkerSlot; worker: Worker }> {
    return this.slots.flatMap((slot) => (slot.ready && slot.worker ? [{ slot, worker: slot.worker }] : []));
  }

  private async snapshots(parts: Part[]): Promise<Array<{ index: number; data: WorkerSnapshot }>> {
    const answers = await Promise.all(
      this.readyWorkers().map(async ({ slot, worker }) => ({ index: slot.index, data: await this.request(worker, { mesh: 'snapshot', id: 0, parts }) })),
    );
    return answers.flatMap((a) => (a.data ? [{ index: a.index, data: a.data }] : []));
  }

  private async broadcast(op: Op, extra: { name?: string; level?: string } = {}): Promise<void> {
    await Promise.all(this.readyWorkers().map(({ worker }) => this.request(worker, { mesh: 'op', id: 0, op, ...extra })));
  }

  // ---- AdminAggregate

  async stats(): Promise<MergedStats> {
    const answers = await this.snapshots(['stats']);
    const store = mergeSnapshots([snapshotStore(this.own), ...answers.map((a) => a.data.stats!)]);
    for (const { index, data } of answers) {
      let served = 0;
      for (const [name, kind, value] of data.stats!.stats) if (kind === 'c' && /^http\..+\.downstream_rq_total$/s.test(name) && !name.startsWith('http.admin.')) served += value;
      store.counter(workerRequestsStat(index)).inc(served);
    }
    return { store, processFamilies: mergeProcessFamilies([this.processMetrics.families(), ...answers.map((a) => a.data.process ?? [])]) };
  }

  async clusters() {
    const answers = await this.snapshots(['clusters']);
    return clusterView(mergeClusterViews(answers.map((a) => a.data.clusters!)));
  }

  async certs(): Promise<CertificateInfo[]> {
    const first = this.readyWorkers()[0];
    return first ? ((await this.request(first.worker, { mesh: 'snapshot', id: 0, parts: ['certs'] }))?.certs ?? []) : [];
  }

  /** The auth configuration (every worker loads the same files; SIGHUP reaches them all): worker 0's. */
  async authRules(): Promise<unknown[]> {
    const first = this.readyWorkers()[0];
    return first ? ((await this.request(first.worker, { mesh: 'snapshot', id: 0, parts: ['auth'] }))?.auth ?? []) : [];
  }

  async rateLimits(): Promise<unknown[]> {
    const first = this.readyWorkers()[0];
    return first ? ((await this.request(first.worker, { mesh: 'snapshot', id: 0, parts: ['rateLimits'] }))?.rateLimits ?? []) : [];
  }

  async routes(): Promise<RouteTableDump[]> {
    const first = this.readyWorkers()[0];
    return first ? ((await this.request(first.worker, { mesh: 'snapshot', id: 0, parts: ['routes'] }))?.routes ?? []) : [];
  }

  tap(filter: TapFilter, sink: Parameters<AdminAggregate['tap']>[1]): () => void {
    const tap = this.nextId++;
    this.taps.set(tap, { filter, sink });
    for (const { worker } of this.readyWorkers()) this.sendTo(worker, { mesh: 'tap', tap, filter });
    return () => {
      if (!this.taps.delete(tap)) return;
      for (const { worker } of this.readyWorkers()) this.sendTo(worker, { mesh: 'untap', tap });
    };
  }

  async traffic(): Promise<TrafficReport> {
    const answers = await this.snapshots(['traffic']);
    const reports = answers.map((a) => a.data.traffic!);
    // The process as worker 0 records it (its kind, name and mTLS), under the primary's id and start.
    const named = reports[0]?.process ?? { kind: this.setup.role, name: '', mtls: this.options.mtls };
    return mergeTrafficReports({ id: this.processId, kind: named.kind, name: named.name, mtls: named.mtls, started_ms: this.state.startedAt }, reports);
  }

  resetCounters(): Promise<void> {
    return this.broadcast('reset');
  }

  logging(name: string, level: string): Promise<void> {
    return this.broadcast('logging', { name, level });
  }

  workers(): Array<{ index: number; pid: number }> {
    return this.readyWorkers().map(({ slot, worker }) => ({ index: slot.index, pid: worker.process.pid! }));
  }

  // ---- shutdown

  /**
   * Once: every worker drains as a single process does (--drain_delay, --drain_timeout) and
   * exits; then the admin closes. Resolves with the exit code: 0 when every worker exited 0.
   */
  shutdown(): Promise<number> {
    this.stoppingNow = true;
    this.stopping ??= (async () => {
      for (const slot of this.slots) clearTimeout(slot.restartTimer);
      // The admin's /ready answers DRAINING from now on; the workers turn draining themselves.
      await this.state.fail().catch(() => undefined);
      const live = this.slots.flatMap((s) => (s.worker && !s.worker.isDead() ? [s.worker] : []));
      const gone = Promise.all(live.map((w) => new Promise<void>((resolve) => (w.isDead() ? resolve() : w.once('exit', () => resolve())))));
      for (const w of live) {
        try {
          w.send({ mesh: 'shutdown' } satisfies ToWorker);
        } catch {
          w.process.kill('SIGTERM');
        }
      }
      // A worker stuck past its own drain bound is killed.
      const bound = this.options.drainDelay + this.options.drainTimeout + 15_000;
      const killer = setTimeout(() => {
        for (const w of live) if (!w.isDead()) w.process.kill('SIGKILL');
      }, bound);
      await gone;
      clearTimeout(killer);
      for (const close of this.closers.reverse()) {
        try {
          await close();
        } catch (err) {
          this.log().error({ err: (err as Error).message }, 'shutdown step failed');
        }
      }
      this.log_.flush();
      return this.exitCodes.some((c) => c !== 0) ? 1 : 0;
    })();
    return this.stopping;
  }

  /** SIGINT/SIGTERM: every worker drains, then exit (0, or 1 when a worker cut requests off); a second signal kills the workers and exits 130. */
  installSignalHandlers(): void {
    let signalled = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (signalled) {
        for (const s of this.slots) s.worker?.process.kill('SIGKILL');
        process.exit(130);
      }
      signalled = true;
      this.log().info({ signal }, 'shutting down');
      void this.shutdown().then(
        (code) => process.exit(code),
        () => process.exit(1),
      );
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // Reload signals are the workers' business: SIGHUP rereads the auth rules, SIGUSR1 reopens the access log.
    const forward = (signal: NodeJS.Signals) => {
      for (const s of this.slots) if (s.worker && !s.worker.isDead()) s.worker.process.kill(signal);
    };
    process.on('SIGHUP', forward);
    process.on('SIGUSR1', forward);
  }
}
