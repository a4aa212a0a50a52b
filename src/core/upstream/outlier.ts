/**
 * Outlier detection (passive health checking), after Envoy:
 *
 * - Consecutive gateway failure: a host whose last `consecutiveGatewayFailure` attempts were 502,
 *   503 or 504 answers (or local-origin errors, see below) is ejected at once. Checked first.
 * - Consecutive 5xx: the same for any 5xx answer (and local-origin errors).
 * - Local-origin errors are the ones the client sees itself: connect failure, reset, timeout
 *   (per-try or overall). Without `splitExternalLocalOriginErrors` (the default, as Envoy) they
 *   count as 503 (504 for a timeout) in the two detectors above and in the success rate. With it,
 *   they count only in `consecutiveLocalOriginFailure` (reset by any answer from the host), and
 *   the other detectors see only the host's answers.
 * - Success rate: every interval, hosts with at least `successRateRequestVolume` requests get a
 *   success rate (0..100, else -1); when at least `successRateMinimumHosts` hosts have one, those
 *   below mean − stdevFactor × stdev are ejected. Average and threshold are -1 otherwise.
 * - An ejected host (`failed_outlier_check`) stays out for baseEjectionTime × its number of
 *   ejections (capped by maxEjectionTime), checked at each interval tick, so an ejection lasts up
 *   to one interval longer. The multiplier drops by one for each baseEjectionTime the host then
 *   stays in.
 * - At most maxEjectionPercent of the hosts are ejected at once, but always at least one host
 *   (so a 2-host cluster can eject its bad host); further detections count ejections_overflow.
 */
import { declareStats, type FamilyStats, type StatsScope } from '../../base/stats/store.js';
import type { OutlierDetectionConfig } from './config.js';
import type { Host } from './host.js';
import type { AttemptOutcome } from './types.js';

type Logger = { info(obj: object, msg: string): void; debug(obj: object, msg: string): void };

/** `cluster.<name>.outlier_detection.*` */
export const OUTLIER_STATS = {
  gauges: { active: 'ejections_active' },
  counters: {
    total: 'ejections_total',
    enforcedTotal: 'ejections_enforced_total',
    overflow: 'ejections_overflow',
    detected5xx: 'ejections_detected_consecutive_5xx',
    enforced5xx: 'ejections_enforced_consecutive_5xx',
    detectedSr: 'ejections_detected_success_rate',
    enforcedSr: 'ejections_enforced_success_rate',
    detectedGw: 'ejections_detected_consecutive_gateway_failure',
    enforcedGw: 'ejections_enforced_consecutive_gateway_failure',
    detectedLocal: 'ejections_detected_consecutive_local_origin_failure',
    enforcedLocal: 'ejections_enforced_consecutive_local_origin_failure',
  },
} as const;

export type OutlierReason = 'consecutive_5xx' | 'consecutive_gateway_failure' | 'consecutive_local_origin_failure' | 'success_rate';

/** What outlier detection sees of one attempt: an answer's status or a local-origin error. */
export type OutlierResult = Exclude<AttemptOutcome, { kind: 'cancelled' }>;

export interface OutlierDetectorOptions {
  config: OutlierDetectionConfig;
  /** The cluster's scope, `cluster.<name>.`. */
  stats: StatsScope;
  cluster: string;
  hosts: () => readonly Host[];
  /** Called whenever a host's outlier flag changes. */
  onChange: () => void;
  log?: Logger;
  now?: () => number;
  random?: () => number;
}

export class OutlierDetector {
  readonly config: OutlierDetectionConfig;
  /** Of the last interval; -1 when too few hosts had enough volume. */
  successRateAverage = -1;
  successRateEjectionThreshold = -1;

  private readonly hosts: () => readonly Host[];
  private readonly onChange: () => void;
  private readonly log?: Logger;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly cluster: string;
  private timer: NodeJS.Timeout | undefined;
  private active = 0;

  private readonly s: FamilyStats<typeof OUTLIER_STATS>;

