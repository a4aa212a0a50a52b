/**
 * What the registry accepts: one set of rules for every door (sidecar /registry, `mesh register`,
 * the framework's Service, every backend's register) and for every record read back from storage
 * (SQLite, etcd), whoever wrote it. See docs/sidecar.md "Registry rules".
 *
 * - Service name: 1..MAX_NAME_LENGTH of letters, digits, `.`, `-`, `_`, `:`, `/`, starting with
 *   a letter or a digit. Never `..` (a path segment), `//` (a URL) or `::` (the admin text
 *   separator) — so no whitespace, control character, path escape or URL. The one exception is
 *   a reserved name (RESERVED_SERVICES, starting with `_`): mesh's own records (the process
 *   records of ./processes.ts). Every backend stores it, but leaves it out of listServices and
 *   of watches that name no service (isListedService); the doors refuse it
 *   (reservedServiceProblem), and no front calls it (the cluster manager).
 * - Version: empty, or 1..MAX_VERSION_LENGTH of the same characters and `+`, same rules.
 * - Node id: 1..MAX_NODE_ID_LENGTH of the same characters and `@`, same rules.
 * - Address: an IPv4 address (dotted quad, no leading zeros), an IPv6 address WITHOUT brackets
 *   (`::1`; no zone), or a DNS host name (labels of letters, digits, `-`, `_`, up to 63 each,
 *   253 in all, the last label not a number). No scheme, path, port or space.
 * - Port: an integer from 1 to 65535.
 * - Metadata (service, node, endpoint): at most MAX_METADATA_ENTRIES entries; keys 1..128
 *   characters, values strings of up to MAX_METADATA_VALUE_LENGTH; no control characters.
 *   At most MAX_METADATA_BYTES in all (UTF-8 bytes of keys and values): a node is small.
 * - Endpoints: at most MAX_ENDPOINTS; names 1..MAX_NAME_LENGTH of letters, digits, `.`, `-`,
 *   `_`, `:`, `/` (may start with `/` or `_`), same rules; request/response schemas up to
 *   MAX_ENDPOINT_SCHEMA_BYTES of JSON each.
 * - At most MAX_NODES_PER_REQUEST nodes in one registration, MAX_NODES_PER_SERVICE live nodes per
 *   service name (all versions together).
 * - At most MAX_SERVICE_BYTES per service name, all versions together, counted by serviceBytes
 *   (the UTF-8 bytes of its strings): a watcher's memory stays proportional to what it routes.
 *
 * A stored record that breaks a rule is skipped piece by piece (sanitizeStoredVersion): a bad
 * node is dropped and its service's good nodes stay; bad metadata entries and endpoints are
 * dropped; only a bad name or version hides the version. Each drop is reported to the
 * InvalidRecordSink: a warning log and the counter `registry.invalid_record`.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { Logger } from 'pino';
import type { StatsStore } from '../../base/stats/store.js';
import type { Logging } from '../../base/util/log.js';
import { printable } from '../../base/util/text.js';
import type { Endpoint, Metadata, Node, RegisterOptions, Service } from './registry.js';

/** Thrown for an invalid registration; the message names the field. */
export class RegistryValidationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RegistryValidationError';
  }
}

export const MAX_NAME_LENGTH = 200;
export const MAX_VERSION_LENGTH = 64;
export const MAX_NODE_ID_LENGTH = 255;
export const MAX_ADDRESS_LENGTH = 253;
export const MAX_METADATA_ENTRIES = 64;
export const MAX_METADATA_KEY_LENGTH = 128;
export const MAX_METADATA_VALUE_LENGTH = 4096;
export const MAX_ENDPOINTS = 256;
export const MAX_ENDPOINT_SCHEMA_BYTES = 16 * 1024;
/** Nodes in one register or deregister call. */
export const MAX_NODES_PER_REQUEST = 1_000;
/** Live nodes of one service name, all versions together. */
export const MAX_NODES_PER_SERVICE = 10_000;
/** The bytes of one metadata map (service, node or endpoint): keys and values, UTF-8. */
export const MAX_METADATA_BYTES = 16 * 1024;
/** The bytes of one service name, all versions together (serviceBytes). */
export const MAX_SERVICE_BYTES = 2 * 1024 * 1024;

