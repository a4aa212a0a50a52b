/**
 * TTLs and re-registration of the etcd registry: the registrations made here (kept in memory),
 * the etcd leases their keys are attached to, the maintenance loop that keeps them.
 *
 * Keys with a TTL are attached to a lease (one per TTL in whole seconds, at least MIN_LEASE_S)
 * that this process keeps alive while it runs, so that etcd deletes them when the process dies;
 * while it runs, this process deletes its own records whose TTL passed without a refresh. When a
 * lease is lost, or etcd comes back after being unreachable, or it turns out to be a different
 * cluster (a wiped etcd), the registrations are written again (those whose TTL has not passed).
 */
import type { Lease } from 'etcd3';
import { errorText, type EtcdStore } from './store.js';

const MIN_LEASE_S = 5;
const MAINTENANCE_MS = 500;

/** One node's key as this process wrote it. */
export interface Registration {
  key: string;
  value: string;
  ttlMs: number;
  expiresAt: number | null;
}

export class EtcdLeases {
  private readonly registrations = new Map<string, Registration>();
  private readonly leases = new Map<number, { lease: Lease; id: Promise<string> }>();
  private timer: NodeJS.Timeout | undefined;
  private needRestore = false;
  private restoring: Promise<void> | undefined;
  private maintaining = false;

  constructor(private readonly store: EtcdStore) {}

  /**
   * Remembers the registrations first (if etcd is unreachable now, the maintenance loop writes
   * them when it is back), then writes them.
   */
  async register(regs: Registration[]): Promise<void> {
    for (const r of regs) this.registrations.set(r.key, r);
    this.arm();
    try {
      await this.store.wrap('register', () => this.put(regs));
    } catch (err) {
      this.needRestore = true;
      throw err;
    }
  }

  forget(keys: string[]): void {
    for (const k of keys) this.registrations.delete(k);
  }

  clear(): void {
    this.registrations.clear();
  }

  /** Our registrations must be written again (etcd is back, or another cluster): on the next tick. */
  restoreSoon(): void {
    this.needRestore = true;
    this.arm();
  }

  stopTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Stops keeping leases alive; etcd expires their keys after the lease TTL, as a TTL promises. */
  releaseAll(): void {
    for (const { lease } of this.leases.values()) lease.release();
    this.leases.clear();
  }

  /** Writes registrations (grouped by TTL so each group shares a lease); retries once on a lost lease. */
  private async put(regs: Registration[]): Promise<void> {
    const byLease = new Map<number, Registration[]>();
    for (const r of regs) {
      const secs = r.ttlMs > 0 ? Math.max(MIN_LEASE_S, Math.ceil(r.ttlMs / 1000)) : 0;
      let list = byLease.get(secs);
      if (!list) byLease.set(secs, (list = []));
      list.push(r);
    }
    for (const [secs, list] of byLease) {
      for (let attempt = 0; ; attempt++) {
        const lease = secs > 0 ? await this.leaseFor(secs) : undefined;
        try {
          await this.store.txn(
            list.map((r) => ({ request_put: { key: Buffer.from(r.key), value: Buffer.from(r.value), ...(lease ? { lease } : {}) } })),
          );
          break;
        } catch (err) {
          if (secs > 0 && attempt === 0 && /lease not found/i.test(errorText(err))) {
            this.dropLease(secs);
            continue;
          }
          throw err;
        }
      }
    }
  }

  private async leaseFor(secs: number): Promise<string> {
    let entry = this.leases.get(secs);
    if (!entry) {
      const lease = this.store.client.lease(secs, { autoKeepAlive: true });
      const id = lease.grant();
      entry = { lease, id };
      this.leases.set(secs, entry);
      const mine = entry;
      lease.on('lost', () => {
        if (this.leases.get(secs) === mine) this.leases.delete(secs);
        if (!this.store.closed) {
          this.needRestore = true;
          this.arm();
        }
      });
      id.catch(() => this.dropLease(secs, mine.lease));
    }
    return entry.id;
  }

  private dropLease(secs: number, which?: Lease): void {
    const entry = this.leases.get(secs);
    if (!entry || (which && entry.lease !== which)) return;
    this.leases.delete(secs);
    entry.lease.release();
  }

  /** Starts the maintenance loop while there is something to maintain. */
  private arm(): void {
    if (this.store.closed || this.timer) return;
    this.timer = setInterval(() => void this.maintain(), MAINTENANCE_MS);
    this.timer.unref();
  }

  /** Deletes our own expired records, probes etcd, and writes our registrations again when needed. */
  private async maintain(): Promise<void> {
    if (this.store.closed || this.maintaining) return;
    this.maintaining = true;
    const store = this.store;
    const client = store.client;
    try {
      const now = Date.now();
      const expired = [...this.registrations.values()].filter((r) => r.expiresAt !== null && r.expiresAt <= now);
      for (const r of expired) {
        this.registrations.delete(r.key);
        // Only if nobody wrote the key since (compare the value we wrote).
        await client
          .if(r.key, 'Value', '==', r.value)
          .then(client.delete().key(r.key))
          .commit()
          .then((res) => store.noteHeader(res.header))
          .catch(() => undefined);
      }
      if (this.registrations.size === 0) {
        this.needRestore = false;
        if (this.timer) clearInterval(this.timer);
        this.timer = undefined;
        return;
      }
      try {
        const res = await client.get(`${store.prefix}\u0000probe`).exec();
        store.noteHeader(res.header);
        if (store.unreachable) {
          store.unreachable = false;
          this.needRestore = true;
        }
      } catch {
        store.unreachable = true;
        return;
      }
      if (this.needRestore) await this.restore();
    } finally {
      this.maintaining = false;
    }
  }

  private restore(): Promise<void> {
    this.restoring ??= (async () => {
      this.needRestore = false;
      const now = Date.now();
      const live = [...this.registrations.values()].filter((r) => r.expiresAt === null || r.expiresAt > now);
      try {
        await this.put(live);
      } catch {
        this.needRestore = true; // try again on the next tick
      }
    })().finally(() => (this.restoring = undefined));
    return this.restoring;
  }
}
