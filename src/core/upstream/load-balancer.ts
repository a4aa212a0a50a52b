/**
 * Load balancers: pick one host among candidates.
 *
 * - round_robin: smooth weighted round robin (nginx's algorithm): over any window of
 *   sum(weights) picks each host is chosen `weight` times, evenly spread. Equal weights take an
 *   O(1) rotating index.
 * - random: weighted random.
 * - least_request: power of two choices: two distinct hosts drawn at random (by weight), the one
 *   with fewer active requests wins (ties: the first drawn).
 *
 * Which hosts are candidates (healthy ones, Envoy's panic mode, `exclude`) is decided by
 * `candidates()` below, shared by every policy.
 */
import type { LbPolicy } from './types.js';

/** What a balancer needs of a host. */
export interface Balanceable {
  readonly key: string;
  readonly weight: number;
  readonly stats: { readonly rq_active: number };
  healthy(): boolean;
}

export interface LoadBalancer<H extends Balanceable = Balanceable> {
  readonly policy: LbPolicy;
  /** One of `hosts` (non-empty), or undefined when it is empty. */
  pick(hosts: readonly H[]): H | undefined;
  /** Forgets per-host state of a host that left the cluster. */
  forget?(host: H): void;
}

export type RandomSource = () => number;

function allSameWeight(hosts: readonly Balanceable[]): boolean {
  const w = hosts[0]!.weight;
  for (let i = 1; i < hosts.length; i++) if (hosts[i]!.weight !== w) return false;
  return true;
}

function weightedIndex(hosts: readonly Balanceable[], random: RandomSource, skip = -1): number {
  let total = 0;
  for (let i = 0; i < hosts.length; i++) if (i !== skip) total += hosts[i]!.weight;
  let r = random() * total;
  let last = -1;
  for (let i = 0; i < hosts.length; i++) {
    if (i === skip) continue;
    last = i;
    r -= hosts[i]!.weight;
    if (r < 0) return i;
  }
  return last;
}

export class RoundRobinBalancer<H extends Balanceable = Balanceable> implements LoadBalancer<H> {
  readonly policy = 'round_robin' as const;
  // Start at a random host, as Envoy does, so short-lived processes (the CLI) spread their calls.
  private index = Math.floor(Math.random() * 1024);
  private readonly current = new Map<string, number>();

  pick(hosts: readonly H[]): H | undefined {
    if (hosts.length === 0) return undefined;
    if (hosts.length === 1) return hosts[0];
    if (allSameWeight(hosts)) {
      const h = hosts[this.index % hosts.length]!;
      this.index = (this.index + 1) % 1_000_000_007;
      return h;
    }
    // smooth weighted round robin
    let total = 0;
    let best: H | undefined;
    let bestWeight = -Infinity;
    for (const h of hosts) {
      const cw = (this.current.get(h.key) ?? 0) + h.weight;
      this.current.set(h.key, cw);
      total += h.weight;
      if (cw > bestWeight) {
        bestWeight = cw;
        best = h;
      }
    }
    this.current.set(best!.key, bestWeight - total);
    return best;
  }

  forget(host: H): void {
    this.current.delete(host.key);
  }
}

export class RandomBalancer<H extends Balanceable = Balanceable> implements LoadBalancer<H> {
  readonly policy = 'random' as const;
  constructor(private readonly random: RandomSource = Math.random) {}

  pick(hosts: readonly H[]): H | undefined {
    if (hosts.length === 0) return undefined;
    if (hosts.length === 1) return hosts[0];
    if (allSameWeight(hosts)) return hosts[Math.floor(this.random() * hosts.length)];
    return hosts[weightedIndex(hosts, this.random)];
  }
}

export class LeastRequestBalancer<H extends Balanceable = Balanceable> implements LoadBalancer<H> {
  readonly policy = 'least_request' as const;
  constructor(private readonly random: RandomSource = Math.random) {}

  pick(hosts: readonly H[]): H | undefined {
    if (hosts.length === 0) return undefined;
    if (hosts.length === 1) return hosts[0];
    let a: number;
    let b: number;
    if (allSameWeight(hosts)) {
      a = Math.floor(this.random() * hosts.length);
      b = Math.floor(this.random() * (hosts.length - 1));
      if (b >= a) b++;
    } else {
      a = weightedIndex(hosts, this.random);
      b = weightedIndex(hosts, this.random, a);
    }
    const ha = hosts[a]!;
    const hb = hosts[b]!;
    return hb.stats.rq_active < ha.stats.rq_active ? hb : ha;
  }
}

export function createBalancer<H extends Balanceable>(policy: LbPolicy, random: RandomSource = Math.random): LoadBalancer<H> {
  switch (policy) {
    case 'round_robin':
      return new RoundRobinBalancer<H>();
    case 'random':
      return new RandomBalancer<H>(random);
    case 'least_request':
      return new LeastRequestBalancer<H>(random);
    default:
      throw new Error(`lb_policy: unknown policy "${String(policy)}"`);
  }
}

export interface CandidateSet<H> {
  hosts: readonly H[];
  /** True when the healthy share was under the panic threshold and all hosts are balanced over. */
  panic: boolean;
}

/**
 * The hosts a balancer chooses among:
 * - the healthy hosts (not ejected by outlier detection, not failing active health checks);
 * - Envoy's panic mode: when healthy hosts are fewer than `panicThresholdPercent` of all hosts
 *   (default 50), all hosts, healthy or not, so a cluster whose checks all fail still serves;
 *   with a threshold of 0 there is no panic mode and no healthy host means no candidate;
 * - then hosts in `exclude` (already tried by this call) are dropped, unless that leaves none.
 * `healthy`: the healthy hosts of `all` when the caller keeps them (saves a pass per pick).
 */
export function candidates<H extends Balanceable>(
  all: readonly H[],
  panicThresholdPercent: number,
  exclude?: ReadonlySet<string>,
  healthy?: readonly H[],
): CandidateSet<H> {
  const ok = healthy ?? all.filter((h) => h.healthy());
  let pool: readonly H[];
  let panic = false;
  if (ok.length === all.length) pool = all;
  else if (all.length > 0 && ok.length * 100 < panicThresholdPercent * all.length) {
    pool = all;
    panic = true;
  } else pool = ok;
  if (exclude && exclude.size > 0 && pool.length > 1) {
    const kept = pool.filter((h) => !exclude.has(h.key));
    if (kept.length > 0) pool = kept;
  }
  return { hosts: pool, panic };
}
