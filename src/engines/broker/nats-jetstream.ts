/**
 * Durable topics of the nats broker, on JetStream (the server must run with JetStream enabled,
 * `nats-server -js -sd <dir>`):
 *
 * - One stream per topic, `MESH_<topic>` (a name JetStream accepts: other characters become `_`
 *   and a hash is added), file storage, limits retention with --broker_stream_max_age and
 *   --broker_stream_max_bytes; created by the first durable subscription to the topic (and to its
 *   dead-letter topic) or by a publisher that finds none.
 * - One durable pull consumer per subscription name on the topic's stream: every process that
 *   subscribes with that name shares it (each message goes to one of them), explicit acks, ack
 *   wait as configured; the consumer's own max_deliver is unlimited: this side counts attempts
 *   (delivery count from JetStream) and moves a message to the dead-letter topic, so a message
 *   whose attempts all timed out (the subscriber died each time) is dead-lettered too.
 * - A publish to a topic that has a stream goes through JetStream and resolves once the server
 *   has stored it (its PubAck), with `Mesh-Id` as the de-duplication id; other topics are
 *   published plainly (core NATS, at most once).
 */
import { createHash } from 'node:crypto';
import type { ConsumerMessages, JetStreamClient, JetStreamManager, JsMsg, MsgHdrs, NatsConnection } from 'nats';
import type pino from 'pino';
import { BrokerUnavailableError, type ConsumerInfo, type Message, type MessageHandler, type Subscription } from './broker.js';
import { deadLetter, messageId, nackDelayMs, replayed, runDurable, tooManyConsumers, type DurableDefaults, type DurableSettings, type DurableStats } from './durable.js';

type NatsModule = typeof import('nats');

/** How long "no stream holds this topic" is believed before asking the server again. */
const NO_STREAM_TTL_MS = 1000;
/** Topics whose stream (or lack of one) is remembered; the map is cleared when full. */
const MAX_CACHED_TOPICS = 10_000;
/** Messages a subscription pulls ahead of its handler. */
const PULL_BATCH = 256;
/** Handlers of one subscription running at once. */
const MAX_INFLIGHT = 64;

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The stream of a topic: `MESH_` and the topic, with `.`, `*`, `>` and the like as `_`, and a hash when changed. */
export function streamName(topic: string): string {
  const safe = topic.replace(/[^A-Za-z0-9_-]/g, '_');
  const hash = createHash('sha256').update(topic).digest('hex').slice(0, 8);
  return `MESH_${safe.slice(0, 120)}_${hash}`;
}

export interface JetStreamOptions {
  nats: () => NatsModule;
  connection: () => Promise<NatsConnection>;
  defaults: DurableDefaults;
  stats: DurableStats;
  logger: pino.Logger;
  timeoutMs: number;
}

export class JetStreamTopics {
  /** topic -> its stream name, or the time "none" was learnt. */
  private readonly streams = new Map<string, string | number>();
  private jsm?: Promise<JetStreamManager>;
  private jsmOf?: NatsConnection;
  private unavailableAt = 0;
  /** Running durable subscriptions, stopped by close(). */
  private readonly running = new Set<() => Promise<void>>();

  constructor(private readonly options: JetStreamOptions) {}

  private async manager(): Promise<{ nc: NatsConnection; jsm: JetStreamManager; js: JetStreamClient }> {
    const nc = await this.options.connection();
    if (this.jsmOf !== nc || !this.jsm) {
      this.jsmOf = nc;
      this.jsm = nc.jetstreamManager({ timeout: this.options.timeoutMs }).catch((err: unknown) => {
        this.jsm = undefined;
        throw new BrokerUnavailableError(`nats broker: JetStream is not available (run nats-server with -js): ${errorText(err)}`);
      });
    }
    const jsm = await this.jsm;
    return { nc, jsm, js: nc.jetstream({ timeout: this.options.timeoutMs }) };
  }

  private remember(topic: string, value: string | number): void {
    if (this.streams.size >= MAX_CACHED_TOPICS) this.streams.clear();
    this.streams.set(topic, value);
  }