/** The counter of stored records (nodes, metadata entries, endpoints, versions) skipped as invalid. */
export const INVALID_RECORD_STAT = 'registry.invalid_record';

const SERVICE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._:/-]*$/;
const VERSION_RE = /^[A-Za-z0-9][A-Za-z0-9._:/+-]*$/;
const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:/@-]*$/;
/** A path segment escape, a URL's `//`, the admin text separator. */
const FORBIDDEN_RUN_RE = /\.\.|\/\/|::/;
const ENDPOINT_NAME_RE = /^[A-Za-z0-9_/][A-Za-z0-9._:/-]*$/;
const HOST_LABEL_RE = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$/;
/** A last label that URL parsers read as (part of) an IPv4 number. */
const NUMERIC_LABEL_RE = /^(?:\d+|0[xX][0-9A-Fa-f]*)$/;
const METADATA_CONTROL_RE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** A value shown in an error message: quoted, escaped, cut at 64 characters. */
export function shown(value: unknown): string {
  if (typeof value !== 'string') return printable(JSON.stringify(value) ?? String(value));
  const cut = value.length > 64 ? `${value.slice(0, 64)}…` : value;
  return printable(JSON.stringify(cut));
}

function identifierProblem(value: unknown, what: string, re: RegExp, max: number, allowed: string): string | undefined {
  if (typeof value !== 'string' || value === '') return 'required';
  if (value.length > max) return `longer than ${max} characters`;
  if (!re.test(value)) return `${shown(value)} is not ${what} (${allowed})`;
  if (FORBIDDEN_RUN_RE.test(value)) return `${shown(value)} must not contain "..", "//" or "::"`;
  return undefined;
}

/** Where mesh's processes record themselves (./processes.ts). */
export const PROCESS_SERVICE = '_mesh.process';
/** Service names only mesh itself writes: valid for the backends, refused at every door. */
export const RESERVED_SERVICES: ReadonlySet<string> = new Set([PROCESS_SERVICE]);

/** False for a reserved name: listServices and watches of every service leave it out. */
export function isListedService(name: string): boolean {
  return !RESERVED_SERVICES.has(name);
}

/**
 * The refusal of a reserved name at a door (the sidecar's /registry, `mesh register`, a framework
 * service): only mesh writes these records.
 */
export function reservedServiceProblem(name: unknown): string | undefined {
  return typeof name === 'string' && RESERVED_SERVICES.has(name) ? `${shown(name)} is reserved: mesh's processes record themselves under it` : undefined;
}

/**
 * Wraps a watch callback so that events of a reserved name reach only a watch of that name
 * (every backend's watch: they are not listed).
 */
export function listedEvents<E extends { service: { name: string } }>(onEvent: (event: E) => void, watched: string | undefined): (event: E) => void {
  if (watched !== undefined) return onEvent;
  return (event) => {
    if (isListedService(event.service.name)) onEvent(event);
  };
}

export function serviceNameProblem(name: unknown): string | undefined {
  if (typeof name === 'string' && RESERVED_SERVICES.has(name)) return undefined;
  return identifierProblem(name, 'a valid service name', SERVICE_NAME_RE, MAX_NAME_LENGTH, 'letters, digits, ".", "-", "_", ":", "/", starting with a letter or a digit');
}

export function versionProblem(version: unknown): string | undefined {
  if (version === '' || version === undefined) return undefined;
  if (typeof version !== 'string') return 'must be a string';
  return identifierProblem(version, 'a valid version', VERSION_RE, MAX_VERSION_LENGTH, 'letters, digits, ".", "-", "_", ":", "/", "+", starting with a letter or a digit');
}

export function nodeIdProblem(id: unknown): string | undefined {
  return identifierProblem(id, 'a valid node id', NODE_ID_RE, MAX_NODE_ID_LENGTH, 'letters, digits, ".", "-", "_", ":", "/", "@", starting with a letter or a digit');
}

