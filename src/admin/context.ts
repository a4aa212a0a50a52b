/**
 * What the admin interface reads and drives: one process's stats, logging, cluster manager,
 * routes, certificates and server state. The runtime builds one AdminContext per process.
 */
import type { TrafficReport } from './traffic.js';
import type { WorkloadTls } from '../base/mtls/workload-tls.js';
import type { ServerLimits } from '../base/http/lifecycle.js';
import { EventEmitter } from 'node:events';
import type { StatsStore } from '../base/stats/store.js';
import type { ServerStatsSource } from '../base/stats/server-stats.js';
import type { Logging } from '../base/util/log.js';
import type { ClusterManagerView } from '../core/upstream/types.js';
import { buildInfo, type BuildStatus, type BuildType } from './build-info.js';
import type { CertificateInfo } from '../tls/certificate.js';
import type { ProcessMetrics } from '../base/stats/process-metrics.js';
import type { AdminAggregate } from './aggregate.js';
import type { RouteTableDump } from './route-table.js';
import type { ListenerInfo } from './config-dump.js';
import type { TapHub } from '../base/http/tap.js';

// Certificates are the TLS layer's (src/tls/certificate.ts); re-exported for the admin API.
export type { CertificateInfo, SubjectAltName } from '../tls/certificate.js';
// Route table dumps have their own file (route-table.ts), so that aggregate.ts needs nothing from here.
export type { RouteTableDump } from './route-table.js';

export type ServerHealthState = 'live' | 'draining';

export interface ServerStateOptions {
  version?: string;
  /** Build commit, 40 hex digits. */
  sha?: string;
  status?: BuildStatus;
  buildType?: BuildType;
  /** Hot-restart epoch number (always 0: mesh has no hot restart). */
  epoch?: number;
  /** Epoch milliseconds when this process started (default: now). */
  startedAt?: number;
  /** Epoch milliseconds when the first epoch started (default: startedAt). */
  firstStartedAt?: number;
  /** Clock, epoch milliseconds (tests inject a fixed one). */
  now?: () => number;
}

type Hook = () => void | Promise<void>;

/**
 * The server's health-check state. `fail()` turns it to draining and `ok()` back to live; the
 * process hooks both (onFail/onOk, awaited by the admin before it answers, or the `fail`, `ok`
 * and `state` events) to withdraw and restore its registry entries and to make its health-check
 * path answer 503.
 *
 * Events: `state` (new state), `fail`, `ok`; emitted only when the state changes.
 */
export class ServerState extends EventEmitter implements ServerStatsSource {
  state: ServerHealthState = 'live';
  readonly startedAt: number;
  readonly firstStartedAt: number;
  readonly version: string;
  readonly sha: string;
  readonly status: BuildStatus;
  readonly buildType: BuildType;
  readonly epoch: number;
  private readonly clock: () => number;
  private readonly failHooks = new Set<Hook>();
  private readonly okHooks = new Set<Hook>();

  constructor(options: ServerStateOptions = {}) {
    super();
    const build = buildInfo();
    this.clock = options.now ?? Date.now;
    this.version = options.version ?? build.version;
    this.sha = options.sha ?? build.sha;
    this.status = options.status ?? build.status;
    this.buildType = options.buildType ?? build.type;
    this.epoch = options.epoch ?? 0;
    this.startedAt = options.startedAt ?? this.clock();
    this.firstStartedAt = options.firstStartedAt ?? this.startedAt;
  }

  now(): number {
    return this.clock();
  }

  get live(): boolean {
    return this.state === 'live';
  }

  /** Registers a hook run (and awaited) when the state turns draining; returns an unsubscribe. */
  onFail(hook: Hook): () => void {
    this.failHooks.add(hook);
    return () => this.failHooks.delete(hook);
  }

  /** Registers a hook run (and awaited) when the state turns live again; returns an unsubscribe. */
  onOk(hook: Hook): () => void {
    this.okHooks.add(hook);
    return () => this.okHooks.delete(hook);
  }

