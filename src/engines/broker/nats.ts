/**
 * NATS broker (client `nats` v2): topics are subjects, queue groups are NATS queue groups, message
 * headers travel as NATS headers. The client reconnects forever after a server restart and resumes
 * its subscriptions. Publishing while disconnected rejects with BrokerUnavailableError: the client
 * library would otherwise buffer the message silently until it reconnects.
 *
 * NATS header limits apply: keys are printable ASCII without ':', values may not hold CR or LF and
 * lose leading and trailing whitespace; header and body together must fit the server's max_payload
 * (1 MiB by default).
 */
import { createRequire } from 'node:module';
import type { Msg, NatsConnection, NatsError } from 'nats';

// Loaded only by a process that uses NATS, so short CLI commands don't pay for it.
type NatsModule = typeof import('nats');
let natsModule: NatsModule | undefined;
const nats = (): NatsModule => (natsModule ??= createRequire(import.meta.url)('nats') as NatsModule);
import type pino from 'pino';
import { Logging } from '../../base/util/log.js';
import { withTimeout } from '../../base/util/timeout.js';
import { parseEngineEndpoint, readEngineTls, sharedCredentials, type EngineCredentials, type EngineTls, type EngineTlsFiles } from '../../base/util/engine-access.js';
import {
  BrokerUnavailableError,
  type Broker,
  type ConsumerInfo,
  type Message,
  type MessageHandler,
  type SubscribeOptions,
  type Subscription,
} from './broker.js';
import { checkMessage, invokeHandler } from './memory.js';
import { checkQueue, checkTopic } from './names.js';
import { checkDurableDefaults, DurableStats, durableSettings, REPLAY_HEADER, withMessageId, type DurableDefaults } from './durable.js';
import { JetStreamTopics } from './nats-jetstream.js';
import type { StatsStore } from '../../base/stats/store.js';

export interface NatsBrokerOptions {
  /**
   * Server address(es), several separated by commas or as an array: "host:port",
   * "nats://[user:password@]host:port", or "tls://[user:password@]host:port" to require TLS.
   */
  address: string | string[];
  /** TLS files (--broker_tls_*): TLS is then required; a CA file replaces the system's roots. */
  tls?: EngineTlsFiles;
  /** Connection name shown by the server. */
  name?: string;
  /** Wait between reconnect attempts; default 1 s. */
  reconnectTimeWaitMs?: number;
  /** Bound on the first connection and on confirming a subscription; default 5 s. */
  timeoutMs?: number;
  /** Durable subscriptions (JetStream): max deliver, ack wait, dead-letter suffix, stream limits. */
  durable?: Partial<DurableDefaults>;
  /** Stats of durable topics and consumers (src/engines/broker/durable.ts). */
  stats?: StatsStore;
  logger?: pino.Logger;
}


function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Rejects after ms; the timer never holds the process open. */

export class NatsBroker implements Broker {
  readonly name = 'nats';
  private readonly servers: string[];
  private readonly credentials?: EngineCredentials;
  private readonly tls?: EngineTls;
  private readonly connName?: string;
  private readonly reconnectTimeWaitMs: number;
  private readonly timeoutMs: number;
  private readonly logger: pino.Logger;
  private nc?: NatsConnection;
  private connecting?: Promise<NatsConnection>;
  /** Tracked from the client's status events. */
  private up = false;
  private closed = false;
  private readonly jetstream: JetStreamTopics;
  private readonly durable: DurableDefaults;