  constructor(options: OutlierDetectorOptions) {
    this.config = options.config;
    this.hosts = options.hosts;
    this.onChange = options.onChange;
    this.log = options.log;
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
    this.cluster = options.cluster;
    this.s = declareStats(options.stats.scope('outlier_detection.'), OUTLIER_STATS);
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.tick(), this.config.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  ejectionsActive(): number {
    return this.active;
  }

  /** One finished attempt on a host (a cancelled one is not the host's doing and never comes here). */
  record(host: Host, result: OutlierResult): void {
    const c = this.config;
    const local = result.kind !== 'response';
    if (c.splitExternalLocalOriginErrors) {
      if (local) {
        host.consecutiveLocalOriginFailure++;
        if (c.consecutiveLocalOriginFailure > 0 && host.consecutiveLocalOriginFailure >= c.consecutiveLocalOriginFailure) {
          host.consecutiveLocalOriginFailure = 0;
          this.detect(host, 'consecutive_local_origin_failure');
        }
        return;
      }
      host.consecutiveLocalOriginFailure = 0;
    }
    // Without the split, a local-origin error stands for the answer a proxy would have given.
    const status = result.kind === 'response' ? result.status : result.kind === 'timeout' ? 504 : 503;
    host.intervalTotal++;
    if (status < 500) {
      host.intervalSuccess++;
      host.consecutive5xx = 0;
      host.consecutiveGatewayFailure = 0;
      return;
    }
    if (status >= 502 && status <= 504) {
      host.consecutiveGatewayFailure++;
      if (c.consecutiveGatewayFailure > 0 && host.consecutiveGatewayFailure >= c.consecutiveGatewayFailure) {
        host.consecutiveGatewayFailure = 0;
        this.detect(host, 'consecutive_gateway_failure');
      }
    } else host.consecutiveGatewayFailure = 0;
    host.consecutive5xx++;
    if (c.consecutive5xx > 0 && host.consecutive5xx >= c.consecutive5xx) {
      host.consecutive5xx = 0;
      this.detect(host, 'consecutive_5xx');
    }
  }

  /** A consecutive-errors detector fired: count it, and eject unless the host is out already. */
  private detect(host: Host, reason: Exclude<OutlierReason, 'success_rate'>): void {
    if (host.failedOutlierCheck || host.removed) return;
    const c = this.config;
    const [detected, enforced, percent] =
      reason === 'consecutive_5xx'
        ? [this.s.detected5xx, this.s.enforced5xx, c.enforcingConsecutive5xx]
        : reason === 'consecutive_gateway_failure'
          ? [this.s.detectedGw, this.s.enforcedGw, c.enforcingConsecutiveGatewayFailure]
          : [this.s.detectedLocal, this.s.enforcedLocal, c.enforcingConsecutiveLocalOriginFailure];
    detected.inc();
    if (this.enforce(percent) && this.eject(host, reason)) enforced.inc();
  }

  /** A host left the cluster: it no longer counts as ejected. */
  hostRemoved(host: Host): void {
    if (host.failedOutlierCheck) {
      host.failedOutlierCheck = false;
      this.active = Math.max(0, this.active - 1);
      this.s.active.set(this.active);
    }
  }

  /** The interval's work: return hosts whose ejection is over, compute success rates, eject. */
  tick(): void {
    const now = this.now();
    const hosts = this.hosts();
    let changed = false;
    for (const h of hosts) {
      if (h.failedOutlierCheck) {
        if (now >= h.ejectionEndAt) {
          h.failedOutlierCheck = false;
          h.consecutive5xx = 0;
          h.consecutiveGatewayFailure = 0;
          h.consecutiveLocalOriginFailure = 0;
          h.lastUnejectedAt = now;
          this.active = Math.max(0, this.active - 1);
          changed = true;
          this.log?.info({ cluster: this.cluster, host: h.key }, 'outlier detection: host returned');
        }
      } else if (h.ejections > 0 && now - h.lastUnejectedAt >= this.config.baseEjectionTimeMs) {
        h.ejections--;
        h.lastUnejectedAt = now;
      }
    }
    if (changed) {
      this.s.active.set(this.active);
      this.onChange();
    }

    const valid: Array<[Host, number]> = [];
    const volume = this.config.successRateRequestVolume;
    for (const h of hosts) {
      if (h.intervalTotal > 0 && h.intervalTotal >= volume) {
        h.successRate = (h.intervalSuccess / h.intervalTotal) * 100;
        if (!h.failedOutlierCheck) valid.push([h, h.successRate]);
      } else h.successRate = -1;
      h.intervalTotal = 0;
      h.intervalSuccess = 0;
    }
    if (valid.length > 0 && valid.length >= this.config.successRateMinimumHosts) {
      let sum = 0;
      for (const [, r] of valid) sum += r;
      const mean = sum / valid.length;
      let variance = 0;
      for (const [, r] of valid) variance += (r - mean) ** 2;
      variance /= valid.length;
      const threshold = mean - this.config.successRateStdevFactor * Math.sqrt(variance);
      this.successRateAverage = mean;
      this.successRateEjectionThreshold = threshold;
      for (const [h, r] of valid) {
        if (r < threshold) {
          this.s.detectedSr.inc();
          if (this.enforce(this.config.enforcingSuccessRate) && this.eject(h, 'success_rate')) this.s.enforcedSr.inc();
        }
      }
    } else {
      this.successRateAverage = -1;
      this.successRateEjectionThreshold = -1;
    }
  }

  private enforce(percent: number): boolean {
    if (percent >= 100) return true;
    if (percent <= 0) return false;
    return this.random() * 100 < percent;
  }

  /** Most hosts that may be ejected at once: maxEjectionPercent of them, but at least one. */
  maxEjections(hostCount: number): number {
    const pct = this.config.maxEjectionPercent;
    if (pct <= 0 || hostCount === 0) return 0;
    return Math.max(1, Math.floor((hostCount * Math.min(100, pct)) / 100));
  }

  private eject(host: Host, reason: OutlierReason): boolean {
    if (host.failedOutlierCheck) return false;
    if (this.active >= this.maxEjections(this.hosts().length)) {
      this.s.overflow.inc();
      this.log?.debug({ cluster: this.cluster, host: host.key, reason }, 'outlier detection: ejection over max_ejection_percent');
      return false;
    }
    const now = this.now();
    host.ejections++;
    host.failedOutlierCheck = true;
    host.ejectedAt = now;
    const base = this.config.baseEjectionTimeMs;
    const duration = Math.min(base * host.ejections, Math.max(base, this.config.maxEjectionTimeMs));
    host.ejectionEndAt = now + duration;
    this.active++;
    this.s.active.set(this.active);
    this.s.total.inc();
    this.s.enforcedTotal.inc();
    this.log?.info({ cluster: this.cluster, host: host.key, reason, ejectionMs: duration, ejections: host.ejections }, 'outlier detection: host ejected');
    this.onChange();
    return true;
  }
}
