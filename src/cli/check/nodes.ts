/**
 * `mesh check`: every node of every service answers Debug.Health within a short time (a node that
 * does not is a warning); a service with no node that answers is an error. With --mtls, a check
 * that cannot get its own workload certificate (mesh.cli) checks no node and says so, once. The http broker's
 * subscriber entries (`topic:…`) are not services and are skipped.
 */
import type { DirectOperations } from '../operations.js';
import type { Service } from '../../engines/registry/registry.js';
import { formatAddress } from '../../base/util/address.js';
import { parseJson } from '../../base/codec/json.js';
import { printable } from '../../base/util/text.js';
import { errorOf, within, type Finding } from './finding.js';

async function nodeProblem(ops: DirectOperations, service: string, address: string, timeoutMs: number): Promise<string | undefined> {
  try {
    const text = await within(ops.call(service, 'Debug.Health', '{}', address), timeoutMs);
    const status = (parseJson(text) as { status?: unknown }).status ?? 'ok';
    return status === 'ok' ? undefined : `answers status ${JSON.stringify(status)}`;
  } catch (err) {
    return `does not answer Debug.Health: ${errorOf(err)}`;
  }
}

/** `services`: the registry's list (names and versions); the nodes of each are read with getService. */
export async function checkNodes(ops: DirectOperations, services: Service[], timeoutMs: number): Promise<Finding[]> {
  const names = [...new Set(services.map((s) => s.name).filter((n) => !n.startsWith('topic:')))].sort();
  const findings: Finding[] = [];
  let identityError: string | undefined;
  const unchecked: string[] = [];
  for (const name of names) {
    let nodes: Service['nodes'];
    try {
      nodes = (await within(ops.getService(name), timeoutMs))?.nodes ?? [];
    } catch (err) {
      findings.push({ level: 'error', check: 'registry', message: `cannot read service ${printable(name)}: ${errorOf(err)}` });
      continue;
    }
    // With --mtls, the check calls as mesh.cli: without that certificate (the CA unreachable) it
    // cannot tell anything about the nodes, and says so once instead of blaming them.
    if (identityError === undefined && nodes.length > 0) {
      try {
        await within(ops.callerIdentity(name), timeoutMs);
      } catch (err) {
        identityError = errorOf(err);
      }
    }
    if (identityError !== undefined) {
      unchecked.push(printable(name));
      continue;
    }
    const problems = await Promise.all(nodes.map((n) => nodeProblem(ops, name, formatAddress(n.address, n.port), timeoutMs)));
    nodes.forEach((n, i) => {
      const p = problems[i];
      if (p) findings.push({ level: 'warning', check: 'nodes', message: `${printable(name)} node ${printable(n.id)} at ${formatAddress(n.address, n.port)} ${p}` });
    });
    if (problems.every((p) => p !== undefined)) findings.push({ level: 'error', check: 'services', message: `${printable(name)} has no healthy node (${nodes.length} registered)` });
  }
  if (identityError !== undefined) {
    findings.push({ level: 'error', check: 'mtls', message: `cannot check the nodes of ${unchecked.join(', ')}: this check has no workload certificate of its own (mesh.cli) to call them over mutual TLS: ${identityError}` });
  }
  return findings;
}
