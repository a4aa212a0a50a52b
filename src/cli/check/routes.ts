/**
 * `mesh check --routes=FILE`: the route file's routes as a Gateway API controller would write
 * their status (src/edge/routes/status.ts). A route whose Accepted is False (it attaches to no
 * listener of the file's Gateways) or whose ResolvedRefs is False (a backendRef of another kind, a
 * service the registry does not know) is an error; a rule that answers 500 with
 * its refs resolved (no backendRefs, every weight 0) a warning; a file a front end would refuse an
 * error. Without the registry's services (it could not be read: its own finding says so) only what
 * the file says is checked.
 */
import { loadRouteFile } from '../../edge/routes/file.js';
import { routeStatus } from '../../edge/routes/status.js';
import type { Service } from '../../engines/registry/registry.js';
import { errorOf, type Finding } from './finding.js';

export function checkRoutes(file: string, services: readonly Service[] | undefined): Finding[] {
  let parsed;
  try {
    parsed = loadRouteFile(file);
  } catch (err) {
    return [{ level: 'error', check: 'routes', message: errorOf(err) }];
  }
  const names = services ? new Set(services.map((s) => s.name)) : undefined;
  const found: Finding[] = [];
  for (const status of routeStatus(parsed, names ? (service) => names.has(service) : undefined)) {
    const accepted = status.conditions.find((c) => c.type === 'Accepted');
    if (accepted?.status === 'False') {
      found.push({ level: 'error', check: 'routes', message: `${file} line ${status.line}: ${status.kind ?? 'HTTPRoute'} ${status.route}: Accepted False (${accepted.reason}): ${accepted.message}` });
    }
    const resolved = status.conditions.find((c) => c.type === 'ResolvedRefs');
    if (resolved?.status === 'False') {
      found.push({ level: 'error', check: 'routes', message: `${file} line ${status.line}: ${status.kind ?? 'HTTPRoute'} ${status.route}: ResolvedRefs False (${resolved.reason}): ${resolved.message}` });
    }
    for (const r of status.rules) {
      found.push({ level: 'warning', check: 'routes', message: `${file} line ${r.line}: ${status.kind ?? 'HTTPRoute'} ${status.route} rules[${r.index}] (${r.rule}): ${r.note}` });
    }
  }
  return found;
}
