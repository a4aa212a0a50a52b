/**
 * gRPC calls passed through unchanged (docs/grpc.md, "Native gRPC through the gateway and the
 * sidecar"): an HTTP/2 request of content type `application/grpc` (`+proto`, `+json`, ...) at
 * `/<package.Service>/<Method>` goes to a node of the mesh service chosen for it, each call
 * balanced on its own (not each connection) over one HTTP/2 connection per node. Headers (the
 * call's metadata), messages, trailers and the status pass as they are; nothing is transcoded.
 *
 * - The budget: `grpc-timeout` (or `Mesh-Timeout`, the shorter of the two), sent on to the node as
 *   what is left of it; past it the call ends DEADLINE_EXCEEDED and the node's stream is reset.
 * - Cancellation travels both ways: a client that resets its stream resets the node's, and a node
 *   that resets ends the client's (UNAVAILABLE when no answer had started, else the same reset).
 * - Retries, up to --client_retries: a call that never reached a node (no node could be connected
 *   to) is sent to another; and a call whose node answered a status of --grpc_retry_on before any
 *   message, whose whole request the front holds (./grpc-retry.ts), is sent again to another.
 *   Nothing is retried once a message of the answer (or its headers) reached the client.
 * - Flow control is HTTP/2's own, both ways: each side is read only as fast as the other drains.
 * - Errors before any answer are trailers-only answers with a gRPC status (UNAVAILABLE for no
 *   node, NOT_FOUND for no service, DEADLINE_EXCEEDED) and a `grpc-message`.
 *
 * Plain (h2c) to nodes that serve no TLS; mutual TLS with the workload certificate to a node that
 * says `mtls=true`, its SPIFFE ID checked; under --mtls=strict no plain node is called.
 */
import * as http2 from 'node:http2';
import { Transform, type Duplex, type TransformCallback } from 'node:stream';
import { CONNECTION_SPECIFIC } from '../../base/http/front-types.js';
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { PeerCertificate, TLSSocket } from 'node:tls';
import type { UpstreamLease, UpstreamTarget, AttemptOutcome } from '../../core/upstream/types.js';
import type { ClusterManager } from '../../core/upstream/cluster-manager.js';
import { MTLS_METADATA_KEY, spiffeIdOf, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import { spiffeIdentityError } from '../../core/transport/grpc/credentials.js';
import { leaseWithin } from '../../core/client/budget.js';
import { MeshError } from '../../base/errors.js';
import type { Counter, StatsScope, StatsStore } from '../../base/stats/store.js';
import { formatTraceparent, TRACEPARENT, TRACESTATE, type TraceContext } from '../../base/util/trace-context.js';
import { HOLD_HEADERS_MS, RequestHold } from './grpc-retry.js';

const { NGHTTP2_CANCEL, NGHTTP2_FLAG_END_STREAM, HTTP2_HEADER_STATUS, HTTP2_HEADER_PATH, HTTP2_HEADER_AUTHORITY, HTTP2_HEADER_METHOD, HTTP2_HEADER_SCHEME } = http2.constants;

/** gRPC status codes used here. */
export const GRPC_CODES = { ok: 0, cancelled: 1, unknown: 2, invalidArgument: 3, deadline: 4, notFound: 5, resourceExhausted: 8, unimplemented: 12, internal: 13, unavailable: 14 } as const;

/** Whether a content type is gRPC's (`application/grpc`, `application/grpc+proto`, ...; not gRPC-Web). */
export function isGrpcContentType(type: string | undefined): boolean {
  if (!type) return false;
  const t = type.toLowerCase();
  return t === 'application/grpc' || t.startsWith('application/grpc+') || t.startsWith('application/grpc;');
}

/** A gRPC method path `/<package.Service>/<Method>`: its service and method; undefined for any other path. */
export function grpcMethodOf(path: string): { service: string; method: string } | undefined {
  const m = /^\/([A-Za-z_][A-Za-z0-9_.]*)\/([A-Za-z_][A-Za-z0-9_]*)$/.exec(path);
  return m ? { service: m[1]!, method: m[2]! } : undefined;
}

const UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

/** `grpc-timeout` (`100m`, `5S`: up to 8 digits and a unit) in ms; undefined when absent or malformed. */
export function parseGrpcTimeout(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const m = /^([0-9]{1,8})([HMSmun])$/.exec(value);
  return m ? Number(m[1]) * UNITS[m[2]!]! : undefined;
}

/** A budget in ms as `grpc-timeout` (milliseconds, at least 1). */
export function formatGrpcTimeout(ms: number): string {
  return `${Math.max(1, Math.min(99_999_999, Math.ceil(ms)))}m`;
}

/**
 * Headers that never cross an HTTP/2 hop (RFC 9113 8.2.2), but `te: trailers`, which gRPC
 * requires, or that this hop writes itself (Host is `:authority`; the budget is re-encoded).
 */
const NOT_FORWARDED: ReadonlySet<string> = new Set([...[...CONNECTION_SPECIFIC].filter((h) => h !== 'te'), 'host', 'grpc-timeout', 'mesh-timeout']);

/**
 * The request's headers for the node: its metadata as sent, the pseudo-headers this hop's, and
 * with `trace` the trace context this hop's (`traceparent`, `tracestate`: the node's parent is this
 * hop, not the client).
 */
export function requestHeaders(headers: IncomingHttpHeaders, path: string, authority: string, timeoutMs: number | undefined, trace?: TraceContext): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = { [HTTP2_HEADER_METHOD]: 'POST', [HTTP2_HEADER_PATH]: path, [HTTP2_HEADER_AUTHORITY]: authority, [HTTP2_HEADER_SCHEME]: 'http' };
  for (const name in headers) {
    if (name.startsWith(':') || NOT_FORWARDED.has(name)) continue;
    if (trace && (name === TRACEPARENT || name === TRACESTATE)) continue;
    out[name] = headers[name];
  }
  if (timeoutMs !== undefined) out['grpc-timeout'] = formatGrpcTimeout(timeoutMs);
  if (trace) {
    out[TRACEPARENT] = formatTraceparent(trace);
    if (trace.state !== undefined) out[TRACESTATE] = trace.state;
  }
  return out;
}

