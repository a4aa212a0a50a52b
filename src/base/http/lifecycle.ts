/**
 * Listening, limits and draining, shared by every HTTP server of the project that takes traffic
 * (front ends: gateway, sidecar, proxy listeners; the framework's RPC server):
 * - a connection cap (--max_connections): Node closes a connection over it at accept and emits
 *   'drop', counted in `http.<prefix>.downstream_cx_overflow`;
 * - header and whole-request read timeouts (--request_headers_timeout, --request_timeout), checked
 *   every second;
 * - a header-count limit (MAX_HEADER_COUNT);
 * - a drain: every answer carries `Connection: close`, idle keep-alive connections are closed,
 *   then the listener closes and in-flight requests get up to --drain_timeout before they are cut off.
 */
import type { Server, ServerOptions } from 'node:http';
import type { FrontRequest, FrontResponse } from './front-types.js';
import type { AddressInfo, Socket } from 'node:net';
import type { ServerHttp2Session } from 'node:http2';
import { isHttp2Response } from './front-types.js';
import { declareStats, type Counter, type StatsStore } from '../stats/store.js';
import { HTTP_LIFECYCLE_STATS } from './stats.js';
import type { ReusePortListening } from './reuse-port.js';

/**
 * The requests (or connections) in flight: an array with each member's index stored on it, so
 * adding and removing cost O(1) and leave nothing behind. Not a Set on purpose: a Set that many
 * short-lived members pass through is rehashed every few dozen adds, and V8 keeps each old table
 * linked to its successor (for iterators). Once one old table has been promoted to the old
 * generation and dropped, it still points at its successors and at the members it held, so the
 * scavenger keeps whole request graphs alive and promotes them until the next full collection.
 */
class Tracked<T extends object> {
  private readonly list: T[] = [];
  /** Where each member's index is kept (on the member itself). */
  private readonly slot = Symbol('slot');

  get size(): number {
    return this.list.length;
  }

  add(item: T): void {
    const s = item as unknown as Record<symbol, number | undefined>;
    if (s[this.slot] !== undefined) return;
    s[this.slot] = this.list.length;
    this.list.push(item);
  }

  delete(item: T): void {
    const s = item as unknown as Record<symbol, number | undefined>;
    const i = s[this.slot];
    if (i === undefined || this.list[i] !== item) return;
    s[this.slot] = undefined;
    const last = this.list.pop()!;
    if (last !== item) {
      this.list[i] = last;
      (last as unknown as Record<symbol, number | undefined>)[this.slot] = i;
    }
  }

  /** A copy: members may leave while the caller iterates. */
  items(): T[] {
    return this.list.slice();
  }
}

/** Requests with more header fields than this get 431 (Node would silently drop the extra ones). */
export const MAX_HEADER_COUNT = 100;

/** node:http's default maxHeadersCount: the header fields it parses at most. */
export const NODE_MAX_HEADERS_COUNT = 2000;

/** How often Node checks the header and request timeouts (its default is 30 s). */
const TIMEOUT_CHECK_MS = 1000;

/** Idle keep-alive connections are closed after this. */
export const KEEP_ALIVE_MS = 65_000;

/**
 * Listens and resolves with the bound address; a bind error (EADDRINUSE...) rejects. With
 * `reusePort` (a worker of --concurrency where Node has it), the socket is this process's own.
 */
