/**
 * One upstream host (`address:port`) of a cluster: its keep-alive connection pool, its per-host
 * stats (SPEC 2.2) and its health flags. Hosts are updated in place when their registry node
 * changes, so their stats survive.
 */
import { Pool } from '../../base/http/undici.js';
import type { buildConnector } from 'undici';
import type { Node } from '../../engines/registry/registry.js';
import { formatAddress } from '../../base/util/address.js';
import type { HostSnapshot, HostStatsSnapshot, UpstreamTarget } from './types.js';
import { servesMtls } from '../../base/mtls/connector.js';

export const MIN_WEIGHT = 1;
export const MAX_WEIGHT = 100;

/** What a host is built from: a registry node, a static host entry or an `address` option. */
export interface HostSpec {
  address: string;
  port: number;
  nodeId: string;
  hostname: string;
  metadata: Record<string, string>;
  weight: number;
  zone: string;
  region: string;
  canary: boolean;
  /** The registry's Version of the node ('' when none, or for a static host). */
  version?: string;
}

export interface HostPoolOptions {
  /** Pool size: the cluster's max_connections. */
  connections: number;
  connectTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /**
   * The connector of the host's pool, made when the pool is (mutual TLS: src/base/mtls/connector.ts).
   * Without it the pool connects plain, with connectTimeoutMs.
   */
  connector?: (host: Host) => buildConnector.connector | undefined;
}

/** Connection events, forwarded to the cluster's upstream_cx_* stats. */
export interface HostConnectionListener {
  connect(host: Host): void;
  disconnect(host: Host): void;
  connectFailure(host: Host): void;
}

/** `host:port` as Envoy prints it; IPv6 addresses in brackets (src/base/util/address.ts). */
export const hostKey = formatAddress;

/**
 * Reads weight (1..100, default 1; out of range clamped), zone, region, canary and hostname from
 * node metadata. `warn` is told about a weight that had to be corrected.
 */
export function specFromNode(node: Node, warn?: (message: string) => void): HostSpec {
  const md = node.metadata ?? {};
  return {
    address: node.address,
    port: node.port,
    nodeId: node.id,
    hostname: node.id || node.address,
    metadata: { ...md },
    weight: parseWeight(md.weight, (m) => warn?.(`node ${node.id} (${hostKey(node.address, node.port)}): ${m}`)),
    zone: md.zone ?? '',
    region: md.region ?? '',
    canary: md.canary === 'true',
  };
}

export function parseWeight(value: string | number | undefined, warn?: (message: string) => void): number {
  if (value === undefined || value === '') return 1;
  const n = typeof value === 'number' ? value : Number(String(value).trim());
  if (!Number.isFinite(n)) {
    warn?.(`weight "${value}" is not a number; using 1`);
    return 1;
  }
  const int = Math.round(n);
  if (int < MIN_WEIGHT || int > MAX_WEIGHT || int !== n) {
    const clamped = Math.min(MAX_WEIGHT, Math.max(MIN_WEIGHT, int));
    warn?.(`weight ${value} is outside 1..100 or not an integer; using ${clamped}`);
    return clamped;
  }
  return int;
}

export class Host implements UpstreamTarget {
  readonly key: string;
  readonly address: string;
  readonly port: number;
  nodeId!: string;
  hostname!: string;
  metadata!: Record<string, string>;
  weight!: number;
  zone!: string;
  region!: string;
  canary!: boolean;
  /** The registry's Version of the node ('' when none). */
  version!: string;

  private pool: Pool | undefined;
  /** The pool's connector, made once (undefined: plain); see connector. */
  private connectorMade = false;
  private madeConnector: buildConnector.connector | undefined;
  /** The active health checks' connection when they cannot use the shared one (mutual TLS). */
  private checkPool: Pool | undefined;
  private readonly poolOptions: HostPoolOptions;
  private readonly listener?: HostConnectionListener;
  /** What close() also closes (gRPC channels); undefined once closed. */
  private closeHooks: Array<() => void> | undefined = [];
  readonly stats: HostStatsSnapshot = {
    cx_active: 0,
    cx_connect_fail: 0,
    cx_total: 0,
    rq_active: 0,
    rq_error: 0,
    rq_success: 0,
    rq_timeout: 0,
    rq_total: 0,
  };

  // health flags
  failedActiveHc = false;
  failedOutlierCheck = false;

  // outlier detection state (owned by OutlierDetector)
  consecutive5xx = 0;
  consecutiveGatewayFailure = 0;
  consecutiveLocalOriginFailure = 0;
  ejections = 0;
  ejectedAt = 0;
  ejectionEndAt = 0;
  lastUnejectedAt = 0;
  intervalSuccess = 0;
  intervalTotal = 0;
  /** Success rate of the last interval, 0..100, or -1 with too little volume. */
  successRate = -1;

  /** Set once the host left its cluster (or was transient and is done). */
  removed = false;

  constructor(spec: HostSpec, pool: HostPoolOptions, listener?: HostConnectionListener) {
    this.address = spec.address;
    this.port = spec.port;
    this.key = hostKey(spec.address, spec.port);
    this.update(spec);
    // Checked now (throws TypeError: Invalid URL), so a host that cannot be reached is refused
    // when it is added, not on its first request.
    new URL(`http://${this.key}`);
    this.poolOptions = pool;
    this.listener = listener;
  }

