/** Picks a registry backend from --registry / --registry_address. */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Registry } from './registry.js';
import { MemoryRegistry } from './memory.js';
import { LocalRegistry } from './local/index.js';
import { EtcdRegistry } from './etcd/index.js';
import type { EngineTlsFiles } from '../../base/util/engine-access.js';
import type { StatsStore } from '../../base/stats/store.js';
import type { Logging } from '../../base/util/log.js';
import { invalidRecordSink } from './validate.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { OPTIONS } from '../../base/options/schema.js';

/** The registry backends: the schema's choices of --registry. */
export const REGISTRY_KINDS = OPTIONS.registry.choices;

/** The directory the local registry uses when no address is given: $MESH_HOME, else ~/.mesh. */
export function defaultRegistryDirectory(home?: string): string {
  if (home) return home;
  const env = process.env.MESH_HOME;
  if (env) return env;
  return join(homedir(), '.mesh');
}

/**
 * kind: memory | local | etcd. address: local: the directory (default $MESH_HOME, else ~/.mesh;
 * opts.home overrides the environment); etcd: `host:port[,host:port]` or
 * `https://[user:password@]host:port[,...]` (required), with opts.tls its TLS files.
 * opts.stats / opts.logging: where stored records that break the registry rules are reported
 * (counter registry.invalid_record, a warning of subsystem registry).
 */
export function createRegistry(
  kind: string,
  address: string | undefined,
  opts: { home?: string; tls?: EngineTlsFiles; stats?: StatsStore; logging?: Logging } = {},
): Registry {
  const addr = address?.trim() || undefined;
  const onInvalidRecord = invalidRecordSink({ stats: opts.stats, logging: opts.logging });
  switch (kind) {
    case 'memory':
      return new MemoryRegistry();
    case 'local':
      return new LocalRegistry(addr ?? defaultRegistryDirectory(opts.home), { stats: opts.stats, logger: opts.logging?.get('registry'), onInvalidRecord });
    case 'etcd':
      if (!addr) throw new SchemaOptionError('registry_address', 'registry etcd: {registry_address} is required (host:port[,host:port], or https://[user:password@]host:port)');
      return new EtcdRegistry(addr, { tls: opts.tls, onInvalidRecord, stats: opts.stats, logger: opts.logging?.get('registry') });
    default:
      throw new Error(`unknown registry "${kind}" (use ${REGISTRY_KINDS.join(', ')})`);
  }
}