/** The node's answer headers for the client: all but the connection-specific ones. */
function answerHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    if ((name.startsWith(':') && name !== HTTP2_HEADER_STATUS) || NOT_FORWARDED.has(name)) continue;
    out[name] = headers[name];
  }
  return out;
}

/** `grpc-message` is percent-encoded (the gRPC HTTP/2 protocol): only printable ASCII but `%` as is. */
export function encodeGrpcMessage(message: string): string {
  return Buffer.from(message, 'utf8').reduce((s, b) => s + (b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`), '');
}

/**
 * The HTTP/2 connections to the nodes, one per node (the calls to it multiplexed), closed when the
 * node leaves its cluster. Counts them in the node's cx_* stats.
 */
export class GrpcConnections {
  private readonly sessions = new Map<string, ClientHttp2Session>();
  /** The workload context a mutual TLS session was made with: a renewed certificate makes a new one for later calls. */
  private readonly contexts = new WeakMap<ClientHttp2Session, unknown>();
  /** Sessions whose connection came up (a stream of one that did not never reached the node). */
  private readonly connected = new WeakSet<ClientHttp2Session>();

  constructor(private readonly workload: () => WorkloadTls | undefined) {}

  /** The connection to a node (opened on first use); throws when the security settings refuse the node. */
  session(target: UpstreamTarget, service: string): ClientHttp2Session {
    const key = target.key;
    const workload = this.workload();
    const open = this.sessions.get(key);
    const context = this.contexts.get(open!);
    if (open && !open.closed && !open.destroyed && (context === undefined || context === workload?.secureContext())) return open;
    // Calls in flight finish on a replaced session.
    open?.close();
    const strict = workload?.mode === 'strict';
    const mtls = workload && workload.mode !== 'off' && target.metadata[MTLS_METADATA_KEY] === 'true';
    if (strict && !mtls) throw Object.assign(new Error(`node ${key} serves no mutual TLS (--mtls=strict)`), { refused: true });
    const session = mtls
      ? http2.connect(`https://${target.address}:${target.port}`, {
          secureContext: workload.secureContext(),
          ALPNProtocols: ['h2'],
          servername: undefined,
          checkServerIdentity: (_host: string, cert: PeerCertificate) => spiffeIdentityError(cert, spiffeIdOf(workload.trustDomain, service), key),
        })
      : http2.connect(`http://${target.address}:${target.port}`);
    if (mtls) this.contexts.set(session, workload.secureContext());
    target.connectionOpened?.();
    session.once('connect', () => this.connected.add(session));
    let forget: (() => void) | undefined;
    session.once('close', () => {
      target.connectionClosed?.();
      forget?.();
      if (this.sessions.get(key) === session) this.sessions.delete(key);
    });
    session.on('error', () => {});
    // Every call that comes while the connection is being made waits on its 'connect' and 'error'
    // (and stops listening once it is up): as many listeners as calls in flight, not a leak.
    session.setMaxListeners(0);
    // An idle connection is not kept open for ever: it closes after a minute without a stream.
    session.setTimeout(60_000, () => session.close());
    forget = target.onClose?.(() => session.close());
    this.sessions.set(key, session);
    return session;
  }

  /** Whether the session's connection came up. */
  isConnected(session: ClientHttp2Session): boolean {
    return this.connected.has(session);
  }

  /** Closes every connection (shutdown): calls in flight finish first. */
  close(): void {
    for (const s of this.sessions.values()) s.close();
    this.sessions.clear();
  }
}

