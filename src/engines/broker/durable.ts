/**
 * Durable (at-least-once) subscriptions, shared by the backends that have them (nats: JetStream;
 * http: a SQLite outbox beside the local registry): the options and their checks, the retry
 * backoff, the dead-letter topic, the message id header, and the per-topic and per-consumer stats.
 *
 * The contract: a durable subscription's handler returning acknowledges the message; a throw or
 * rejection is a nack, and the message comes again after a backoff (doubling from 100 ms, at most
 * the ack wait); a delivery neither acknowledged nor refused within the ack wait (the subscriber
 * hung or died) comes again too. Each delivery carries the message id (`Mesh-Id`, the same on
 * every attempt) and its delivery count. After maxDeliver attempts the message is published to the
 * dead-letter topic `<topic><dlqSuffix>` (headers kept, plus Mesh-Dlq-Topic, Mesh-Dlq-Consumer,
 * Mesh-Dlq-Deliveries and Mesh-Dlq-Error) and acknowledged.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Message, MessageHandler, SubscribeOptions } from './broker.js';
import { declareStats, type FamilyStats, type StatsStore } from '../../base/stats/store.js';

/** The message id header: set by the publisher (a random UUID when absent), kept on redelivery. */
export const ID_HEADER = 'Mesh-Id';
/** Headers added to a message moved to the dead-letter topic. */
export const DLQ_HEADERS = {
  topic: 'Mesh-Dlq-Topic',
  consumer: 'Mesh-Dlq-Consumer',
  deliveries: 'Mesh-Dlq-Deliveries',
  error: 'Mesh-Dlq-Error',
} as const;

/** Set on a replayed dead letter (a number): a fresh de-duplication id for the broker, the same Mesh-Id. */
export const REPLAY_HEADER = 'Mesh-Replay';
/** The consumer that keeps a topic's dead letters (embedded broker) until they are replayed. */
export const DLQ_KEEPER = 'dlq';

/** A dead letter as published again to its topic: the Mesh-Dlq-* headers dropped, Mesh-Replay set. */
export function replayed(message: Message): Message {
  const header: Record<string, string> = {};
  const dlq = new Set<string>(Object.values(DLQ_HEADERS));
  for (const [k, v] of Object.entries(message.header)) if (!dlq.has(k)) header[k] = v;
  header[REPLAY_HEADER] = String(Date.now());
  return { header, body: message.body };
}

/** Broker-wide defaults of durable subscriptions (flags --broker_max_deliver and the like). */
export interface DurableDefaults {
  /** Attempts before dead-lettering; default 5. */
  maxDeliver: number;
  /** Redelivery after this without an ack; default 30 s. */
  ackWaitMs: number;
  /** Dead-letter topic = topic + this; default `.dlq`. */
  dlqSuffix: string;
  /** Stored messages older than this are dropped (0: no limit); default 0. */
  maxAgeMs: number;
  /** Stored bytes per topic before the oldest are dropped (0: no limit); default 0. */
  maxBytes: number;
  /** A consumer name no subscriber used for this long is removed with what it kept (0: never); default 24 h. */
  inactiveThresholdMs: number;
  /** Most durable consumer names per topic; a subscription with a new name over it is refused. Default 1000. */
  maxConsumers: number;
}

export const DURABLE_DEFAULTS: Readonly<DurableDefaults> = Object.freeze({
  maxDeliver: 5,
  ackWaitMs: 30_000,
  dlqSuffix: '.dlq',
  maxAgeMs: 0,
  maxBytes: 0,
  inactiveThresholdMs: 24 * 3_600_000,
  maxConsumers: 1000,
});

/** A durable subscription's settings, checked. */
export interface DurableSettings {
  name: string;
  maxDeliver: number;
  ackWaitMs: number;
}

/** Fills the defaults and checks a durable name, maxDeliver and ackWaitMs; undefined for a plain subscription. */
export function durableSettings(options: SubscribeOptions, defaults: DurableDefaults): DurableSettings | undefined {
  const { durable, maxDeliver, ackWaitMs } = options;
  if (durable === undefined) {
    if (maxDeliver !== undefined || ackWaitMs !== undefined) throw new TypeError('maxDeliver and ackWaitMs apply to durable subscriptions only (set durable)');
    return undefined;
  }
  if (typeof durable !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(durable)) {
    throw new TypeError(`durable "${String(durable)}": must be 1 to 64 letters, digits, '-' or '_'`);
  }
  const md = maxDeliver ?? defaults.maxDeliver;
  if (!Number.isInteger(md) || md < 1 || md > 1000) throw new TypeError(`maxDeliver ${String(maxDeliver)}: must be an integer from 1 to 1000`);
  const aw = ackWaitMs ?? defaults.ackWaitMs;
  if (typeof aw !== 'number' || !Number.isFinite(aw) || aw < 100 || aw > 3_600_000) throw new TypeError(`ackWaitMs ${String(ackWaitMs)}: must be from 100 ms to 1 h`);
  return { name: durable, maxDeliver: md, ackWaitMs: aw };
}

