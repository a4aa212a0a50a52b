/** Picks a broker backend by name (--broker): memory, http (the default), nats. */
import type pino from 'pino';
import type { Registry } from '../registry/registry.js';
import type { Broker } from './broker.js';
import { HttpBroker } from './http/broker.js';
import { MemoryBroker } from './memory.js';
import { NatsBroker } from './nats.js';
import type { EngineTlsFiles } from '../../base/util/engine-access.js';
import type { DurableDefaults } from './durable.js';
import type { StatsStore } from '../../base/stats/store.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { OPTIONS } from '../../base/options/schema.js';
import type { WorkloadTls } from '../../base/mtls/workload-tls.js';

/** The broker backends: the schema's choices of --broker. */
export const BROKER_KINDS = OPTIONS.broker.choices;
export type BrokerKind = (typeof BROKER_KINDS)[number];

export interface CreateBrokerOptions {
  /** The registry the http broker registers subscriptions in and looks subscribers up. */
  registry: Registry;
  /** http: listen host[:port] of the subscriber endpoint (default 127.0.0.1:0); nats: server address(es), required. */
  address?: string;
  /** http: host others reach the subscriber endpoint at (the port stays the bound one). */
  advertiseHost?: string;
  /** nats: TLS files (--broker_tls_*). */
  tls?: EngineTlsFiles;
  /** http: the delivery secret itself, or a file holding it; else `broker.secret` of the local registry's directory or of secretDirectory (src/engines/broker/http/secret.ts). */
  secret?: string;
  secretFile?: string;
  secretDirectory?: string;
  /** Durable subscriptions: max deliver, ack wait, dead-letter suffix, stream limits (--broker_max_deliver and the like). */
  durable?: Partial<DurableDefaults>;
  /** Stats of durable topics and consumers. */
  stats?: StatsStore;
  /** http: the process's workload certificate (--mtls): deliveries over mutual TLS. */
  workloadTls?: () => WorkloadTls | undefined;
  logger?: pino.Logger;
}

export function createBroker(kind: string, options: CreateBrokerOptions): Broker {
  const address = options.address?.trim() || undefined;
  const directory = (options.registry as { directory?: unknown }).directory;
  switch (kind) {
    case 'memory':
      return new MemoryBroker({ logger: options.logger });
    case 'http':
      return new HttpBroker({
        registry: options.registry,
        address,
        advertise: options.advertiseHost,
        // The local registry's directory keeps durable subscriptions' messages (broker.db).
        durableDirectory: typeof directory === 'string' ? directory : undefined,
        durable: options.durable,
        secret: options.secret,
        secretFile: options.secretFile,
        secretDirectory: options.secretDirectory,
        stats: options.stats,
        workloadTls: options.workloadTls,
        logger: options.logger,
      });
    case 'nats':
      if (!address) throw new SchemaOptionError('broker_address', 'broker nats: an address is required ({broker_address} host:port)');
      return new NatsBroker({ address, tls: options.tls, durable: options.durable, stats: options.stats, logger: options.logger });
    default:
      throw new Error(`unknown broker "${kind}" (use ${BROKER_KINDS.join(', ')})`);
  }
}