export interface GrpcPassOptions {
  clusters: ClusterManager;
  connections: GrpcConnections;
  /** The mesh service to call. */
  service: string;
  /** --client_retries: tries after a failure to connect, or after a status of `retryOn`. */
  retries: number;
  /** The gRPC statuses a call is tried again on another node for, when that is safe (--grpc_retry_on; ./grpc-retry.ts); none by default. */
  retryOn?: readonly number[];
  /** Told of each retry after a status: the status and the node that answered it. */
  onRetry?: (code: number, host: string) => void;
  /** This hop's trace context, sent to the node as its `traceparent` metadata in place of the client's. */
  trace?: TraceContext;
  /** How long to wait for a node when the call has no budget of its own (ms). */
  acquireTimeoutMs: number;
  /** The call's end (grpc-timeout, Mesh-Timeout), as a Date.now() time; undefined: none. */
  deadline?: number;
  /**
   * The stream is served through node:http2's compatibility response (the front server's), which
   * sends its own trailers when the stream wants them: the node's are given to it here.
   */
  compatTrailers?: (trailers: OutgoingHttpHeaders) => void;
  /** The largest request message passed on (its length prefix says it); a larger one ends the call RESOURCE_EXHAUSTED. */
  maxMessageBytes?: number;
  /** Told once with the call's gRPC status (for stats and access logs). */
  onStatus?: (code: number, host: string | undefined) => void;
  /** Only the nodes of this registry version of the service (a GRPCRoute's backendRef). */
  version?: string;
  /** Changes the node's answer headers (not its trailers) before the client gets them (a GRPCRoute's ResponseHeaderModifier). */
  answerHeaders?: (headers: OutgoingHttpHeaders) => void;
  /** Told each chunk of the request as it goes to the node, then undefined at its end (a GRPCRoute's RequestMirror). */
  tap?: (chunk: Buffer | undefined) => void;
}

/**
 * What a call is answered on: the client's HTTP/2 stream, or a stream that acts as one (a gRPC-Web
 * call over HTTP/1.1 or HTTP/2, ./grpc-web.ts).
 */
export type GrpcDownstream = Duplex & Pick<ServerHttp2Stream, 'respond' | 'sendTrailers' | 'close' | 'closed' | 'headersSent' | 'rstCode'>;

/** Runs a write on a stream that the peer may have reset meanwhile (node throws then): the reset already ended the call. */
function guarded(write: () => void): void {
  try {
    write();
  } catch {
    // ERR_HTTP2_INVALID_STREAM, ERR_HTTP2_HEADERS_SENT, ERR_HTTP2_TRAILERS_ALREADY_SENT: nothing left to answer.
  }
}

