/**
 * Rate limits of the front ends (`--rate_limit`, docs/gateway.md "Rate limits"): one token bucket
 * per key (the client's address, its authenticated subject, or the route), in a map bounded by
 * `--rate_limit_max_keys` that forgets the least recently used bucket first.
 *
 * A bucket holds at most `burst` tokens and gains `ratePerSec` tokens a second; a request takes
 * one token or is refused (429). A forgotten bucket comes back full: the bucket that goes first is
 * the one that waited longest, the most likely to be full anyway.
 *
 * `RateLimiter.check(key, policy?)` takes a policy per call, so a per-route rule can pass its own
 * rate; buckets of different policies never mix (the policy's name is part of the bucket's key).
 *
 * Answers carry the RateLimit fields of draft-ietf-httpapi-ratelimit-headers (draft 08 and later:
 * `RateLimit-Policy: "default";q=<burst>;w=<seconds to refill>` and
 * `RateLimit: "default";r=<remaining>;t=<seconds until full>`), and a 429 carries `Retry-After`.
 */
import type { FrontRequest } from './front-types.js';
import { parseDuration } from '../util/duration.js';
import { targetOf } from './target.js';

/** What one bucket allows. */
export interface RatePolicy {
  /** Names the policy in the RateLimit fields and separates its buckets from other policies'. */
  readonly name: string;
  /** Tokens gained per second. */
  readonly ratePerSec: number;
  /** Tokens a full bucket holds: the largest burst allowed at once. */
  readonly burst: number;
}

export type RateLimitKeyKind = 'address' | 'subject' | 'route';
export const RATE_LIMIT_KEYS: readonly RateLimitKeyKind[] = ['address', 'subject', 'route'];
export const DEFAULT_RATE_LIMIT_MAX_KEYS = 100_000;

/** The outcome of one check. */
export interface RateDecision {
  readonly allowed: boolean;
  readonly policy: RatePolicy;
  /** Whole tokens left after this request. */
  readonly remaining: number;
  /** Seconds (rounded up) until the bucket is full again. */
  readonly resetSec: number;
  /** Refused: seconds (rounded up, at least 1) until one token is there. 0 when allowed. */
  readonly retryAfterSec: number;
  /** The shared store could not answer: allowed (failure mode open) or refused with a 503 (closed). */
  readonly storeDown?: boolean;
}

const UNITS: Record<string, number> = { s: 1000, sec: 1000, second: 1000, m: 60_000, min: 60_000, minute: 60_000, h: 3_600_000, hour: 3_600_000 };

/**
 * A rate `N/UNIT`: UNIT is s, m, h (or second, minute, hour) or a duration (`10s`, `1m30s`);
 * N a positive number. `0` or `off` (and "") turn the limit off: undefined. Throws naming the problem.
 */
export function parseRate(text: string): number | undefined {
  const t = text.trim();
  if (t === '' || t === '0' || t === 'off') return undefined;
  const slash = t.indexOf('/');
  if (slash === -1) throw new Error('use N/s, N/m, N/h or N/<duration> (e.g. 100/s), or 0 for no limit');
  const countText = t.slice(0, slash).trim();
  const unitText = t.slice(slash + 1).trim();
  if (!/^(\d+(\.\d*)?|\.\d+)$/.test(countText)) throw new Error(`"${countText}" is not a positive number of requests`);
  const count = Number(countText);
  if (!(count > 0)) throw new Error('the number of requests must be positive (0 alone turns the limit off)');
  let ms = UNITS[unitText];
  if (ms === undefined) {
    try {
      ms = parseDuration(unitText);
    } catch {
      throw new Error(`"${unitText}" is not s, m, h or a duration like 10s`);
    }
    if (ms <= 0) throw new Error('the period must be positive');
  }
  return (count * 1000) / ms;
}

/** The default burst of a rate: one second's worth, at least 1. */
export function defaultBurst(ratePerSec: number): number {
  return Math.max(1, Math.ceil(ratePerSec));
}

/** The policy of `--rate_limit` and `--rate_limit_burst` (0 or undefined burst: the default), or undefined for no limit. */
export function ratePolicy(rate: string | undefined, burst?: number, name = 'default'): RatePolicy | undefined {
  const ratePerSec = parseRate(rate ?? '');
  if (ratePerSec === undefined) return undefined;
  if (burst !== undefined && (!Number.isSafeInteger(burst) || burst < 0)) throw new Error('the burst must be a non-negative integer');
  return { name, ratePerSec, burst: burst ? burst : defaultBurst(ratePerSec) };
}