  constructor(options: NatsBrokerOptions) {
    const list = Array.isArray(options?.address) ? options.address : String(options?.address ?? '').split(',');
    const endpoints = list
      .map((s) => s.trim())
      .filter((s) => s !== '')
      .map((s) => parseEngineEndpoint(s, { scheme: 'nats', port: 4222 }, 'nats broker'));
    if (endpoints.length === 0) throw new Error('nats broker: a server address is required (host:port)');
    for (const e of endpoints) {
      if (e.scheme !== 'nats' && e.scheme !== 'tls') throw new Error(`nats broker: address scheme ${e.scheme}:// is not nats:// or tls://`);
    }
    this.servers = endpoints.map((e) => e.hostPort);
    this.credentials = sharedCredentials(endpoints, 'nats broker');
    const files = readEngineTls('broker_tls', options.tls);
    // tls:// or any TLS file: TLS is required (the client refuses a server that does not offer it).
    this.tls = files ?? (endpoints.some((e) => e.scheme === 'tls') ? {} : undefined);
    this.connName = options.name;
    this.reconnectTimeWaitMs = options.reconnectTimeWaitMs ?? 1000;
    this.timeoutMs = options.timeoutMs ?? 5000;
    // The runtime passes its logger; a broker built on its own logs to stderr at info.
    this.logger = options.logger ?? new Logging().get('broker');
    this.durable = checkDurableDefaults(options.durable);
    this.jetstream = new JetStreamTopics({
      nats,
      connection: () => this.ensure(),
      defaults: this.durable,
      stats: new DurableStats(options.stats),
      logger: this.logger,
      timeoutMs: this.timeoutMs,
    });
  }

  /** True while the client holds a live connection to a server. */
  get connected(): boolean {
    const nc = this.nc;
    if (!nc || nc.isClosed() || !this.up) return false;
    // The protocol handler flips this as soon as the socket closes, before the status event is
    // delivered to our iterator; it is not part of the typed API, so use it only when present.
    const protocol = (nc as unknown as { protocol?: { connected?: unknown } }).protocol;
    return typeof protocol?.connected === 'boolean' ? protocol.connected : true;
  }

  async connect(): Promise<void> {
    await this.ensure();
  }

  private ensure(): Promise<NatsConnection> {
    if (this.closed) return Promise.reject(new BrokerUnavailableError('nats broker: closed'));
    if (this.nc && !this.nc.isClosed()) return Promise.resolve(this.nc);
    if (!this.connecting) {
      this.connecting = this.open().finally(() => {
        this.connecting = undefined;
      });
    }
    return this.connecting;
  }

  private async open(): Promise<NatsConnection> {
    let nc: NatsConnection;
    try {
      nc = await nats().connect({
        servers: this.servers,
        name: this.connName,
        user: this.credentials?.username,
        pass: this.credentials?.password,
        tls: this.tls ? { ca: this.tls.ca?.toString(), cert: this.tls.cert?.toString(), key: this.tls.key?.toString() } : undefined,
        reconnect: true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: this.reconnectTimeWaitMs,
        timeout: this.timeoutMs,
        pingInterval: 30_000,
      });
    } catch (err) {
      // A server that wants a client certificate closes the handshake without a word: the client sees a timeout.
      const hint = this.tls && !this.tls.cert && /TIMEOUT/.test(errorText(err)) ? ' (a server that requires client certificates needs --broker_tls_cert_file and --broker_tls_key_file)' : '';
      throw new BrokerUnavailableError(`nats broker: cannot connect to ${this.servers.join(',')}: ${errorText(err)}${hint}`);
    }
    if (this.closed) {
      await nc.close().catch(() => undefined);
      throw new BrokerUnavailableError('nats broker: closed');
    }
    this.nc = nc;
    this.up = true;
    void this.watchStatus(nc);
    void nc.closed().then((err) => {
      if (this.nc === nc) {
        this.nc = undefined;
        this.up = false;
      }
      if (!this.closed) this.logger.error({ error: err ? errorText(err) : undefined }, 'nats broker: connection closed');
    });
    return nc;
  }

  private async watchStatus(nc: NatsConnection): Promise<void> {
    try {
      for await (const s of nc.status()) {
        if (this.nc !== nc) continue;
        switch (s.type) {
          case nats().Events.Disconnect:
            this.up = false;
            if (!this.closed) this.logger.warn({ server: String(s.data) }, 'nats broker: disconnected, reconnecting');
            break;
          case nats().DebugEvents.Reconnecting:
            this.up = false;
            break;
          case nats().Events.Reconnect:
            this.up = true;
            this.logger.info({ server: String(s.data) }, 'nats broker: reconnected');
            break;
          case nats().Events.Error:
            this.logger.warn({ error: String(s.data) }, 'nats broker: async error from the server');
            break;
          default:
            break;
        }
      }
    } catch {
      // the iterator ends with the connection
    }
  }