  /** live -> draining. The state changes at once; resolves when every hook has run (rejects with the first failure). */
  async fail(): Promise<void> {
    if (this.state === 'draining') return;
    this.state = 'draining';
    this.emit('state', this.state);
    this.emit('fail');
    await runHooks(this.failHooks);
  }

  /** draining -> live. */
  async ok(): Promise<void> {
    if (this.state === 'live') return;
    this.state = 'live';
    this.emit('state', this.state);
    this.emit('ok');
    await runHooks(this.okHooks);
  }
}

async function runHooks(hooks: Set<Hook>): Promise<void> {
  const results = await Promise.allSettled([...hooks].map(async (hook) => hook()));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

export interface AdminContext {
  stats: StatsStore;
  logging: Logging;
  clusters?: ClusterManagerView;
  /** Dynamic route tables, read at each request; when absent /routes does not exist (404, not in the help). */
  routes?: () => RouteTableDump[];
  /**
   * Whether the process has dynamic route tables now (read at each request: /routes exists, and is
   * in the help, only while it says true). Absent: as long as `routes` is set.
   */
  hasRoutes?: () => boolean;
  /** The front ends' listening sockets, read at each request; /listeners exists while hasListeners says true. */
  listeners?: () => ListenerInfo[];
  hasListeners?: () => boolean;
  /** /config_dump's options section (secrets left out: src/admin/config-dump.ts); absent: no /config_dump. */
  options?: () => Record<string, unknown>;
  /** The loaded auth configurations (rules), read at each request; /auth_rules exists while hasAuthRules says true. */
  authRules?: () => unknown[] | Promise<unknown[]>;
  hasAuthRules?: () => boolean;
  /** The rate limit stores (src/base/http/rate-limit-store.ts), read at each request; /rate_limits exists while hasRateLimits says true. */
  rateLimits?: () => unknown[] | Promise<unknown[]>;
  hasRateLimits?: () => boolean;
  /** Loaded certificates, read at each request. */
  certs?: () => CertificateInfo[];
  server: ServerState;
  /** Drains, deregisters and exits 0. Called after `OK\n` of /quitquitquit has been flushed. */
  quit: () => Promise<void>;
  /**
   * This process's id in the registry's process records: `/quitquitquit?process=ID` quits only
   * when it is this one (`mesh stop`: a record that outlived its process names an admin port
   * another process may hold now).
   */
  processId?: string;
  /** admin /traffic (src/admin/traffic.ts): absent, no such path. */
  traffic?: () => TrafficReport | Promise<TrafficReport>;
  /**
   * --tap_allowed_identities: the admin also accepts mutual TLS with this workload certificate
   * (plain HTTP stays as it is), and over it serves only /tap, to these SPIFFE IDs, without the token.
   */
  tapMtls?: { workload: WorkloadTls; allowed: readonly string[] };
  /** --admin_token: every request then needs `Authorization: Bearer <token>`. */
  token?: string;
  /** --admin_allowed_hosts: Host names answered besides loopback, localhost and the own IP (`*`: all). */
  allowedHosts?: readonly string[];
  /** Where /cpuprofiler writes profiles (default os.tmpdir()). */
  profileDir?: string;
  /** --max_connections and the read timeouts, as on every other listener (absent: node's defaults). */
  limits?: ServerLimits;
  /** Standard process metrics of the Prometheus format (absent: the admin makes its own and closes it with itself). */
  processMetrics?: ProcessMetrics;
  /** The process's tap hub: /tap streams what its front ends publish there; absent: no /tap. */
  tap?: TapHub;
  /** --stats_histograms: /stats (every format) prints the latency histograms too (default false). */
  histograms?: boolean;
  /**
   * --concurrency above 1: the admin of the process that owns the workers shows and drives them
   * all through this (src/admin/aggregate.ts); `stats` then holds only that process's own stats.
   */
  aggregate?: AdminAggregate;
}
