/**
 * The http broker (the embedded default, after go-micro's): a subscribing process serves one HTTP
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
 *   <body: the message bytes, raw>
 *
 * Answers: 202 accepted (the handlers run after the answer), 400 bad input, 404 unknown path or
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
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHash, randomUUID } from 'node:crypto';
import { advertisedAddress, formatAddress, parseAddress } from '../util/address.js';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
import type pino from 'pino';
import { Logging } from '../util/log.js';
import { badRequest, MeshError, methodNotAllowed, notFound, payloadTooLarge } from '../errors.js';
import type { Node, Registry, Service, WatchEvent, Watcher } from '../registry/registry.js';
import { serviceNameProblem, versionProblem } from '../registry/validate.js';
import {
  BrokerUnavailableError,
  type Broker,
  type Message,
  type MessageHandler,
  type SubscribeOptions,
  type Subscription,
} from './broker.js';
import { checkMessage, checkQueue, checkTopic, invokeHandler } from './memory.js';

export const DELIVERY_PATH = '/_mesh/broker';
export const HEADER_FIELD = 'mesh-broker-header';
/** Registry version of subscribers without a queue. */
export const BROADCAST_VERSION = 'broadcast';
/** Largest encoded message header accepted (bytes of JSON). */
export const MAX_HEADER_BYTES = 32 * 1024;
const ERROR_ID = 'go.mesh.broker';
/** Queue group: nodes tried at most, per message. */
const MAX_QUEUE_ATTEMPTS = 3;
/** Node metadata: the subscriber's endpoint takes several `id`s in one delivery (value "1"). */
export const BATCH_METADATA = 'batch';
/** Answer header of a batched delivery: the ids (comma-separated) it did not know. */
export const MISSING_FIELD = 'mesh-broker-missing';
/** A batched delivery's query string stays under this many characters (the endpoint takes 64 KiB of head). */
const MAX_BATCH_QUERY = 8 * 1024;
/** Topics whose subscriber lists a publisher keeps; past this the oldest entry goes. */
const MAX_CACHED_TOPICS = 1024;
const TOPIC_SERVICE_PREFIX = 'topic:';
/** Prefix of a hashed topic or queue name (see topicService). */
const HASHED = 'h.';

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
function queueVersion(queue: string): string {
  return versionProblem(queue) === undefined ? queue : hashed(queue);
}
const WATCH_RETRY_MS = 5_000;

export interface HttpBrokerOptions {
  registry: Registry;
  /** Listen host[:port] of the subscriber endpoint; default 127.0.0.1:0 (a free port). */
  address?: string;
  /** --advertise forms (src/util/address.ts) registered for subscribers; default the listen host (the first external IPv4 for 0.0.0.0/::) and port. */
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
  logger?: pino.Logger;
}

interface HttpSub {
  topic: string;
  queue?: string;
  handler: MessageHandler;
  active: boolean;
  group: SubGroup;
}

