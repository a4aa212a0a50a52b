/**
 * The etcd v3 registry (client `etcd3`), for more than one machine.
 *
 * Layout: one key per node, `<prefix><service>/<version>/<nodeId>` (each segment URI-encoded),
 * holding the JSON of the service with that one node, plus `expiresAt` (ms since the epoch) when
 * it was registered with a TTL.
 *
 * TTL: readers never return a node past its `expiresAt`, so a TTL is honoured to the millisecond
 * whatever etcd's lease granularity. Keys with a TTL are also attached to a lease (one per TTL in
 * whole seconds, at least MIN_LEASE_S) that this process keeps alive while it runs, so that
 * etcd deletes them when the process dies; while it runs, this process deletes its own records
 * whose TTL passed without a refresh.
 *
 * Recovery: the registrations made here are kept in memory. When a lease is lost, or etcd comes
 * back after being unreachable, or it turns out to be a different cluster (a wiped etcd), they
 * are written again (those whose TTL has not passed). Watchers resynchronise (full read + diff)
 * whenever their watch stream reconnects.
 */
import { createRequire } from 'node:module';
import type {
  Etcd3,
  IOptions,
  Lease,
  IKeyValue,
  IResponseHeader,
  IWatchResponse,
  Watcher as EtcdWatch,
} from 'etcd3';

// etcd3 (and the gRPC stack under it) is loaded only by a process that uses etcd: it costs half
// a second of start-up, which every short CLI command would otherwise pay.
const loadEtcd3 = () => createRequire(import.meta.url)('etcd3') as typeof import('etcd3');
import {
  validateService,
  type RegisterOptions,
  type Registry,
  type Service,
  type WatchEvent,
  type WatchOptions,
  type Watcher,
} from './registry.js';
import { parseEngineEndpoint, readEngineTls, redactAddress, sharedCredentials, type EngineCredentials, type EngineTlsFiles } from '../util/engine-access.js';
import { EventQueue, byName, byNodeId, byVersion, cloneService, diffVersions } from './records.js';
import {
  ttlOf,
  validateDeregister,
  MAX_NODES_PER_SERVICE,
  checkNodesPerService,
  invalidRecordSink,
  sanitizeStoredService,
  shown,
  type InvalidRecordSink,
} from './validate.js';

export const DEFAULT_ETCD_PREFIX = '/mesh/registry/';
const MIN_LEASE_S = 5;
const MAINTENANCE_MS = 500;
const TXN_MAX_OPS = 100;

export interface EtcdRegistryOptions {
  /** Key prefix (default /mesh/registry/); must end with '/'. */
  prefix?: string;
  /** Deadline of each unary call (default 5000 ms). */
  callTimeoutMs?: number;
  /** TLS files (--registry_tls_*); they need https:// addresses. */
  tls?: EngineTlsFiles;
  /** Told about stored records that break the registry rules (they are skipped); default: a process warning. */
  onInvalidRecord?: InvalidRecordSink;
}

/** What an etcd address list says: the endpoints as URLs (no credentials) and the login, if any. */
export interface EtcdAddress {
  hosts: string[];
  credentials?: EngineCredentials;
  secure: boolean;
}

/**
 * `host:port[,host:port]` → http://host:port; `https://[user:password@]host:port[,...]` for TLS
 * and etcd's authentication. Every address uses the same scheme and the same login.
 */
export function parseEtcdAddress(address: string): EtcdAddress {
  const what = 'registry etcd';
  const parts = address
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h !== '');
  if (parts.length === 0) throw new Error(`${what}: invalid address "${redactAddress(address)}" (use host:port[,host:port])`);
  const endpoints = parts.map((h) => parseEngineEndpoint(h, { scheme: 'http', port: 2379 }, what));
  for (const e of endpoints) {
    if (e.scheme !== 'http' && e.scheme !== 'https') throw new Error(`${what}: address scheme ${e.scheme}:// is not http:// or https://`);
  }
  const secure = endpoints[0]!.scheme === 'https';
  if (endpoints.some((e) => (e.scheme === 'https') !== secure)) throw new Error(`${what}: mix of http:// and https:// addresses: use one`);
  return { hosts: endpoints.map((e) => `${e.scheme}://${e.hostPort}`), credentials: sharedCredentials(endpoints, what), secure };
}

/** A stored record: the service with one node, and its expiry. */
interface StoredRecord {
  service: Service;
  expiresAt: number | null;
  modRevision: bigint;
}