interface Bucket {
  tokens: number;
  /** Clock time (ms) of `tokens`. */
  at: number;
}

export interface RateLimiterOptions {
  /** The policy of a check that names none. */
  policy: RatePolicy;
  /** Most buckets kept; the least recently used goes first. Default 100,000. */
  maxKeys?: number;
  /** Milliseconds, monotonic; default performance.now(). For tests. */
  now?: () => number;
}

export class RateLimiter {
  readonly policy: RatePolicy;
  readonly maxKeys: number;
  private readonly now: () => number;
  /** Insertion order is recency order: a used bucket is moved to the end. */
  private readonly buckets = new Map<string, Bucket>();

  constructor(options: RateLimiterOptions) {
    this.policy = options.policy;
    this.maxKeys = Math.max(1, options.maxKeys ?? DEFAULT_RATE_LIMIT_MAX_KEYS);
    this.now = options.now ?? (() => performance.now());
  }

  /** Buckets held now. */
  get size(): number {
    return this.buckets.size;
  }

  /** Takes one token from the bucket of `key` under `policy` (default: the limiter's). */
  check(key: string, policy: RatePolicy = this.policy): RateDecision {
    const { granted, tokens } = this.grant(key, policy, 1);
    return decisionOf(policy, granted === 1, tokens);
  }

  /**
   * Takes up to `want` whole tokens at once from the bucket of `key` (what a shared store hands a
   * worker as its local allowance): `granted` (0..want), the tokens left, and when none was left,
   * the milliseconds until `want` are there.
   */
  grant(key: string, policy: RatePolicy, want: number): BucketGrant {
    const now = this.now();
    const id = policy === this.policy ? key : `${policy.name}\u0000${key}`;
    let bucket = this.buckets.get(id);
    if (bucket) {
      this.buckets.delete(id);
      bucket.tokens = Math.min(policy.burst, bucket.tokens + ((now - bucket.at) / 1000) * policy.ratePerSec);
      bucket.at = now;
    } else {
      bucket = { tokens: policy.burst, at: now };
      while (this.buckets.size >= this.maxKeys) {
        const oldest = this.buckets.keys().next().value as string;
        this.buckets.delete(oldest);
      }
    }
    this.buckets.set(id, bucket);
    const granted = Math.max(0, Math.min(want, Math.floor(bucket.tokens + 1e-9)));
    bucket.tokens -= granted;
    return { granted, tokens: bucket.tokens, retryMs: granted > 0 ? 0 : ((want - bucket.tokens) / policy.ratePerSec) * 1000 };
  }
}

/** What a bucket handed out at once (RateLimiter.grant, and the shared stores' buckets). */
export interface BucketGrant {
  /** Whole tokens taken. */
  granted: number;
  /** Tokens left in the bucket (a fraction too). */
  tokens: number;
  /** Nothing granted: milliseconds until `want` tokens are there (when asking again is worth it); else 0. */
  retryMs: number;
}

/** The decision of a take under `policy` with `tokens` left in the bucket afterwards. */
export function decisionOf(policy: RatePolicy, allowed: boolean, tokens: number): RateDecision {
  const toFull = (policy.burst - tokens) / policy.ratePerSec;
  return {
    allowed,
    policy,
    remaining: Math.max(0, Math.floor(tokens)),
    resetSec: Math.max(0, Math.ceil(toFull - 1e-9)),
    retryAfterSec: allowed ? 0 : Math.max(1, Math.ceil((1 - tokens) / policy.ratePerSec - 1e-9)),
  };
}

/**
 * Where the buckets of a front end's rate limits live (`--rate_limit_store`): the process's memory
 * (MemoryRateLimitStore), the primary of `--concurrency` (its workers draw from it over IPC), or Redis
 * (every instance draws from one bucket). `take` answers at once when it can (the memory store
 * always; a shared store while its local allowance lasts), else with a promise that settles within
 * the store's timeout: a take never hangs.
 */
export interface RateLimitStore {
  /** `memory`, `primary` or `redis`. */
  readonly kind: string;
  /** One request of `key` (its kind, `address`, `subject`, `route` or `rule`, names its stats). */
  take(key: string, policy: RatePolicy, kind: string): RateDecision | Promise<RateDecision>;
  /** What admin /rate_limits shows. */
  status?(): RateLimitStoreStatus;
  close?(): Promise<void> | void;
}

