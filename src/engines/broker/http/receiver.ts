/**
 * The http broker's delivery endpoint: the HTTP server a subscribing process listens on, and the
 * delivery path (`POST /_mesh/broker?topic=...&id=...`) that checks a delivery, reads its body and
 * hands the message to this process's subscriptions.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from '../../../base/http/node-http.js';
import type { AddressInfo } from 'node:net';
import type pino from 'pino';
import { badRequest, forbidden, internalError, MeshError, methodNotAllowed, notFound, payloadTooLarge, unauthorized } from '../../../base/errors.js';
import type { Counter } from '../../../base/stats/store.js';
import { readBody } from '../../../base/http/body.js';
import { advertisedAddress, formatAddress } from '../../../base/util/address.js';
import type { SubGroup, Subscriptions } from './subscriptions.js';
import { SECRET_FIELD, SECRET_HEADER, type DeliverySecret } from './secret.js';
import { serveMtls } from '../../../base/mtls/server.js';
import type { WorkloadTls } from '../../../base/mtls/workload-tls.js';
import { StatsStore, type StatsScope } from '../../../base/stats/store.js';
import { decodeHeader, DELIVERY_PATH, encodeMissing, ERROR_ID, errorText, HEADER_FIELD, MAX_HEADER_BYTES, MISSING_FIELD } from './wire.js';

export interface ReceiverOptions {
  listenHost: string;
  listenPort: number;
  /** --advertise forms (src/base/util/address.ts) registered for subscribers. */
  advertise?: string;
  /** Largest body accepted. */
  maxMessageBytes: number;
  logger: pino.Logger;
  /** Who gets the messages delivered. */
  subscriptions: Subscriptions;
  /** The secret every delivery must carry (secret.ts). */
  secret: DeliverySecret;
  /** Counts deliveries refused for a missing or wrong secret. */
  refused?: Counter;
  /**
   * The process's workload certificate (--mtls permissive or strict), read when the endpoint
   * starts listening: the endpoint then terminates mutual TLS (src/base/mtls/server.ts;
   * strict refuses plain deliveries) and its subscriptions say mtls=true. The secret is still
   * checked on every delivery.
   */
  workloadTls?: () => WorkloadTls | undefined;
  /** Where the endpoint's ssl.* and downstream_cx_plain_refused stats go (`http.broker.`). */
  tlsStats?: StatsScope;
}


/** A refused delivery is logged at most this often (the first one at once), with the count since. */
const REFUSED_LOG_INTERVAL_MS = 60_000;

export class Receiver {
  private server?: Server;
  private node?: { address: string; port: number; mtls: boolean };
  private stopMtls?: () => void;
  /** Refused deliveries not yet logged, and when the last log line was written (performance.now()). */
  private refusedUnlogged = 0;
  private refusedLoggedAt?: number;

  constructor(private readonly options: ReceiverOptions) {}

  /** The registered address of the endpoint (once it listens). */
  get endpoint(): { address: string; port: number; mtls: boolean } | undefined {
    return this.node;
  }