interface Registration {
  key: string;
  value: string;
  ttlMs: number;
  expiresAt: number | null;
}

const enc = encodeURIComponent;

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A stored value as a record, not yet checked against the registry rules (group does that);
 * undefined, reported to `sink`, when it is not even the shape of one.
 */
function decode(kv: IKeyValue, sink: InvalidRecordSink): StoredRecord | undefined {
  const bad = (problem: string) => {
    sink({ backend: 'etcd', service: shown(kv.key.toString()), dropped: 1, problem });
    return undefined;
  };
  let raw: Service & { expiresAt?: number | null };
  try {
    raw = JSON.parse(kv.value.toString()) as Service & { expiresAt?: number | null };
  } catch {
    return bad('the value is not JSON');
  }
  if (!raw || typeof raw !== 'object' || typeof raw.name !== 'string' || !Array.isArray(raw.nodes) || raw.nodes.length === 0)
    return bad('the value is not a service with a node');
  const expiresAt = typeof raw.expiresAt === 'number' ? raw.expiresAt : null;
  const { expiresAt: _ignored, ...service } = raw;
  return { service: service as Service, expiresAt, modRevision: BigInt(kv.mod_revision) };
}

const isLive = (rec: StoredRecord, now: number) => rec.expiresAt === null || rec.expiresAt > now;

/**
 * Groups live one-node records into services: one entry per name, versions sorted, checked
 * against the registry rules (bad nodes, metadata and endpoints dropped and reported to `sink`;
 * at most MAX_NODES_PER_SERVICE nodes per service).
 */
function group(records: Iterable<StoredRecord>, now: number, sink: InvalidRecordSink): Map<string, Service[]> {
  const byNameVersion = new Map<string, Map<string, { latest: StoredRecord; service: Service }>>();
  for (const rec of records) {
    if (!isLive(rec, now)) continue;
    const s = rec.service;
    let versions = byNameVersion.get(s.name);
    if (!versions) byNameVersion.set(s.name, (versions = new Map()));
    const entry = versions.get(s.version);
    if (!entry) {
      versions.set(s.version, { latest: rec, service: { ...s, nodes: [...s.nodes] } });
      continue;
    }
    entry.service.nodes.push(...s.nodes);
    if (rec.modRevision > entry.latest.modRevision) {
      // the version's own fields come from its most recently written node
      entry.latest = rec;
      entry.service.metadata = s.metadata;
      entry.service.endpoints = s.endpoints;
    }
  }
  const out = new Map<string, Service[]>();
  for (const [name, versions] of byNameVersion) {
    const list = [...versions.values()].map(({ service }) => {
      const nodes = new Map(service.nodes.map((n) => [n?.id, n]));
      return { ...service, nodes: [...nodes.values()].sort(byNodeId) };
    });
    const usable = sanitizeStoredService('etcd', name, list.sort(byVersion), sink).map(cloneService);
    if (usable.length > 0) out.set(name, usable);
  }
  return out;
}

/** A cockatiel-compatible policy that just runs the call: no circuit breaker keeping a restarted etcd closed for 5s. */
const passThrough = {
  execute: <T>(fn: (ctx: { signal: AbortSignal; attempt: number }) => T | Promise<T>) =>
    Promise.resolve().then(() => fn({ signal: new AbortController().signal, attempt: 0 })),
};
/** Watch streams reconnect every 250 ms instead of backing off up to 30 s. */
const constantBackoff: { duration: number; next(): unknown } = { duration: 250, next: () => constantBackoff };

type FaultHandling = NonNullable<IOptions['faultHandling']>;

export class EtcdRegistry implements Registry {
  readonly name = 'etcd';
  readonly prefix: string;
  readonly hosts: string[];
  /** https:// addresses. */
  readonly secure: boolean;
  /** @internal */
  readonly client: Etcd3;
  private readonly registrations = new Map<string, Registration>();
  private readonly leases = new Map<number, { lease: Lease; id: Promise<string> }>();
  private readonly watchers = new Set<EtcdWatcher>();
  /** Watchers still reading their initial state: writes wait for them so they see every change. */
  private readonly settling = new Set<Promise<void>>();
  /** @internal */
  readonly events = new EventQueue();
  /** @internal */
  readonly onInvalid: InvalidRecordSink;
  private rev = 0n;
  private clusterId: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private unreachable = false;
  private needRestore = false;
  private restoring: Promise<void> | undefined;
  private closed = false;

