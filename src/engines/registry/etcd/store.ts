/**
 * The etcd registry's store: the key layout, get/put/delete through the client, decoding stored
 * values and grouping one-node records into services, and what the response headers say (the
 * revision, a different cluster, etcd reachable or not).
 *
 * Layout: one key per node, `<prefix><service>/<version>/<nodeId>` (each segment URI-encoded),
 * holding the JSON of the service with that one node, plus `expiresAt` (ms since the epoch) when
 * it was registered with a TTL. Readers never return a node past its `expiresAt`.
 */
import type { Etcd3, IKeyValue, IResponseHeader } from 'etcd3';
import type pino from 'pino';
import type { Service } from '../registry.js';
import { byNodeId, byVersion, cloneService } from '../records.js';
import { MAX_NODES_PER_SERVICE, checkNodesPerService, sanitizeStoredService, shown, type InvalidRecordSink } from '../validate.js';
import type { StaleView } from '../stale-view.js';

const TXN_MAX_OPS = 100;
/** Bytes of keys and values in one transaction: under etcd's default request limit (--max-request-bytes, 1.5 MiB). */
const TXN_MAX_BYTES = 1024 * 1024;

/** A stored record: the service with one node, and its expiry. */
export interface StoredRecord {
  service: Service;
  expiresAt: number | null;
  modRevision: bigint;
}

const enc = encodeURIComponent;

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A stored value as a record, not yet checked against the registry rules (group does that);
 * undefined, reported to `sink`, when it is not even the shape of one.
 */
