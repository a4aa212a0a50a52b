/**
 * The http broker (the embedded default, after go-micro's), composed of its parts in this folder:
 * wire.ts (the delivery wire), receiver.ts (the delivery endpoint), subscriptions.ts (this
 * process's subscriptions and their registry nodes), routes.ts (subscriber lists per topic) and
 * sender.ts (deliveries to endpoints). How it works: a subscribing process serves one HTTP
 * endpoint and registers its subscriptions in the registry as service `topic:<topic>`, version =
 * the queue name (or `broadcast`), with a TTL it refreshes: one node per topic and queue group in
 * each process, whatever the number of the process's subscriptions to it (the node stands for all
 * of them), so a subscription after the first one to a topic is O(1) and writes nothing to the
 * registry. A publisher looks the topic up and POSTs the message to every broadcast node (the
 * process hands it to each of its subscriptions there) and to one node per queue group (the
 * process hands it to one of its members there, round robin).
 *
 * Delivery wire (one request per subscriber, or per subscriber endpoint, see below):
 *
 *   POST /_mesh/broker?topic=<topic>&id=<node id>[&id=<another node id>...]
 *   Content-Type: application/octet-stream
 *   Mesh-Broker-Header: <the message header as a JSON object of strings, non-ASCII \u-escaped>
 *   Mesh-Broker-Secret: <the mesh's delivery secret, secret.ts>
 *   <body: the message bytes, raw>
 *
 * Answers: 202 accepted (the handlers run after the answer), 401 no secret, 403 another secret
 * (both before anything else is looked at), 400 bad input, 404 unknown path or
 * subscription, 405 not POST, 413 body or header too large; errors are MeshError JSON bodies.
 * Delivery is at most once: no acknowledgement of the handler, no retry except that a queue group
 * message that could not be delivered to one node is tried on another node of the group.
 *
 * Batches: a subscription registered with node metadata `batch: "1"` is served by an endpoint that
 * takes several `id`s in one request, and the message goes to each of them. A publisher sends one
 * request per such endpoint for all its broadcast subscriptions to the topic (queue group
 * deliveries stay one request per node, for the retry). When some of the ids are unknown, the
 * others still get the message and the answer is 404 with `Mesh-Broker-Missing: <id>,<id>...`.
 * Nodes without the metadata (older subscribers) get one request each, with one `id`.
 *
 * Publishers keep each topic's subscriber list (and the delivery URLs built from it) instead of
 * reading the registry per message: a registry watch drops a topic's list on any change to
 * `topic:<topic>`, and a list is read again after lookupCacheMs in any case. A subscriber another
 * process adds or removes is seen within the registry's watch latency (the local registry polls
 * every 50 ms); this process's own subscribe and unsubscribe are seen at once.
 */
import type pino from 'pino';
import { Logging } from '../../../base/util/log.js';
import { formatAddress, parseAddress } from '../../../base/util/address.js';
import type { Registry } from '../../registry/registry.js';
import {
  BrokerUnavailableError,
  type Broker,
  type ConsumerInfo,
  type Message,
  type MessageHandler,
  type SubscribeOptions,
  type Subscription,
} from '../broker.js';
import { checkMessage } from '../memory.js';
import { checkQueue, checkTopic } from '../names.js';
import { Receiver } from './receiver.js';
import { RouteCache } from './routes.js';
import { Sender } from './sender.js';
import { Subscriptions } from './subscriptions.js';
import { decodeHeader, deliveryTo, encodeHeader, MAX_HEADER_BYTES } from './wire.js';
import { Outbox } from './outbox.js';
import { checkDurableDefaults, DurableStats, durableSettings, type DurableDefaults } from '../durable.js';
import { StatsStore } from '../../../base/stats/store.js';
import { loadSecret } from './secret.js';
import type { WorkloadTls } from '../../../base/mtls/workload-tls.js';
import { mtlsClientStats } from '../../../base/mtls/connector.js';