  constructor(address: string, options: EtcdRegistryOptions = {}) {
    const parsed = parseEtcdAddress(address);
    this.hosts = parsed.hosts;
    this.secure = parsed.secure;
    const tls = readEngineTls('registry_tls', options.tls);
    if (tls && !parsed.secure) throw new Error('registry etcd: --registry_tls_* files need https:// addresses (https://host:2379)');
    const prefix = options.prefix ?? DEFAULT_ETCD_PREFIX;
    this.prefix = prefix.endsWith('/') ? prefix : `${prefix}/`;
    const callTimeoutMs = options.callTimeoutMs ?? 5000;
    this.onInvalid = options.onInvalidRecord ?? invalidRecordSink({});
    this.client = new (loadEtcd3().Etcd3)({
      hosts: this.hosts,
      // https:// without files: the system's roots; with them: that CA and/or a client certificate.
      credentials: tls ? { rootCertificate: tls.ca as Buffer, privateKey: tls.key, certChain: tls.cert } : undefined,
      auth: parsed.credentials ? { username: parsed.credentials.username, password: parsed.credentials.password } : undefined,
      dialTimeout: callTimeoutMs,
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
      faultHandling: {
        host: () => passThrough as unknown as ReturnType<NonNullable<FaultHandling['host']>>,
        watchBackoff: constantBackoff as unknown as FaultHandling['watchBackoff'],
      },
    });
  }

