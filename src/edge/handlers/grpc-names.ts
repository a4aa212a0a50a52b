/**
 * Which mesh service a native gRPC call is for (docs/grpc.md, "Native gRPC through the gateway
 * and the sidecar"), in order:
 *   1. the `mesh-service` metadata of the call (a header), when it names a service of the registry;
 *   2. the call's `:authority` without its port, when it names a service of the registry (a channel
 *      made with `grpc.default_authority`, or a DNS name that is the service's);
 *   3. the service whose nodes say they serve the call's gRPC service (`grpc_service` in their
 *      registry metadata: `helloworld.Greeter`), as a framework service serving gRPC registers them.
 * The registry's answers, yes and no, are kept for a few seconds (the index of 3 is rebuilt at most
 * once per REFRESH_MS, by one read at a time), so a burst of calls reads the registry once: a
 * channel whose `:authority` is an address (`127.0.0.1:8081`, most channels) does not cost a
 * registry read per call.
 */
import type { Registry } from '../../engines/registry/registry.js';
import { GRPC_SERVICE_KEY } from '../../core/transport/grpc/transport.js';

/** How long the registry's answers are kept. */
export const REFRESH_MS = 5000;
/** The index reads at most this many services (a registry larger than that is read in part); as many names are kept. */
export const MAX_SERVICES = 10_000;

/** The metadata header a caller may name the service with. */
export const MESH_SERVICE_HEADER = 'mesh-service';

export class GrpcServiceNames {
  /** Registry service names asked about: whether the registry has each, and when that was read. */
  private readonly known = new Map<string, { at: number; found: boolean }>();
  /** gRPC full service name → mesh service, and when it was built. */
  private index: { at: number; map: Map<string, string> } | undefined;
  private building: Promise<Map<string, string>> | undefined;

  constructor(
    private readonly registry: Registry,
    private readonly now: () => number = Date.now,
  ) {}

  /** The mesh service for a call; undefined when none is found. */
  async resolve(grpcService: string, authority: string | undefined, named: string | undefined): Promise<string | undefined> {
    if (named && (await this.exists(named))) return named;
    const host = hostOf(authority);
    if (host && (await this.exists(host))) return host;
    return (await this.byGrpcService()).get(grpcService);
  }

  /** Whether the registry has the service (the answer is kept REFRESH_MS; at most MAX_SERVICES names are kept). */
  async exists(name: string): Promise<boolean> {
    const kept = this.known.get(name);
    if (kept !== undefined && this.now() - kept.at < REFRESH_MS) return kept.found;
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$/.test(name)) return false;
    const found = (await this.registry.getService(name)).length > 0;
    if (this.known.size >= MAX_SERVICES) this.known.clear();
    this.known.set(name, { at: this.now(), found });
    return found;
  }

  private byGrpcService(): Promise<Map<string, string>> {
    if (this.index && this.now() - this.index.at < REFRESH_MS) return Promise.resolve(this.index.map);
    this.building ??= this.build().finally(() => (this.building = undefined));
    return this.building;
  }

  private async build(): Promise<Map<string, string>> {
    const map = new Map<string, string>();
    const names = (await this.registry.listServices()).slice(0, MAX_SERVICES).map((s) => s.name);
    for (const name of names) {
      for (const version of await this.registry.getService(name)) {
        for (const node of version.nodes) {
          const grpcService = node.metadata?.[GRPC_SERVICE_KEY];
          // The first service (by name) that serves it: a name two services claim is not guessed further.
          if (grpcService && !map.has(grpcService)) map.set(grpcService, name);
        }
      }
    }
    this.index = { at: this.now(), map };
    return map;
  }
}

/** `:authority` without its port, lower case; undefined when empty. */
function hostOf(authority: string | undefined): string | undefined {
  if (!authority) return undefined;
  const host = authority.startsWith('[') ? authority.slice(0, authority.indexOf(']') + 1) : authority.replace(/:[0-9]*$/, '');
  return host === '' ? undefined : host.toLowerCase();
}
