/** `mesh check`: the registry answers a read and takes a write (a probe node, removed at once). */
import type { DirectOperations } from '../operations.js';
import { normalizeService, type Service } from '../../engines/registry/registry.js';
import { errorOf, within, type Finding } from './finding.js';

/** The service of the probe node; `mesh check` never health-checks it. */
export const PROBE_SERVICE = 'mesh.check.probe';

export interface RegistryCheck {
  findings: Finding[];
  /** The registry's services when it could be read. */
  services?: Service[];
}

/** The registry's errors mostly name it already ("registry etcd (http://…): …"). */
function named(where: string, what: string, error: string): string {
  return error.startsWith('registry ') ? `${what}: ${error}` : `${where} ${what}: ${error}`;
}

export async function checkRegistry(ops: DirectOperations, where: string, timeoutMs: number): Promise<RegistryCheck> {
  let services: Service[];
  try {
    services = await within(ops.runtime.registry.listServices(), timeoutMs);
  } catch (err) {
    return { findings: [{ level: 'error', check: 'registry', message: named(where, 'cannot be read', errorOf(err)) }] };
  }
  const probe = normalizeService({ name: PROBE_SERVICE, nodes: [{ id: `${PROBE_SERVICE}-${process.pid}`, address: '127.0.0.1', port: 9, metadata: {} }] });
  try {
    await within(ops.register(probe, 10_000), timeoutMs);
    await within(ops.deregister(probe), timeoutMs);
  } catch (err) {
    return { findings: [{ level: 'error', check: 'registry', message: named(where, 'cannot be written', errorOf(err)) }], services };
  }
  return { findings: [], services: services.filter((s) => s.name !== PROBE_SERVICE) };
}