/** undefined when `address` is an IPv4 address, an IPv6 address without brackets or a DNS host name. */
export function addressProblem(address: unknown): string | undefined {
  if (typeof address !== 'string' || address === '') return 'required';
  if (address.length > MAX_ADDRESS_LENGTH) return `longer than ${MAX_ADDRESS_LENGTH} characters`;
  const bad = `${shown(address)} is not an IPv4 address, an IPv6 address or a host name (no scheme, path, port or spaces)`;
  if (address.startsWith('[')) {
    return /^\[[0-9A-Fa-f:.]+\]$/.test(address) ? `${shown(address)}: write an IPv6 address without brackets (::1, not [::1])` : bad;
  }
  if (address.includes(':')) return /^[0-9A-Fa-f:.]+$/.test(address) && isIPv6(address) ? undefined : bad;
  if (isIPv4(address)) return undefined;
  const labels = address.split('.');
  if (!labels.every((l) => HOST_LABEL_RE.test(l))) return bad;
  if (NUMERIC_LABEL_RE.test(labels[labels.length - 1]!)) return `${shown(address)} is not a valid IPv4 address (a dotted quad, 0-255 each, no leading zeros)`;
  return undefined;
}

export function portProblem(port: unknown): string | undefined {
  return typeof port === 'number' && Number.isInteger(port) && port >= 1 && port <= 65535 ? undefined : 'must be an integer from 1 to 65535';
}

/** The first problem of a metadata map, as `[field suffix, problem]`. */
export function metadataProblem(metadata: unknown): [string, string] | undefined {
  if (metadata === undefined) return undefined;
  if (!metadata || typeof metadata !== 'object' || Array.isArray(metadata)) return ['', 'must be an object of strings'];
  const entries = Object.entries(metadata);
  if (entries.length > MAX_METADATA_ENTRIES) return ['', `more than ${MAX_METADATA_ENTRIES} entries`];
  for (const [k, v] of entries) {
    const p = metadataEntryProblem(k, v);
    if (p) return [`.${printable(k.slice(0, 64))}`, p];
  }
  const bytes = metadataBytes(metadata as Metadata);
  if (bytes > MAX_METADATA_BYTES) return ['', `${bytes} bytes of keys and values, more than the limit of ${MAX_METADATA_BYTES}`];
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// sizes: the UTF-8 bytes of a record's strings (ports and JSON punctuation are not counted)

/** The bytes of a metadata map: its keys and values. */
export function metadataBytes(metadata: Metadata | undefined): number {
  let n = 0;
  for (const [k, v] of Object.entries(metadata ?? {})) n += Buffer.byteLength(k) + Buffer.byteLength(String(v));
  return n;
}

/** The bytes of a node: id, address and metadata. */
export function nodeBytes(node: Node): number {
  return Buffer.byteLength(node.id) + Buffer.byteLength(node.address) + metadataBytes(node.metadata);
}

function endpointBytes(e: Endpoint): number {
  const json = (v: unknown) => (v === undefined || v === null ? 0 : Buffer.byteLength(JSON.stringify(v) ?? ''));
  return Buffer.byteLength(e.name) + json(e.request) + json(e.response) + metadataBytes(e.metadata);
}

/** The bytes of a version without its nodes: name, version, metadata and endpoints (schemas as JSON). */
export function versionBytes(service: Service): number {
  let n = Buffer.byteLength(service.name) + Buffer.byteLength(service.version ?? '') + metadataBytes(service.metadata);
  for (const e of service.endpoints ?? []) n += endpointBytes(e);
  return n;
}

/** The bytes a service name takes, all versions given: each version's own bytes and its nodes'. */
export function serviceBytes(versions: readonly Service[]): number {
  let n = 0;
  for (const v of versions) {
    n += versionBytes(v);
    for (const node of v.nodes) n += nodeBytes(node);
  }
  return n;
}

function tooLarge(name: string, bytes: number): string {
  return `service ${shown(name)} would take ${bytes} bytes, more than the limit of ${MAX_SERVICE_BYTES} per service (all versions, nodes and endpoints)`;
}

/**
 * Refuses a registration that would take the service past MAX_SERVICE_BYTES. `existing`: the
 * service's versions now; the registration replaces its version's own part and its nodes of the
 * same ids.
 */
export function checkServiceBytes(existing: readonly Service[], added: Service): void {
  const replaced = new Set(added.nodes.map((n) => n.id));
  let bytes = serviceBytes([added]);
  for (const v of existing) {
    const same = (v.version ?? '') === (added.version ?? '');
    if (!same) bytes += versionBytes(v);
    for (const node of v.nodes) if (!(same && replaced.has(node.id))) bytes += nodeBytes(node);
  }
  if (bytes > MAX_SERVICE_BYTES) fail('service', tooLarge(added.name, bytes));
}

function metadataEntryProblem(key: string, value: unknown): string | undefined {
  if (key === '') return 'empty key';
  if (key.length > MAX_METADATA_KEY_LENGTH) return `key longer than ${MAX_METADATA_KEY_LENGTH} characters`;
  if (METADATA_CONTROL_RE.test(key)) return 'key has a control character';
  if (typeof value !== 'string') return 'must be a string';
  if (value.length > MAX_METADATA_VALUE_LENGTH) return `longer than ${MAX_METADATA_VALUE_LENGTH} characters`;
  if (METADATA_CONTROL_RE.test(value)) return 'has a control character';
  return undefined;
}

function schemaProblem(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    return 'must be JSON';
  }
  if (json !== undefined && Buffer.byteLength(json) > MAX_ENDPOINT_SCHEMA_BYTES) return `larger than ${MAX_ENDPOINT_SCHEMA_BYTES} bytes of JSON`;
  return undefined;
}