  async publish(topic: string, message: Message): Promise<void> {
    checkTopic(topic);
    checkMessage(message);
    const nc = await this.ensure();
    if (!this.connected) {
      throw new BrokerUnavailableError(`nats broker: not connected to ${this.servers.join(',')} (reconnecting)`);
    }
    // A topic with a stream (durable subscribers) goes through JetStream: stored, then resolved.
    const stream = await this.jetstream.streamOf(topic);
    let header = message.header ?? {};
    let id: string | undefined;
    if (stream) ({ header, id } = withMessageId(header));
    let h: ReturnType<NatsModule['headers']> | undefined;
    const entries = Object.entries(header);
    if (entries.length > 0) {
      h = nats().headers();
      try {
        for (const [k, v] of entries) h.set(k, v);
      } catch (err) {
        throw new TypeError(`nats broker: message header: ${errorText(err)}`);
      }
    }
    // A replayed dead letter keeps its Mesh-Id but must not be dropped as a repeat by JetStream.
    if (stream) return this.jetstream.publish(topic, message.body, h!, header[REPLAY_HEADER] ? `${id!}:replay:${header[REPLAY_HEADER]}` : id!);
    try {
      nc.publish(topic, message.body, h ? { headers: h } : undefined);
    } catch (err) {
      if (err instanceof nats().NatsError && err.code === nats().ErrorCode.MaxPayloadExceeded) {
        throw new Error(`nats broker: message of ${message.body.byteLength} bytes (plus header) exceeds the server's max_payload`);
      }
      if (err instanceof nats().NatsError && (err.code === nats().ErrorCode.ConnectionClosed || err.code === nats().ErrorCode.ConnectionDraining)) {
        throw new BrokerUnavailableError(`nats broker: ${err.message}`);
      }
      throw err;
    }
  }

  async subscribe(topic: string, handler: MessageHandler, options: SubscribeOptions = {}): Promise<Subscription> {
    checkTopic(topic);
    checkQueue(options.queue);
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    const durable = durableSettings(options, this.durable);
    if (durable) return this.jetstream.subscribe(topic, handler, durable, options.queue);
    const nc = await this.ensure();
    const queue = options.queue;
    const sub = nc.subscribe(topic, {
      queue,
      callback: (err: NatsError | null, msg: Msg) => {
        if (err) {
          this.logger.warn({ topic, queue, error: errorText(err) }, 'nats broker: subscription error');
          return;
        }
        const header: Record<string, string> = {};
        if (msg.headers) for (const [k, values] of msg.headers) header[k] = values.join(', ');
        const message: Message = { header, body: msg.data.slice() };
        void invokeHandler(this.logger, handler, message, topic, queue);
      },
    });
    // Make sure the server has the subscription before we say it exists, so a publish that
    // follows (from any connection) reaches it. While disconnected it is sent on reconnect.
    if (this.connected) {
      await withTimeout(nc.flush(), this.timeoutMs, `nats broker: confirming subscription: timed out after ${this.timeoutMs} ms`).catch((err: unknown) => {
        this.logger.warn({ topic, queue, error: errorText(err) }, 'nats broker: subscription not confirmed yet');
      });
    }
    let active = true;
    return {
      topic,
      queue,
      unsubscribe: async () => {
        if (!active) return;
        active = false;
        if (!sub.isClosed()) sub.unsubscribe();
      },
    };
  }

  async listDeadLetters(topic: string, limit: number): Promise<Message[]> {
    checkTopic(topic);
    return (await this.jetstream.deadLetters(topic, limit)).map((d) => d.message);
  }

  async replayDeadLetters(topic: string, limit: number): Promise<number> {
    checkTopic(topic);
    return this.jetstream.replayDeadLetters(topic, limit, (t, m) => this.publish(t, m));
  }

  async listConsumers(topic: string): Promise<ConsumerInfo[]> {
    checkTopic(topic);
    return this.jetstream.consumers(topic);
  }

  async removeConsumer(topic: string, name: string): Promise<boolean> {
    checkTopic(topic);
    return this.jetstream.removeConsumer(topic, name);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.jetstream.close();
    const nc = this.nc ?? (await this.connecting?.catch(() => undefined));
    this.nc = undefined;
    this.up = false;
    if (nc && !nc.isClosed()) await nc.close().catch(() => undefined);
  }
}
