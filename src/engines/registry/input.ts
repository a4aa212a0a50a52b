/**
 * Registration input (sidecar /registry, `mesh register service`): SPEC 2.6 keys, capitalised
 * in the docs, matched case-insensitively. Every problem is reported naming the field; the rules
 * themselves are validate.ts's.
 */
import type { Endpoint, Metadata, Node, Service } from './registry.js';
import { printable } from '../../base/util/text.js';
import { MAX_ENDPOINTS, MAX_NODES_PER_REQUEST, RegistryValidationError, reservedServiceProblem, validateService } from './validate.js';

function lowerKeys(value: unknown, field: string): Record<string, unknown> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new RegistryValidationError(`${field}: must be a JSON object`);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k.toLowerCase()] = v;
  return out;
}

function metadataOf(value: unknown, field: string): Metadata {
  if (value === undefined || value === null) return {};
  const o = lowerKeysKeepCase(value, field);
  const out: Metadata = {};
  for (const [k, v] of Object.entries(o)) {
    if (typeof v === 'string') out[k] = v;
    else if (typeof v === 'number' || typeof v === 'boolean') out[k] = String(v);
    else throw new RegistryValidationError(`${field}.${printable(k.slice(0, 64))}: must be a string`);
  }
  return out;
}

function lowerKeysKeepCase(value: unknown, field: string): Record<string, unknown> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new RegistryValidationError(`${field}: must be a JSON object`);
  return value as Record<string, unknown>;
}

function optionalString(value: unknown, field: string): string {
  if (value === undefined || value === null) return '';
  if (typeof value !== 'string') throw new RegistryValidationError(`${field}: must be a string`);
  return value;
}

/** Converts parsed JSON into a Service record; throws RegistryValidationError naming the field. */
export function serviceFromInput(input: unknown, options: { requireNodes?: boolean } = {}): Service {
  const o = lowerKeys(input, 'body');
  if (typeof o.name !== 'string' || o.name.trim() === '') throw new RegistryValidationError('Name: required (a non-empty string)');
  const reserved = reservedServiceProblem(o.name.trim());
  if (reserved) throw new RegistryValidationError(`Name: ${reserved}`);
  if (o.nodes !== undefined && o.nodes !== null && !Array.isArray(o.nodes)) throw new RegistryValidationError('Nodes: must be an array');
  // Counted before anything else is looked at, so a huge request costs nothing more.
  if (Array.isArray(o.nodes) && o.nodes.length > MAX_NODES_PER_REQUEST)
    throw new RegistryValidationError(`Nodes: ${o.nodes.length} nodes in one request, more than the limit of ${MAX_NODES_PER_REQUEST}`);
  if (Array.isArray(o.endpoints) && o.endpoints.length > MAX_ENDPOINTS)
    throw new RegistryValidationError(`Endpoints: more than ${MAX_ENDPOINTS} endpoints`);
  const nodes: Node[] = ((o.nodes as unknown[] | undefined) ?? []).map((raw, i) => {
    const n = lowerKeys(raw, `Nodes[${i}]`);
    const id = n.id;
    if (typeof id !== 'string' || id === '') throw new RegistryValidationError(`Nodes[${i}].Id: required (a non-empty string)`);
    const address = n.address;
    if (typeof address !== 'string' || address === '') throw new RegistryValidationError(`Nodes[${i}].Address: required (a non-empty string)`);
    const port = n.port;
    if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535)
      throw new RegistryValidationError(`Nodes[${i}].Port: must be an integer from 1 to 65535`);
    return { id, address, port, metadata: metadataOf(n.metadata, `Nodes[${i}].Metadata`) };
  });
  if (o.endpoints !== undefined && o.endpoints !== null && !Array.isArray(o.endpoints)) throw new RegistryValidationError('Endpoints: must be an array');
  const endpoints: Endpoint[] = ((o.endpoints as unknown[] | undefined) ?? []).map((raw, i) => {
    const e = lowerKeys(raw, `Endpoints[${i}]`);
    if (typeof e.name !== 'string' || e.name === '') throw new RegistryValidationError(`Endpoints[${i}].Name: required`);
    return { name: e.name, request: e.request, response: e.response, metadata: metadataOf(e.metadata, `Endpoints[${i}].Metadata`) };
  });
  const service: Service = {
    name: o.name.trim(),
    version: optionalString(o.version, 'Version'),
    metadata: metadataOf(o.metadata, 'Metadata'),
    endpoints,
    nodes,
  };
  validateService(service, options.requireNodes ?? true);
  return service;
}
