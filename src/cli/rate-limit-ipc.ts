/**
 * The rate limit buckets of `--concurrency` workers kept by their primary (docs/gateway.md "Rate
 * limits"): a worker asks the primary over the cluster's IPC channel for up to `want` tokens of a
 * key's bucket (`PrimaryBuckets`, the worker side, a BucketBackend of a SharedRateLimitStore), and
 * the primary answers from one RateLimiter for all of them (`servePrimaryBuckets`). So the workers
 * of one process share one budget, whatever their number.
 */
import cluster, { type Worker } from 'node:cluster';
import { RateLimiter, type BucketGrant, type RatePolicy } from '../base/http/rate-limit.js';
import type { BucketBackend } from '../base/http/rate-limit-store.js';

type Ask = { mesh: 'rl-grant'; id: number; key: string; policy: RatePolicy; want: number };
type Answer = { mesh: 'rl-granted'; id: number; grant: BucketGrant };

const isAsk = (m: unknown): m is Ask => typeof m === 'object' && m !== null && (m as { mesh?: unknown }).mesh === 'rl-grant';
const isAnswer = (m: unknown): m is Answer => typeof m === 'object' && m !== null && (m as { mesh?: unknown }).mesh === 'rl-granted';

/** The primary's side: answers every worker's asks from one set of buckets. Returns what stops it. */
export function servePrimaryBuckets(maxKeys: number): () => void {
  // The policy of each ask comes with it; this one only names the limiter's default.
  const buckets = new RateLimiter({ policy: { name: '', ratePerSec: 1, burst: 1 }, maxKeys });
  const onMessage = (worker: Worker, m: unknown) => {
    if (!isAsk(m)) return;
    const p = m.policy;
    // A worker runs the same command line: a malformed ask is a bug, answered with nothing granted.
    const valid = typeof m.key === 'string' && p && typeof p.name === 'string' && p.ratePerSec > 0 && p.burst >= 1 && Number.isSafeInteger(m.want) && m.want >= 1;
    const grant = valid ? buckets.grant(m.key, { name: p.name, ratePerSec: p.ratePerSec, burst: p.burst }, m.want) : { granted: 0, tokens: 0, retryMs: 1000 };
    // A worker gone (or going) gets no answer: a send on a closed channel would be an 'error' on the worker.
    if (worker.isConnected()) worker.send({ mesh: 'rl-granted', id: m.id, grant } satisfies Answer, undefined, () => undefined);
  };
  cluster.on('message', onMessage);
  return () => {
    cluster.off('message', onMessage);
  };
}

/** A worker's side: asks the primary; an ask without an answer is dropped after `timeoutMs`. */
export class PrimaryBuckets implements BucketBackend {
  readonly kind = 'primary';
  readonly address = 'the --concurrency primary';
  private readonly pending = new Map<number, { resolve: (g: BucketGrant) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  private nextId = 1;
  private readonly onMessage = (m: unknown) => {
    if (!isAnswer(m)) return;
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    clearTimeout(p.timer);
    p.resolve(m.grant);
  };

  constructor(private readonly timeoutMs: number) {
    process.on('message', this.onMessage);
  }

  grant(key: string, policy: RatePolicy, want: number): Promise<BucketGrant> {
    return new Promise((resolve, reject) => {
      if (!process.connected) return reject(new Error('the primary is gone'));
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`the primary did not answer within ${this.timeoutMs}ms`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      process.send!({ mesh: 'rl-grant', id, key, policy: { name: policy.name, ratePerSec: policy.ratePerSec, burst: policy.burst }, want } satisfies Ask, undefined, undefined, (err) => {
        if (!err) return;
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err);
      });
    });
  }

  close(): void {
    process.off('message', this.onMessage);
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new Error('closed'));
    }
    this.pending.clear();
  }
}