  /**
   * The host's connection pool, made on first use: a cluster of thousands of hosts that are never
   * called costs no pools (each holds buffers). A host used after it was removed gets a pool its
   * keep-alive timeout closes.
   */
  get dispatcher(): Pool {
    if (this.pool) return this.pool;
    const options = this.poolOptions;
    const pool = new Pool(`http://${this.key}`, {
      connections: options.connections,
      pipelining: 1,
      keepAliveTimeout: options.keepAliveTimeoutMs,
      connect: this.connector ?? { timeout: options.connectTimeoutMs },
    });
    pool.on('connect', () => this.connectionOpened());
    pool.on('disconnect', () => this.connectionClosed());
    pool.on('connectionError', () => this.connectionFailed());
    this.pool = pool;
    return pool;
  }

  /**
   * How the host's pool connects when it is not plain (mutual TLS: the node's identity checked,
   * plain nodes refused in strict mode), made once; undefined: plain. Connections made outside the
   * pool (a proxied upgrade's) use it too.
   */
  get connector(): buildConnector.connector | undefined {
    if (!this.connectorMade) {
      this.madeConnector = this.poolOptions.connector?.(this);
      this.connectorMade = true;
    }
    return this.madeConnector;
  }

  /**
   * A pool of one connection of the host's own for its active health checks, made with
   * `connector` on first use (a node that serves mutual TLS is checked over it); not the host's
   * pool, so checks are not counted in its stats. Closed with the host.
   */
  checkDispatcher(connector: () => buildConnector.connector | undefined): Pool {
    if (this.checkPool) return this.checkPool;
    const options = this.poolOptions;
    this.checkPool = new Pool(`http://${this.key}`, {
      connections: 1,
      pipelining: 1,
      keepAliveTimeout: 4_000,
      connect: connector() ?? { timeout: options.connectTimeoutMs },
    });
    return this.checkPool;
  }

  /** A connection to the host opened (the pool's, or a gRPC channel's). */
  connectionOpened(): void {
    this.stats.cx_total++;
    this.stats.cx_active++;
    this.listener?.connect(this);
  }

  connectionClosed(): void {
    if (this.stats.cx_active > 0) this.stats.cx_active--;
    this.listener?.disconnect(this);
  }

  connectionFailed(): void {
    this.stats.cx_connect_fail++;
    this.listener?.connectFailure(this);
  }

  /**
   * Runs `close` once when the host is closed (a gRPC channel's close); returns what forgets it.
   * Undefined, without keeping it, when the host was already closed: its user closes what it
   * made some other way.
   */
  onClose(close: () => void): (() => void) | undefined {
    if (this.closeHooks === undefined) return undefined;
    this.closeHooks.push(close);
    return () => {
      const i = this.closeHooks?.indexOf(close) ?? -1;
      if (i >= 0) this.closeHooks!.splice(i, 1);
    };
  }

  /** Takes the node's fields (at construction, and its new metadata later) without touching stats or health. */
  update(spec: HostSpec): void {
    this.nodeId = spec.nodeId;
    this.hostname = spec.hostname;
    this.metadata = spec.metadata;
    this.weight = spec.weight;
    this.zone = spec.zone;
    this.region = spec.region;
    this.canary = spec.canary;
    this.version = spec.version ?? '';
  }

  healthy(): boolean {
    return !this.failedActiveHc && !this.failedOutlierCheck;
  }

  /** Requests queued in the pool, not yet written to a connection. */
  pendingInPool(): number {
    return this.pool ? this.pool.stats.pending : 0;
  }

  /**
   * Closes the pool: in-flight requests finish (up to graceMs), then connections are destroyed.
   */
  async close(graceMs = 5_000): Promise<void> {
    const pool = this.pool;
    // Health checks are disposable: their connection is not waited for.
    void this.checkPool?.destroy().catch(() => {});
    const hooks = this.closeHooks;
    this.closeHooks = undefined;
    for (const hook of hooks ?? []) {
      try {
        hook();
      } catch {
        // A channel that failed to close is gone anyway.
      }
    }
    if (!pool || pool.destroyed) return;
    let timer: NodeJS.Timeout | undefined;
    const closing = pool.closed ? Promise.resolve() : pool.close().catch(() => {});
    const timedOut = await Promise.race([
      closing.then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), graceMs);
        timer.unref();
      }),
    ]);
    if (timer) clearTimeout(timer);
    if (timedOut && !pool.destroyed) await pool.destroy().catch(() => {});
  }

  snapshot(): HostSnapshot {
    return {
      address: this.address,
      port: this.port,
      hostname: this.hostname,
      stats: { ...this.stats },
      failedActiveHc: this.failedActiveHc,
      failedOutlierCheck: this.failedOutlierCheck,
      weight: this.weight,
      region: this.region,
      zone: this.zone,
      canary: this.canary,
      successRate: this.successRate,
      version: this.version,
      mtls: servesMtls(this.metadata),
    };
  }
}
