/**
 * Active HTTP health checking, after Envoy's HTTP health checker: each checked host gets
 * `GET <path>` every interval with a timeout. A status in `expectedStatuses` (default: 200) is a
 * success; anything else, or no answer in time, a failure.
 *
 * - A host added to a checked cluster starts as failed_active_hc until its first check (which runs
 *   at once); one success is enough the first time.
 * - Afterwards a healthy host turns failed after `unhealthyThreshold` consecutive failures and a
 *   failed host returns after `healthyThreshold` consecutive successes.
 * - Checks use their own connections (a dispatcher shared by the cluster manager), so they do not
 *   count in the host's cx_* / rq_* stats. Timers are unref'd and stopped on close.
 */
import type { Dispatcher } from 'undici';
import { declareStats, type FamilyStats, type StatsScope } from '../../base/stats/store.js';
import type { HealthCheckConfig } from './config.js';
import type { Host } from './host.js';

/** `cluster.<name>.health_check.*` */
export const HEALTH_CHECK_STATS = {
  counters: { attempt: 'attempt', success: 'success', failure: 'failure', networkFailure: 'network_failure' },
  gauges: { healthy: 'healthy' },
} as const;

type Logger = { info(obj: object, msg: string): void; debug(obj: object, msg: string): void };

interface Session {
  host: Host;
  path: string;
  timer?: NodeJS.Timeout;
  consecutiveOk: number;
  consecutiveFail: number;
  first: boolean;
  running?: Promise<void>;
  stopped: boolean;
}

export interface HealthCheckerOptions {
  config: HealthCheckConfig;
  cluster: string;
  /** The cluster's scope, `cluster.<name>.`. */
  stats: StatsScope;
  /** Where check requests go (an undici Agent); not the host's own pool. */
  dispatcher: Dispatcher;
  /**
   * The dispatcher of a host's checks when it is not `dispatcher`: a host that serves mutual TLS
   * is checked over it (Cluster: a connection of the host's own, with the mTLS connector).
   */
  dispatcherFor?: (host: Host) => Dispatcher | undefined;
  onChange: () => void;
  log?: Logger;
}

export class HealthChecker {
  readonly config: HealthCheckConfig;
  private readonly sessions = new Map<Host, Session>();
  private readonly dispatcher: Dispatcher;
  private readonly dispatcherFor?: (host: Host) => Dispatcher | undefined;
  private readonly onChange: () => void;
  private readonly log?: Logger;
  private readonly cluster: string;
  private closed = false;

  private readonly s: FamilyStats<typeof HEALTH_CHECK_STATS>;

  constructor(options: HealthCheckerOptions) {
    this.config = options.config;
    this.dispatcher = options.dispatcher;
    this.dispatcherFor = options.dispatcherFor;
    this.onChange = options.onChange;
    this.log = options.log;
    this.cluster = options.cluster;
    this.s = declareStats(options.stats.scope('health_check.'), HEALTH_CHECK_STATS);
  }

  /** Number of hosts under active checking. */
  size(): number {
    return this.sessions.size;
  }

  isChecked(host: Host): boolean {
    return this.sessions.has(host);
  }

  /**
   * Sets the path a host is checked on (undefined: not checked). A newly checked host is marked
   * failed_active_hc until its first check, which starts now; returns that check.
   */
  set(host: Host, path: string | undefined): Promise<void> {
    const existing = this.sessions.get(host);
    if (path === undefined) {
      if (existing) this.remove(host);
      return Promise.resolve();
    }
    const normalized = path.startsWith('/') ? path : `/${path}`;
    if (existing) {
      existing.path = normalized;
      return existing.running ?? Promise.resolve();
    }
    if (this.closed) return Promise.resolve();
    const session: Session = { host, path: normalized, consecutiveOk: 0, consecutiveFail: 0, first: true, stopped: false };
    this.sessions.set(host, session);
    if (!host.failedActiveHc) {
      host.failedActiveHc = true;
      this.onChange();
    }
    this.updateHealthyGauge();
    return this.run(session);
  }

  /** Stops checking a host and clears its flag. */
  remove(host: Host): void {
    const session = this.sessions.get(host);
    if (!session) return;
    session.stopped = true;
    if (session.timer) clearTimeout(session.timer);
    this.sessions.delete(host);
    if (host.failedActiveHc) {
      host.failedActiveHc = false;
      this.onChange();
    }
    this.updateHealthyGauge();
  }

  close(): void {
    this.closed = true;
    for (const session of this.sessions.values()) {
      session.stopped = true;
      if (session.timer) clearTimeout(session.timer);
    }
    this.sessions.clear();
  }

  private schedule(session: Session): void {
    if (session.stopped || this.closed) return;
    session.timer = setTimeout(() => {
      session.timer = undefined;
      void this.run(session);
    }, this.config.intervalMs);
    session.timer.unref();
  }

  private run(session: Session): Promise<void> {
    if (session.running) return session.running;
    const p = this.check(session).finally(() => {
      session.running = undefined;
      this.schedule(session);
    });
    session.running = p;
    return p;
  }

  private async check(session: Session): Promise<void> {
    const { host } = session;
    this.s.attempt.inc();
    let ok = false;
    let network = false;
    let detail = '';
    try {
      const dispatcher = this.dispatcherFor?.(host) ?? this.dispatcher;
      const res = await dispatcher.request({
        origin: `http://${host.key}`,
        path: session.path,
        method: 'GET',
        headers: { host: this.config.host ?? host.key, 'user-agent': 'mesh/HC', connection: 'keep-alive' },
        signal: AbortSignal.timeout(this.config.timeoutMs),
        headersTimeout: this.config.timeoutMs,
        bodyTimeout: this.config.timeoutMs,
      });
      await res.body.dump({ limit: 64 * 1024 }).catch(() => {});
      ok = this.config.expectedStatuses.some(([from, to]) => res.statusCode >= from && res.statusCode < to);
      detail = `status ${res.statusCode}`;
    } catch (err) {
      network = true;
      detail = err instanceof Error ? (err.name === 'TimeoutError' ? 'timeout' : err.message) : String(err);
    }
    if (session.stopped || this.closed) return;
    if (ok) this.s.success.inc();
    else {
      this.s.failure.inc();
      if (network) this.s.networkFailure.inc();
    }
    this.apply(session, ok, detail);
  }

  private apply(session: Session, ok: boolean, detail: string): void {
    const { host } = session;
    const first = session.first;
    session.first = false;
    let changed = false;
    if (ok) {
      session.consecutiveFail = 0;
      session.consecutiveOk++;
      if (host.failedActiveHc && (first || session.consecutiveOk >= this.config.healthyThreshold)) {
        host.failedActiveHc = false;
        changed = true;
        this.log?.info({ cluster: this.cluster, host: host.key, path: session.path }, 'health check: host healthy');
      }
    } else {
      session.consecutiveOk = 0;
      session.consecutiveFail++;
      if (!host.failedActiveHc && session.consecutiveFail >= this.config.unhealthyThreshold) {
        host.failedActiveHc = true;
        changed = true;
        this.log?.info({ cluster: this.cluster, host: host.key, path: session.path, detail }, 'health check: host unhealthy');
      } else {
        this.log?.debug({ cluster: this.cluster, host: host.key, path: session.path, detail }, 'health check failed');
      }
    }
    if (changed) {
      this.updateHealthyGauge();
      this.onChange();
    }
  }

  private updateHealthyGauge(): void {
    let n = 0;
    for (const s of this.sessions.values()) if (!s.host.failedActiveHc) n++;
    this.s.healthy.set(n);
  }
}
