/**
 * Which nodes of the mesh serve mutual TLS (registry metadata `mtls=true`) and which do not. Used
 * by `mesh check` (a plain node among nodes that serve mutual TLS: callers with --mtls=strict,
 * such as `mesh dev`'s gateway, refuse to call it) and by `mesh run` (the mode of the mesh an app
 * joins, src/cli/run-mtls.ts). The http broker's subscriber entries (`topic:…`) are not services.
 */
import type { Registry } from '../../engines/registry/registry.js';
import { servesMtls } from '../../base/mtls/connector.js';
import { formatAddress } from '../../base/util/address.js';
import { printable } from '../../base/util/text.js';
import { within, type Finding } from './finding.js';

export interface NodeOfMesh {
  service: string;
  id: string;
  address: string;
  port: number;
}

/** The registry's nodes, those that serve mutual TLS and those that do not. */
export interface MtlsCensus {
  mtls: NodeOfMesh[];
  plain: NodeOfMesh[];
}

/**
 * Reads every service's nodes (each read within `timeoutMs`; one that fails rejects), leaving out
 * the services named in `skip` (the apps `mesh run` is about to start: a stale record of theirs
 * does not say what the mesh is).
 */
export async function mtlsCensus(registry: Pick<Registry, 'listServices' | 'getService'>, timeoutMs: number, skip: ReadonlySet<string> = new Set()): Promise<MtlsCensus> {
  const census: MtlsCensus = { mtls: [], plain: [] };
  const list = await within(registry.listServices(), timeoutMs);
  const names = [...new Set(list.map((s) => s.name).filter((n) => !n.startsWith('topic:') && !skip.has(n)))].sort();
  for (const name of names) {
    for (const version of await within(registry.getService(name), timeoutMs)) {
      for (const n of version.nodes) (servesMtls(n.metadata) ? census.mtls : census.plain).push({ service: name, id: n.id, address: n.address, port: n.port });
    }
  }
  return census;
}

/** `1 node of the mesh does`, `2 nodes of the mesh do`. */
const nodesDo = (n: number) => (n === 1 ? '1 node of the mesh does' : `${n} nodes of the mesh do`);

/**
 * One warning per plain node when other nodes of the mesh serve mutual TLS: a caller with
 * --mtls=strict (`mesh dev`'s gateway, a strict sidecar) answers 502 rather than call it. (The
 * registry does not say whether the mesh is strict or permissive, so this is a warning.)
 */
export function checkPlainNodes(census: MtlsCensus): Finding[] {
  if (census.mtls.length === 0) return [];
  return census.plain.map((n) => ({
    level: 'warning' as const,
    check: 'mtls',
    message:
      `${printable(n.service)} node ${printable(n.id)} at ${formatAddress(n.address, n.port)} does not serve mutual TLS, ` +
      `while ${nodesDo(census.mtls.length)}: callers with --mtls=strict (as mesh dev's gateway) do not call it (502); ` +
      'start it with --mtls=strict (mesh run: --mtls=strict)',
  }));
}
