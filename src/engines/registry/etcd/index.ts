/**
 * The etcd v3 registry (client `etcd3`), for more than one machine. EtcdRegistry composes the
 * parts, each in its own module:
 *
 * - client.ts: the address list and the etcd3 client;
 * - store.ts: the key layout, reads and writes, decoding and grouping records, response headers;
 * - leases.ts: TTL leases, keep-alive, expiring our own records, writing them again after etcd
 *   restarts, comes back or turns out to be another cluster;
 * - watcher.ts: prefix watches, regrouping, expiry timers, re-watch after a broken stream;
 * - contact.ts: while watching, etcd asked after a silence, so a cut link shows within seconds.
 *
 * TTL: readers never return a node past its `expiresAt`, so a TTL is honoured to the millisecond
 * whatever etcd's lease granularity. Watchers resynchronise (full read + diff) whenever their
 * watch stream reconnects, and before they expire anything; while etcd cannot be read they keep
 * their last view (stale-view.ts: nothing expires, gauge registry.stale_seconds).
 */
import type { Etcd3 } from 'etcd3';
import type pino from 'pino';
import type {
  RegisterOptions,
  Registry,
  Service,
  WatchEvent,
  WatchOptions,
  Watcher,
} from '../registry.js';
import { readEngineTls, type EngineTlsFiles } from '../../../base/util/engine-access.js';
import { byName, cloneService } from '../records.js';
import { invalidRecordSink, isListedService, listedEvents, ttlOf, validateDeregister, validateService, type InvalidRecordSink } from '../validate.js';
import { createEtcdClient, parseEtcdAddress } from './client.js';
import { EtcdLeases, type Registration } from './leases.js';
import { EtcdStore } from './store.js';
import { EtcdWatchers } from './watcher.js';
import { STALE_SECONDS_STAT, StaleView } from '../stale-view.js';
import type { StatsStore } from '../../../base/stats/store.js';
import { Logging } from '../../../base/util/log.js';
import { SchemaOptionError } from '../../../base/util/option-error.js';

export { parseEtcdAddress, type EtcdAddress } from './client.js';

export const DEFAULT_ETCD_PREFIX = '/mesh/registry/';

export interface EtcdRegistryOptions {
  /** Key prefix (default /mesh/registry/); must end with '/'. */
  prefix?: string;
  /** Deadline of each unary call (default 5000 ms). */
  callTimeoutMs?: number;
  /** TLS files (--registry_tls_*); they need https:// addresses. */
  tls?: EngineTlsFiles;
  /** Told about stored records that break the registry rules (they are skipped); default: a process warning. */
  onInvalidRecord?: InvalidRecordSink;
  /** The process's stats store: gauge `registry.stale_seconds` (how old the watchers' view is). */
  stats?: StatsStore;
  /** The 'registry' logger; default: one of its own on stderr. */
  logger?: pino.Logger;
}

export class EtcdRegistry implements Registry {
  readonly name = 'etcd';
  readonly prefix: string;
  readonly hosts: string[];
  /** https:// addresses. */
  readonly secure: boolean;
  /** @internal The etcd3 client (tests write raw values with it). */
  readonly client: Etcd3;
  private readonly store: EtcdStore;
  private readonly leases: EtcdLeases;
  private readonly watchers: EtcdWatchers;

  constructor(address: string, options: EtcdRegistryOptions = {}) {
    const parsed = parseEtcdAddress(address);
    this.hosts = parsed.hosts;
    this.secure = parsed.secure;
    const tls = readEngineTls('registry_tls', options.tls);
    if (tls && !parsed.secure) throw new SchemaOptionError('registry_address', 'registry etcd: TLS files ({registry_tls_ca_file}, {registry_tls_cert_file}, {registry_tls_key_file}) need https:// addresses (https://host:2379)');
    const prefix = options.prefix ?? DEFAULT_ETCD_PREFIX;
    this.prefix = prefix.endsWith('/') ? prefix : `${prefix}/`;
    const callTimeoutMs = options.callTimeoutMs ?? 5000;
    const onInvalid = options.onInvalidRecord ?? invalidRecordSink({});
    this.client = createEtcdClient(parsed, tls, callTimeoutMs);
    const view = new StaleView(options.stats?.gauge(STALE_SECONDS_STAT));
    const log = options.logger ?? new Logging().get('registry');
    this.store = new EtcdStore(this.client, this.prefix, this.hosts, this.secure, onInvalid, view, log);
    this.leases = new EtcdLeases(this.store);
    this.store.onRestoreNeeded = () => this.leases.restoreSoon();
    this.watchers = new EtcdWatchers(this.store);
  }

  async register(service: Service, options?: RegisterOptions): Promise<void> {
    this.checkOpen();
    validateService(service);
    const ttlMs = ttlOf(options);
    const s = cloneService(service);
    await this.watchers.settle();
    await this.store.checkServiceSize(s);
    const expiresAt = ttlMs > 0 ? Date.now() + ttlMs : null;
    const regs: Registration[] = s.nodes.map((node) => {
      const record: Service & { expiresAt?: number } = { ...s, nodes: [node] };
      if (expiresAt !== null) record.expiresAt = expiresAt;
      return { key: this.store.key(s.name, s.version, node.id), value: JSON.stringify(record), ttlMs, expiresAt };
    });
    await this.leases.register(regs);
  }

  async deregister(service: Service): Promise<void> {
    this.checkOpen();
    validateDeregister(service);
    await this.watchers.settle();
    const ids = new Set((service.nodes ?? []).map((n) => n.id));
    if (ids.size === 0) return;
    const version = service.version ?? '';
    // An empty version means "wherever these node ids are" (node ids are unique).
    const keys = version !== '' ? [...ids].map((id) => this.store.key(service.name, version, id)) : await this.store.nodeKeys(service.name, ids);
    this.leases.forget(keys);
    if (keys.length === 0) return;
    await this.store.deleteKeys(keys);
  }

  async getService(name: string): Promise<Service[]> {
    this.checkOpen();
    return this.store.getService(name);
  }

  async listServices(): Promise<Service[]> {
    this.checkOpen();
    const out: Service[] = [];
    for (const versions of (await this.store.listServices()).values()) if (isListedService(versions[0]!.name)) out.push({ ...versions[0]!, nodes: [] });
    return out.sort(byName);
  }

  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher {
    this.checkOpen();
    return this.watchers.add(listedEvents(onEvent, options?.service), options?.service);
  }

  revision(): string {
    return String(this.store.rev);
  }

  async close(): Promise<void> {
    if (this.store.closed) return;
    this.store.closed = true;
    this.leases.stopTimer();
    this.store.view.close();
    // Cancel the watch streams before closing the client, or an open stream keeps the process alive.
    await this.watchers.close();
    // Stop keeping leases alive; etcd expires their keys after the lease TTL, as a TTL promises.
    this.leases.releaseAll();
    this.client.close();
  }

  /** Deletes every key under this registry's prefix (tests; `mesh` never calls it). */
  async purgePrefix(): Promise<void> {
    this.leases.clear();
    await this.client.delete().prefix(this.prefix).exec();
  }

  private checkOpen(): void {
    if (this.store.closed) throw new Error(`registry etcd (${this.hosts.join(',')}): closed`);
  }
}