export interface HttpBrokerOptions {
  registry: Registry;
  /** Listen host[:port] of the subscriber endpoint; default 127.0.0.1:0 (a free port). */
  address?: string;
  /** --advertise forms (src/base/util/address.ts) registered for subscribers; default the listen host (the first external IPv4 for 0.0.0.0/::) and port. */
  advertise?: string;
  /** Registration TTL of each subscription; default 30 s. */
  ttlMs?: number;
  /** How often registrations are refreshed; default 10 s. */
  refreshMs?: number;
  /** Bound on one delivery (connect, send, answer); default 5 s. */
  deliveryTimeoutMs?: number;
  /** Largest body published or accepted; default 16 MiB. */
  maxMessageBytes?: number;
  /**
   * How long a publisher uses a topic's subscriber list before reading the registry again; a
   * registry watch drops it sooner on any change. Default 5 s; 0 reads the registry per message.
   */
  lookupCacheMs?: number;
  /**
   * Durable subscriptions: the directory of their outbox (`broker.db`, src/engines/broker/http/outbox.ts),
   * the local registry's; without it a durable subscription is refused.
   */
  durableDirectory?: string;
  /** Durable subscriptions: max deliver, ack wait, dead-letter suffix, max age, max bytes. */
  durable?: Partial<DurableDefaults>;
  /**
   * The delivery secret every delivery carries and the endpoint requires (src/engines/broker/http/secret.ts):
   * `secret` itself, else `secretFile`, else `broker.secret` of `secretDirectory` (default: the
   * registry's directory, for the local registry), made when missing; with none of them, a secret
   * of this process (enough for an in-process registry).
   */
  secret?: string;
  secretFile?: string;
  secretDirectory?: string;
  /** Stats of durable topics and consumers, broker.http.delivery_refused, and the mutual TLS ones (`broker.http.ssl.*` of deliveries, `http.broker.ssl.*` of the endpoint). */
  stats?: StatsStore;
  /**
   * The process's workload certificate (--mtls), read when the endpoint starts listening and at
   * each delivery: deliveries between processes that have one go over mutual TLS (receiver.ts,
   * sender.ts). The delivery secret is checked as without it.
   */
  workloadTls?: () => WorkloadTls | undefined;
  logger?: pino.Logger;
}

export class HttpBroker implements Broker {
  readonly name = 'http';
  private readonly maxMessageBytes: number;
  private readonly logger: pino.Logger;
  private readonly subscriptions: Subscriptions;
  private readonly receiver: Receiver;
  private readonly routes: RouteCache;
  private readonly sender: Sender;
  private listening?: Promise<void>;
  private closing?: Promise<void>;
  private readonly durableDirectory?: string;
  private readonly durable: DurableDefaults;
  private readonly durableStats: DurableStats;
  private outboxInstance?: Outbox;

  constructor(options: HttpBrokerOptions) {
    if (!options || !options.registry) throw new Error('http broker: a registry is required');
    const registry = options.registry;
    const listen = parseAddress(options.address ?? '127.0.0.1:0', { defaultPort: 0, what: 'broker address' });
    const ttlMs = options.ttlMs ?? 30_000;
    const refreshMs = options.refreshMs ?? 10_000;
    const deliveryTimeoutMs = options.deliveryTimeoutMs ?? 5_000;
    this.maxMessageBytes = options.maxMessageBytes ?? 16 * 1024 * 1024;
    const lookupCacheMs = options.lookupCacheMs ?? 5_000;
    if (!(ttlMs > 0)) throw new Error('http broker: ttlMs must be positive');
    if (!(refreshMs > 0)) throw new Error('http broker: refreshMs must be positive');
    if (refreshMs >= ttlMs) throw new Error('http broker: refreshMs must be shorter than ttlMs');
    // The runtime passes its logger; a broker built on its own logs to stderr at info.
    const logger = (this.logger = options.logger ?? new Logging().get('broker'));
    const registryDirectory = (registry as { directory?: unknown }).directory;
    const secret = loadSecret({
      secret: options.secret,
      secretFile: options.secretFile,
      directory: options.secretDirectory ?? (typeof registryDirectory === 'string' ? registryDirectory : undefined),
      logger,
    });
    const tlsStore = options.stats ?? new StatsStore();
    this.subscriptions = new Subscriptions({
      registry,
      ttlMs,
      refreshMs,
      closeTimeoutMs: deliveryTimeoutMs,
      logger,
      endpoint: () => this.receiver.endpoint,
      changed: (topic) => this.routes.invalidate(topic),
    });
    this.receiver = new Receiver({
      listenHost: listen.host,
      listenPort: listen.port,
      advertise: options.advertise,
      maxMessageBytes: this.maxMessageBytes,
      logger,
      subscriptions: this.subscriptions,
      secret,
      refused: options.stats?.counter('broker.http.delivery_refused'),
      workloadTls: options.workloadTls,
      tlsStats: tlsStore.scope('http.broker.'),
    });
    this.durableDirectory = options.durableDirectory;
    this.durable = checkDurableDefaults(options.durable);
    this.durableStats = new DurableStats(options.stats);
    this.routes = new RouteCache({ registry, lookupCacheMs, logger, isLocal: (id) => this.subscriptions.has(id) });
    this.sender = new Sender({
      deliveryTimeoutMs,
      logger,
      secret: secret.value,
      workloadTls: options.workloadTls,
      tlsStats: mtlsClientStats(tlsStore.scope('broker.http.')),
      deliverLocally: (id, topic, headerValue, body) => {
        const local = this.subscriptions.liveGroup(id, topic);
        if (!local) return false;
        this.subscriptions.fanOut([local], topic, decodeHeader(headerValue), new Uint8Array(body.buffer, body.byteOffset, body.byteLength), false);
        return true;
      },
    });
  }