/** Answers a call that reached no node: a trailers-only answer with a gRPC status. */
export function refuseGrpc(stream: GrpcDownstream, code: number, message: string): void {
  if (stream.destroyed || stream.closed) return;
  if (stream.headersSent) {
    stream.close(NGHTTP2_CANCEL);
    return;
  }
  guarded(() => stream.respond({ [HTTP2_HEADER_STATUS]: 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(message) }, { endStream: true }));
  // The client's request body, if any, is not wanted.
  stream.resume();
}

/**
 * Passes one gRPC call (`stream`, `headers`: the client's HTTP/2 stream and its headers) through to
 * a node of `options.service`.
 */
export function passGrpcCall(stream: GrpcDownstream, headers: IncomingHttpHeaders, options: GrpcPassOptions): void {
  const path = String(headers[HTTP2_HEADER_PATH] ?? '');
  const tried = new Set<string>();
  /** Tries made (a host may be tried again when it is the only one). */
  let tries = 0;
  let reported = false;
  const report = (code: number, host?: string) => {
    if (reported) return;
    reported = true;
    // The call's status is known: the deadline no longer ends it.
    clearTimeout(deadlineTimer);
    options.onStatus?.(code, host);
  };
  const fail = (code: number, message: string, host?: string) => {
    report(code, host);
    refuseGrpc(stream, code, message);
  };
  const deadline = options.deadline;
  let deadlineTimer: NodeJS.Timeout | undefined;
  let upstream: ClientHttp2Stream | undefined;
  let clientGone = false;
  /** The client's request went to a node (piped): a later try sends the held copy (`again`). */
  let piped = false;
  /** The copy of the request kept for a retry after a status (./grpc-retry.ts); none when no status is retried. */
  let hold: RequestHold | undefined;
  /** The whole request, sent again by a retry after a status. */
  let again: Buffer | undefined;
  /** The answer of the node last dropped for a retry (its status as a trailers-only answer): what the client gets when no retry can be made. */
  let dropped: { answer: OutgoingHttpHeaders; code: number; host: string } | undefined;
  /** The trailers of the answer passed on. */
  let trailers: OutgoingHttpHeaders | undefined;
  const retryOn = options.retryOn ?? [];
  const compat = options.compatTrailers;
  const noStatus = { 'grpc-status': String(GRPC_CODES.internal), 'grpc-message': encodeGrpcMessage('the node sent no status') };
  // node:http2's compatibility response sends the trailers given to it when the stream wants them; a bare stream, these.
  if (!compat) stream.on('wantTrailers', () => guarded(() => stream.sendTrailers(trailers ?? noStatus)));
  stream.once('close', () => {
    clearTimeout(deadlineTimer);
    if (!stream.writableFinished || stream.rstCode !== 0) {
      clientGone = true;
      if (upstream && !upstream.closed) upstream.close(NGHTTP2_CANCEL);
      // Gone while no node had the call (a node being found or connected to): cancelled.
      else report(GRPC_CODES.cancelled);
    }
  });
  if (deadline !== undefined) {
    deadlineTimer = setTimeout(() => {
      if (upstream && !upstream.closed) upstream.close(NGHTTP2_CANCEL);
      fail(GRPC_CODES.deadline, `deadline exceeded (${path})`);
    }, Math.max(0, deadline - Date.now()));
  }

  /** Answers with the status of the node whose answer was dropped for a retry that could not be made. */
  const answerDropped = (): void => {
    const d = dropped!;
    report(d.code, d.host);
    if (stream.destroyed || stream.closed || stream.headersSent) return;
    guarded(() => stream.respond(d.answer, { endStream: true }));
    stream.resume();
  };

  /** `afterStatus`: a retry after a node's status (counted against the retry budget), not after a failure to connect. */
  const attempt = (retry: boolean, afterStatus = false): void => {
    if (clientGone || reported) return;
    const clusters = options.clusters;
    const acquireOptions = { exclude: tried, retry, afterConnectFailure: retry && !afterStatus, version: options.version };
    const waitUntil = deadline ?? Date.now() + options.acquireTimeoutMs;
    let leased: Promise<UpstreamLease | undefined>;
    try {
      const now = clusters.acquireNow(options.service, acquireOptions);
      leased = now ? Promise.resolve(now) : leaseWithin(clusters.acquire(options.service, acquireOptions), waitUntil);
    } catch (err) {
      leased = Promise.reject(err);
    }
    leased.then(
      (lease) => (lease ? send(lease) : afterStatus ? answerDropped() : fail(GRPC_CODES.unavailable, `${options.service}: no node answered in time`)),
      (err: unknown) => {
        // A retry after a status that cannot be made (the retry budget, no node): the node's answer stands.
        if (afterStatus) return answerDropped();
        const e = err instanceof MeshError ? err : undefined;
        fail(e?.code === 404 ? GRPC_CODES.notFound : GRPC_CODES.unavailable, e ? e.detail : `${options.service}: ${(err as Error).message}`);
      },
    );
  };

  const send = (lease: UpstreamLease): void => {
    const target = lease.target;
    const started = Date.now();
    let released = false;
    const release = (outcome: AttemptOutcome) => {
      if (released) return;
      released = true;
      lease.release(outcome, Date.now() - started);
    };
    if (clientGone || reported) return release({ kind: 'cancelled' });
    tried.add(target.key);
    tries++;
    let session: ClientHttp2Session;
    try {
      session = options.connections.session(target, options.service);
    } catch (err) {
      release({ kind: 'cancelled' });
      return fail(GRPC_CODES.unavailable, `${options.service} on ${target.key}: ${(err as Error).message}`, target.key);
    }
    if (options.connections.isConnected(session)) return start(session, target, release);
    // Nothing of the call is read until the node's connection is up: a node that cannot be
    // connected to leaves the call whole, to be sent to another.
    const onConnect = () => {
      session.off('error', onError);
      start(session, target, release);
    };
    const onError = (err: Error) => {
      session.off('connect', onConnect);
      release({ kind: 'connect_failure' });
      retryOrFail(err.message, target.key);
    };
    session.once('connect', onConnect);
    session.once('error', onError);
  };

  const start = (session: ClientHttp2Session, target: UpstreamTarget, release: (outcome: AttemptOutcome) => void): void => {
    if (clientGone || reported) return release({ kind: 'cancelled' });
    const left = deadline === undefined ? undefined : deadline - Date.now();
    let up: ClientHttp2Stream;
    try {
      up = session.request(requestHeaders(headers, path, String(headers[HTTP2_HEADER_AUTHORITY] ?? options.service), left, options.trace), { endStream: false });
    } catch (err) {
      release({ kind: 'reset' });
      return fail(GRPC_CODES.unavailable, `${options.service} on ${target.key}: ${(err as Error).message}`, target.key);
    }
    upstream = up;
    let answered = false;
    /** Something of this try's answer reached the client (its headers at least): it is never retried. */
    let forwarded = false;
    /** The node's answer headers, held back while the answer may still be retried (no message yet). */
    let held: OutgoingHttpHeaders | undefined;
    /** This try was dropped for a retry: nothing more of it is passed on. */
    let abandoned = false;
    let status: number | undefined;
    let heldTimer: NodeJS.Timeout | undefined;
    const forwardHeld = () => {
      clearTimeout(heldTimer);
      if (!held) return;
      const out = held;
      held = undefined;
      forwarded = true;
      hold?.forget();
      guarded(() => stream.respond(out, { waitForTrailers: true }));
    };
    /**
     * Drops this try's answer and tries another node, when it is safe: a status of --grpc_retry_on,
     * nothing of the answer passed on, the whole request held, tries and time left.
     */
    const retryAfter = (code: number, answer: OutgoingHttpHeaders): boolean => {
      if (!retryOn.includes(code) || forwarded || clientGone || reported || tries > options.retries) return false;
      const body = hold?.whole();
      if (body === undefined || (deadline !== undefined && deadline <= Date.now())) return false;
      abandoned = true;
      held = undefined;
      clearTimeout(heldTimer);
      again = body;
      dropped = { answer, code, host: target.key };
      release({ kind: 'response', status: code === GRPC_CODES.unavailable ? 503 : 200 });
      options.onRetry?.(code, target.key);
      attempt(true, true);
      return true;
    };
    // Messages to the client, with HTTP/2's flow control: the node is read as fast as the client
    // takes it. Read only from the node's answer headers on: node:http2 emits 'response' on the
    // next tick, and when it reads the HEADERS and a DATA frame inside another call (TLS does,
    // under load) the 'data' comes first. A message written to the client before its headers
    // makes node answer on its own (:status 200, and no trailers: the client gets no status).
    const onDrain = () => up.resume();
    const readAnswer = () => {
      stream.on('drain', onDrain);
      up.on('data', (chunk: Buffer) => {
        if (abandoned) return;
        forwardHeld();
        if (!stream.write(chunk)) up.pause();
      });
    };
    up.on('response', (h: IncomingHttpHeaders, flags: number) => {
      answered = true;
      if (stream.destroyed || stream.closed) return;
      const out = answerHeaders(h);
      options.answerHeaders?.(out);
      if (flags & NGHTTP2_FLAG_END_STREAM) {
        // Trailers-only: the status is in these headers; nothing to read.
        up.resume();
        status = Number(h['grpc-status'] ?? GRPC_CODES.unknown);
        if (retryAfter(status, out)) return;
        forwarded = true;
        // Told now, not when the node's stream closes: the client's answer may close first (the access log's status).
        report(status, target.key);
        guarded(() => stream.respond(out, { endStream: true }));
        return;
      }
      held = out;
      // Held until a message or the trailers come (HOLD_HEADERS_MS at most), while a status may still be retried.
      if (retryOn.length === 0 || hold?.whole() === undefined || tries > options.retries) forwardHeld();
      else heldTimer = setTimeout(forwardHeld, HOLD_HEADERS_MS);
      readAnswer();
    });
    up.on('trailers', (t: IncomingHttpHeaders) => {
      status = Number(t['grpc-status'] ?? GRPC_CODES.unknown);
      if (held && retryAfter(status, { ...held, ...answerHeaders(t) })) return;
      forwardHeld();
      trailers = answerHeaders(t);
      report(status, target.key);
      compat?.(trailers);
    });
    if (compat) up.once('end', () => !abandoned && trailers === undefined && compat(noStatus));
    up.once('end', () => !abandoned && stream.end());
    if (piped) {
      // A retry after a status: the request held, whole.
      up.end(again);
    } else {
      piped = true;
      let source: NodeJS.ReadableStream = stream;
      if (options.maxMessageBytes !== undefined) {
        const limit = new GrpcMessageLimit(options.maxMessageBytes, (size) => {
          stream.unpipe(limit);
          if (upstream && !upstream.closed) upstream.close(NGHTTP2_CANCEL);
          fail(GRPC_CODES.resourceExhausted, `a request message of ${size} bytes is larger than ${options.maxMessageBytes} bytes (--max_body_size)`, target.key);
        });
        source = stream.pipe(limit);
      }
      if (retryOn.length > 0 && options.retries > 0) source = source.pipe((hold = new RequestHold()));
      source.pipe(options.tap ? tapInto(options.tap, up) : up, { end: true });
    }
    up.once('close', () => {
      stream.off('drain', onDrain);
      clearTimeout(heldTimer);
      if (abandoned) return;
      const rst = up.rstCode ?? 0;
      if (status !== undefined && rst === 0) {
        release({ kind: 'response', status: status === GRPC_CODES.unavailable ? 503 : 200 });
        report(status, target.key);
        return;
      }
      if (clientGone) {
        release({ kind: 'cancelled' });
        report(GRPC_CODES.cancelled, target.key);
        return;
      }
      if (reported) return release({ kind: 'cancelled' }); // the deadline
      if (!answered || !forwarded) {
        release({ kind: 'reset' });
        return fail(GRPC_CODES.unavailable, `${options.service} on ${target.key}: the node reset the call (code ${rst})`, target.key);
      }
      release({ kind: 'reset' });
      report(GRPC_CODES.unavailable, target.key);
      if (!stream.closed) stream.close(rst || NGHTTP2_CANCEL);
    });
    up.on('error', () => {});
  };

  const retryOrFail = (why: string, host: string): void => {
    if (tries <= options.retries) return attempt(true);
    fail(GRPC_CODES.unavailable, `${options.service}: ${why} (the last of ${tries} tries, on ${host})`, host);
  };

  stream.on('error', () => {});
  attempt(false);
}

