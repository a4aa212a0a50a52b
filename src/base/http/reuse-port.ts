/**
 * Listening with `reusePort` (SO_REUSEPORT): the workers of `--concurrency` each bind their own
 * socket on the shared port and the kernel spreads the connections over them, instead of the
 * cluster primary accepting every connection and handing it over (docs/architecture.md,
 * "Concurrency"). Node's net.Server takes `reusePort` from 22.12 (and 23.1) on; Node 20 ignores
 * the option, so the caller decides with reusePortSupported().
 *
 * A port 0 is shared too: the first worker binds it and reports the ports it got (ports()); the
 * others (and every worker started again) are given that list and bind the same ports.
 */
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';

/** A listen on port 0 and the port it got: the n-th such listen on a host matches the n-th in another worker. */
export interface SharedPort {
  host: string;
  port: number;
}

/** True where net.Server listens with `reusePort`: Linux, Node 22.12 or later (23.1 or later in 23). */
export function reusePortSupported(platform: string = process.platform, version: string = process.versions.node): boolean {
  if (platform !== 'linux') return false;
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major === 22) return minor >= 12;
  if (major === 23) return minor >= 1;
  return major > 23;
}

/**
 * Whether host:port can be bound by this process alone: a plain listen (no reusePort), closed at
 * once. Resolves with the bind error (EADDRINUSE: another process holds the port, even one that
 * listens with reusePort itself), or undefined. The `--concurrency` primary checks its ports so,
 * before its workers bind them with reusePort: else a second instance would share the port silently.
 */
export function probeListen(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(undefined)));
  });
}

/** Parses the list of shared ports a worker is given (JSON); throws on anything else. */
export function parseSharedPorts(text: string): SharedPort[] {
  const value: unknown = JSON.parse(text);
  const ok = (p: unknown): p is SharedPort =>
    typeof p === 'object' && p !== null && typeof (p as SharedPort).host === 'string' && Number.isInteger((p as SharedPort).port) && (p as SharedPort).port >= 0 && (p as SharedPort).port <= 65535;
  if (!Array.isArray(value) || !value.every(ok)) throw new Error(`not a list of {host, port}: ${text}`);
  return value.map((p) => ({ host: p.host, port: p.port }));
}

/** One process's listens with reusePort; `given` holds the ports another worker's port-0 listens got. */
export class ReusePortListening {
  /** This process's port-0 listens in the order they were made, with the port each got (0 until bound). */
  private readonly taken: SharedPort[] = [];

  constructor(private readonly given: readonly SharedPort[]) {}

  /** Listens with reusePort (a port 0 becomes the matching given port, if any); resolves with the bound address. */
  listen(server: Server, host: string, port: number): Promise<AddressInfo> {
    let slot: SharedPort | undefined;
    let target = port;
    if (port === 0) {
      // Matched by order among this host's port-0 listens (taken synchronously, before any await).
      const nth = this.taken.filter((p) => p.host === host).length;
      slot = { host, port: 0 };
      this.taken.push(slot);
      target = this.given.filter((p) => p.host === host)[nth]?.port ?? 0;
    }
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      // `reusePort` is in Node's ListenOptions from 22.12 on (this project's types are Node 20's).
      server.listen({ host, port: target, reusePort: true } as Parameters<Server['listen']>[0], () => {
        server.off('error', reject);
        const address = server.address() as AddressInfo;
        if (slot) slot.port = address.port;
        resolve(address);
      });
    });
  }

  /** The ports this process's port-0 listens got, in order: what the other workers are given. */
  ports(): SharedPort[] {
    return this.taken.map((p) => ({ ...p }));
  }
}