export function listenOn(server: Server, host: string, port: number, reusePort?: ReusePortListening): Promise<AddressInfo> {
  if (reusePort) return reusePort.listen(server, host, port);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** The limits of one server, from the flags. Durations in ms; 0 means no limit. */
export interface ServerLimits {
  maxConnections: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  drainTimeoutMs: number;
}

/** The limits from the resolved options (src/process/options.ts: durations in ms). */
export function serverLimits(options: { maxConnections: number; requestHeadersTimeout: number; requestTimeout: number; drainTimeout: number }): ServerLimits {
  return {
    maxConnections: options.maxConnections,
    headersTimeoutMs: Math.ceil(options.requestHeadersTimeout),
    requestTimeoutMs: Math.ceil(options.requestTimeout),
    drainTimeoutMs: options.drainTimeout,
  };
}

/** node:http(s) server options for these limits. */
export function httpServerOptions(limits: ServerLimits): ServerOptions {
  return {
    keepAliveTimeout: KEEP_ALIVE_MS,
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: TIMEOUT_CHECK_MS,
  };
}

/** The header-field count of a request when it is over MAX_HEADER_COUNT, else 0. */
export function tooManyHeaders(req: FrontRequest): number {
  const count = req.rawHeaders.length / 2;
  return count > MAX_HEADER_COUNT ? count : 0;
}

/** What a drain could not finish: requests still in flight at --drain_timeout, and their connections. */
export interface DrainResult {
  requestsCutOff: number;
  connectionsCutOff: number;
}

/** Something the runtime drains on shutdown (see Runtime.shutdown). */
export interface Drainable {
  /**
   * From now on every answer carries `Connection: close`. Idle keep-alive connections stay open
   * until close(): closing one races with a request a peer may be sending on it at that moment
   * (the peer sees a reset), while a request that arrives on it is simply answered and closed.
   */
  beginDrain(): void;
  /** Stops accepting, waits for in-flight requests up to the drain timeout, then closes the rest. */
  close(): Promise<DrainResult>;
}

export interface ServerStatNames {
  stats: StatsStore;
  /** `http.<prefix>.`; the counters below are created under it. */
  prefix: string;
}

/**
 * Connection cap, in-flight tracking and the drain of one node:http(s) server. Call request()
 * for each request the server answers.
 */
export class ServerLifecycle implements Drainable {
  private readonly sockets = new Tracked<Socket>();
  private readonly responses = new Tracked<FrontResponse>();
  /** The HTTP/2 connections (--enable_http2), each a session of streams. */
  private readonly sessions = new Tracked<ServerHttp2Session>();
  private readonly waiters: Array<() => void> = [];
  private draining = false;
  private closing?: Promise<DrainResult>;
  private readonly drainClose: Counter;
  private readonly destroyActive: Counter;

  constructor(
    private readonly server: Server,
    private readonly limits: ServerLimits,
    stats: ServerStatNames,
    /** Ends connections the HTTP server no longer tracks (upgraded ones) before they are destroyed. */
    private readonly closeOthers?: () => Promise<void> | void,
  ) {
    const { overflow, drainClose, destroyActive } = declareStats(stats.stats.scope(stats.prefix), HTTP_LIFECYCLE_STATS);
    this.drainClose = drainClose;
    this.destroyActive = destroyActive;
    // Node's own default bound (2000 fields; the header size limit bounds the parse too), well above
    // MAX_HEADER_COUNT, so that a request over the limit reaches tooManyHeaders (431 naming the count)
    // on every Node: from Node 23 on the parser refuses a request over maxHeadersCount itself
    // (HPE_HEADER_OVERFLOW, which reads as a header block too large); Node 20 drops the extra fields.
    server.maxHeadersCount = NODE_MAX_HEADERS_COUNT;
    // Over the cap Node closes the accepted handle at once (no socket, no file descriptor kept) and emits 'drop'.
    if (limits.maxConnections > 0) server.maxConnections = limits.maxConnections;
    server.on('drop', () => overflow.inc());
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
  }

  /**
   * An HTTP/2 connection the server serves: while draining it gets GOAWAY (graceful: the streams it
   * has finish, the client opens new ones on another connection), and is destroyed on close().
   */
  addSession(session: ServerHttp2Session): void {
    this.sessions.add(session);
    session.once('close', () => this.sessions.delete(session));
    if (this.draining) this.goAway(session);
  }

  private goAway(session: ServerHttp2Session): void {
    if (session.closed || session.destroyed) return;
    this.drainClose.inc();
    session.close();
  }

  get isDraining(): boolean {
    return this.draining;
  }

  /** Number of requests being answered. */
  get inFlight(): number {
    return this.responses.size;
  }

  /** Tracks one request until its response closes; while draining its answer closes the connection. */
  request(res: FrontResponse): void {
    this.track(res);
    res.once('close', () => this.untrack(res));
  }

  /** request() for a caller that listens for the response's 'close' itself and then calls untrack(res). */
  track(res: FrontResponse): void {
    this.responses.add(res);
    if (this.draining) this.closeAfter(res);
  }

  /** The response of a track()ed request closed. */
  untrack(res: FrontResponse): void {
    this.responses.delete(res);
    if (this.responses.size === 0 && this.waiters.length > 0) for (const w of this.waiters.splice(0)) w();
  }

  beginDrain(): void {
    if (this.draining) return;
    this.draining = true;
    for (const res of this.responses.items()) this.closeAfter(res);
    for (const session of this.sessions.items()) this.goAway(session);
  }

  close(): Promise<DrainResult> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private closeAfter(res: FrontResponse): void {
    // An HTTP/2 stream closes with its answer; its connection gets GOAWAY (goAway).
    if (isHttp2Response(res) || res.headersSent || !res.shouldKeepAlive) return;
    res.shouldKeepAlive = false;
    this.drainClose.inc();
  }

  private async doClose(): Promise<DrainResult> {
    this.beginDrain();
    const server = this.server;
    const closed = server.listening ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    server.closeIdleConnections();
    await this.idle(this.limits.drainTimeoutMs);
    // Connections: an HTTP/1.1 request's socket, an HTTP/2 stream's session.
    const cutOff = new Set<object>();
    for (const res of this.responses.items()) {
      if (isHttp2Response(res)) cutOff.add(res.stream.session ?? res);
      else if (res.socket) cutOff.add(res.socket);
    }
    const result: DrainResult = { requestsCutOff: this.responses.size, connectionsCutOff: cutOff.size };
    if (cutOff.size > 0) this.destroyActive.inc(cutOff.size);
    try {
      await this.closeOthers?.();
    } finally {
      server.closeAllConnections();
      for (const session of this.sessions.items()) session.destroy();
      for (const socket of this.sockets.items()) socket.destroy();
      await closed;
    }
    return result;
  }

  /** Resolves when nothing is in flight, or after timeoutMs. */
  private idle(timeoutMs: number): Promise<void> {
    if (this.responses.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