/** This process's subscriptions to one topic and queue (or broadcast): one registry node. */
interface SubGroup {
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

/** One delivery request: to one node, or (batch) to several subscriptions behind one endpoint. */
interface Delivery {
  nodes: Node[];
  /** http://host:port */
  origin: string;
  /** /_mesh/broker?topic=...&id=... */
  path: string;
}

/** Where a message to one topic goes, built from the registry's `topic:<topic>` entries. */
interface Route {
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


/** JSON of the header with everything outside printable ASCII \u-escaped, so it is a valid header value. */
export function encodeHeader(header: Record<string, string>): string {
  return JSON.stringify(header).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** Parses a Mesh-Broker-Header value; throws a message for a 400 on anything but an object of strings. */
export function decodeHeader(value: string): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new Error(`${HEADER_FIELD}: not valid JSON`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error(`${HEADER_FIELD}: must be a JSON object`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed as Record<string, unknown>)) {
    if (typeof v !== 'string') throw new Error(`${HEADER_FIELD}: value of "${k}" must be a string`);
    out[k] = v;
  }
  return out;
}

function shuffle<T>(items: T[]): T[] {
  const a = items.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/** A name as a URL component; a lone surrogate (which encodeURIComponent refuses) becomes U+FFFD. */
function encodeComponent(id: string): string {
  try {
    return encodeURIComponent(id);
  } catch {
    return encodeURIComponent(id.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD'));
  }
}

function decodeComponent(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** A delivery the endpoint answered with an error; `missing`: the ids a batch's endpoint did not know. */
class DeliveryError extends Error {
  constructor(
    message: string,
    readonly missing?: Set<string>,
  ) {
    super(message);
  }
}

function errorText(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}

export class HttpBroker implements Broker {
  readonly name = 'http';
  private readonly registry: Registry;
  private readonly listenHost: string;
  private readonly listenPort: number;
  private readonly advertise?: string;
  private readonly ttlMs: number;
  private readonly refreshMs: number;
  private readonly deliveryTimeoutMs: number;
  private readonly maxMessageBytes: number;
  private readonly logger: pino.Logger;
  /** This process's subscriptions, by registry node id and by topic and queue. */
  private readonly groups = new Map<string, SubGroup>();
  private readonly groupOf = new Map<string, SubGroup>();
  private readonly agent: Agent;
  private server?: Server;
  private listening?: Promise<void>;
  private node?: { address: string; port: number };
  private refreshTimer?: NodeJS.Timeout;
  private refreshing = false;
  private closing?: Promise<void>;
  private readonly lookupCacheMs: number;
  /** Publisher side: subscriber lists per topic (insertion order = age). */
  private readonly routes = new Map<string, RouteEntry>();
  private watcher?: Watcher;
  private watchReady = false;
  /** After a failed watch(): when to try again (performance.now()). */
  private watchRetryAt = 0;

  constructor(options: HttpBrokerOptions) {
    if (!options || !options.registry) throw new Error('http broker: a registry is required');
    this.registry = options.registry;
    const listen = parseAddress(options.address ?? '127.0.0.1:0', { defaultPort: 0, what: 'broker address' });
    this.listenHost = listen.host;
    this.listenPort = listen.port;
    this.advertise = options.advertise;
    this.ttlMs = options.ttlMs ?? 30_000;
    this.refreshMs = options.refreshMs ?? 10_000;
    this.deliveryTimeoutMs = options.deliveryTimeoutMs ?? 5_000;
    this.maxMessageBytes = options.maxMessageBytes ?? 16 * 1024 * 1024;
    this.lookupCacheMs = options.lookupCacheMs ?? 5_000;
    if (!(this.ttlMs > 0)) throw new Error('http broker: ttlMs must be positive');
    if (!(this.refreshMs > 0)) throw new Error('http broker: refreshMs must be positive');
    if (this.refreshMs >= this.ttlMs) throw new Error('http broker: refreshMs must be shorter than ttlMs');
    // The runtime passes its logger; a broker built on its own logs to stderr at info.
    this.logger = options.logger ?? new Logging().get('broker');
    this.agent = new Agent({
      connect: { timeout: this.deliveryTimeoutMs },
      headersTimeout: this.deliveryTimeoutMs,
      bodyTimeout: this.deliveryTimeoutMs,
      keepAliveTimeout: 4_000,
      connections: 64,
    });
  }

  /** The registered address of this process's subscriber endpoint (after connect). */
  get endpoint(): { address: string; port: number } | undefined {
    return this.node ? { ...this.node } : undefined;
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
    const server = createServer(
      { maxHeaderSize: MAX_HEADER_BYTES * 2, requestTimeout: 30_000, headersTimeout: 10_000, keepAliveTimeout: 5_000 },
      (req, res) => {
        try {
          this.handle(req, res);
        } catch (err) {
          // A bug here must cost one request, not the subscribing process.
          this.logger.error({ error: errorText(err) }, 'http broker: delivery endpoint failed');
          if (res.headersSent) res.destroy();
          else this.fail(res, new MeshError(ERROR_ID, 500, 'delivery endpoint failed'), true);
        }
      },
    );
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
      if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      else socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(new Error(`http broker: cannot listen on ${formatAddress(this.listenHost, this.listenPort)}: ${err.message}`)));
      server.listen(this.listenPort, this.listenHost, () => resolve());
    });
    server.on('error', (err) => this.logger.error({ err }, 'http broker: server error'));
    const bound = server.address() as AddressInfo;
    const { host, port } = advertisedAddress({ host: this.listenHost, port: bound.port }, this.advertise);
    this.server = server;
    this.node = { address: host, port };
    // close() ran while we were starting up: it closes this.server after this settles
    if (this.closing) throw new BrokerUnavailableError('http broker: closed');
    this.logger.debug({ address: formatAddress(host, port) }, 'http broker: subscriber endpoint listening');
  }

  // ---------------------------------------------------------------- subscriber side

  async subscribe(topic: string, handler: MessageHandler, options: SubscribeOptions = {}): Promise<Subscription> {
    checkTopic(topic);
    checkQueue(options.queue);
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    await this.connect();
    const queue = options.queue;
    const key = `${topic}\n${queue ?? ''}`;
    let group = this.groupOf.get(key);
    if (!group) {
      // The first subscription here to this topic and queue: one registry node for all of them.
      const g: SubGroup = { id: `broker-${randomUUID()}`, key, topic, queue, subs: new Set(), registered: Promise.resolve() };
      this.groupOf.set(key, g);
      this.groups.set(g.id, g);
      g.registered = this.registry.register(this.serviceOf(g), { ttlMs: this.ttlMs }).then(
        () => this.invalidate(topic),
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
    if (!sub.active || this.closing) throw new BrokerUnavailableError('http broker: closed');
    this.startRefresh();
    return {
      topic,
      queue,
      unsubscribe: () => this.unsubscribe(sub),
    };
  }

  private serviceOf(group: SubGroup): Service {
    const node = this.node!;
    const metadata: Record<string, string> = { broker: 'http', topic: group.topic, [BATCH_METADATA]: '1' };
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
    this.invalidate(sub.topic);
    try {
      await group.registered.catch(() => undefined);
      await this.registry.deregister(this.serviceOf(group));
      this.invalidate(sub.topic);
    } catch (err) {
      // The TTL removes it in the end; deliveries meanwhile get 404 and queue groups try another node.
      this.logger.warn({ err, topic: sub.topic }, 'http broker: deregistering a subscription failed');
    }
  }

  /**
   * Hands a message to the subscriptions of these groups: each of a broadcast group's, one of a
   * queue group's. Each gets its own copy; `owned`: the last one may have the given objects.
   */
  private fanOut(groups: SubGroup[], topic: string, header: Record<string, string>, body: Uint8Array, owned: boolean): void {
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
      void invokeHandler(this.logger, sub.handler, message, topic, sub.queue);
    }
  }

  /** A group of this process that takes messages of the topic now. */
  private liveGroup(id: string, topic: string): SubGroup | undefined {
    const group = this.groups.get(id);
    return group && group.topic === topic && group.subs.size > 0 ? group : undefined;
  }

  private startRefresh(): void {
    if (this.refreshTimer || this.closing) return;
    this.refreshTimer = setInterval(() => void this.refresh(), this.refreshMs);
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
            await this.registry.register(this.serviceOf(group), { ttlMs: this.ttlMs });
            // its last subscription left meanwhile: undo the registration we just refreshed
            if (this.groups.get(group.id) !== group) await this.registry.deregister(this.serviceOf(group));
          } catch (err) {
            this.logger.warn({ err, topic: group.topic }, 'http broker: refreshing a subscription failed');
          }
        }),
      );
    } finally {
      this.refreshing = false;
    }
  }

  private fail(res: ServerResponse, err: MeshError, close = false, missing?: string[]): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = err.toBody();
    res.statusCode = err.code;
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('Content-Length', Buffer.byteLength(body));
    if (close) res.setHeader('Connection', 'close');
    // Ids come from the request: percent-encoded, so no byte of theirs can break the header.
    if (missing) res.setHeader(MISSING_FIELD, missing.map(encodeComponent).join(','));
    res.end(body);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://broker');
    } catch {
      return this.fail(res, badRequest(ERROR_ID, 'bad request target'));
    }
    if (url.pathname !== DELIVERY_PATH) return this.fail(res, notFound(ERROR_ID, `${url.pathname}: not found`));
    if (req.method !== 'POST') {
      res.setHeader('Allow', 'POST');
      return this.fail(res, methodNotAllowed(ERROR_ID, `method ${req.method} not allowed: use POST`));
    }
    const topic = url.searchParams.get('topic');
    const ids = url.searchParams.getAll('id');
    if (!topic) return this.fail(res, badRequest(ERROR_ID, 'topic: required'));
    if (ids.length === 0 || ids.includes('')) return this.fail(res, badRequest(ERROR_ID, 'id: required'));
    let header: Record<string, string> = {};
    const raw = req.headers[HEADER_FIELD];
    if (Array.isArray(raw)) return this.fail(res, badRequest(ERROR_ID, `${HEADER_FIELD}: given more than once`));
    if (raw !== undefined) {
      if (raw.length > MAX_HEADER_BYTES) return this.fail(res, payloadTooLarge(ERROR_ID, `${HEADER_FIELD}: too large`));
      try {
        header = decodeHeader(raw);
      } catch (err) {
        return this.fail(res, badRequest(ERROR_ID, (err as Error).message));
      }
    }
    // One id (the usual case), or a batch: every node named gets the message (each of its
    // subscriptions here, or one member of a queue group).
    const subs: SubGroup[] = [];
    let missing: string[] | undefined;
    for (const id of ids.length === 1 ? ids : new Set(ids)) {
      const group = this.liveGroup(id, topic);
      if (group) subs.push(group);
      else (missing ??= []).push(id);
    }
    if (subs.length === 0) {
      const what = ids.length === 1 ? `subscription ${ids[0]}` : `subscriptions ${missing!.join(', ')}`;
      return this.fail(res, notFound(ERROR_ID, `${what} to topic ${topic}: not found`), false, ids.length === 1 ? undefined : missing);
    }
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > this.maxMessageBytes) {
      return this.fail(res, payloadTooLarge(ERROR_ID, `body over ${this.maxMessageBytes} bytes`), true);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > this.maxMessageBytes) {
        failed = true;
        // Connection: close ends the socket once the answer is out; the rest of the body is dropped.
        this.fail(res, payloadTooLarge(ERROR_ID, `body over ${this.maxMessageBytes} bytes`), true);
        chunks.length = 0;
        res.once('finish', () => req.destroy());
        return;
      }
      chunks.push(chunk);
    });
    req.on('error', () => {
      failed = true;
    });
    req.on('end', () => {
      if (failed) return;
      if (missing) {
        this.fail(res, notFound(ERROR_ID, `subscriptions ${missing.join(', ')} to topic ${topic}: not found`), false, missing);
      } else {
        res.statusCode = 202;
        res.setHeader('Content-Length', 0);
        res.end();
      }
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      const bytes = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
      // Each subscription gets its own copy (the last one the original: earlier handlers cannot
      // touch it).
      this.fanOut(subs, topic, header, bytes, true);
    });
  }

  // ---------------------------------------------------------------- publisher side

  async publish(topic: string, message: Message): Promise<void> {
    checkTopic(topic);
    checkMessage(message);
    if (this.closing) throw new BrokerUnavailableError('http broker: closed');
    if (message.body.byteLength > this.maxMessageBytes) {
      throw new Error(`http broker: message body is ${message.body.byteLength} bytes, over the limit of ${this.maxMessageBytes}`);
    }
    // Taken now, as the other brokers do: a caller changing its object later changes nothing.
    const header = { ...(message.header ?? {}) };
    const headerValue = encodeHeader(header);
    if (headerValue.length > MAX_HEADER_BYTES) {
      throw new Error(`http broker: message header is ${headerValue.length} bytes as JSON, over the limit of ${MAX_HEADER_BYTES}`);
    }
    const route = await this.routeOf(topic);
    if (route.size === 0) return;
    const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
    let tasks: Promise<void>[] | undefined;
    if (route.local.length > 0) {
      const stale = this.handOver(route.local, topic, header, message.body);
      // Registered here but no longer subscribed: as for any other node, the endpoint answers 404.
      for (const node of stale ?? []) (tasks ??= []).push(this.deliverBroadcast(this.deliveryTo([node], topic), topic, headerValue, body));
    }
    for (const delivery of route.remote) (tasks ??= []).push(this.deliverBroadcast(delivery, topic, headerValue, body));
    for (const group of route.groups) (tasks ??= []).push(this.deliverToGroup(group.queue, group.targets, topic, headerValue, body));
    if (tasks) await Promise.all(tasks);
  }

  /** Hands a message to this process's broadcast subscriptions, each its own copy; returns the nodes no longer subscribed here. */
  private handOver(nodes: Node[], topic: string, header: Record<string, string>, body: Uint8Array): Node[] | undefined {
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

  /** The subscribers of a topic: from the cache while it is fresh, else from the registry. */
  private routeOf(topic: string): Promise<Route> {
    if (!this.caching()) return this.lookup(topic).then((services) => this.buildRoute(topic, services));
    const now = performance.now(); // monotonic: a clock step must not keep a list for an hour
    const hit = this.routes.get(topic);
    if (hit) {
      if (hit.pending) return hit.pending;
      if (hit.route && now - hit.at < this.lookupCacheMs) return Promise.resolve(hit.route);
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

  /**
   * Whether subscriber lists may be kept: caching on, and a registry watch that reports changes
   * (until it is ready, a change could fall between its first read and ours and never be seen).
   * A watch that cannot be made is tried again after WATCH_RETRY_MS; meanwhile every message reads.
   */
  private caching(): boolean {
    if (this.lookupCacheMs <= 0 || this.closing) return false;
    if (!this.watcher) {
      if (performance.now() < this.watchRetryAt) return false;
      try {
        const watcher = this.registry.watch((event) => this.onRegistryEvent(event));
        this.watcher = watcher;
        this.watchReady = watcher.ready === undefined;
        void watcher.ready?.then(() => {
          if (this.watcher === watcher) this.watchReady = true;
        });
      } catch (err) {
        this.watchRetryAt = performance.now() + WATCH_RETRY_MS;
        this.logger.warn({ error: errorText(err) }, `http broker: cannot watch the registry; looking subscribers up per message, trying again in ${WATCH_RETRY_MS / 1000} s`);
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

  /** Drops a topic's subscriber list (and marks a read in flight as out of date). */
  private invalidate(topic: string): void {
    const entry = this.routes.get(topic);
    if (!entry) return;
    entry.valid = false;
    this.routes.delete(topic);
  }

  private async lookup(topic: string): Promise<Service[]> {
    try {
      return await this.registry.getService(topicService(topic));
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
        } else if (this.groups.has(node.id)) local.push(node);
        else if (meta[BATCH_METADATA] === '1') {
          const key = `${node.address}\0${node.port}`;
          let e = endpoints.get(key);
          if (!e) endpoints.set(key, (e = []));
          e.push(node);
        } else single.push(node);
      }
    }
    const remote: Delivery[] = single.map((node) => this.deliveryTo([node], topic));
    for (const nodes of endpoints.values()) {
      // Several requests when the ids would make one request's head too long.
      let chunk: Node[] = [];
      let length = 0;
      for (const node of nodes) {
        const add = encodeComponent(node.id).length + 4;
        if (chunk.length > 0 && length + add > MAX_BATCH_QUERY) {
          remote.push(this.deliveryTo(chunk, topic));
          chunk = [];
          length = 0;
        }
        chunk.push(node);
        length += add;
      }
      remote.push(this.deliveryTo(chunk, topic));
    }
    const queues: Route['groups'] = [];
    for (const [queue, nodes] of groups) queues.push({ queue, targets: nodes.map((node) => this.deliveryTo([node], topic)) });
    return { local, remote, groups: queues, size: local.length + remote.length + queues.length };
  }

  /** The request to the endpoint of nodes[0] for all the nodes (one endpoint). */
  private deliveryTo(nodes: Node[], topic: string): Delivery {
    const node = nodes[0]!;
    let path = `${DELIVERY_PATH}?topic=${encodeComponent(topic)}`;
    for (const n of nodes) path += `&id=${encodeComponent(n.id)}`;
    return { nodes, origin: `http://${formatAddress(node.address, node.port)}`, path };
  }

  /** A broadcast delivery: failures are logged per subscriber, never thrown. */
  private async deliverBroadcast(delivery: Delivery, topic: string, headerValue: string, body: Buffer): Promise<void> {
    try {
      await this.post(delivery, headerValue, body);
    } catch (err) {
      const error = errorText(err);
      const missing = delivery.nodes.length > 1 ? (err as DeliveryError).missing : undefined;
      for (const node of delivery.nodes) {
        if (missing && !missing.has(node.id)) continue; // the endpoint took it for this one
        this.logger.warn({ topic, node: node.id, address: `${node.address}:${node.port}`, error }, 'http broker: delivery to a subscriber failed');
      }
    }
  }

  private async deliverToGroup(queue: string, targets: Delivery[], topic: string, headerValue: string, body: Buffer): Promise<void> {
    const errors: string[] = [];
    for (const target of shuffle(targets).slice(0, MAX_QUEUE_ATTEMPTS)) {
      const node = target.nodes[0]!;
      try {
        await this.deliver(target, topic, headerValue, body);
        return;
      } catch (err) {
        errors.push(`${node.id} (${node.address}:${node.port}): ${errorText(err)}`);
        this.logger.debug({ topic, queue, node: node.id, error: errorText(err) }, 'http broker: queue delivery failed, trying another node');
      }
    }
    this.logger.warn({ topic, queue, errors }, 'http broker: no subscriber of the queue group took the message');
  }

  /** Delivers to one node: directly when it is a subscription of this process, else over HTTP. */
  private async deliver(target: Delivery, topic: string, headerValue: string, body: Buffer): Promise<void> {
    const node = target.nodes[0]!;
    // A subscription of this very process (a sidecar's WebSocket subscribers, say) is handed the
    // message directly: no HTTP request to ourselves.
    const local = this.liveGroup(node.id, topic);
    if (local) {
      this.fanOut([local], topic, decodeHeader(headerValue), new Uint8Array(body.buffer, body.byteOffset, body.byteLength), false);
      return;
    }
    await this.post(target, headerValue, body);
  }

  /**
   * One delivery request; resolves on 2xx, else rejects (a DeliveryError for an answer). Bounded
   * by deliveryTimeoutMs from the call, time waiting for a connection included. undici's dispatch
   * API with a plain handler: no response stream, no AbortSignal per request.
   */
  private post(delivery: Delivery, headerValue: string, body: Buffer): Promise<void> {
    const timeoutMs = this.deliveryTimeoutMs;
    return new Promise<void>((resolve, reject) => {
      let controller: Dispatcher.DispatchController | undefined;
      let settled = false;
      let timedOut = false;
      let status = 0;
      let missing: string | undefined;
      let errorBody: Buffer[] | undefined;
      let errorBytes = 0;
      const finish = (err?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => {
        timedOut = true;
        const err = new Error(`no answer within ${timeoutMs} ms`);
        controller?.abort(err);
        finish(err);
      }, timeoutMs);
      try {
        this.agent.dispatch(
          {
            origin: delivery.origin,
            path: delivery.path,
            method: 'POST',
            headers: { 'content-type': 'application/octet-stream', [HEADER_FIELD]: headerValue },
            body,
          },
          {
            onRequestStart(c) {
              controller = c;
              if (timedOut) c.abort(new Error(`no answer within ${timeoutMs} ms`));
            },
            onResponseStart(_c, statusCode, headers) {
              status = statusCode;
              const m = headers[MISSING_FIELD];
              missing = typeof m === 'string' ? m : undefined;
              if (statusCode < 200 || statusCode >= 300) errorBody = [];
            },
            onResponseData(_c, chunk) {
              // An error's text (the start of it) goes into the log; a 202 has no body.
              if (errorBody && errorBytes < 300) {
                errorBody.push(chunk);
                errorBytes += chunk.length;
              }
            },
            onResponseEnd() {
              if (!errorBody) return finish();
              const text = Buffer.concat(errorBody).toString('utf8').slice(0, 300);
              finish(new DeliveryError(`status ${status}${text ? `: ${text}` : ''}`, missing !== undefined ? new Set(missing.split(',').map(decodeComponent)) : undefined));
            },
            onResponseError(_c, err) {
              finish(err);
            },
          },
        );
      } catch (err) {
        finish(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  // ---------------------------------------------------------------- shutdown

  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.stopRefresh();
    this.watcher?.stop();
    this.watcher = undefined;
    for (const entry of this.routes.values()) entry.valid = false;
    this.routes.clear();
    const groups = [...this.groups.values()];
    for (const group of groups) for (const sub of group.subs) sub.active = false;
    this.groups.clear();
    this.groupOf.clear();
    if (this.node && groups.length > 0) {
      const deregister = Promise.allSettled(
        groups.map(async (group) => {
          await group.registered.catch(() => undefined);
          await this.registry.deregister(this.serviceOf(group));
        }),
      );
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((r) => (timer = setTimeout(r, this.deliveryTimeoutMs)));
      await Promise.race([deregister, bound]);
      clearTimeout(timer);
    }
    await this.listening?.catch(() => undefined);
    const server = this.server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    }
    await this.agent.close().catch(() => undefined);
  }
}