export function decode(kv: IKeyValue, sink: InvalidRecordSink): StoredRecord | undefined {
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

export const isLive = (rec: StoredRecord, now: number) => rec.expiresAt === null || rec.expiresAt > now;

/**
 * Groups live one-node records into services: one entry per name, versions sorted, checked
 * against the registry rules (bad nodes, metadata and endpoints dropped and reported to `sink`;
 * at most MAX_NODES_PER_SERVICE nodes per service).
 */
export function group(records: Iterable<StoredRecord>, now: number, sink: InvalidRecordSink): Map<string, Service[]> {
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

export type TxnOps = NonNullable<Parameters<Etcd3['kv']['txn']>[0]['success']>;

export class EtcdStore {
  rev = 0n;
  private clusterId: string | undefined;
  /** The last call failed: the next one that works means etcd is back. */
  unreachable = false;
  closed = false;
  /** Our registrations must be written again: etcd came back, or is another cluster. Set by the composer. */
  onRestoreNeeded: () => void = () => undefined;
  /** When etcd last answered (any response header). */
  goodAt = Date.now();

  constructor(
    readonly client: Etcd3,
    readonly prefix: string,
    readonly hosts: string[],
    /** https:// addresses. */
    readonly secure: boolean,
    readonly onInvalid: InvalidRecordSink,
    /** The watchers' view: frozen while they cannot read etcd. */
    readonly view: StaleView,
    readonly log: pino.Logger,
  ) {}

  /**
   * A watcher could not read etcd: watchers keep their view as of the last answer (nothing
   * expires meanwhile). Logged once per stale period.
   */
  watchersCutOff(err: unknown): void {
    if (this.closed || !this.view.freeze(this.goodAt)) return;
    this.log.warn(
      { hosts: this.hosts.join(','), err: errorText(err), as_of: new Date(this.view.asOf!).toISOString() },
      'registry unreachable: keeping the last known view (nothing expires) until it answers again',
    );
  }

  /** A watcher read etcd again (and resynchronised). Logged once per stale period. */
  watchersBack(): void {
    const seconds = this.view.staleSeconds();
    if (!this.view.thaw()) return;
    this.log.info({ hosts: this.hosts.join(','), stale_seconds: seconds }, 'registry reachable again: view resynchronised');
  }

  key(name: string, version: string, nodeId: string): string {
    return `${this.prefix}${enc(name)}/${enc(version)}/${enc(nodeId)}`;
  }

  servicePrefix(name: string): string {
    return `${this.prefix}${enc(name)}/`;
  }

  /** Records a response header: tracks the revision and notices a different cluster. */
  noteHeader(header: IResponseHeader | undefined): void {
    if (!header) return;
    this.goodAt = Date.now();
    const rev = BigInt(header.revision);
    if (this.clusterId !== undefined && header.cluster_id !== this.clusterId) {
      // A new etcd cluster (wiped data): everything we registered is gone there.
      this.rev = rev;
      this.onRestoreNeeded();
    } else if (rev > this.rev) {
      this.rev = rev;
    }
    this.clusterId = header.cluster_id;
  }

  /** The live versions of one service. */
  async getService(name: string): Promise<Service[]> {
    const res = await this.wrap('get service', () => this.client.getAll().prefix(this.servicePrefix(name)).exec());
    this.noteHeader(res.header);
    const records = res.kvs.map((kv) => decode(kv, this.onInvalid)).filter((r): r is StoredRecord => r !== undefined && r.service.name === name);
    return group(records, Date.now(), this.onInvalid).get(name) ?? [];
  }

  /** Every live service, grouped by name (unsorted). */
  async listServices(): Promise<Map<string, Service[]>> {
    const res = await this.wrap('list services', () => this.client.getAll().prefix(this.prefix).exec());
    this.noteHeader(res.header);
    const records = res.kvs.map((kv) => decode(kv, this.onInvalid)).filter((r): r is StoredRecord => r !== undefined);
    return group(records, Date.now(), this.onInvalid);
  }

  /** The keys of the nodes `ids` of a service, in whatever version they are (node ids are unique). */
  async nodeKeys(name: string, ids: Set<string>): Promise<string[]> {
    const res = await this.wrap('deregister', () => this.client.getAll().prefix(this.servicePrefix(name)).exec());
    this.noteHeader(res.header);
    return res.kvs.map((kv) => kv.key.toString()).filter((k) => ids.has(decodeURIComponent(k.slice(k.lastIndexOf('/') + 1))));
  }

  async deleteKeys(keys: string[]): Promise<void> {
    await this.wrap('deregister', () => this.txn(keys.map((k) => ({ request_delete_range: { key: Buffer.from(k) } }))));
  }

  /**
   * Refuses a registration that would take the service past MAX_NODES_PER_SERVICE nodes. A count
   * first (cheap); the keys only near the limit. Skipped when etcd cannot be asked: the write
   * path handles an unreachable etcd, and readers cap what they use anyway.
   */
  async checkServiceSize(s: Service): Promise<void> {
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

  /** Runs one call; an error names the hosts and the likely cause, and marks etcd unreachable. */
  async wrap<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      const out = await fn();
      if (this.unreachable) {
        this.unreachable = false;
        this.onRestoreNeeded();
      }
      return out;
    } catch (err) {
      this.unreachable = true;
      throw new Error(`registry etcd (${this.hosts.join(',')}): ${what}: ${errorText(err)}${this.hint(err)}`, { cause: err });
    }
  }

  /** Runs the operations in transactions of at most TXN_MAX_OPS and TXN_MAX_BYTES (one larger put goes alone). */
  async txn(ops: TxnOps): Promise<void> {
    let batch: TxnOps = [];
    let bytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      const res = await this.client.kv.txn({ compare: [], success: batch, failure: [] });
      this.noteHeader(res.header);
      batch = [];
      bytes = 0;
    };
    for (const op of ops) {
      const size = (op.request_put?.key?.length ?? 0) + (op.request_put?.value?.length ?? 0) + (op.request_delete_range?.key?.length ?? 0);
      if (batch.length >= TXN_MAX_OPS || (batch.length > 0 && bytes + size > TXN_MAX_BYTES)) await flush();
      batch.push(op);
      bytes += size;
    }
    await flush();
  }

  /** gRPC says only "UNAVAILABLE" when TLS fails; name the likely causes. */
  private hint(err: unknown): string {
    if (!/\bUNAVAILABLE\b/.test(errorText(err))) return '';
    return this.secure
      ? ' (is etcd running there, and does --registry_tls_ca_file name the CA that signed its certificate?)'
      : ' (is etcd running there? an etcd that serves TLS needs an https:// address)';
  }
}
