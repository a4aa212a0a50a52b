/**
 * In-process broker: publish and subscribe inside one process. Queue groups get each message once
 * (round robin over the group's members); subscribers without a queue all get every message.
 * Handlers run after publish returns (on a microtask); their errors are logged, never thrown.
 */
import type pino from 'pino';
import { Logging } from '../../base/util/log.js';
import {
  BrokerUnavailableError,
  type Broker,
  type Message,
  type MessageHandler,
  type SubscribeOptions,
  type Subscription,
} from './broker.js';
import { checkQueue, checkTopic } from './names.js';

export interface MemoryBrokerOptions {
  /** Logger for handler failures; default: a 'broker' logger of its own. */
  logger?: pino.Logger;
}

interface MemorySub {
  topic: string;
  queue?: string;
  handler: MessageHandler;
  active: boolean;
}


/** Validates a message: header a map of strings, body bytes. */
export function checkMessage(message: Message): void {
  if (!message || typeof message !== 'object') throw new TypeError('message: must be an object');
  if (!(message.body instanceof Uint8Array)) throw new TypeError('message.body: must be a Uint8Array');
  const header = message.header ?? {};
  if (typeof header !== 'object' || Array.isArray(header)) throw new TypeError('message.header: must be an object');
  for (const [k, v] of Object.entries(header)) {
    if (typeof v !== 'string') throw new TypeError(`message.header["${k}"]: must be a string`);
  }
}

/** Calls a handler; a throw or rejection is logged and swallowed. */
export async function invokeHandler(
  logger: pino.Logger,
  handler: MessageHandler,
  message: Message,
  topic: string,
  queue?: string,
): Promise<void> {
  try {
    await handler(message, topic);
  } catch (err) {
    logger.error({ err, topic, queue }, 'broker subscriber handler failed');
  }
}

export class MemoryBroker implements Broker {
  readonly name = 'memory';
  private readonly logger: pino.Logger;
  /** Subscriptions per topic: a Set, so subscribing and unsubscribing are O(1) whatever their number. */
  private readonly subs = new Map<string, Set<MemorySub>>();
  /** Round-robin cursor per "topic\0queue". */
  private readonly cursors = new Map<string, number>();
  private closed = false;

  constructor(options: MemoryBrokerOptions = {}) {
    // The runtime passes its logger; a broker built on its own logs to stderr at info.
    this.logger = options.logger ?? new Logging().get('broker');
  }

  async connect(): Promise<void> {
    if (this.closed) throw new BrokerUnavailableError('memory broker: closed');
  }

  async publish(topic: string, message: Message): Promise<void> {
    checkTopic(topic);
    checkMessage(message);
    if (this.closed) throw new BrokerUnavailableError('memory broker: closed');
    const list = this.subs.get(topic);
    if (!list || list.size === 0) return;
    const targets: MemorySub[] = [];
    const groups = new Map<string, MemorySub[]>();
    for (const sub of list) {
      if (sub.queue === undefined) targets.push(sub);
      else {
        let g = groups.get(sub.queue);
        if (!g) groups.set(sub.queue, (g = []));
        g.push(sub);
      }
    }
    for (const [queue, members] of groups) {
      const key = `${topic}\0${queue}`;
      const cursor = this.cursors.get(key) ?? 0;
      targets.push(members[cursor % members.length]!);
      this.cursors.set(key, (cursor + 1) % members.length);
    }
    for (const sub of targets) {
      // Each subscriber gets its own copy, as it would from a real broker.
      // new Uint8Array(x) copies; a Buffer body's slice() would be a view of the same bytes.
      const copy: Message = { header: { ...(message.header ?? {}) }, body: new Uint8Array(message.body) };
      queueMicrotask(() => {
        if (sub.active) void invokeHandler(this.logger, sub.handler, copy, topic, sub.queue);
      });
    }
  }

  async subscribe(topic: string, handler: MessageHandler, options: SubscribeOptions = {}): Promise<Subscription> {
    checkTopic(topic);
    checkQueue(options.queue);
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    if (options.durable !== undefined) throw new TypeError('memory broker: durable subscriptions need the nats or http broker');
    if (this.closed) throw new BrokerUnavailableError('memory broker: closed');
    const sub: MemorySub = { topic, queue: options.queue, handler, active: true };
    let list = this.subs.get(topic);
    if (!list) this.subs.set(topic, (list = new Set()));
    list.add(sub);
    return {
      topic,
      queue: options.queue,
      unsubscribe: async () => this.remove(sub),
    };
  }

  private remove(sub: MemorySub): void {
    if (!sub.active) return;
    sub.active = false;
    const list = this.subs.get(sub.topic);
    if (!list) return;
    list.delete(sub);
    if (list.size === 0) this.subs.delete(sub.topic);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const list of this.subs.values()) for (const sub of list) sub.active = false;
    this.subs.clear();
    this.cursors.clear();
  }
}
