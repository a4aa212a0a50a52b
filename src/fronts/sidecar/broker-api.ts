/**
 * The sidecar's `/broker` (SPEC 2.7, 6; DESIGN 6).
 *
 * Publish: `POST /broker?topic=T`. The body is the message, raw, whatever its Content-Type (a form
 * body is never parsed as a form). The message header is the request's end-to-end headers (not
 * hop-by-hop ones, not Authorization or Cookie), names in canonical form (`Content-Type`), plus
 * `Timestamp`: when given it must be an integer (seconds since the epoch), else 400; when absent it
 * is set to now. Answers 200 `{}` once the broker took the message; 503 when the broker failed
 * (never a silent 200).
 *
 * Subscribe: `GET /broker?topic=T[&queue=Q]` with a WebSocket upgrade. Every message is one text
 * frame `{"Header":{...},"Body":"<base64 of the bytes>"}`. With `queue`, each message goes to one
 * subscriber of the group. The subscription lives as long as the connection: a close, a read error,
 * a missed pong or a shutdown ends it and releases it in the broker.
 *
 * Slow subscribers: a connection's send queue is bounded (bytes not yet taken by the kernel, and a
 * count of messages). When a message arrives while the queue is over the bound, the subscription is
 * released and the connection closed with 1013 ("try again later") after what was queued; if the
 * client does not read even that within CLOSE_GRACE_MS the socket is destroyed.
 *
 * Sending: a message is encoded into its frame once, whatever the number of subscribers it goes to
 * here (the broker hands each subscription its own copy, one after the other: the last frame is
 * kept with the header and body it was made from, and reused for an equal message). Frames for
 * one connection during one turn of the event loop leave in one write (the socket is corked until
 * setImmediate, or until 64 KiB wait), so a burst of publishes costs one system call per
 * subscriber, not one per frame.
 *
 * Acknowledged subscriptions: `GET /broker?topic=T&ack=1&durable=NAME[&max_inflight=N]` subscribes
 * durably (the broker keeps messages for NAME while no one is connected, at least once). Each frame
 * then is `{"Id":n,"MessageId":"...","Deliveries":k,"Header":{...},"Body":"..."}` and the client
 * answers `{"ack":n}` (done) or `{"nack":n}` (send it again later); a frame not answered within
 * --broker_ack_wait, or unanswered when the connection ends, is redelivered (to this name's next
 * subscriber). At most max_inflight (default 16, at most 64) frames are unanswered at once: the
 * next waits. In this mode client frames are answers only; anything else closes the connection
 * with 1008.
 *
 * CloudEvents (src/edge/handlers/cloudevents.ts, the mapping in docs/sidecar.md): a publish that is a
 * CloudEvent (structured or binary mode) is checked as at the gateway (400 when invalid) and
 * published unchanged with `Mesh-Id` = the event id. `format=cloudevents` on a subscription sends
 * each message as a structured CloudEvent; with ack=1 the frame is
 * `{"Id":n,"MessageId":"...","Deliveries":k,"Event":{...}}`.
 *
 * Client frames: a text or binary frame from the client is published to the same topic (header
 * `Content-Type: text/plain` or `application/octet-stream`, `Timestamp`, and `Mesh-Publisher`, the
 * connection's id). A subscriber without a queue does not get its own frames back.
 */
import type { IncomingMessage } from 'node:http';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { Duplex } from 'node:stream';
import { randomUUID } from 'node:crypto';
import type { WebSocket, RawData, WebSocketServer } from 'ws';
import { wsLibrary } from '../../base/util/lazy-packages.js';
import { nameProblem } from '../../engines/broker/names.js';
import { badRequest, MeshError, methodNotAllowed, serviceUnavailable, tooManyRequests, upgradeRequired } from '../../base/errors.js';
import { readBody } from '../../base/http/body.js';
import { refuseSocket, sendJson } from '../../base/http/respond.js';
import { canonicalHeaderKey, isHopByHop, requestConnectionNamed } from '../../core/transport/headers.js';
import type { Message, Subscription } from '../../engines/broker/broker.js';
import { DurableLimitError, ID_HEADER } from '../../engines/broker/durable.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';
import { checkCloudEventRequest, cloudEventMode, messageCloudEvent } from '../../edge/handlers/cloudevents.js';
import type { Counter, Gauge } from '../../base/stats/store.js';

