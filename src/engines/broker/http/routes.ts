/**
 * The http broker's subscriber routes: where a message to a topic goes (this process's
 * subscriptions, other endpoints, queue groups), read from the registry's `topic:<topic>` entries
 * and kept per topic until a registry watch reports a change (or lookupCacheMs passes); and the
 * registry names of topics and queues (topicService, hashed names).
 */
import { createHash } from 'node:crypto';
import type pino from 'pino';
import type { Node, Registry, Service, WatchEvent, Watcher } from '../../registry/registry.js';
import { serviceNameProblem, versionProblem } from '../../registry/validate.js';
import { BrokerUnavailableError } from '../broker.js';
import { BATCH_METADATA, BROADCAST_VERSION, batchDeliveries, deliveryTo, errorText, type Delivery } from './wire.js';

/** Topics whose subscriber lists a publisher keeps; past this the oldest entry goes. */
const MAX_CACHED_TOPICS = 1024;
const TOPIC_SERVICE_PREFIX = 'topic:';
/** Prefix of a hashed topic or queue name (see topicService). */
const HASHED = 'h.';
const WATCH_RETRY_MS = 5_000;

const hashed = (text: string) => `${HASHED}${createHash('sha256').update(text).digest('hex').slice(0, 40)}`;

/**
 * The registry service of a topic's subscribers: `topic:<topic>`, or `topic:h.<hash>` for a topic
 * the registry's name rules refuse (non-ASCII, `*`, `..`, over 200 characters). The node metadata
 * carries the topic itself, so any topic the broker accepts can be subscribed to.
 */
export function topicService(topic: string): string {
  const plain = `${TOPIC_SERVICE_PREFIX}${topic}`;
  return serviceNameProblem(plain) === undefined ? plain : `${TOPIC_SERVICE_PREFIX}${hashed(topic)}`;
}

/** The registry version of a queue group: the queue's name, or `h.<hash>` when the version rules refuse it. */
export function queueVersion(queue: string): string {
  return versionProblem(queue) === undefined ? queue : hashed(queue);
}

/** Where a message to one topic goes, built from the registry's `topic:<topic>` entries. */
export interface Route {
  /** Broadcast subscriptions of this process: handed the message directly. */
  local: Node[];
  /** Broadcast subscriptions elsewhere: one request each. */
  remote: Delivery[];
  /** Queue groups: one node of each gets the message (another on failure). */
  groups: Array<{ queue: string; targets: Delivery[] }>;
  size: number;
}

interface RouteEntry {
  route?: Route;
  pending?: Promise<Route>;
  /** When the registry read started. */
  at: number;
  /** False once a registry change (or a subscription here) made the read out of date. */
  valid: boolean;
}

export interface RouteCacheOptions {
  registry: Registry;
  /** How long a topic's list is used before the registry is read again; 0 reads per message. */
  lookupCacheMs: number;
  logger: pino.Logger;
  /** Whether a registry node is one of this process's subscriptions (handed messages directly). */
  isLocal: (nodeId: string) => boolean;
}

/** The subscriber lists of the topics this process publishes to (insertion order = age). */
export class RouteCache {
  private readonly routes = new Map<string, RouteEntry>();
  private watcher?: Watcher;
  private watchReady = false;
  /** After a failed watch(): when to try again (performance.now()). */
  private watchRetryAt = 0;
  private closed = false;

  constructor(private readonly options: RouteCacheOptions) {}

  /** The subscribers of a topic: from the cache while it is fresh, else from the registry. */
  routeOf(topic: string): Promise<Route> {
    if (!this.caching()) return this.lookup(topic).then((services) => this.buildRoute(topic, services));
    const now = performance.now(); // monotonic: a clock step must not keep a list for an hour
    const hit = this.routes.get(topic);
    if (hit) {
      if (hit.pending) return hit.pending;
      if (hit.route && now - hit.at < this.options.lookupCacheMs) return Promise.resolve(hit.route);
      this.routes.delete(topic);
    }
    const entry: RouteEntry = { at: now, valid: true };
    entry.pending = this.lookup(topic).then(
      (services) => {
        entry.pending = undefined;
        const route = this.buildRoute(topic, services);
        // A list read while the registry changed is used for this message but not kept; an empty
        // one is not kept either (publishing to nobody reads the registry each time, as before).
        if (entry.valid && route.size > 0 && this.routes.get(topic) === entry) entry.route = route;
        else if (this.routes.get(topic) === entry) this.routes.delete(topic);
        return route;
      },
      (err: unknown) => {
        if (this.routes.get(topic) === entry) this.routes.delete(topic);
        throw err;
      },
    );
    this.routes.set(topic, entry);
    if (this.routes.size > MAX_CACHED_TOPICS) {
      const oldest = this.routes.keys().next().value as string;
      this.invalidate(oldest);
    }
    return entry.pending;
  }