/** The first problem of an endpoint, as `[field suffix, problem]`. */
export function endpointProblem(e: unknown): [string, string] | undefined {
  if (!e || typeof e !== 'object' || Array.isArray(e)) return ['', 'must be an object'];
  const ep = e as Partial<Endpoint>;
  const name = identifierProblem(ep.name, 'a valid endpoint name', ENDPOINT_NAME_RE, MAX_NAME_LENGTH, 'letters, digits, ".", "-", "_", ":", "/"');
  if (name) return ['.Name', name];
  const req = schemaProblem(ep.request);
  if (req) return ['.Request', req];
  const res = schemaProblem(ep.response);
  if (res) return ['.Response', res];
  const md = metadataProblem(ep.metadata);
  if (md) return [`.Metadata${md[0]}`, md[1]];
  return undefined;
}

/** The first problem of a node, as `[field suffix, problem]`. */
export function nodeProblem(n: unknown): [string, string] | undefined {
  if (!n || typeof n !== 'object' || Array.isArray(n)) return ['', 'must be an object'];
  const node = n as Partial<Node>;
  const id = nodeIdProblem(node.id);
  if (id) return ['.Id', id];
  const address = addressProblem(node.address);
  if (address) return ['.Address', address];
  const port = portProblem(node.port);
  if (port) return ['.Port', port];
  const md = metadataProblem(node.metadata);
  if (md) return [`.Metadata${md[0]}`, md[1]];
  return undefined;
}

function fail(field: string, problem: string): never {
  throw new RegistryValidationError(`${field}: ${problem}`);
}

/** Validates a service record before it is written; throws RegistryValidationError naming the field. */
export function validateService(service: Service, requireNodes = true): void {
  if (!service || typeof service !== 'object') fail('service', 'must be an object');
  const name = serviceNameProblem(service.name);
  if (name) fail('Name', name);
  const version = versionProblem(service.version);
  if (version) fail('Version', version);
  const md = metadataProblem(service.metadata);
  if (md) fail(`Metadata${md[0]}`, md[1]);
  if (service.endpoints !== undefined) {
    if (!Array.isArray(service.endpoints)) fail('Endpoints', 'must be an array');
    if (service.endpoints.length > MAX_ENDPOINTS) fail('Endpoints', `more than ${MAX_ENDPOINTS} endpoints`);
    service.endpoints.forEach((e, i) => {
      const p = endpointProblem(e);
      if (p) fail(`Endpoints[${i}]${p[0]}`, p[1]);
    });
  }
  if (!Array.isArray(service.nodes)) fail('Nodes', 'must be an array');
  if (requireNodes && service.nodes.length === 0) fail('Nodes', 'at least one node is required');
  if (service.nodes.length > MAX_NODES_PER_REQUEST)
    fail('Nodes', `${service.nodes.length} nodes in one request, more than the limit of ${MAX_NODES_PER_REQUEST}`);
  service.nodes.forEach((node, i) => {
    const p = nodeProblem(node);
    if (p) fail(`Nodes[${i}]${p[0]}`, p[1]);
  });
  const bytes = serviceBytes([service]);
  if (bytes > MAX_SERVICE_BYTES) fail('service', tooLarge(service.name, bytes));
}

