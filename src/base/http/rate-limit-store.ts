/**
 * The rate limit stores of a process (`--rate_limit_store`, docs/gateway.md "Rate limits"): where the
 * token buckets of `--rate_limit` and of the auth rules' `rate_limit` live.
 *
 * - `MemoryRateLimitStore`: the process's own buckets (one process, `--concurrency=1`).
 * - `SharedRateLimitStore`: buckets kept elsewhere (`BucketBackend`: the `--concurrency` primary over
 *   IPC, or Redis), drawn from in batches: a process takes up to `allowance` tokens of a key's bucket
 *   at once and spends them locally, so that only one request in `allowance` crosses to the store. A
 *   bucket that had nothing left is not asked again before its next token is due. Tokens a process
 *   holds were taken from the shared bucket, so the shared count is never exceeded; but tokens taken
 *   before a window may be spent inside it: over any window, N processes may let through at most
 *   N × allowance more than the bucket alone would.
 *
 * A take never hangs: a take that has no answer within `timeoutMs` (`--rate_limit_store_timeout`)
 * in all (its own call to the store, or the calls of other takes of its key it waits for), or whose
 * call fails, is a store error, and `--rate_limit_failure_mode` decides: `open` allows the request, `closed` refuses it (503). Three failed calls in a row make
 * an outage, logged once (and counted in `rate_limit.store.outages`), its end too; while the store
 * is down it is asked again at most once per backoff (100 ms doubling to 2 s), the other takes go
 * straight to the failure mode.
 *
 * Stats (`rate_limit.<kind>.*`, kind = address, subject, route or rule): `allowed`, `limited`
 * (every decision, the failure mode's too), `store_errors` (the decisions the failure mode made),
 * `store_latency` (ms, one per call to a shared store); `rate_limit.store.round_trips` counts the
 * calls, `rate_limit.store.outages` the outages.
 */
import type { Logger } from 'pino';
import { withTimeout } from '../util/timeout.js';
import type { Counter, Histogram, StatsScope } from '../stats/store.js';
import { decisionOf, RateLimiter, type BucketGrant, type RateDecision, type RateLimitStore, type RateLimitStoreStatus, type RatePolicy } from './rate-limit.js';

export type RateLimitFailureMode = 'open' | 'closed';
export const RATE_LIMIT_FAILURE_MODES: readonly RateLimitFailureMode[] = ['open', 'closed'];

/** Milliseconds a call to a shared store may take before the failure mode decides. */
export const DEFAULT_STORE_TIMEOUT_MS = 100;
/** Most calls to a shared store in flight at once; past it a take is a store error at once. */
const MAX_IN_FLIGHT = 1024;
const FIRST_PROBE_MS = 100;
const MAX_PROBE_MS = 2000;
/** Failed calls in a row that make an outage (logged, counted, the store asked once per backoff). */
const OUTAGE_AFTER = 3;

/** Buckets kept elsewhere: hands out up to `want` tokens of a key's bucket at once. */
export interface BucketBackend {
  /** `primary` or `redis`. */
  readonly kind: string;
  /** Where it is, without credentials. */
  readonly address: string;
  grant(key: string, policy: RatePolicy, want: number): Promise<BucketGrant>;
  close(): Promise<void> | void;
}

/** The per-kind stats of a store. */
class RateLimitStats {
  private readonly kinds = new Map<string, { allowed: Counter; limited: Counter; storeErrors: Counter; latency: Histogram }>();
  readonly roundTrips: Counter;
  readonly outages: Counter;

  constructor(private readonly scope: StatsScope) {
    this.roundTrips = scope.counter('rate_limit.store.round_trips');
    this.outages = scope.counter('rate_limit.store.outages');
  }

  of(kind: string) {
    let s = this.kinds.get(kind);
    if (!s) {
      const p = `rate_limit.${kind}.`;
      s = { allowed: this.scope.counter(p + 'allowed'), limited: this.scope.counter(p + 'limited'), storeErrors: this.scope.counter(p + 'store_errors'), latency: this.scope.histogram(p + 'store_latency') };
      this.kinds.set(kind, s);
    }
    return s;
  }