/** The state of a shared store (admin /rate_limits). */
export interface RateLimitStoreStatus {
  store: string;
  address?: string;
  state: 'up' | 'down';
  /** ISO time of the last change of state. */
  since: string;
  failure_mode?: 'open' | 'closed';
  /** Local allowance: tokens one process takes from the shared bucket at once. */
  allowance?: string;
  outages?: number;
  round_trips?: number;
}

/** A policy's name as a structured-field String (RFC 8941): printable ASCII, `"` and `\` escaped. */
function sfString(s: string): string {
  return `"${s.replace(/[^\x20-\x7e]/g, '').replace(/["\\]/g, '\\$&')}"`;
}

/**
 * The RateLimit fields of a decision: `RateLimit-Policy` (quota `q` = the burst, window `w` =
 * seconds to refill an empty bucket, at least 1) and `RateLimit` (`r` remaining, `t` seconds until
 * full); a refusal adds `Retry-After`. A decision of the failure mode (the shared store down) has
 * no bucket to describe: none, or `Retry-After: 1` when refused.
 */
export function rateLimitHeaders(d: RateDecision): Record<string, string> {
  if (d.storeDown) return d.allowed ? {} : { 'retry-after': '1' };
  const name = sfString(d.policy.name);
  const window = Math.max(1, Math.ceil(d.policy.burst / d.policy.ratePerSec - 1e-9));
  const headers: Record<string, string> = {
    'ratelimit-policy': `${name};q=${d.policy.burst};w=${window}`,
    ratelimit: `${name};r=${d.remaining};t=${d.resetSec}`,
  };
  if (!d.allowed) headers['retry-after'] = String(d.retryAfterSec);
  return headers;
}

/**
 * The authenticated subject of a request, set by the authentication step of the front end
 * (`setAuthSubject`) before the rate limit runs; undefined when the request was not authenticated.
 * A client's own `Mesh-Auth-Subject` header is never read here: the client controls it.
 */
export function authSubjectOf(req: FrontRequest): string | undefined {
  const s = (req as FrontRequest & { meshAuthSubject?: unknown }).meshAuthSubject;
  return typeof s === 'string' && s !== '' ? s : undefined;
}

/** Records the authenticated subject of a request (the seam the authentication step uses). */
export function setAuthSubject(req: FrontRequest, subject: string): void {
  (req as FrontRequest & { meshAuthSubject?: string }).meshAuthSubject = subject;
}

/** The client's address, IPv4-mapped IPv6 as plain IPv4. */
export function clientAddress(req: FrontRequest): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}

/**
 * The bucket key of a request: its client address; its authenticated subject (`s:<subject>`,
 * else the address); or its path without the query (`r:<path>`, one bucket per path for every client).
 */
export function rateLimitKey(req: FrontRequest, kind: RateLimitKeyKind): string {
  switch (kind) {
    case 'address':
      return clientAddress(req);
    case 'subject': {
      const subject = authSubjectOf(req);
      return subject === undefined ? clientAddress(req) : `s:${subject}`;
    }
    case 'route':
      return `r:${targetOf(req).path}`;
  }
}

/**
 * A front end's rate limits: the store of its buckets (shared with the auth rules' own limits),
 * what keys them, and `--rate_limit`'s policy (undefined: no limit of the front end's own).
 */
export interface FrontRateLimit {
  store: RateLimitStore;
  key: RateLimitKeyKind;
  policy?: RatePolicy;
}

/** `--rate_limit`'s policy and key kind (undefined policy: off). Throws naming the problem. */
export function frontRatePolicy(options: { rate?: string; burst?: number; key?: string }): { policy?: RatePolicy; key: RateLimitKeyKind } {
  const policy = ratePolicy(options.rate, options.burst);
  const key = (options.key ?? 'address') as RateLimitKeyKind;
  if (!RATE_LIMIT_KEYS.includes(key)) throw new Error(`rate limit key "${key}": use ${RATE_LIMIT_KEYS.join(', ')}`);
  return { policy, key };
}

/** `100/s (burst 100)`: a policy as the 429's detail names it. */
export function describePolicy(p: RatePolicy): string {
  const r = p.ratePerSec;
  const rate = r >= 1 || r === 0 ? `${round(r)}/s` : r * 60 >= 1 ? `${round(r * 60)}/m` : `${round(r * 3600)}/h`;
  return `${rate} (burst ${p.burst})`;
}

function round(n: number): string {
  return String(Math.round(n * 1000) / 1000);
}
