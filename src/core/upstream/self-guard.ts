/**
 * The self-forwarding guard: the gateway, the sidecar and the proxy never send a request to an
 * address they listen on themselves (their admin interface, their front listeners). A node
 * registered at the admin's address would otherwise let a public request reach /quitquitquit.
 *
 * - SelfAddresses: the process's listening addresses, registered by each listener once it is bound
 *   (the Runtime owns one). A listener bound to a wildcard (0.0.0.0, ::) on port P covers every
 *   local address on P: loopback (127.0.0.0/8, ::1), the interface addresses of
 *   os.networkInterfaces(), and the wildcard itself. A target named `localhost` is loopback. Other
 *   host names are not resolved. Addresses are compared in one canonical form (canonicalHost): an
 *   IPv4-mapped IPv6 address in any spelling (`::ffff:127.0.0.1`, `::ffff:7f00:1`,
 *   `0:0:0:0:0:ffff:7f00:1`, bracketed) is the IPv4 address it reaches, and `127.1`, `0x7f.1` or
 *   `2130706433` are 127.0.0.1, as a connect reads them. (An admin also refuses mutating requests
 *   that carry forwarding headers, which covers a name this guard does not resolve.)
 * - SelfGuard: used by the cluster manager at every host pick. A cluster's own-address hosts are
 *   avoided while another host is available; when the pick can only be one of them (the only hosts,
 *   or `address` naming one), the attempt is refused before any connection: 502, counted in
 *   `cluster.<name>.upstream_cx_self_refused`.
 * - selfRefusingConnector: the connector of the health checks' dispatcher, which does not go
 *   through a pick (a node's `health_check_path` could otherwise be /quitquitquit): a check of an
 *   own address fails to connect, so the host is unhealthy, and nothing is sent.
 */
import { networkInterfaces } from 'node:os';
import { buildConnector } from '../../base/http/undici.js';
import { badGateway, ERROR_IDS, MeshError } from '../../base/errors.js';
import { canonicalHost, isLoopbackAddress, isWildcardAddress } from '../../base/http/host-check.js';
import { hostKey } from './host.js';
import { tryParseAddress } from '../../base/util/address.js';
import type { AcquireOptions, UpstreamLease } from './types.js';
import type { Cluster } from './cluster.js';

export const SELF_REFUSED_STAT = 'upstream_cx_self_refused';

export interface Listening {
  host: string;
  port: number;
  what: string;
}

/** Answers "is address:port one of this process's listeners?"; the cluster manager's view of it. */
export interface SelfLookup {
  /** What listens there (`admin`, `sidecar`...), or undefined when it is not this process. */
  lookup(address: string, port: number): string | undefined;
  /** Bumped on every change, so that cached answers are dropped. */
  readonly version: number;
}

export class SelfAddresses implements SelfLookup {
  private readonly listening: Listening[] = [];
  private readonly ports = new Set<number>();
  private readonly added: (() => void)[] = [];
  version = 0;

  /** The listeners, in the order they were bound. */
  list(): readonly Listening[] {
    return this.listening;
  }

  /** Calls `fn` after each listener added (the process record: src/engines/registry/processes.ts). */
  onAdd(fn: () => void): void {
    this.added.push(fn);
  }

  /** Records a bound listener (`what` names it in errors: admin, sidecar, api, a proxy listener). */
  add(host: string, port: number, what: string): void {
    const canonical = canonicalHost(host) ?? host;
    if (this.listening.some((l) => l.host === canonical && l.port === port)) return;
    this.listening.push({ host: canonical, port, what });
    this.ports.add(port);
    this.version++;
    for (const fn of this.added) fn();
  }

  lookup(address: string, port: number): string | undefined {
    if (!this.ports.has(port)) return undefined;
    const target = canonicalHost(address);
    if (target === undefined) return undefined;
    let local: Set<string> | undefined;
    const isLocal = (h: string) => {
      if (h === 'localhost' || isLoopbackAddress(h) || isWildcardAddress(h)) return true;
      local ??= localAddresses();
      return local.has(h);
    };
    for (const l of this.listening) {
      if (l.port !== port) continue;
      if (l.host === target) return l.what;
      // 0.0.0.0 and :: as a destination are this machine.
      if (isWildcardAddress(target)) return l.what;
      if (isWildcardAddress(l.host) && isLocal(target)) return l.what;
      if (target === 'localhost' && isLoopbackAddress(l.host)) return l.what;
    }
    return undefined;
  }
}

/** An undici connector that refuses this process's own addresses and connects to anything else. */
export function selfRefusingConnector(self: SelfLookup): buildConnector.connector {
  const connect = buildConnector({});
  return (options, callback) => {
    const port = Number(options.port || (options.protocol === 'https:' ? 443 : 80));
    const what = self.lookup(options.hostname, port);
    if (what !== undefined) {
      callback(new Error(`${options.hostname}:${port} is this process's own ${what} listener; refusing to connect to itself`), null);
      return;
    }
    connect(options, callback);
  };
}

function localAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const c = canonicalHost(a.address);
      if (c !== undefined) out.add(c);
    }
  }
  return out;
}

export class SelfGuard {
  /** Per host list of a cluster (replaced on every change), the keys of its own-address hosts. */
  private readonly own = new WeakMap<readonly unknown[], { version: number; keys: Map<string, string> }>();

  constructor(private readonly self: SelfLookup) {}

  /** cluster.acquire(service, options), never onto one of this process's own addresses. */
  acquire(cluster: Cluster, service: string, options: AcquireOptions): UpstreamLease {
    const hosts = cluster.hosts();
    let cached = this.own.get(hosts);
    if (!cached || cached.version !== this.self.version) {
      const keys = new Map<string, string>();
      for (const h of hosts) {
        const what = this.self.lookup(h.address, h.port);
        if (what !== undefined) keys.set(h.key, what);
      }
      cached = { version: this.self.version, keys };
      this.own.set(hosts, cached);
    }
    const own = cached.keys;
    if (own.size === 0) return cluster.acquire(service, options);
    if (options.address !== undefined) {
      const hp = tryParseAddress(options.address, { target: true });
      const key = hp ? hostKey(hp.host, hp.port) : undefined;
      if (key !== undefined && own.has(key)) throw this.refuse(cluster, service, key, own.get(key)!);
      return cluster.acquire(service, options);
    }
    if (own.size >= hosts.length) {
      const [key, what] = own.entries().next().value as [string, string];
      throw this.refuse(cluster, service, key, what);
    }
    const exclude = new Set(options.exclude ?? []);
    for (const key of own.keys()) exclude.add(key);
    const lease = cluster.acquire(service, { ...options, exclude });
    const what = own.get(lease.target.key);
    if (what !== undefined) {
      // Every other host was excluded (already tried): give the lease back unused.
      lease.release({ kind: 'cancelled' }, 0);
      throw this.refuse(cluster, service, lease.target.key, what);
    }
    return lease;
  }

  private refuse(cluster: Cluster, service: string, key: string, what: string): MeshError {
    cluster.statScope.counter(SELF_REFUSED_STAT).inc();
    return badGateway(
      ERROR_IDS.client,
      `service ${service}: node ${key} is this process's own ${what} listener; refusing to forward to itself`,
    );
  }
}
