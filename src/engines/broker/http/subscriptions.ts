/**
 * The http broker's subscriptions in this process: one registry node per topic and queue group
 * (whatever the number of subscriptions to it), its registration, refresh and deregistration, and
 * handing a message to the handlers (each of a broadcast group's, one of a queue group's, round
 * robin).
 */
import { MTLS_METADATA_KEY } from '../../../base/mtls/workload-tls.js';
import { randomUUID } from 'node:crypto';
import type pino from 'pino';
import type { Node, Registry, Service } from '../../registry/registry.js';
import { BrokerUnavailableError, type Message, type MessageHandler, type Subscription } from '../broker.js';
import { invokeHandler } from '../memory.js';
import { queueVersion, topicService } from './routes.js';
import { BATCH_METADATA, BROADCAST_VERSION, errorText } from './wire.js';

interface HttpSub {
  topic: string;
  queue?: string;
  handler: MessageHandler;
  active: boolean;
  group: SubGroup;
}

/** This process's subscriptions to one topic and queue (or broadcast): one registry node. */
export interface SubGroup {
  /** The registry node id (what deliveries name in `id`). */
  id: string;
  key: string;
  topic: string;
  queue?: string;
  subs: Set<HttpSub>;
  /** The first registration; every subscriber of the group waits for it. */
  registered: Promise<void>;
  /** Round robin over a queue group's members (a Set iterator skips members that left). */
  cursor?: IterableIterator<HttpSub>;
}

/** The next member of a queue group, round robin. */
function nextMember(group: SubGroup): HttpSub | undefined {
  for (let pass = 0; pass < 2; pass++) {
    group.cursor ??= group.subs.values();
    const r = group.cursor.next();
    if (!r.done) return r.value;
    group.cursor = undefined;
  }
  return undefined;
}

export interface SubscriptionsOptions {
  registry: Registry;
  ttlMs: number;
  refreshMs: number;
  /** Bound on deregistering everything at close. */
  closeTimeoutMs: number;
  logger: pino.Logger;
  /** The registered address of the subscriber endpoint (set once it listens). */
  endpoint: () => { address: string; port: number; mtls: boolean } | undefined;
  /** A topic's subscribers changed here (its registry node was added or removed). */
  changed: (topic: string) => void;
}

export class Subscriptions {
  /** This process's subscriptions, by registry node id and by topic and queue. */
  private readonly groups = new Map<string, SubGroup>();
  private readonly groupOf = new Map<string, SubGroup>();
  private refreshTimer?: NodeJS.Timeout;
  private refreshing = false;
  private closed = false;

  constructor(private readonly options: SubscriptionsOptions) {}

  /** Adds a subscription (the endpoint listens already): registers its group's node if it is the first. */
  async add(topic: string, handler: MessageHandler, queue: string | undefined): Promise<Subscription> {
    const key = `${topic}\n${queue ?? ''}`;
    let group = this.groupOf.get(key);
    if (!group) {
      // The first subscription here to this topic and queue: one registry node for all of them.
      const g: SubGroup = { id: `broker-${randomUUID()}`, key, topic, queue, subs: new Set(), registered: Promise.resolve() };
      this.groupOf.set(key, g);
      this.groups.set(g.id, g);
      g.registered = this.options.registry.register(this.serviceOf(g), { ttlMs: this.options.ttlMs }).then(
        () => this.options.changed(topic),
        (err: unknown) => {
          this.dropGroup(g);
          throw new BrokerUnavailableError(`http broker: cannot register subscription to "${topic}": ${errorText(err)}`);
        },
      );
      group = g;
    }
    const sub: HttpSub = { topic, queue, handler, active: true, group };
    group.subs.add(sub);
    try {
      await group.registered;
    } catch (err) {
      sub.active = false;
      group.subs.delete(sub);
      throw err;
    }
    // closed while registering: close() deregisters the group
    if (!sub.active || this.closed) throw new BrokerUnavailableError('http broker: closed');
    this.startRefresh();
    return {
      topic,
      queue,
      unsubscribe: () => this.unsubscribe(sub),
    };
  }

  /** Whether a registry node is a group of this process (whatever its topic). */
  has(id: string): boolean {
    return this.groups.has(id);
  }

  /** A group of this process that takes messages of the topic now. */
  liveGroup(id: string, topic: string): SubGroup | undefined {
    const group = this.groups.get(id);
    return group && group.topic === topic && group.subs.size > 0 ? group : undefined;
  }