/** A stream that passes what is written to it on to `into`, telling `tap` each chunk and the end (undefined). */
function tapInto(tap: (chunk: Buffer | undefined) => void, into: NodeJS.WritableStream): Transform {
  const t = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      tap(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      tap(undefined);
      callback();
    },
  });
  t.pipe(into, { end: true });
  return t;
}

/** The TLS socket of a server stream's session, when it is one. */
export function tlsSocketOf(stream: ServerHttp2Stream): TLSSocket | undefined {
  const socket = stream.session?.socket as TLSSocket | undefined;
  return socket && 'encrypted' in socket ? socket : undefined;
}

/**
 * Passes a gRPC request stream on unchanged while reading each message's 5-byte prefix (a flag and
 * a 32-bit length): a message longer than `max` is not passed on; `tooLarge` is told its length.
 */
export class GrpcMessageLimit extends Transform {
  /** Bytes of the current prefix read so far, and of the current message still to come. */
  private readonly prefix = Buffer.alloc(5);
  private prefixRead = 0;
  private bodyLeft = 0;
  private stopped = false;

  constructor(
    private readonly max: number,
    private readonly tooLarge: (size: number) => void,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.stopped) return callback();
    let at = 0;
    while (at < chunk.length) {
      if (this.bodyLeft > 0) {
        const take = Math.min(this.bodyLeft, chunk.length - at);
        this.bodyLeft -= take;
        at += take;
        continue;
      }
      const take = Math.min(5 - this.prefixRead, chunk.length - at);
      chunk.copy(this.prefix, this.prefixRead, at, at + take);
      this.prefixRead += take;
      at += take;
      if (this.prefixRead < 5) break;
      this.prefixRead = 0;
      const size = this.prefix.readUInt32BE(1);
      if (size > this.max) {
        this.stopped = true;
        this.tooLarge(size);
        return callback();
      }
      this.bodyLeft = size;
    }
    callback(null, chunk);
  }
}