  /** The registered address of this process's subscriber endpoint (after connect). */
  get endpoint(): { address: string; port: number } | undefined {
    const node = this.receiver.endpoint;
    return node ? { ...node } : undefined;
  }

  /** The durable outbox, opened on first use; undefined without a directory. */
  private get outbox(): Outbox | undefined {
    if (!this.durableDirectory) return undefined;
    this.outboxInstance ??= new Outbox({
      directory: this.durableDirectory,
      defaults: this.durable,
      stats: this.durableStats,
      logger: this.logger,
      publish: (topic, message) => this.publish(topic, message),
    });
    return this.outboxInstance;
  }

  async listDeadLetters(topic: string, limit: number): Promise<Message[]> {
    checkTopic(topic);
    return this.durableOutbox().listDeadLetters(topic, limit).map((r) => r.message);
  }

  async replayDeadLetters(topic: string, limit: number): Promise<number> {
    checkTopic(topic);
    return this.durableOutbox().replayDeadLetters(topic, limit);
  }

  async listConsumers(topic: string): Promise<ConsumerInfo[]> {
    checkTopic(topic);
    return this.durableOutbox().listConsumers(topic);
  }

  async removeConsumer(topic: string, name: string): Promise<boolean> {
    checkTopic(topic);
    return this.durableOutbox().removeConsumer(topic, name);
  }

  private durableOutbox(): Outbox {
    if (this.closing) throw new BrokerUnavailableError('http broker: closed');
    const outbox = this.outbox;
    if (!outbox) throw new TypeError('http broker: durable subscriptions and dead letters need the local registry (its directory keeps the messages)');
    return outbox;
  }

  /** Starts the subscriber endpoint; idempotent. Publishing does not need it. */
  connect(): Promise<void> {
    if (this.closing) return Promise.reject(new BrokerUnavailableError('http broker: closed'));
    if (!this.listening) {
      this.listening = this.listen().catch((err: unknown) => {
        this.listening = undefined;
        throw err;
      });
    }
    return this.listening;
  }

  private async listen(): Promise<void> {
    await this.receiver.listen();
    // close() ran while we were starting up: it closes the server after this settles
    if (this.closing) throw new BrokerUnavailableError('http broker: closed');
    const { address, port } = this.receiver.endpoint!;
    this.logger.debug({ address: formatAddress(address, port) }, 'http broker: subscriber endpoint listening');
  }

  async subscribe(topic: string, handler: MessageHandler, options: SubscribeOptions = {}): Promise<Subscription> {
    checkTopic(topic);
    checkQueue(options.queue);
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    const durable = durableSettings(options, this.durable);
    if (durable) {
      return this.durableOutbox().subscribe(topic, handler, durable, options.queue);
    }
    await this.connect();
    return this.subscriptions.add(topic, handler, options.queue);
  }

  async publish(topic: string, message: Message): Promise<void> {
    checkTopic(topic);
    checkMessage(message);
    if (this.closing) throw new BrokerUnavailableError('http broker: closed');
    if (message.body.byteLength > this.maxMessageBytes) {
      throw new Error(`http broker: message body is ${message.body.byteLength} bytes, over the limit of ${this.maxMessageBytes}`);
    }
    // Taken now, as the other brokers do: a caller changing its object later changes nothing.
    let header = { ...(message.header ?? {}) };
    // Stored first for durable consumers (it gets its Mesh-Id there); plain subscribers get it after.
    if (this.durableDirectory) header = this.outbox!.store(topic, header, message.body);
    const headerValue = encodeHeader(header);
    if (headerValue.length > MAX_HEADER_BYTES) {
      throw new Error(`http broker: message header is ${headerValue.length} bytes as JSON, over the limit of ${MAX_HEADER_BYTES}`);
    }
    const route = await this.routes.routeOf(topic);
    if (route.size === 0) return;
    const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
    let tasks: Promise<void>[] | undefined;
    if (route.local.length > 0) {
      const stale = this.subscriptions.handOver(route.local, topic, header, message.body);
      // Registered here but no longer subscribed: as for any other node, the endpoint answers 404.
      for (const node of stale ?? []) (tasks ??= []).push(this.sender.deliverBroadcast(deliveryTo([node], topic), topic, headerValue, body));
    }
    for (const delivery of route.remote) (tasks ??= []).push(this.sender.deliverBroadcast(delivery, topic, headerValue, body));
    for (const group of route.groups) (tasks ??= []).push(this.sender.deliverToGroup(group.queue, group.targets, topic, headerValue, body));
    if (tasks) await Promise.all(tasks);
  }

  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.routes.close();
    await this.subscriptions.close();
    await this.listening?.catch(() => undefined);
    await this.receiver.close();
    await this.sender.close();
    await this.outboxInstance?.close();
  }
}
