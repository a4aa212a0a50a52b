/**
 * Admin `/config_dump` and `/listeners` (docs/admin.md): what a process runs with, as JSON, and
 * its listeners in Envoy's shapes.
 *
 * /config_dump holds the effective options (every option of the option schema that the process's
 * command uses, with its value, secrets left out: see isSecretOption and redactUrl), the
 * route tables with their source and version (what /routes lists), the clusters (names, where
 * they come from, their hosts) and the listeners.
 */
import { apiName, optionEntries, type CommandName, COMMAND_NAMES } from '../base/options/schema.js';
import { formatAddress } from '../base/util/address.js';
import { redactUrl } from '../base/util/redact.js';
import type { ClusterSnapshot } from '../core/upstream/types.js';
import type { RouteTableDump } from './route-table.js';

/** One listening socket of a front end (the gateway's, a proxy listener's). */
export interface ListenerInfo {
  name: string;
  address: string;
  port: number;
}

/**
 * An option whose value is a secret (a token, a shared secret, a password): left out of
 * /config_dump whatever its value. By name: `*_token`, `*_secret`, `*_password`. A `*_file`
 * option holds a path, not the secret, and stays.
 */
export function isSecretOption(key: string): boolean {
  return /(^|_)(token|secret|password)$/.test(key);
}


function plain(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === 'string') return redactUrl(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return value;
  if (Array.isArray(value)) return value.map(plain);
  return '(set in code)';
}

/**
 * The effective options of a process: for each schema option its command uses (every library
 * option when the role is not a command), the value from `flags` (the parsed command line, by
 * schema key) when it has one, else from `resolved` (the process's options, by API name). The
 * command line wins: a CLI process resolves its library options from it, except `--address`, the
 * listen address of its front end, which the library options keep at their default.
 * Secrets are left out; URLs are redacted (redactUrl). Sorted by key.
 */
export function effectiveOptions(role: string, resolved: object, flags?: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const command = (COMMAND_NAMES as readonly string[]).includes(role) ? (role as CommandName) : undefined;
  const values = resolved as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [key, spec] of optionEntries().sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (isSecretOption(key)) continue;
    if (command ? !spec.commands.includes(command) : !spec.api) continue;
    const name = apiName(key);
    if (flags && flags[key] !== undefined) out[key] = plain(flags[key]);
    else if (spec.api && Object.hasOwn(values, name)) out[key] = plain(values[name]);
    else out[key] = null;
  }
  return out;
}

export interface ConfigDumpParts {
  options: Record<string, unknown>;
  routes: RouteTableDump[];
  clusters: ClusterSnapshot[];
  listeners: ListenerInfo[];
}

/** The /config_dump body: `{"configs": [...]}`, one section each, 2-space indent, trailing newline. */
export function renderConfigDump(parts: ConfigDumpParts): string {
  const configs = [
    { '@type': 'mesh.options', options: parts.options },
    {
      '@type': 'mesh.routes',
      route_tables: parts.routes.map((r) => ({ route_config_name: r.routeConfigName, version_info: r.versionInfo, table: r.table })),
    },
    {
      '@type': 'mesh.clusters',
      clusters: parts.clusters.map((c) => ({ name: c.name, added_via_api: c.addedViaApi, hosts: c.hosts.map((h) => formatAddress(h.address, h.port)) })),
    },
    { '@type': 'mesh.listeners', listeners: parts.listeners.map((l) => ({ name: l.name, address: formatAddress(l.address, l.port) })) },
  ];
  return `${JSON.stringify({ configs }, null, 2)}\n`;
}

/** Envoy's /listeners text: `<name>::<address>:<port>` a line. */
export function renderListenersText(listeners: readonly ListenerInfo[]): string {
  return listeners.map((l) => `${l.name}::${formatAddress(l.address, l.port)}\n`).join('');
}

/** Envoy's /listeners?format=json: `{"listener_statuses": [{name, local_address: {socket_address: {address, port_value}}}]}`. */
export function renderListenersJson(listeners: readonly ListenerInfo[]): string {
  const statuses = listeners.map((l) => ({ name: l.name, local_address: { socket_address: { address: l.address, port_value: l.port } } }));
  return `${JSON.stringify({ listener_statuses: statuses }, null, 1)}\n`;
}