/** Families of gRPC call stats at most (a caller chooses the method names: the rest count as `_other`). */
const MAX_GRPC_FAMILIES = 200;

/**
 * The stats of the calls passed through, as Envoy's gRPC stats filter names them:
 * `cluster.<mesh service>.grpc.<package.Service>.<Method>.total`, `.success` (status 0),
 * `.failure`, and `.<status code>` per code; `.retry`, the tries made again after a node's status
 * (--grpc_retry_on); past MAX_GRPC_FAMILIES families, `.grpc._other.`.
 */
export class GrpcCallStats {
  private readonly families = new Map<string, { total: Counter; success: Counter; failure: Counter; retry: Counter; scope: StatsScope; codes: Map<number, Counter> }>();

  constructor(private readonly stats: StatsStore) {}

  private family(service: string, grpcService: string, method: string) {
    let key = `${service}/${grpcService}/${method}`;
    let family = this.families.get(key);
    if (!family) {
      const other = this.families.size >= MAX_GRPC_FAMILIES;
      if (other) key = `${service}/_other`;
      family = this.families.get(key);
      if (!family) {
        const scope = this.stats.scope(other ? `cluster.${service}.grpc._other.` : `cluster.${service}.grpc.${grpcService}.${method}.`);
        family = { total: scope.counter('total'), success: scope.counter('success'), failure: scope.counter('failure'), retry: scope.counter('retry'), scope, codes: new Map() };
        this.families.set(key, family);
      }
    }
    return family;
  }

  /** A call ended with `code`. */
  record(service: string, grpcService: string, method: string, code: number): void {
    const family = this.family(service, grpcService, method);
    family.total.inc();
    (code === GRPC_CODES.ok ? family.success : family.failure).inc();
    if (!Number.isInteger(code) || code < 0 || code > 16) return;
    let counter = family.codes.get(code);
    if (!counter) {
      counter = family.scope.counter(String(code));
      family.codes.set(code, counter);
    }
    counter.inc();
  }

  /** A call was tried again after a node's status. */
  retried(service: string, grpcService: string, method: string): void {
    this.family(service, grpcService, method).retry.inc();
  }
}
