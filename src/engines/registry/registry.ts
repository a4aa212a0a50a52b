/**
 * The Registry interface: where services say where they are. Small on purpose (go-micro's shape):
 * every backend (memory, local SQLite, etcd) implements exactly this and passes one contract suite
 * (test/registry-contract.ts).
 */

export type Metadata = Record<string, string>;

export interface Node {
  id: string;
  address: string;
  port: number;
  metadata: Metadata;
}

export interface Endpoint {
  name: string;
  request?: unknown;
  response?: unknown;
  metadata: Metadata;
}

export interface Service {
  name: string;
  version: string;
  metadata: Metadata;
  endpoints: Endpoint[];
  nodes: Node[];
}

export interface RegisterOptions {
  /** Time to live in milliseconds; the nodes expire unless registered again. Absent or 0: no expiry. */
  ttlMs?: number;
}

export type WatchAction = 'create' | 'update' | 'delete';

export interface WatchEvent {
  action: WatchAction;
  /** The service as it now is (for delete: the name and version, nodes may be empty). */
  service: Service;
  /** The registry revision after this change; admin /clusters reports it as version_info. */
  revision: string;
}

export interface Watcher {
  stop(): void;
  /**
   * Resolves once changes are being reported: a change made after that is sure to produce an
   * event. Absent when that is so from the start (the watcher read its starting state in watch()).
   */
  readonly ready?: Promise<void>;
}

export interface WatchOptions {
  /** Only events for this service name. */
  service?: string;
}

export interface Registry {
  /** Backend name: memory, local, etcd. */
  readonly name: string;
  /** Adds or refreshes the service and its nodes (upsert by service name + version and node id). */
  register(service: Service, options?: RegisterOptions): Promise<void>;
  /** Removes the given nodes; a service version with no nodes left disappears. */
  deregister(service: Service): Promise<void>;
  /** Every version of the service that has live nodes; [] when unknown. Expired nodes never appear. */
  getService(name: string): Promise<Service[]>;
  /** One entry per service name (name and version; nodes may be omitted), sorted by name. */
  listServices(): Promise<Service[]>;
  /** Calls back on every change, including TTL expiry, in order. */
  watch(onEvent: (event: WatchEvent) => void, options?: WatchOptions): Watcher;
  /** The revision last written or seen, as a string ("0" when empty). */
  revision(): string;
  close(): Promise<void>;
}

/** Fills the optional fields so every stored record has the full shape. */
export function normalizeService(service: Partial<Service> & { name: string }): Service {
  return {
    name: service.name,
    version: service.version ?? '',
    metadata: { ...(service.metadata ?? {}) },
    endpoints: (service.endpoints ?? []).map((e) => ({ ...e, metadata: { ...(e.metadata ?? {}) } })),
    nodes: (service.nodes ?? []).map((n) => ({ ...n, metadata: { ...(n.metadata ?? {}) } })),
  };
}

/** Merges all versions of a service into one record (nodes of every version), as GET /registry?service= does. */
export function mergeVersions(versions: Service[]): Service | undefined {
  if (versions.length === 0) return undefined;
  const first = versions[0]!;
  const merged = normalizeService(first);
  for (const other of versions.slice(1)) {
    merged.nodes.push(...other.nodes.map((n) => ({ ...n, metadata: { ...n.metadata } })));
    for (const e of other.endpoints) if (!merged.endpoints.some((x) => x.name === e.name)) merged.endpoints.push(e);
  }
  return merged;
}