/** Checks broker-wide defaults (from flags or options); throws naming the bad one. */
export function checkDurableDefaults(d: Partial<DurableDefaults> | undefined): DurableDefaults {
  const out = { ...DURABLE_DEFAULTS, ...stripUndefined(d ?? {}) };
  durableSettings({ durable: 'check', maxDeliver: out.maxDeliver, ackWaitMs: out.ackWaitMs }, out);
  if (typeof out.dlqSuffix !== 'string' || out.dlqSuffix === '' || /[\s*>]/.test(out.dlqSuffix)) throw new TypeError(`dlq suffix "${String(out.dlqSuffix)}": must be non-empty, without whitespace, '*' or '>'`);
  if (!(out.maxAgeMs >= 0)) throw new TypeError('stream max age: must be 0 or positive');
  if (!(out.maxBytes >= 0)) throw new TypeError('stream max bytes: must be 0 or positive');
  if (!(out.inactiveThresholdMs === 0 || (out.inactiveThresholdMs >= 1000 && Number.isFinite(out.inactiveThresholdMs)))) throw new TypeError('consumer inactive threshold: must be 0 (never) or from 1s');
  if (!Number.isInteger(out.maxConsumers) || out.maxConsumers < 1 || out.maxConsumers > 100_000) throw new TypeError('max consumers: must be an integer from 1 to 100000');
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** A subscription with a new durable name to a topic that has maxConsumers of them already. */
export function tooManyConsumers(topic: string, max: number): Error {
  return new DurableLimitError(`topic "${topic}" has ${max} durable consumer names, the most allowed (--broker_max_consumers): remove unused ones with mesh consumers rm ${topic} NAME`);
}

/** A durable subscription refused by a bound (the number of consumer names of a topic). */
export class DurableLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DurableLimitError';
  }
}

/** Wait before redelivering a nacked message: 100 ms doubling per attempt, capped by the ack wait. */
export function nackDelayMs(deliveryCount: number, ackWaitMs: number): number {
  return Math.min(100 * 2 ** Math.min(Math.max(deliveryCount - 1, 0), 20), ackWaitMs);
}

/** The message id of a header: `Mesh-Id` in any letter case. */
export function messageId(header: Record<string, string>): string | undefined {
  const exact = header[ID_HEADER];
  if (exact) return exact;
  for (const [k, v] of Object.entries(header)) if (v && k.toLowerCase() === 'mesh-id') return v;
  return undefined;
}

/** The message's id header, a new UUID when absent: returns the header to publish. */
export function withMessageId(header: Record<string, string> | undefined): { header: Record<string, string>; id: string } {
  const h = { ...(header ?? {}) };
  let id = messageId(h);
  if (!id) h[ID_HEADER] = id = randomUUID();
  return { header: h, id };
}

/** The dead-letter copy of a message. */
export function deadLetter(message: Message, topic: string, consumer: string, deliveries: number, error: string): Message {
  const header = { ...message.header };
  header[DLQ_HEADERS.topic] = topic;
  header[DLQ_HEADERS.consumer] = consumer;
  header[DLQ_HEADERS.deliveries] = String(deliveries);
  header[DLQ_HEADERS.error] = error.replace(/[\r\n]+/g, ' ').slice(0, 512);
  return { header, body: message.body };
}

/** Runs a durable handler: resolves undefined on ack, the error text on nack. */
export async function runDurable(handler: MessageHandler, message: Message, topic: string): Promise<string | undefined> {
  try {
    await handler(message, topic);
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message || err.name : String(err);
  }
}

/** Most distinct topics and consumers with stats of their own; the rest count under `other`. */
const MAX_STAT_NAMES = 200;

/** A name as one dotted stats segment: short safe names as they are, others cut and hashed. */
export function statName(name: string): string {
  const safe = name.replace(/[^A-Za-z0-9_-]/g, '_');
  if (safe === name && name.length <= 48) return name;
  return `${safe.slice(0, 32)}_${createHash('sha256').update(name).digest('hex').slice(0, 8)}`;
}

/** `broker.topic.<topic>.*`; dropped: stored messages dropped over the byte budget (--broker_stream_max_bytes; embedded broker). */
export const TOPIC_STATS = {
  counters: { published: 'published', dead_lettered: 'dead_lettered', dropped: 'dropped' },
} as const;

/** `broker.consumer.<name>.*` */
export const CONSUMER_STATS = {
  counters: { delivered: 'delivered', acked: 'acked', redelivered: 'redelivered', dead_lettered: 'dead_lettered' },
  gauges: { pending: 'pending' },
} as const;

export type TopicStats = FamilyStats<typeof TOPIC_STATS>;
export type ConsumerStats = FamilyStats<typeof CONSUMER_STATS>;

/**
 * Durable stats: `broker.topic.<topic>.published|dead_lettered|dropped` and
 * `broker.consumer.<name>.delivered|acked|redelivered|dead_lettered|pending`; names go through
 * statName() and at most MAX_STAT_NAMES of each get their own (then `other`).
 */
export class DurableStats {
  private readonly topics = new Map<string, TopicStats>();
  private readonly consumers = new Map<string, ConsumerStats>();

  constructor(private readonly store?: StatsStore) {}

  /** Whether there is a stats store to count into. */
  get enabled(): boolean {
    return this.store !== undefined;
  }

  topic(topic: string): TopicStats | undefined {
    const store = this.store;
    if (!store) return undefined;
    let t = this.topics.get(topic);
    if (!t) {
      const name = this.topics.size < MAX_STAT_NAMES ? statName(topic) : 'other';
      t = declareStats(store.scope(`broker.topic.${name}.`), TOPIC_STATS);
      if (this.topics.size < MAX_STAT_NAMES) this.topics.set(topic, t);
    }
    return t;
  }

  consumer(consumer: string): ConsumerStats | undefined {
    const store = this.store;
    if (!store) return undefined;
    let c = this.consumers.get(consumer);
    if (!c) {
      const name = this.consumers.size < MAX_STAT_NAMES ? statName(consumer) : 'other';
      c = declareStats(store.scope(`broker.consumer.${name}.`), CONSUMER_STATS);
      if (this.consumers.size < MAX_STAT_NAMES) this.consumers.set(consumer, c);
    }
    return c;
  }
}