/** Deregister input: a name and node ids are all that matter (a stored record that breaks the rules can still be removed). */
export function validateDeregister(service: Service): void {
  if (!service || typeof service !== 'object') fail('service', 'must be an object');
  if (typeof service.name !== 'string' || service.name === '') fail('Name', 'required');
  if (service.name.length > MAX_NAME_LENGTH) fail('Name', `longer than ${MAX_NAME_LENGTH} characters`);
  if (service.nodes !== undefined && !Array.isArray(service.nodes)) fail('Nodes', 'must be an array');
  const nodes = service.nodes ?? [];
  if (nodes.length > MAX_NODES_PER_REQUEST) fail('Nodes', `${nodes.length} nodes in one request, more than the limit of ${MAX_NODES_PER_REQUEST}`);
  nodes.forEach((node, i) => {
    if (!node || typeof node.id !== 'string' || node.id === '') fail(`Nodes[${i}].Id`, 'required');
    if (node.id.length > MAX_NODE_ID_LENGTH) fail(`Nodes[${i}].Id`, `longer than ${MAX_NODE_ID_LENGTH} characters`);
  });
}

/**
 * Refuses a registration that would leave the service with more than MAX_NODES_PER_SERVICE live
 * nodes. `existing`: the node ids the service has now (any version); `added`: those registered.
 */
export function checkNodesPerService(name: string, existing: Iterable<string>, added: readonly string[]): void {
  const all = new Set(existing);
  for (const id of added) all.add(id);
  if (all.size > MAX_NODES_PER_SERVICE)
    fail('Nodes', `service ${name} would have ${all.size} nodes, more than the limit of ${MAX_NODES_PER_SERVICE} per service`);
}

// ---------------------------------------------------------------------------------------------
// records read back from storage

/** What a backend tells about a stored record it skipped. */
export interface InvalidRecordReport {
  backend: string;
  /** The service name as stored (escaped for printing). */
  service: string;
  /** How many pieces were dropped (nodes, metadata entries, endpoints, or 1 for a whole version). */
  dropped: number;
  /** The first problem, naming the field. */
  problem: string;
}

export type InvalidRecordSink = (report: InvalidRecordReport) => void;

/** Distinct skipped records a sink remembers having logged; past it, it starts over. */
const LOGGED_RECORDS = 1024;

/**
 * Where backends report skipped records: a warning log (subsystem registry) and the
 * registry.invalid_record counter. A record is read again on every change of its service: it is
 * logged once (per service and problem), and counted every time it is skipped.
 */
export function invalidRecordSink(options: { stats?: StatsStore; logging?: Logging; log?: Logger }): InvalidRecordSink {
  const counter = options.stats?.counter(INVALID_RECORD_STAT);
  const log = options.log ?? options.logging?.get('registry');
  const logged = new Set<string>();
  return (r) => {
    counter?.inc(r.dropped);
    const key = `${r.backend}\0${r.service}\0${r.problem}`;
    if (logged.has(key)) return;
    if (logged.size >= LOGGED_RECORDS) logged.clear();
    logged.add(key);
    if (log) log.warn({ backend: r.backend, service: r.service, dropped: r.dropped, problem: r.problem }, 'invalid registry record skipped');
    else process.emitWarning(`registry ${r.backend}: invalid record of service ${r.service} skipped (${r.dropped} dropped): ${r.problem}`);
  };
}

/**
 * A stored version as it may be used: bad nodes, metadata entries and endpoints dropped.
 * `service` is undefined when its name or version breaks the rules (nothing of it can be used).
 */