/** A connection whose unsent bytes reach this is dropped (at least 2 x the largest frame). */
export const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;
/** ...or whose messages not yet handed to the kernel reach this many. */
export const MAX_QUEUED_MESSAGES = 10_000;
/** After a close frame, the client has this long to read it before the socket is destroyed. */
export const CLOSE_GRACE_MS = 5_000;
/** Ping period; a connection that did not answer the previous ping by the next one is dropped. */
export const PING_INTERVAL_MS = 30_000;
/** The last frame is kept for reuse when the message body is at most this long. */
const MAX_KEPT_FRAME_BODY = 1024 * 1024;
/** A corked connection with this many bytes waiting is flushed at once, not at the end of the turn. */
const FLUSH_BYTES = 64 * 1024;
/** Client frames being published at once, per connection, before reading pauses. */
const MAX_PUBLISHING = 32;

export const PUBLISHER_HEADER = 'Mesh-Publisher';
const NEVER_FORWARDED = new Set(['authorization', 'cookie', 'proxy-authorization']);

/** A header map with canonical names (canonicalHeaderKey); values of names that differ only in case are joined with ", ". */
export function canonicalHeaderMap(header: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(header)) {
    const c = canonicalHeaderKey(k);
    out[c] = out[c] === undefined ? v : `${out[c]}, ${v}`;
  }
  return out;
}

/** The broker message header for a publish request (throws 400 for a bad Timestamp). */
export function publishHeader(errorId: string, req: FrontRequest, nowSeconds = Math.floor(Date.now() / 1000)): Record<string, string> {
  const named = requestConnectionNamed(req.headers.connection);
  const header: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || isHopByHop(name) || named?.has(name) || NEVER_FORWARDED.has(name)) continue;
    if (name === 'timestamp') continue;
    header[canonicalHeaderKey(name)] = Array.isArray(value) ? value.join(', ') : value;
  }
  const ts = req.headers['timestamp'];
  if (ts === undefined) header['Timestamp'] = String(nowSeconds);
  else {
    const text = (Array.isArray(ts) ? ts.join(', ') : ts).trim();
    if (!/^\d{1,15}$/.test(text)) throw badRequest(errorId, `Timestamp: must be an integer (seconds since the epoch), got "${text.slice(0, 64)}"`);
    header['Timestamp'] = String(Number(text));
  }
  return header;
}

/** A topic or queue query value, given once, under the brokers' name rule (src/engines/broker/names.ts); 400 otherwise. */
function checkName(errorId: string, what: 'topic' | 'queue', params: URLSearchParams, required: boolean): string | undefined {
  const all = params.getAll(what);
  if (all.length === 0) {
    if (required) throw badRequest(errorId, `${what}: required (/broker?${what}=NAME)`);
    return undefined;
  }
  if (all.length > 1) throw badRequest(errorId, `${what}: given more than once`);
  const problem = nameProblem(what, all[0]);
  if (problem) throw badRequest(errorId, problem);
  return all[0];
}

/** The frame format of a subscription from its query: true for format=cloudevents. */
function cloudEventsFormat(errorId: string, params: URLSearchParams): boolean {
  const all = params.getAll('format');
  if (all.length === 0) return false;
  if (all.length > 1) throw badRequest(errorId, 'format: given more than once');
  if (all[0] !== 'cloudevents') throw badRequest(errorId, `format: must be cloudevents (or absent for mesh frames), got "${all[0]!.slice(0, 32)}"`);
  return true;
}