  /**
   * Hands a message to the subscriptions of these groups: each of a broadcast group's, one of a
   * queue group's. Each gets its own copy; `owned`: the last one may have the given objects.
   */
  fanOut(groups: SubGroup[], topic: string, header: Record<string, string>, body: Uint8Array, owned: boolean): void {
    const targets: HttpSub[] = [];
    for (const group of groups) {
      if (group.queue !== undefined) {
        const member = nextMember(group);
        if (member) targets.push(member);
      } else for (const sub of group.subs) targets.push(sub);
    }
    const last = targets.length - 1;
    for (let i = 0; i <= last; i++) {
      const sub = targets[i]!;
      if (!sub.active) continue;
      // new Uint8Array(x) copies (Buffer's slice() would not)
      const message: Message = owned && i === last ? { header, body } : { header: { ...header }, body: new Uint8Array(body) };
      void invokeHandler(this.options.logger, sub.handler, message, topic, sub.queue);
    }
  }

  /** Hands a message to this process's broadcast subscriptions, each its own copy; returns the nodes no longer subscribed here. */
  handOver(nodes: Node[], topic: string, header: Record<string, string>, body: Uint8Array): Node[] | undefined {
    let stale: Node[] | undefined;
    const live: SubGroup[] = [];
    for (const node of nodes) {
      const group = this.liveGroup(node.id, topic);
      if (group) live.push(group);
      else (stale ??= []).push(node);
    }
    this.fanOut(live, topic, header, body, false);
    return stale;
  }

  /** Ends every subscription and deregisters their nodes (bounded by closeTimeoutMs). */
  async close(): Promise<void> {
    this.closed = true;
    this.stopRefresh();
    const groups = [...this.groups.values()];
    for (const group of groups) for (const sub of group.subs) sub.active = false;
    this.groups.clear();
    this.groupOf.clear();
    if (this.options.endpoint() && groups.length > 0) {
      const deregister = Promise.allSettled(
        groups.map(async (group) => {
          await group.registered.catch(() => undefined);
          await this.options.registry.deregister(this.serviceOf(group));
        }),
      );
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((r) => (timer = setTimeout(r, this.options.closeTimeoutMs)));
      await Promise.race([deregister, bound]);
      clearTimeout(timer);
    }
  }

  private serviceOf(group: SubGroup): Service {
    const node = this.options.endpoint()!;
    const metadata: Record<string, string> = { broker: 'http', topic: group.topic, [BATCH_METADATA]: '1' };
    // The endpoint serves mutual TLS: publishers deliver to it over mutual TLS.
    if (node.mtls) metadata[MTLS_METADATA_KEY] = 'true';
    if (group.queue !== undefined) metadata.queue = group.queue;
    return {
      name: topicService(group.topic),
      version: group.queue !== undefined ? queueVersion(group.queue) : BROADCAST_VERSION,
      metadata: {},
      endpoints: [],
      nodes: [{ id: group.id, address: node.address, port: node.port, metadata }],
    };
  }

  /** Forgets a group (its node is deregistered by the caller); a later subscription makes a new one. */
  private dropGroup(group: SubGroup): void {
    if (this.groups.get(group.id) === group) this.groups.delete(group.id);
    if (this.groupOf.get(group.key) === group) this.groupOf.delete(group.key);
  }

  private async unsubscribe(sub: HttpSub): Promise<void> {
    if (!sub.active) return;
    sub.active = false;
    const group = sub.group;
    group.subs.delete(sub);
    // Others here still subscribe to it: the registry node stays.
    if (group.subs.size > 0 || this.groups.get(group.id) !== group) return;
    this.dropGroup(group);
    if (this.groups.size === 0) this.stopRefresh();
    this.options.changed(sub.topic);
    try {
      await group.registered.catch(() => undefined);
      await this.options.registry.deregister(this.serviceOf(group));
      this.options.changed(sub.topic);
    } catch (err) {
      // The TTL removes it in the end; deliveries meanwhile get 404 and queue groups try another node.
      this.options.logger.warn({ err, topic: sub.topic }, 'http broker: deregistering a subscription failed');
    }
  }

  private startRefresh(): void {
    if (this.refreshTimer || this.closed) return;
    this.refreshTimer = setInterval(() => void this.refresh(), this.options.refreshMs);
    this.refreshTimer.unref();
  }

  private stopRefresh(): void {
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    this.refreshTimer = undefined;
  }

  private async refresh(): Promise<void> {
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      // One registration per topic and queue group of this process, not one per subscription.
      await Promise.all(
        [...this.groups.values()].map(async (group) => {
          try {
            await group.registered;
            await this.options.registry.register(this.serviceOf(group), { ttlMs: this.options.ttlMs });
            // its last subscription left meanwhile: undo the registration we just refreshed
            if (this.groups.get(group.id) !== group) await this.options.registry.deregister(this.serviceOf(group));
          } catch (err) {
            this.options.logger.warn({ err, topic: group.topic }, 'http broker: refreshing a subscription failed');
          }
        }),
      );
    } finally {
      this.refreshing = false;
    }
  }
}