export function sanitizeStoredVersion(service: Service): { service?: Service; dropped: number; problem?: string } {
  let dropped = 0;
  let problem: string | undefined;
  const note = (field: string, p: string, count = 1) => {
    dropped += count;
    problem ??= `${field}: ${p}`;
  };
  const name = serviceNameProblem(service.name);
  if (name) return { dropped: 1, problem: `Name: ${name}` };
  const version = versionProblem(service.version);
  if (version) return { dropped: 1, problem: `Version: ${version}` };
  const cleanMetadata = (md: unknown, field: string): Metadata => {
    if (md === undefined || md === null) return {};
    if (typeof md !== 'object' || Array.isArray(md)) {
      note(field, 'must be an object of strings');
      return {};
    }
    const out: Metadata = {};
    let count = 0;
    let bytes = 0;
    for (const [k, v] of Object.entries(md)) {
      let p = count >= MAX_METADATA_ENTRIES ? `more than ${MAX_METADATA_ENTRIES} entries` : metadataEntryProblem(k, v);
      const size = p ? 0 : Buffer.byteLength(k) + Buffer.byteLength(v as string);
      if (!p && bytes + size > MAX_METADATA_BYTES) p = `more than ${MAX_METADATA_BYTES} bytes of keys and values`;
      if (p) note(`${field}.${printable(k.slice(0, 64))}`, p);
      else {
        out[k] = v as string;
        count++;
        bytes += size;
      }
    }
    return out;
  };
  const metadata = cleanMetadata(service.metadata, 'Metadata');
  const endpoints: Endpoint[] = [];
  const rawEndpoints = Array.isArray(service.endpoints) ? service.endpoints : [];
  if (service.endpoints !== undefined && !Array.isArray(service.endpoints)) note('Endpoints', 'must be an array');
  rawEndpoints.forEach((e, i) => {
    const p = i >= MAX_ENDPOINTS ? (['', `more than ${MAX_ENDPOINTS} endpoints`] as [string, string]) : endpointProblem(e);
    if (p) note(`Endpoints[${i}]${p[0]}`, p[1]);
    else endpoints.push(e);
  });
  const nodes: Node[] = [];
  const rawNodes = Array.isArray(service.nodes) ? service.nodes : [];
  rawNodes.forEach((n) => {
    const p = nodeProblem(n);
    if (p) note(`node ${typeof n?.id === 'string' ? shown(n.id) : '?'}${p[0]}`, p[1]);
    else nodes.push(n);
  });
  return { service: { name: service.name, version: service.version ?? '', metadata, endpoints, nodes }, dropped, problem };
}

/**
 * The usable versions of one stored service: each sanitized, and at most MAX_NODES_PER_SERVICE
 * nodes in all (the first ones in version, then node order). Reports what was dropped to `sink`.
 */
export function sanitizeStoredService(backend: string, name: string, versions: readonly Service[], sink: InvalidRecordSink): Service[] {
  let dropped = 0;
  let problem: string | undefined;
  const out: Service[] = [];
  let room = MAX_NODES_PER_SERVICE;
  let bytesRoom = MAX_SERVICE_BYTES;
  for (const v of versions) {
    const r = sanitizeStoredVersion(v);
    dropped += r.dropped;
    problem ??= r.problem;
    if (!r.service || r.service.nodes.length === 0) continue;
    if (r.service.nodes.length > room) {
      const over = r.service.nodes.length - room;
      dropped += over;
      problem ??= `Nodes: more than ${MAX_NODES_PER_SERVICE} nodes in the service; ${over} left out`;
      r.service.nodes = r.service.nodes.slice(0, room);
    }
    // At most MAX_SERVICE_BYTES of the service are used: its first versions and nodes, the rest left out.
    let used = versionBytes(r.service);
    let kept = 0;
    if (used <= bytesRoom) {
      for (const node of r.service.nodes) {
        const size = nodeBytes(node);
        if (used + size > bytesRoom) break;
        used += size;
        kept++;
      }
    }
    if (kept < r.service.nodes.length) {
      const over = r.service.nodes.length - kept;
      dropped += over;
      problem ??= `service: more than ${MAX_SERVICE_BYTES} bytes in the service; ${over} node${over === 1 ? '' : 's'} left out`;
      r.service.nodes = r.service.nodes.slice(0, kept);
    }
    if (kept > 0) bytesRoom -= used;
    room -= r.service.nodes.length;
    if (r.service.nodes.length > 0) out.push(r.service);
  }
  if (dropped > 0) sink({ backend, service: shown(name), dropped, problem: problem ?? 'invalid' });
  return out;
}

/** Validates TTL options; returns the TTL in ms (0: none). */
export function ttlOf(options?: RegisterOptions): number {
  const ttl = options?.ttlMs ?? 0;
  if (typeof ttl !== 'number' || !Number.isFinite(ttl) || ttl < 0) throw new RegistryValidationError(`ttl: must be a non-negative number of milliseconds`);
  return ttl;
}