/** The ack mode of a subscription from its query (ack=1, durable=NAME, max_inflight=N); undefined without ack. */
function ackState(errorId: string, params: URLSearchParams): AckState | undefined {
  const ack = params.get('ack');
  if (ack === null || ack === '0') {
    for (const p of ['durable', 'max_inflight']) if (params.has(p)) throw badRequest(errorId, `${p}: only with ack=1`);
    return undefined;
  }
  if (ack !== '1') throw badRequest(errorId, `ack: must be 1 or 0, got "${ack.slice(0, 32)}"`);
  const durable = params.get('durable');
  if (!durable) throw badRequest(errorId, 'durable: required with ack=1 (the name the broker keeps messages for)');
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(durable)) throw badRequest(errorId, "durable: 1 to 64 letters, digits, '-' or '_'");
  const mi = params.get('max_inflight');
  let maxInflight = DEFAULT_MAX_INFLIGHT;
  if (mi !== null) {
    maxInflight = /^\d{1,4}$/.test(mi) ? Number(mi) : NaN;
    if (!(maxInflight >= 1 && maxInflight <= MAX_MAX_INFLIGHT)) throw badRequest(errorId, `max_inflight: must be an integer from 1 to ${MAX_MAX_INFLIGHT}`);
  }
  return { durable, maxInflight, next: 0, pending: new Map(), waiters: [] };
}

/** Same names, in the same order, with the same values. */
function sameHeader(a: Record<string, string>, b: Record<string, string>): boolean {
  if (a === b) return true;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    const k = ka[i]!;
    if (k !== kb[i] || a[k] !== b[k]) return false;
  }
  return true;
}

interface Connection {
  id: string;
  topic: string;
  queue?: string;
  ws?: WebSocket;
  /** The upgraded socket (ws writes to it): corked while frames of this turn are collected. */
  socket?: Duplex;
  corked: boolean;
  sub?: Subscription;
  /** Frames produced before the WebSocket was ready, and their size in bytes. */
  early: Buffer[];
  earlyBytes: number;
  queued: number;
  closing: boolean;
  alive: boolean;
  publishing: number;
  released?: Promise<void>;
  /** Acknowledged mode (ack=1). */
  ack?: AckState;
  /** format=cloudevents: each message goes out as a structured CloudEvent (messageCloudEvent). */
  cloudEvents: boolean;
}

interface AckState {
  durable: string;
  maxInflight: number;
  next: number;
  pending: Map<number, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>;
  waiters: Array<() => void>;
}

/** Unanswered frames per acknowledged connection: default and bound of max_inflight. */
export const DEFAULT_MAX_INFLIGHT = 16;
export const MAX_MAX_INFLIGHT = 64;

interface BrokerStats {
  published: Counter;
  publishFailed: Counter;
  delivered: Counter;
  subscribersActive: Gauge;
  subscribersTotal: Counter;
  droppedSlow: Counter;
  droppedPing: Counter;
  framesPublished: Counter;
}

export class BrokerApi {
  /** Made at the first subscription: a sidecar whose apps never subscribe does not load ws. */
  private wss?: WebSocketServer;
  private readonly connections = new Set<Connection>();
  private readonly stats: BrokerStats;
  private readonly maxBuffered: number;
  private pingTimer?: NodeJS.Timeout;
  private closed = false;
  /** The last frame made, and the message content it was made from (see frameOf). */
  private lastFrame?: { header: Record<string, string>; body: Buffer; frame: Buffer };
  /** Connections whose socket is corked until the next flush. */
  private readonly corked: Connection[] = [];
  private flushScheduled = false;
  private readonly flush = (): void => {
    this.flushScheduled = false;
    const list = this.corked.splice(0);
    for (const conn of list) {
      conn.corked = false;
      conn.socket?.uncork();
    }
  };

  constructor(private readonly fe: EdgeHandlerContext) {
    // Frames carry base64 (4/3 of the body) plus headers: keep room for two of the largest.
    this.maxBuffered = Math.max(MAX_BUFFERED_BYTES, Math.ceil(fe.maxBodyBytes * 1.4) * 2);
    const s = fe.edge.stats;
    this.stats = {
      published: s.counter('sidecar.broker.published'),
      publishFailed: s.counter('sidecar.broker.publish_failed'),
      delivered: s.counter('sidecar.broker.delivered'),
      subscribersActive: s.gauge('sidecar.broker.subscribers_active'),
      subscribersTotal: s.counter('sidecar.broker.subscribers_total'),
      droppedSlow: s.counter('sidecar.broker.subscribers_dropped_slow'),
      droppedPing: s.counter('sidecar.broker.subscribers_dropped_ping'),
      framesPublished: s.counter('sidecar.broker.frames_published'),
    };
  }