  /** The stream that stores the topic, or undefined (asked of the server at most once a second). */
  async streamOf(topic: string): Promise<string | undefined> {
    const known = this.streams.get(topic);
    if (typeof known === 'string') return known;
    if (typeof known === 'number' && Date.now() - known < NO_STREAM_TTL_MS) return undefined;
    // A server without JetStream has no streams: plain publishing, asked again now and then.
    if (Date.now() - this.unavailableAt < NO_STREAM_TTL_MS * 5) return undefined;
    let jsm: JetStreamManager;
    try {
      ({ jsm } = await this.manager());
    } catch {
      this.unavailableAt = Date.now();
      return undefined;
    }
    try {
      const name = await jsm.streams.find(topic);
      this.remember(topic, name);
      return name;
    } catch (err) {
      if (/no stream matches subject/i.test(errorText(err))) {
        this.remember(topic, Date.now());
        return undefined;
      }
      throw new BrokerUnavailableError(`nats broker: looking up the stream of "${topic}": ${errorText(err)}`);
    }
  }

  /** Creates (or updates the limits of) the topic's stream. */
  async ensureStream(topic: string): Promise<string> {
    const known = this.streams.get(topic);
    if (typeof known === 'string') return known;
    const { jsm } = await this.manager();
    const n = this.options.nats();
    const { maxAgeMs, maxBytes } = this.options.defaults;
    const name = streamName(topic);
    const config = {
      name,
      subjects: [topic],
      storage: n.StorageType.File,
      retention: n.RetentionPolicy.Limits,
      max_age: maxAgeMs > 0 ? n.nanos(maxAgeMs) : 0,
      max_bytes: maxBytes > 0 ? maxBytes : -1,
      duplicate_window: n.nanos(120_000),
    };
    try {
      await jsm.streams.add(config);
    } catch (err) {
      const text = errorText(err);
      if (/already in use|already exists/i.test(text)) {
        await jsm.streams.update(name, config).catch((e: unknown) => this.options.logger.warn({ topic, error: errorText(e) }, 'nats broker: cannot update stream limits'));
      } else if (/subjects overlap/i.test(text)) {
        // Another stream already takes the topic (made by hand): use it.
        const other = await jsm.streams.find(topic);
        this.remember(topic, other);
        return other;
      } else {
        throw new BrokerUnavailableError(`nats broker: cannot create stream for "${topic}": ${text}`);
      }
    }
    this.remember(topic, name);
    return name;
  }

  /** The dead letters still in `<topic>.dlq`'s stream, oldest first, with their stream sequence. */
  async deadLetters(topic: string, limit: number): Promise<Array<{ seq: number; message: Message }>> {
    const dlqTopic = topic + this.options.defaults.dlqSuffix;
    const stream = await this.streamOf(dlqTopic);
    if (!stream) return [];
    const { jsm } = await this.manager();
    const info = await jsm.streams.info(stream);
    const out: Array<{ seq: number; message: Message }> = [];
    // A stream that never stored a message reports first_seq 0 (and the server refuses seq 0).
    if (info.state.messages === 0) return out;
    // Deleted (replayed) sequences are holes: skip them, within a bound of lookups.
    let budget = limit + 10_000;
    for (let seq = Math.max(info.state.first_seq, 1); seq <= info.state.last_seq && out.length < limit && budget-- > 0; seq++) {
      let m;
      try {
        m = await jsm.streams.getMessage(stream, { seq });
      } catch (err) {
        if (/no message found/i.test(errorText(err))) continue;
        throw new BrokerUnavailableError(`nats broker: reading dead letters of "${topic}": ${errorText(err)}`);
      }
      if (m.subject !== dlqTopic) continue;
      const header: Record<string, string> = {};
      if (m.header) for (const [k, values] of m.header) header[k] = values.join(', ');
      out.push({ seq, message: { header, body: m.data.slice(), id: messageId(header) || `${stream}:${seq}` } });
    }
    return out;
  }

  /** Publishes the dead letters to the topic again (through `publish`), each deleted from the dead-letter stream once published. */
  async replayDeadLetters(topic: string, limit: number, publish: (topic: string, message: Message) => Promise<void>): Promise<number> {
    const dlqStream = await this.streamOf(topic + this.options.defaults.dlqSuffix);
    let n = 0;
    for (const { seq, message } of await this.deadLetters(topic, limit)) {
      await publish(topic, replayed(message));
      const { jsm } = await this.manager();
      await jsm.streams.deleteMessage(dlqStream!, seq, false);
      n++;
    }
    return n;
  }