  count(kind: string, d: RateDecision): RateDecision {
    const s = this.of(kind);
    (d.allowed ? s.allowed : s.limited).inc();
    return d;
  }
}

/** The buckets of one process, counted. */
export class MemoryRateLimitStore implements RateLimitStore {
  readonly kind = 'memory';
  private readonly buckets: RateLimiter;
  private readonly stats: RateLimitStats;

  constructor(options: { policy: RatePolicy; maxKeys?: number; stats: StatsScope; now?: () => number }) {
    this.buckets = new RateLimiter({ policy: options.policy, maxKeys: options.maxKeys, now: options.now });
    this.stats = new RateLimitStats(options.stats);
  }

  take(key: string, policy: RatePolicy, kind: string): RateDecision {
    return this.stats.count(kind, this.buckets.check(key, policy));
  }

  status(): RateLimitStoreStatus {
    return { store: 'memory', state: 'up', since: new Date(0).toISOString() };
  }
}

/**
 * The tokens a process takes from a shared bucket at once: a tenth of the burst, from 1 to 100.
 * A smaller allowance crosses to the store more often; a larger one lets N processes hold more
 * of the bucket (and go further over it in a window: N × allowance).
 */
export function allowanceOf(policy: RatePolicy): number {
  return Math.max(1, Math.min(100, Math.floor(policy.burst / 10)));
}

interface Local {
  /** Tokens taken from the shared bucket, not spent yet. */
  tokens: number;
  /** What the shared bucket had left at the last grant. */
  shared: number;
  /** The shared bucket was empty: not asked again before this (the store's clock). */
  emptyUntil: number;
  /** A grant in flight: later takes of the key wait for it instead of asking too. */
  pending?: Promise<void>;
}

export interface SharedRateLimitStoreOptions {
  backend: BucketBackend;
  failureMode: RateLimitFailureMode;
  stats: StatsScope;
  log: Logger;
  /** Most keys held locally; the least recently used is forgotten first (its tokens with it). */
  maxKeys: number;
  timeoutMs?: number;
  /** Tokens taken at once; default allowanceOf(policy). */
  allowance?: (policy: RatePolicy) => number;
  /** The clock (ms, monotonic); default performance.now. */
  now?: () => number;
}

export class SharedRateLimitStore implements RateLimitStore {
  readonly kind: string;
  private readonly backend: BucketBackend;
  private readonly failureMode: RateLimitFailureMode;
  private readonly stats: RateLimitStats;
  private readonly log: Logger;
  private readonly maxKeys: number;
  private readonly timeoutMs: number;
  private readonly allowance: (policy: RatePolicy) => number;
  private readonly now: () => number;
  private readonly locals = new Map<string, Local>();
  private inFlight = 0;
  private down = false;
  private since = Date.now();
  private nextProbe = 0;
  private probeMs = FIRST_PROBE_MS;
  private lastError = '';
  /** Calls failed in a row: an outage starts at OUTAGE_AFTER (one late answer under load is not one). */
  private failures = 0;

  constructor(options: SharedRateLimitStoreOptions) {
    this.backend = options.backend;
    this.kind = options.backend.kind;
    this.failureMode = options.failureMode;
    this.stats = new RateLimitStats(options.stats);
    this.log = options.log;
    this.maxKeys = Math.max(1, options.maxKeys);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    this.allowance = options.allowance ?? allowanceOf;
    this.now = options.now ?? (() => performance.now());
  }

  take(key: string, policy: RatePolicy, kind: string): RateDecision | Promise<RateDecision> {
    const id = `${policy.name}\u0000${key}`;
    let local = this.locals.get(id);
    if (local) {
      this.locals.delete(id);
    } else {
      local = { tokens: 0, shared: policy.burst, emptyUntil: 0 };
      while (this.locals.size >= this.maxKeys) this.locals.delete(this.locals.keys().next().value as string);
    }
    this.locals.set(id, local);
    return this.takeLocal(id, local, key, policy, kind, this.now() + this.timeoutMs);
  }