  // -------------------------------------------------------------------------------------------
  // Registry

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttlMs = ttlOf(options);
    const s = cloneService(service);
    await this.settle();
    await this.checkServiceSize(s);
    const expiresAt = ttlMs > 0 ? Date.now() + ttlMs : null;
    const regs: Registration[] = s.nodes.map((node) => {
      const record: Service & { expiresAt?: number } = { ...s, nodes: [node] };
      if (expiresAt !== null) record.expiresAt = expiresAt;
      return { key: this.key(s.name, s.version, node.id), value: JSON.stringify(record), ttlMs, expiresAt };
    });
    // Remembered first: if etcd is unreachable now, the maintenance loop writes them when it is back.
    for (const r of regs) this.registrations.set(r.key, r);
    this.arm();
    try {
      await this.wrap('register', () => this.put(regs));
    } catch (err) {
      this.needRestore = true;
      throw err;
    }
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    await this.settle();
    const ids = new Set((service.nodes ?? []).map((n) => n.id));
    if (ids.size === 0) return;
    const version = service.version ?? '';
    let keys: string[];
    if (version !== '') {
      keys = [...ids].map((id) => this.key(service.name, version, id));
    } else {
      // An empty version means "wherever these node ids are" (node ids are unique).
      const res = await this.wrap('deregister', () => this.client.getAll().prefix(this.servicePrefix(service.name)).exec());
      this.noteHeader(res.header);
      keys = res.kvs.map((kv) => kv.key.toString()).filter((k) => ids.has(decodeURIComponent(k.slice(k.lastIndexOf('/') + 1))));
    }
    for (const k of keys) this.registrations.delete(k);
    if (keys.length === 0) return;
    await this.wrap('deregister', () =>
      this.txn(keys.map((k) => ({ request_delete_range: { key: Buffer.from(k) } }))),
    );
  }

  async getService(name: string): Promise<Service[]> {
    this.checkOpen();
    const res = await this.wrap('get service', () => this.client.getAll().prefix(this.servicePrefix(name)).exec());
    this.noteHeader(res.header);
    const records = res.kvs.map((kv) => decode(kv, this.onInvalid)).filter((r): r is StoredRecord => r !== undefined && r.service.name === name);
    return group(records, Date.now(), this.onInvalid).get(name) ?? [];
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    const res = await this.wrap('list services', () => this.client.getAll().prefix(this.prefix).exec());
    this.noteHeader(res.header);
    const records = res.kvs.map((kv) => decode(kv, this.onInvalid)).filter((r): r is StoredRecord => r !== undefined);
    const out: Service[] = [];
    for (const versions of group(records, Date.now(), this.onInvalid).values()) out.push({ ...versions[0]!, nodes: [] });
    return out.sort(byName);
  }

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    const w = new EtcdWatcher(this, onEvent, options?.service);
    this.watchers.add(w);
    const ready = w.start().finally(() => this.settling.delete(ready));
    this.settling.add(ready);
    return {
      stop: () => {
        this.watchers.delete(w);
        void w.stop();
      },
      ready: ready.catch(() => undefined),
    };
  }

  revision(): string {
    return String(this.rev);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // Cancel the watch streams before closing the client, or an open stream keeps the process alive.
    const stopping = [...this.watchers].map((w) => w.stop());
    this.watchers.clear();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(stopping), new Promise((r) => (timer = setTimeout(r, 1000)))]);
    clearTimeout(timer);
    // Stop keeping leases alive; etcd expires their keys after the lease TTL, as a TTL promises.
    for (const { lease } of this.leases.values()) lease.release();
    this.leases.clear();
    this.client.close();
  }

  /** Deletes every key under this registry's prefix (tests; `mesh` never calls it). */
  async purgePrefix(): Promise<void> {
    this.registrations.clear();
    await this.client.delete().prefix(this.prefix).exec();
  }

  // -------------------------------------------------------------------------------------------
  // internals shared with EtcdWatcher

  /** @internal */
  servicePrefix(name: string): string {
    return `${this.prefix}${enc(name)}/`;
  }

  /** @internal Records a response header: tracks the revision and notices a different cluster. */
  noteHeader(header: IResponseHeader | undefined): void {
    if (!header) return;
    const rev = BigInt(header.revision);
    if (this.clusterId !== undefined && header.cluster_id !== this.clusterId) {
      // A new etcd cluster (wiped data): everything we registered is gone there.
      this.rev = rev;
      this.needRestore = true;
      this.arm();
    } else if (rev > this.rev) {
      this.rev = rev;
    }
    this.clusterId = header.cluster_id;
  }

  /** @internal */
  get isClosed(): boolean {
    return this.closed;
  }

  // -------------------------------------------------------------------------------------------

  /**
   * Refuses a registration that would take the service past MAX_NODES_PER_SERVICE nodes. A count
   * first (cheap); the keys only near the limit. Skipped when etcd cannot be asked: the write
   * path handles an unreachable etcd, and readers cap what they use anyway.
   */
  private async checkServiceSize(s: Service): Promise<void> {
    const prefix = this.servicePrefix(s.name);
    let count: number;
    try {
      count = await this.client.getAll().prefix(prefix).count();
    } catch {
      return;
    }
    if (count + s.nodes.length <= MAX_NODES_PER_SERVICE) return;
    let keys: string[];
    try {
      keys = await this.client.getAll().prefix(prefix).keys();
    } catch {
      return;
    }
    const ids = keys.map((k) => decodeURIComponent(k.slice(k.lastIndexOf('/') + 1)));
    checkNodesPerService(s.name, ids, s.nodes.map((n) => n.id));
  }

  private key(name: string, version: string, nodeId: string): string {
    return `${this.prefix}${enc(name)}/${enc(version)}/${enc(nodeId)}`;
  }

  private checkOpen(): void {
    if (this.closed) throw new Error(`registry etcd (${this.hosts.join(',')}): closed`);
  }

  private async settle(): Promise<void> {
    if (this.settling.size > 0) await Promise.allSettled([...this.settling]);
  }

  private async wrap<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      const out = await fn();
      if (this.unreachable) {
        this.unreachable = false;
        this.needRestore = true;
        this.arm();
      }
      return out;
    } catch (err) {
      this.unreachable = true;
      throw new Error(`registry etcd (${this.hosts.join(',')}): ${what}: ${errorText(err)}${this.hint(err)}`, { cause: err });
    }
  }

  /** gRPC says only "UNAVAILABLE" when TLS fails; name the likely causes. */
  private hint(err: unknown): string {
    if (!/\bUNAVAILABLE\b/.test(errorText(err))) return '';
    return this.secure
      ? ' (is etcd running there, and does --registry_tls_ca_file name the CA that signed its certificate?)'
      : ' (is etcd running there? an etcd that serves TLS needs an https:// address)';
  }

  private async txn(ops: NonNullable<Parameters<Etcd3['kv']['txn']>[0]['success']>): Promise<void> {
    for (let i = 0; i < ops.length; i += TXN_MAX_OPS) {
      const res = await this.client.kv.txn({ compare: [], success: ops.slice(i, i + TXN_MAX_OPS), failure: [] });
      this.noteHeader(res.header);
    }
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
          await this.txn(
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
      const lease = this.client.lease(secs, { autoKeepAlive: true });
      const id = lease.grant();
      entry = { lease, id };
      this.leases.set(secs, entry);
      const mine = entry;
      lease.on('lost', () => {
        if (this.leases.get(secs) === mine) this.leases.delete(secs);
        if (!this.closed) {
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
    if (this.closed || this.timer) return;
    this.timer = setInterval(() => void this.maintain(), MAINTENANCE_MS);
    this.timer.unref();
  }

  private maintaining = false;

  /** Deletes our own expired records, probes etcd, and writes our registrations again when needed. */
  private async maintain(): Promise<void> {
    if (this.closed || this.maintaining) return;
    this.maintaining = true;
    try {
      const now = Date.now();
      const expired = [...this.registrations.values()].filter((r) => r.expiresAt !== null && r.expiresAt <= now);
      for (const r of expired) {
        this.registrations.delete(r.key);
        // Only if nobody wrote the key since (compare the value we wrote).
        await this.client
          .if(r.key, 'Value', '==', r.value)
          .then(this.client.delete().key(r.key))
          .commit()
          .then((res) => this.noteHeader(res.header))
          .catch(() => undefined);
      }
      if (this.registrations.size === 0) {
        this.needRestore = false;
        if (this.timer) clearInterval(this.timer);
        this.timer = undefined;
        return;
      }
      try {
        const res = await this.client.get(`${this.prefix}\u0000probe`).exec();
        this.noteHeader(res.header);
        if (this.unreachable) {
          this.unreachable = false;
          this.needRestore = true;
        }
      } catch {
        this.unreachable = true;
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

class EtcdWatcher {
  private stopped = false;
  private generation = 0;
  private records = new Map<string, StoredRecord>();
  /** The keys of `records` per service name, so an event regroups only the services it touched. */
  private keysOf = new Map<string, Set<string>>();
  /** The earliest expiry among the records of each service name. */
  private expiryOf = new Map<string, number>();
  private known = new Map<string, Service[]>();
  private current: EtcdWatch | undefined;
  private started = false;
  private lastRev = 0n;
  private expiryTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly keyPrefix: string;

  constructor(
    private readonly reg: EtcdRegistry,
    private readonly onEvent: (event: WatchEvent) => void,
    private readonly service: string | undefined,
  ) {
    this.keyPrefix = service !== undefined ? reg.servicePrefix(service) : reg.prefix;
  }

  /** Reads the current state and opens the watch; on failure keeps retrying in the background. */
  async start(): Promise<void> {
    try {
      await this.sync();
    } catch {
      this.retryLater();
    }
  }

  /** Stops events at once; resolves when the etcd watch is cancelled. */
  stop(): Promise<void> {
    if (!this.stopped) {
      this.stopped = true;
      this.generation++;
      if (this.expiryTimer) clearTimeout(this.expiryTimer);
      if (this.retryTimer) clearTimeout(this.retryTimer);
      this.dropCurrent();
    }
    return Promise.allSettled([...this.cancelling]).then(() => undefined);
  }

  private readonly cancelling = new Set<Promise<void>>();

  private dropCurrent(): void {
    const w = this.current;
    this.current = undefined;
    if (!w) return;
    const p: Promise<void> = w
      .cancel()
      .catch(() => undefined)
      .finally(() => this.cancelling.delete(p));
    this.cancelling.add(p);
  }

  private retryLater(delayMs = 500): void {
    if (this.stopped || this.reg.isClosed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.start();
    }, delayMs);
    this.retryTimer.unref();
  }

  /**
   * Full read, diff against what we knew, then a watch from the next revision. When that watch's
   * stream breaks it is dropped and this runs again: etcd may have come back as another cluster
   * (wiped data, revisions from 1), where resuming at the old revision would miss everything.
   */
  private async sync(): Promise<void> {
    const gen = ++this.generation;
    this.dropCurrent();
    const res = await this.reg.client.getAll().prefix(this.keyPrefix).exec();
    if (gen !== this.generation || this.stopped) return;
    this.reg.noteHeader(res.header);
    this.records = new Map();
    this.keysOf = new Map();
    this.expiryOf = new Map();
    for (const kv of res.kvs) {
      const rec = decode(kv, this.reg.onInvalid);
      if (rec && this.wants(rec.service.name)) this.setRecord(kv.key.toString(), rec);
    }
    const rev = BigInt(res.header.revision);
    this.lastRev = rev;
    // The first read is the baseline; a later one (a resync) reports what changed meanwhile.
    const baseline = !this.started;
    this.started = true;
    this.refresh(undefined, String(rev), baseline);
    const w = this.reg.client
      .watch()
      .prefix(this.keyPrefix)
      .startRevision(String(rev + 1n))
      .watcher();
    this.current = w;
    const lost = () => {
      if (gen !== this.generation || this.stopped) return;
      this.generation++; // ignore anything more from this watch
      this.dropCurrent();
      this.retryLater(250);
    };
    w.on('disconnected', lost);
    w.on('error', lost);
    w.on('data', (r: IWatchResponse) => {
      if (gen !== this.generation || this.stopped) return;
      this.apply(r);
    });
  }

  private apply(res: IWatchResponse): void {
    this.reg.noteHeader(res.header);
    if (res.events.length === 0) return;
    const dirty = new Set<string>();
    for (const ev of res.events) {
      const key = ev.kv.key.toString();
      const prev = this.records.get(key);
      if (prev) dirty.add(prev.service.name);
      if (ev.type === 'Put') {
        const rec = decode(ev.kv, this.reg.onInvalid);
        if (rec && this.wants(rec.service.name)) {
          this.setRecord(key, rec);
          dirty.add(rec.service.name);
        } else this.deleteRecord(key);
      } else {
        this.deleteRecord(key);
      }
    }
    const rev = BigInt(res.header.revision);
    if (rev > this.lastRev) this.lastRev = rev;
    this.refresh(dirty, String(rev));
  }

  private setRecord(key: string, rec: StoredRecord): void {
    const prev = this.records.get(key);
    if (prev && prev.service.name !== rec.service.name) this.keysOf.get(prev.service.name)?.delete(key);
    this.records.set(key, rec);
    let keys = this.keysOf.get(rec.service.name);
    if (!keys) this.keysOf.set(rec.service.name, (keys = new Set()));
    keys.add(key);
  }

  private deleteRecord(key: string): void {
    const prev = this.records.get(key);
    if (!prev) return;
    this.records.delete(key);
    const keys = this.keysOf.get(prev.service.name);
    keys?.delete(key);
    if (keys?.size === 0) this.keysOf.delete(prev.service.name);
  }

  /** The records of one service name. */
  private *recordsOf(name: string): Iterable<StoredRecord> {
    for (const key of this.keysOf.get(name) ?? []) {
      const rec = this.records.get(key);
      if (rec) yield rec;
    }
  }

  /**
   * Emits the differences for `names` (all when undefined) and re-arms the expiry timer. Only the
   * named services are regrouped: an event costs the size of the services it touched.
   */
  private refresh(names: Set<string> | undefined, revision: string, silent = false): void {
    const now = Date.now();
    const all = names ?? new Set([...this.known.keys(), ...this.keysOf.keys()]);
    for (const name of all) {
      const after = group(this.recordsOf(name), now, this.reg.onInvalid).get(name) ?? [];
      if (!silent) {
        for (const change of diffVersions(name, this.known.get(name) ?? [], after))
          this.reg.events.push((e) => {
            if (!this.stopped) this.onEvent(e);
          }, { action: change.action, service: change.service, revision });
      }
      if (after.length > 0) this.known.set(name, after);
      else this.known.delete(name);
      // drop records that expired: they will not come back unless written again
      let next = Infinity;
      for (const key of [...(this.keysOf.get(name) ?? [])]) {
        const rec = this.records.get(key)!;
        if (!isLive(rec, now)) this.deleteRecord(key);
        else if (rec.expiresAt !== null && rec.expiresAt < next) next = rec.expiresAt;
      }
      if (next === Infinity) this.expiryOf.delete(name);
      else this.expiryOf.set(name, next);
    }
    this.armExpiry();
  }

  private armExpiry(): void {
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    if (this.stopped) return;
    let next = Infinity;
    for (const at of this.expiryOf.values()) if (at < next) next = at;
    if (next === Infinity) return;
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      if (this.stopped) return;
      const now = Date.now();
      const names = new Set<string>();
      for (const [name, at] of this.expiryOf) if (at <= now) names.add(name);
      this.refresh(names, String(this.lastRev));
    }, Math.max(0, next - Date.now()) + 1);
    this.expiryTimer.unref();
  }

  private wants(name: string): boolean {
    return this.service === undefined || this.service === name;
  }
}