  /** Plain HTTP requests to /broker: POST publishes; GET without an upgrade is told to upgrade. */
  async handle(req: FrontRequest, res: FrontResponse): Promise<void> {
    const fe = this.fe;
    const url = new URL(req.url ?? '/', 'http://sidecar');
    if (req.method === 'GET' || req.method === 'HEAD') {
      req.resume();
      res.setHeader('upgrade', 'websocket');
      res.setHeader('connection', 'Upgrade');
      throw upgradeRequired(fe.errorId, 'GET /broker subscribes over a WebSocket: send Upgrade: websocket (publish with POST)');
    }
    if (req.method !== 'POST') {
      req.resume();
      res.setHeader('allow', 'GET, POST');
      throw methodNotAllowed(fe.errorId, `method ${req.method} not allowed on /broker: POST publishes, GET with a WebSocket upgrade subscribes`);
    }
    let topic: string;
    let header: Record<string, string>;
    try {
      topic = checkName(fe.errorId, 'topic', url.searchParams, true)!;
      if (url.searchParams.has('queue')) throw badRequest(fe.errorId, 'queue: only for subscribing (a published message goes to every queue group)');
      header = publishHeader(fe.errorId, req);
    } catch (err) {
      req.resume();
      throw err;
    }
    const body = await readBody(req, fe.maxBodyBytes, fe.errorId);
    const ce = cloudEventMode(req);
    if (ce) header[ID_HEADER] = checkCloudEventRequest(fe.errorId, ce, req, body);
    await this.publish(topic, { header, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) });
    sendJson(res, 200, '{}');
  }

  private async publish(topic: string, message: Message): Promise<void> {
    try {
      await this.fe.edge.publish(topic, message, true);
      this.stats.published.inc();
    } catch (err) {
      this.stats.publishFailed.inc();
      const detail = err instanceof MeshError ? err.detail : (err as Error)?.message ?? String(err);
      this.fe.edge.logging.get('sidecar').warn({ topic, err: detail }, 'publish failed');
      throw serviceUnavailable(this.fe.errorId, `publish to topic ${topic} failed: ${detail}`);
    }
  }

  private server(): WebSocketServer {
    // closeTimeout (ws >= 8.18) is not in @types/ws yet: how long a close waits for the client.
    const options = { noServer: true, maxPayload: this.fe.maxBodyBytes, perMessageDeflate: false, clientTracking: false, closeTimeout: CLOSE_GRACE_MS };
    return (this.wss ??= new (wsLibrary().WebSocketServer)(options as ConstructorParameters<typeof WebSocketServer>[0]));
  }

  /** WebSocket upgrade on /broker: validates, subscribes, then completes the handshake. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const fe = this.fe;
    const refuse = (err: MeshError, headers?: Record<string, string>) => refuseSocket(socket, err, fe.errorId, { headers, linger: false });
    if (this.closed) return refuse(serviceUnavailable(fe.errorId, 'sidecar shutting down'));
    if (req.method !== 'GET') return refuse(methodNotAllowed(fe.errorId, 'a WebSocket subscription is a GET'), { allow: 'GET, POST' });
    if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
      return refuse(badRequest(fe.errorId, `upgrade to ${req.headers.upgrade} not supported on /broker: use websocket`));
    }
    const url = new URL(req.url ?? '/', 'http://sidecar');
    let topic: string;
    let queue: string | undefined;
    let ack: AckState | undefined;
    let cloudEvents: boolean;
    try {
      topic = checkName(fe.errorId, 'topic', url.searchParams, true)!;
      queue = checkName(fe.errorId, 'queue', url.searchParams, false);
      ack = ackState(fe.errorId, url.searchParams);
      cloudEvents = cloudEventsFormat(fe.errorId, url.searchParams);
    } catch (err) {
      return refuse(err as MeshError);
    }
    const conn: Connection = { id: `ws-${randomUUID()}`, topic, queue, corked: false, early: [], earlyBytes: 0, queued: 0, closing: false, alive: true, publishing: 0, ack, cloudEvents };
    const handler = ack ? (message: Message) => this.deliverAcked(conn, message) : (message: Message) => this.deliver(conn, message);
    let socketGone = false;
    socket.once('close', () => (socketGone = true));
    this.connections.add(conn);
    fe.edge.broker
      .subscribe(topic, handler, ack ? { queue, durable: ack.durable } : { queue })
      .then(
        (sub) => {
          conn.sub = sub;
          if (socketGone || this.closed || conn.closing) {
            this.release(conn);
            this.connections.delete(conn);
            if (!socketGone) refuse(serviceUnavailable(fe.errorId, this.closed ? 'sidecar shutting down' : 'subscription ended before the handshake completed'));
            return;
          }
          this.server().handleUpgrade(req, socket, head, (ws) => {
            conn.socket = socket;
            this.attach(conn, ws);
          });
        },
        (err: unknown) => {
          this.connections.delete(conn);
          const detail = (err as Error)?.message ?? String(err);
          fe.edge.logging.get('sidecar').warn({ topic, queue, err: detail }, 'subscribe failed');
          // Over the durable names' cap of the topic: the client's to fix (remove unused names), not the broker's.
          if (!socketGone) refuse((err instanceof DurableLimitError ? tooManyRequests : serviceUnavailable)(fe.errorId, `subscribe to topic ${topic} failed: ${detail}`));
        },
      );
  }

  private attach(conn: Connection, ws: WebSocket): void {
    conn.ws = ws;
    this.stats.subscribersActive.inc();
    this.stats.subscribersTotal.inc();
    this.fe.edge.logging.get('sidecar').debug({ conn: conn.id, topic: conn.topic, queue: conn.queue }, 'subscriber connected');
    ws.on('pong', () => (conn.alive = true));
    ws.on('message', (data: RawData, isBinary: boolean) => this.onClientFrame(conn, data, isBinary));
    ws.on('error', (err) => {
      this.fe.edge.logging.get('sidecar').debug({ conn: conn.id, err: err.message }, 'subscriber connection error');
      this.release(conn);
    });
    ws.on('close', () => {
      this.stats.subscribersActive.dec();
      this.release(conn);
      this.connections.delete(conn);
    });
    const early = conn.early.splice(0);
    conn.earlyBytes = 0;
    for (const frame of early) this.send(conn, frame);
    this.startPing();
  }

  /** A message from the broker for this connection. */
  private deliver(conn: Connection, message: Message): void {
    if (conn.closing) return;
    if (!conn.queue && message.header?.[PUBLISHER_HEADER] === conn.id) return;
    // A CloudEvent frame is made per delivery: without a Mesh-Id its id is new each time.
    const frame = conn.cloudEvents ? Buffer.from(messageCloudEvent(message, conn.topic)) : this.frameOf(message);
    if (!conn.ws) {
      if (conn.early.length >= MAX_QUEUED_MESSAGES || conn.earlyBytes >= this.maxBuffered) return this.dropSlow(conn);
      conn.early.push(frame);
      conn.earlyBytes += frame.length;
      return;
    }
    this.send(conn, frame);
  }

  /**
   * A message for an acknowledged connection: waits for a free slot (max_inflight), sends its
   * frame with an id, and settles when the client answers: resolves on ack, rejects on nack, on
   * the ack wait running out, or when the connection ends (the broker then redelivers).
   */
  private async deliverAcked(conn: Connection, message: Message): Promise<void> {
    const a = conn.ack!;
    while (a.pending.size >= a.maxInflight && !conn.closing) await new Promise<void>((r) => a.waiters.push(r));
    if (conn.closing) throw new Error('subscriber disconnected');
    const id = ++a.next;
    const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
    const frame = Buffer.from(
      conn.cloudEvents
        ? `${JSON.stringify({ Id: id, MessageId: message.id, Deliveries: message.deliveryCount }).slice(0, -1)},"Event":${messageCloudEvent(message, conn.topic)}}`
        : JSON.stringify({ Id: id, MessageId: message.id, Deliveries: message.deliveryCount, Header: canonicalHeaderMap(message.header ?? {}), Body: body.toString('base64') }),
    );
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => this.answer(conn, id, new Error('not acknowledged within the ack wait')), this.fe.edge.settings.brokerAckWaitMs);
      timer.unref();
      a.pending.set(id, { resolve, reject, timer });
    });
    if (!conn.ws) {
      conn.early.push(frame);
      conn.earlyBytes += frame.length;
    } else this.send(conn, frame);
    return done;
  }

  /** Settles an unanswered frame (an error: nack) and frees its slot. */
  private answer(conn: Connection, id: number, err?: Error): boolean {
    const a = conn.ack!;
    const p = a.pending.get(id);
    if (!p) return false;
    a.pending.delete(id);
    clearTimeout(p.timer);
    if (err) p.reject(err);
    else p.resolve();
    a.waiters.shift()?.();
    return true;
  }

  /** Ends an acknowledged connection's unanswered frames (redelivered) and its waiting messages. */
  private abandon(conn: Connection): void {
    const a = conn.ack;
    if (!a) return;
    for (const id of [...a.pending.keys()]) this.answer(conn, id, new Error('subscriber disconnected'));
    for (const w of a.waiters.splice(0)) w();
  }

  /** A client frame of an acknowledged connection: `{"ack":n}` or `{"nack":n}`; anything else closes it (1008). */
  private onAnswer(conn: Connection, data: RawData, isBinary: boolean): void {
    const text = (Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data)).toString('utf8');
    let parsed: unknown;
    try {
      parsed = isBinary ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const o = parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
    const keys = o ? Object.keys(o) : [];
    const kind = keys.length === 1 && (keys[0] === 'ack' || keys[0] === 'nack') ? keys[0] : undefined;
    const id = kind ? o![kind] : undefined;
    if (!kind || typeof id !== 'number' || !Number.isInteger(id)) {
      return this.closeConnection(conn, 1008, 'ack mode: send {"ack":<Id>} or {"nack":<Id>}');
    }
    // An id already answered (or timed out) is ignored: the message was or will be redelivered.
    this.answer(conn, id, kind === 'nack' ? new Error('nacked by the subscriber') : undefined);
  }

  /**
   * The text frame's payload: `{"Header":{...},"Body":"<base64>"}`. It depends on the header (in
   * order) and the body only, so the frame of the last message is reused when the next one is
   * equal: a message going to N subscribers here arrives as N copies in a row.
   */
  private frameOf(message: Message): Buffer {
    const header = message.header ?? {};
    const body = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
    const last = this.lastFrame;
    if (last && sameHeader(last.header, header) && last.body.equals(body)) return last.frame;
    const frame = Buffer.from(JSON.stringify({ Header: canonicalHeaderMap(header), Body: body.toString('base64') }));
    // Kept for small and medium messages only: the last one stays in memory until the next.
    this.lastFrame = body.length <= MAX_KEPT_FRAME_BODY ? { header: { ...header }, body: Buffer.from(body), frame } : undefined;
    return frame;
  }

  private send(conn: Connection, frame: Buffer): void {
    const ws = conn.ws!;
    if (conn.closing || ws.readyState !== ws.OPEN) return;
    if (ws.bufferedAmount >= this.maxBuffered || conn.queued >= MAX_QUEUED_MESSAGES) return this.dropSlow(conn);
    conn.queued++;
    this.stats.delivered.inc();
    if (!conn.corked && conn.socket) {
      conn.corked = true;
      conn.socket.cork();
      this.corked.push(conn);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flush);
      }
    }
    // The frame buffer is shared by every connection it goes to: ws never changes it (no masking
    // on the server side).
    ws.send(frame, { binary: false }, () => {
      conn.queued--;
    });
    const socket = conn.socket;
    if (conn.corked && socket && socket.writableLength >= FLUSH_BYTES) {
      socket.uncork();
      socket.cork();
    }
  }

  /** The subscriber cannot keep up: release the subscription, close 1013 after what is queued. */
  private dropSlow(conn: Connection): void {
    if (conn.closing) return;
    this.stats.droppedSlow.inc();
    const ws = conn.ws;
    this.fe.edge.logging
      .get('sidecar')
      .warn({ conn: conn.id, topic: conn.topic, queue: conn.queue, buffered: ws?.bufferedAmount ?? 0, queued: conn.queued }, 'subscriber too slow: dropped');
    this.closeConnection(conn, 1013, 'subscriber too slow: send queue full');
  }

  private closeConnection(conn: Connection, code: number, reason: string): void {
    if (conn.closing) return;
    conn.closing = true;
    conn.early.length = 0;
    conn.earlyBytes = 0;
    this.release(conn);
    const ws = conn.ws;
    if (!ws) return;
    try {
      ws.close(code, reason);
    } catch {
      ws.terminate();
    }
    // ws destroys the socket CLOSE_GRACE_MS after the close frame if the client never answers.
  }

  /** Releases the subscription in the broker once. */
  private release(conn: Connection): Promise<void> {
    conn.closing = true;
    this.abandon(conn);
    if (!conn.released && conn.sub) {
      const sub = conn.sub;
      conn.released = sub.unsubscribe().catch((err: unknown) => {
        this.fe.edge.logging.get('sidecar').warn({ conn: conn.id, topic: conn.topic, err: (err as Error)?.message }, 'unsubscribe failed');
      });
    }
    return conn.released ?? Promise.resolve();
  }

  private onClientFrame(conn: Connection, data: RawData, isBinary: boolean): void {
    if (conn.closing) return;
    if (conn.ack) return this.onAnswer(conn, data, isBinary);
    const body = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
    const header: Record<string, string> = {
      'Content-Type': isBinary ? 'application/octet-stream' : 'text/plain',
      Timestamp: String(Math.floor(Date.now() / 1000)),
      [PUBLISHER_HEADER]: conn.id,
    };
    conn.publishing++;
    if (conn.publishing >= MAX_PUBLISHING) conn.ws?.pause();
    this.publish(conn.topic, { header, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) }).then(
      () => {
        this.stats.framesPublished.inc();
        conn.publishing--;
        if (conn.publishing < MAX_PUBLISHING / 2 && conn.ws?.isPaused) conn.ws.resume();
      },
      (err: MeshError) => {
        conn.publishing--;
        // The reason of a close frame is at most 123 bytes.
        this.closeConnection(conn, 1011, Buffer.from(err.detail).subarray(0, 120).toString('utf8').replace(/\uFFFD+$/, ''));
      },
    );
  }

  private startPing(): void {
    if (this.pingTimer || this.closed) return;
    this.pingTimer = setInterval(() => {
      for (const conn of this.connections) {
        const ws = conn.ws;
        if (!ws || conn.closing) continue;
        if (!conn.alive) {
          this.stats.droppedPing.inc();
          conn.closing = true;
          this.release(conn);
          ws.terminate();
          continue;
        }
        conn.alive = false;
        ws.ping();
      }
      if (this.connections.size === 0) {
        clearInterval(this.pingTimer);
        this.pingTimer = undefined;
      }
    }, PING_INTERVAL_MS);
    this.pingTimer.unref();
  }

  /** Closes every subscription (1001 going away) and releases it in the broker. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.flush();
    const releases: Promise<void>[] = [];
    for (const conn of this.connections) {
      this.closeConnection(conn, 1001, 'sidecar shutting down');
      releases.push(this.release(conn));
    }
    await Promise.race([Promise.allSettled(releases), new Promise((r) => setTimeout(r, 3000).unref())]);
    for (const conn of this.connections) conn.ws?.terminate();
    this.connections.clear();
    this.wss?.close();
  }
}