  /** `deadline`: a take waits for the store (grants of others in flight, its own) until then at most. */
  private takeLocal(id: string, local: Local, key: string, policy: RatePolicy, kind: string, deadline: number): RateDecision | Promise<RateDecision> {
    if (local.tokens >= 1) {
      local.tokens -= 1;
      return this.stats.count(kind, decisionOf(policy, true, Math.min(policy.burst, local.tokens + local.shared)));
    }
    const now = this.now();
    if (now < local.emptyUntil) {
      const d = decisionOf(policy, false, 0);
      return this.stats.count(kind, { ...d, retryAfterSec: Math.max(1, Math.ceil((local.emptyUntil - now) / 1000 - 1e-9)) });
    }
    if (now >= deadline) return this.failed(kind, policy);
    if (this.down && now < this.nextProbe) return this.failed(kind, policy);
    if (local.pending) return local.pending.then(() => this.takeLocal(id, local, key, policy, kind, deadline));
    if (this.inFlight >= MAX_IN_FLIGHT) return this.failed(kind, policy);
    // Down: this call is the probe of the backoff; the other takes keep to the failure mode meanwhile.
    if (this.down) this.nextProbe = now + this.probeMs;
    const fetched = this.fetch(local, key, policy, kind, deadline - now);
    local.pending = fetched.then(
      () => undefined,
      () => undefined,
    );
    return fetched.then(
      () => {
        local.pending = undefined;
        return this.takeLocal(id, local, key, policy, kind, deadline);
      },
      (err: unknown) => {
        local.pending = undefined;
        this.failing(err);
        return this.failed(kind, policy);
      },
    );
  }

  /** One grant from the backend within `timeoutMs`: the local allowance of the key refilled. */
  private async fetch(local: Local, key: string, policy: RatePolicy, kind: string, timeoutMs: number): Promise<void> {
    this.inFlight++;
    this.stats.roundTrips.inc();
    const started = this.now();
    try {
      const grant = await withTimeout(this.backend.grant(key, policy, this.allowance(policy)), timeoutMs, `no answer within ${this.timeoutMs}ms`);
      this.stats.of(kind).latency.record(this.now() - started);
      local.tokens += grant.granted;
      local.shared = grant.tokens;
      local.emptyUntil = grant.granted > 0 ? 0 : this.now() + Math.max(1, grant.retryMs);
      this.recovered();
    } finally {
      this.inFlight--;
    }
  }

  private failed(kind: string, policy: RatePolicy): RateDecision {
    this.stats.of(kind).storeErrors.inc();
    if (this.failureMode === 'open') return this.stats.count(kind, { ...decisionOf(policy, true, policy.burst), storeDown: true });
    return this.stats.count(kind, { ...decisionOf(policy, false, 0), retryAfterSec: 1, storeDown: true });
  }

  private failing(err: unknown): void {
    this.lastError = err instanceof Error ? err.message : String(err);
    if (++this.failures < OUTAGE_AFTER) return;
    const now = this.now();
    this.nextProbe = now + this.probeMs;
    this.probeMs = Math.min(MAX_PROBE_MS, this.probeMs * 2);
    if (this.down) return;
    this.down = true;
    this.since = Date.now();
    this.stats.outages.inc();
    this.log.error({ store: this.backend.kind, address: this.backend.address, err: this.lastError, failure_mode: this.failureMode }, this.failureMode === 'open' ? 'rate limit store unreachable: requests are allowed until it is back' : 'rate limit store unreachable: requests are refused until it is back');
  }

  private recovered(): void {
    this.failures = 0;
    this.probeMs = FIRST_PROBE_MS;
    if (!this.down) return;
    this.down = false;
    const downMs = Date.now() - this.since;
    this.since = Date.now();
    this.log.info({ store: this.backend.kind, address: this.backend.address, down_ms: downMs }, 'rate limit store reachable again');
  }

  status(): RateLimitStoreStatus & { last_error?: string } {
    return {
      store: this.backend.kind,
      address: this.backend.address,
      state: this.down ? 'down' : 'up',
      since: new Date(this.since).toISOString(),
      failure_mode: this.failureMode,
      allowance: 'a tenth of the burst, from 1 to 100 tokens',
      outages: this.stats.outages.value,
      round_trips: this.stats.roundTrips.value,
      ...(this.down ? { last_error: this.lastError } : {}),
    };
  }

  async close(): Promise<void> {
    await this.backend.close();
  }
}