  /** Starts listening; the caller makes it happen once. */
  async listen(): Promise<void> {
    const { listenHost, listenPort } = this.options;
    const server = createServer(
      { maxHeaderSize: MAX_HEADER_BYTES * 2, requestTimeout: 30_000, headersTimeout: 10_000, keepAliveTimeout: 5_000 },
      (req, res) => {
        try {
          this.handle(req, res);
        } catch (err) {
          // A bug here must cost one request, not the subscribing process.
          this.options.logger.error({ error: errorText(err) }, 'http broker: delivery endpoint failed');
          if (res.headersSent) res.destroy();
          else this.fail(res, internalError(ERROR_ID, 'delivery endpoint failed'), true);
        }
      },
    );
    const workload = this.options.workloadTls?.();
    const mtls = workload !== undefined && workload.mode !== 'off';
    // Before anything else listens for the server's connections (serveMtls takes node:http's own listener).
    if (mtls) this.stopMtls = serveMtls(server, { workload, service: ERROR_ID, stats: this.options.tlsStats ?? new StatsStore(), acceptTimeoutMs: 10_000, log: this.options.logger });
    server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
      const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
      if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      else socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(new Error(`http broker: cannot listen on ${formatAddress(listenHost, listenPort)}: ${err.message}`)));
      server.listen(listenPort, listenHost, () => resolve());
    });
    server.on('error', (err) => this.options.logger.error({ err }, 'http broker: server error'));
    const bound = server.address() as AddressInfo;
    this.server = server;
    const { host, port } = advertisedAddress({ host: listenHost, port: bound.port }, this.options.advertise);
    this.node = { address: host, port, mtls };
  }

  /** Closes the server and every connection (the caller waits for a listen() under way first). */
  async close(): Promise<void> {
    const server = this.server;
    this.stopMtls?.();
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
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
    if (missing) res.setHeader(MISSING_FIELD, encodeMissing(missing));
    res.end(body);
  }

  /** A delivery without the mesh's secret: 401 or 403, counted, logged (rate limited); the body is not read. */
  private refuse(req: IncomingMessage, res: ServerResponse, reason: 'missing' | 'wrong'): void {
    this.options.refused?.inc();
    this.refusedUnlogged++;
    const now = performance.now();
    if (this.refusedLoggedAt === undefined || now - this.refusedLoggedAt >= REFUSED_LOG_INTERVAL_MS) {
      this.options.logger.warn(
        { reason, from: req.socket.remoteAddress, refused: this.refusedUnlogged },
        `http broker: refused a delivery ${reason === 'missing' ? 'without' : 'with a wrong'} broker secret (Mesh-Broker-Secret); more are counted in broker.http.delivery_refused and logged at most once a minute`,
      );
      this.refusedUnlogged = 0;
      this.refusedLoggedAt = now;
    }
    const err =
      reason === 'missing'
        ? unauthorized(ERROR_ID, `a broker secret is required (${SECRET_HEADER})`)
        : forbidden(ERROR_ID, 'wrong broker secret');
    this.fail(res, err, true);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const { subscriptions, maxMessageBytes } = this.options;
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
    // Before anything about the subscriptions is looked at: a stranger learns nothing.
    const auth = this.options.secret.check(req.headers[SECRET_FIELD]);
    if (auth !== 'ok') return this.refuse(req, res, auth);
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
      const group = subscriptions.liveGroup(id, topic);
      if (group) subs.push(group);
      else (missing ??= []).push(id);
    }
    if (subs.length === 0) {
      const what = ids.length === 1 ? `subscription ${ids[0]}` : `subscriptions ${missing!.join(', ')}`;
      return this.fail(res, notFound(ERROR_ID, `${what} to topic ${topic}: not found`), false, ids.length === 1 ? undefined : missing);
    }
    // A declared length over the limit is answered before any of the body is read (readBody
    // would also refuse it, but drain the body first).
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > maxMessageBytes) {
      return this.fail(res, payloadTooLarge(ERROR_ID, `body over ${maxMessageBytes} bytes`), true);
    }
    readBody(req, maxMessageBytes, ERROR_ID).then(
      (body) => {
        if (missing) {
          this.fail(res, notFound(ERROR_ID, `subscriptions ${missing.join(', ')} to topic ${topic}: not found`), false, missing);
        } else {
          res.statusCode = 202;
          res.setHeader('Content-Length', 0);
          res.end();
        }
        const bytes = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
        // Each subscription gets its own copy (the last one the original: earlier handlers cannot
        // touch it).
        subscriptions.fanOut(subs, topic, header, bytes, true);
      },
      (err: unknown) => {
        // A body over the limit: the answer says so and Connection: close ends the socket once it
        // is out (the rest of the body is dropped). A request that broke off gets no answer.
        if (!(err instanceof MeshError) || err.code !== 413) return;
        this.fail(res, payloadTooLarge(ERROR_ID, `body over ${maxMessageBytes} bytes`), true);
        res.once('finish', () => req.destroy());
      },
    );
  }
}