  private async hasConsumer(jsm: JetStreamManager, stream: string, topic: string, name: string): Promise<boolean> {
    try {
      await jsm.consumers.info(stream, name);
      return true;
    } catch (err) {
      if (/consumer not found/i.test(errorText(err))) return false;
      throw new BrokerUnavailableError(`nats broker: looking up consumer "${name}" of "${topic}": ${errorText(err)}`);
    }
  }

  /** The durable consumers of the topic's stream, by name. */
  async consumers(topic: string): Promise<ConsumerInfo[]> {
    const stream = await this.streamOf(topic);
    if (!stream) return [];
    const { jsm } = await this.manager();
    const out: ConsumerInfo[] = [];
    try {
      for await (const c of jsm.consumers.list(stream)) {
        if (c.config.filter_subject && c.config.filter_subject !== topic) continue;
        // The server's time of the latest delivery or acknowledgement (an ISO time), else its creation.
        const times = [c.delivered?.last_active, c.ack_floor?.last_active].map((t) => (typeof t === 'string' ? Date.parse(t) : NaN)).filter(Number.isFinite);
        out.push({ name: c.name, pending: c.num_pending + c.num_ack_pending, lastActive: times.length > 0 ? Math.max(...times) : Date.parse(c.created) });
      }
    } catch (err) {
      throw new BrokerUnavailableError(`nats broker: listing the consumers of "${topic}": ${errorText(err)}`);
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Deletes a durable consumer of the topic's stream; false when there is none of that name. */
  async removeConsumer(topic: string, name: string): Promise<boolean> {
    const stream = await this.streamOf(topic);
    if (!stream) return false;
    const { jsm } = await this.manager();
    try {
      return await jsm.consumers.delete(stream, name);
    } catch (err) {
      if (/consumer not found/i.test(errorText(err))) return false;
      throw new BrokerUnavailableError(`nats broker: removing consumer "${name}" of "${topic}": ${errorText(err)}`);
    }
  }

  /** Stops every durable subscription (before the connection closes); unacknowledged messages come again later. */
  async close(): Promise<void> {
    await Promise.all([...this.running].map((stop) => stop()));
  }

  /** Publishes through JetStream; resolves once the server stored it. */
  async publish(topic: string, body: Uint8Array, headers: MsgHdrs, id: string): Promise<void> {
    const { js } = await this.manager();
    try {
      await js.publish(topic, body, { headers, msgID: id, timeout: this.options.timeoutMs });
    } catch (err) {
      throw new BrokerUnavailableError(`nats broker: JetStream did not store the message on "${topic}": ${errorText(err)}`);
    }
    this.options.stats.topic(topic)?.published.inc();
  }

  /** A durable subscription: a durable pull consumer of the topic's stream, consumed until unsubscribed. */
  async subscribe(topic: string, handler: MessageHandler, settings: DurableSettings, queue: string | undefined): Promise<Subscription> {
    const n = this.options.nats();
    const stream = await this.ensureStream(topic);
    // The dead-letter topic gets its stream now, so what is dead-lettered is kept.
    const dlqTopic = topic + this.options.defaults.dlqSuffix;
    await this.ensureStream(dlqTopic);
    const { jsm, js } = await this.manager();
    const { inactiveThresholdMs, maxConsumers } = this.options.defaults;
    const config = {
      durable_name: settings.name,
      ack_policy: n.AckPolicy.Explicit,
      ack_wait: n.nanos(settings.ackWaitMs),
      max_deliver: -1,
      deliver_policy: n.DeliverPolicy.All,
      filter_subject: topic,
      max_ack_pending: 1000,
      // The server removes the consumer once no subscriber pulled from it for this long.
      ...(inactiveThresholdMs > 0 ? { inactive_threshold: n.nanos(inactiveThresholdMs) } : {}),
    };
    if (!(await this.hasConsumer(jsm, stream, topic, settings.name))) {
      const count = (await jsm.streams.info(stream)).state.consumer_count;
      if (count >= maxConsumers) throw tooManyConsumers(topic, maxConsumers);
    }
    try {
      await jsm.consumers.add(stream, config);
    } catch (err) {
      if (!/already in use|already exists/i.test(errorText(err))) throw new BrokerUnavailableError(`nats broker: cannot create consumer "${settings.name}" on "${topic}": ${errorText(err)}`);
      const update = { ack_wait: config.ack_wait, max_ack_pending: config.max_ack_pending, ...(config.inactive_threshold ? { inactive_threshold: config.inactive_threshold } : {}) };
      await jsm.consumers.update(stream, settings.name, update).catch((e: unknown) =>
        this.options.logger.warn({ topic, durable: settings.name, error: errorText(e) }, 'nats broker: cannot update consumer'),
      );
    }
    const consumer = await js.consumers.get(stream, settings.name);
    const messages: ConsumerMessages = await consumer.consume({ max_messages: PULL_BATCH });
    const stats = this.options.stats.consumer(settings.name);
    let active = true;
    // Up to MAX_INFLIGHT handlers run at once: a handler that hangs holds one slot, and its
    // message's redelivery (after the ack wait) can still run in another.
    const inflight = new Set<Promise<void>>();
    const loop = (async () => {
      for await (const m of messages) {
        if (!active) {
          m.nak(); // pulled but not handled: to another subscriber now, not after the ack wait
          continue;
        }
        const p = this.handle(m, topic, dlqTopic, handler, settings, stats)
          .catch((err: unknown) => this.options.logger.warn({ topic, durable: settings.name, error: errorText(err) }, 'nats broker: durable delivery failed'))
          .finally(() => inflight.delete(p));
        inflight.add(p);
        if (inflight.size >= MAX_INFLIGHT) await Promise.race(inflight);
      }
    })();
    const unsubscribe = async () => {
      if (!active) return;
      active = false;
      this.running.delete(unsubscribe);
      messages.stop();
      await loop.catch(() => undefined);
    };
    this.running.add(unsubscribe);
    return { topic, queue, durable: settings.name, unsubscribe };
  }

  private async handle(
    m: JsMsg,
    topic: string,
    dlqTopic: string,
    handler: MessageHandler,
    settings: DurableSettings,
    stats: ReturnType<DurableStats['consumer']>,
  ): Promise<void> {
    const header: Record<string, string> = {};
    if (m.headers) for (const [k, values] of m.headers) header[k] = values.join(', ');
    const count = m.info.deliveryCount;
    const message: Message = { header, body: m.data.slice(), id: messageId(header) || `${m.info.stream}:${m.seq}`, deliveryCount: count };
    stats?.delivered.inc();
    if (count > 1) stats?.redelivered.inc();
    stats?.pending.set(m.info.pending);
    if (count > settings.maxDeliver) {
      // Earlier attempts were never answered (the ack wait ran out each time).
      return this.deadLetter(m, message, topic, dlqTopic, settings, count - 1, 'not acknowledged within the ack wait', stats);
    }
    const error = await runDurable(handler, message, topic);
    if (error === undefined) {
      m.ack();
      stats?.acked.inc();
      return;
    }
    this.options.logger.warn({ topic, durable: settings.name, id: message.id, deliveryCount: count, error }, 'nats broker: durable handler failed');
    if (count >= settings.maxDeliver) return this.deadLetter(m, message, topic, dlqTopic, settings, count, error, stats);
    m.nak(nackDelayMs(count, settings.ackWaitMs));
  }

  private async deadLetter(
    m: JsMsg,
    message: Message,
    topic: string,
    dlqTopic: string,
    settings: DurableSettings,
    deliveries: number,
    error: string,
    stats: ReturnType<DurableStats['consumer']>,
  ): Promise<void> {
    const dead = deadLetter(message, topic, settings.name, deliveries, error);
    const n = this.options.nats();
    const h = n.headers();
    for (const [k, v] of Object.entries(dead.header)) h.set(k, v);
    try {
      // The same id per consumer: a retried dead-lettering is stored once.
      await this.publish(dlqTopic, dead.body, h, `${message.id}:${settings.name}`);
    } catch (err) {
      this.options.logger.warn({ topic, durable: settings.name, error: errorText(err) }, 'nats broker: dead-lettering failed, will retry');
      m.nak(nackDelayMs(deliveries, settings.ackWaitMs));
      return;
    }
    m.ack();
    stats?.dead_lettered.inc();
    this.options.stats.topic(topic)?.dead_lettered.inc();
    this.options.logger.warn({ topic, durable: settings.name, id: message.id, deliveries, dlq: dlqTopic }, 'nats broker: message dead-lettered');
  }
}