  /** Drops a topic's subscriber list (and marks a read in flight as out of date). */
  invalidate(topic: string): void {
    const entry = this.routes.get(topic);
    if (!entry) return;
    entry.valid = false;
    this.routes.delete(topic);
  }

  /** Stops the watch and drops every list; nothing is kept afterwards. */
  close(): void {
    this.closed = true;
    this.watcher?.stop();
    this.watcher = undefined;
    for (const entry of this.routes.values()) entry.valid = false;
    this.routes.clear();
  }

  /**
   * Whether subscriber lists may be kept: caching on, and a registry watch that reports changes
   * (until it is ready, a change could fall between its first read and ours and never be seen).
   * A watch that cannot be made is tried again after WATCH_RETRY_MS; meanwhile every message reads.
   */
  private caching(): boolean {
    if (this.options.lookupCacheMs <= 0 || this.closed) return false;
    if (!this.watcher) {
      if (performance.now() < this.watchRetryAt) return false;
      try {
        const watcher = this.options.registry.watch((event) => this.onRegistryEvent(event));
        this.watcher = watcher;
        this.watchReady = watcher.ready === undefined;
        void watcher.ready?.then(() => {
          if (this.watcher === watcher) this.watchReady = true;
        });
      } catch (err) {
        this.watchRetryAt = performance.now() + WATCH_RETRY_MS;
        this.options.logger.warn({ error: errorText(err) }, `http broker: cannot watch the registry; looking subscribers up per message, trying again in ${WATCH_RETRY_MS / 1000} s`);
        return false;
      }
    }
    return this.watchReady;
  }

  private onRegistryEvent(event: WatchEvent): void {
    const name = event.service?.name;
    if (typeof name !== 'string' || !name.startsWith(TOPIC_SERVICE_PREFIX)) return;
    const topic = name.slice(TOPIC_SERVICE_PREFIX.length);
    if (this.routes.has(topic) || !topic.startsWith(HASHED)) this.invalidate(topic);
    // A hashed name: the topics it may stand for (rare: only topics the name rules refuse).
    else for (const t of [...this.routes.keys()]) if (topicService(t) === name) this.invalidate(t);
  }

  private async lookup(topic: string): Promise<Service[]> {
    try {
      return await this.options.registry.getService(topicService(topic));
    } catch (err) {
      throw new BrokerUnavailableError(`http broker: looking up subscribers of "${topic}" failed: ${errorText(err)}`);
    }
  }

  /** Sorts a topic's nodes into this process's, other endpoints' (batched where they can) and queue groups. */
  private buildRoute(topic: string, services: Service[]): Route {
    const local: Node[] = [];
    const single: Node[] = [];
    const endpoints = new Map<string, Node[]>();
    const groups = new Map<string, Node[]>();
    const seen = new Set<string>();
    for (const service of services) {
      for (const node of service.nodes ?? []) {
        if (seen.has(node.id)) continue;
        seen.add(node.id);
        const meta = node.metadata ?? {};
        if (meta.broker !== undefined && meta.broker !== 'http') continue;
        // A node that names another topic (a hashed name shared by two topics) is not for this one.
        if (meta.topic !== undefined && meta.topic !== topic) continue;
        const queue = meta.queue ?? (service.version === BROADCAST_VERSION ? undefined : service.version);
        if (queue !== undefined) {
          let g = groups.get(queue);
          if (!g) groups.set(queue, (g = []));
          g.push(node);
        } else if (this.options.isLocal(node.id)) local.push(node);
        else if (meta[BATCH_METADATA] === '1') {
          const key = `${node.address}\0${node.port}`;
          let e = endpoints.get(key);
          if (!e) endpoints.set(key, (e = []));
          e.push(node);
        } else single.push(node);
      }
    }
    const remote: Delivery[] = single.map((node) => deliveryTo([node], topic));
    // Several requests per endpoint when the ids would make one request's head too long.
    for (const nodes of endpoints.values()) remote.push(...batchDeliveries(nodes, topic));
    const queues: Route['groups'] = [];
    for (const [queue, nodes] of groups) queues.push({ queue, targets: nodes.map((node) => deliveryTo([node], topic)) });
    return { local, remote, groups: queues, size: local.length + remote.length + queues.length };
  }
}
