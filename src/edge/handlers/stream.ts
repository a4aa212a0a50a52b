/**
 * Streaming endpoints at the edge (gateway rpc/api handlers, sidecar `/<service>/<method>`):
 *
 * - WebSocket on the endpoint's path: each text frame is one JSON message each way. For a server
 *   stream the first client frame is the request; for client and bidi streams every frame is a
 *   request and an empty frame ends the client's side. The backend ending the stream closes the
 *   socket with 1000; an error closes it with 4000 + the error code (1009 for a message over
 *   --max_body_size) and the error's detail as the reason. The client closing cancels the call.
 * - Server-Sent Events for server streams when the client sends `Accept: text/event-stream`
 *   (POST with the request JSON, or GET with the query as the request): each message is
 *   `data: <json>\n\n`, an error `event: error\ndata: <error json>\n\n`; the response ends with
 *   the stream.
 *
 * Whether an endpoint streams is read from the registry (the endpoint metadata `stream`), once per
 * service, then kept current by a registry watch (StreamKinds); for a service with a gRPC node
 * (`protocol=grpc`), from the method in the loaded .proto files, else from the node's reflection
 * service (asked as a unary call asks it: once a minute per node, within --client_request_timeout;
 * a node that does not answer is refused with 502, or 504 past the timeout; a method neither the
 * protos nor the reflection service have with 501). A WebSocket upgrade on a unary endpoint is
 * refused with 404 (no WebSocket endpoint there), an event-stream request for anything but a
 * server stream with 406.
 * Messages pass through undecoded, as JSON; backpressure reaches the backend both ways.
 */
import { flushHead, writeChunk, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { RawData, WebSocket, WebSocketServer } from 'ws';
import { wsLibrary } from '../../base/util/lazy-packages.js';
import { asFrontEndError, badGateway, badRequest, errorWithStatus, gatewayTimeout, MeshError, methodNotAllowed, notAcceptable, serviceNotFound, serviceUnavailable, unsupportedMediaType } from '../../base/errors.js';
import { mediaType } from '../../base/codec/codec.js';
import { JsonDepthError, jsonNestingExceeds } from '../../base/codec/json.js';
import { readBody } from '../../base/http/body.js';
import { drained, refuseSocket, sendError } from '../../base/http/respond.js';
import type { StreamCall } from '../../core/client/stream.js';
import { isStreamKind, type StreamKind } from '../../core/transport/frames.js';
import { TransportError } from '../../core/transport/rpc.js';
import { GRPC_PROTOCOL } from '../../core/transport/grpc/transport.js';
import { hostKey } from '../../core/upstream/host.js';
import { callOptionsFrom, queryObject, type EdgeHandlerContext } from './front-end.js';
import type { RpcRoute } from './resolve.js';

/** Bytes queued on a WebSocket before the next message is pulled from the backend. */
const WS_HIGH_WATER = 64 * 1024;
/** How long a closing WebSocket waits for the client's close frame. */
const CLOSE_GRACE_MS = 2000;

/** True when the request asks for Server-Sent Events. */
export function wantsEventStream(req: FrontRequest): boolean {
  const accept = req.headers.accept;
  return typeof accept === 'string' && accept.toLowerCase().includes('text/event-stream');
}

/** Services whose endpoint kinds a front end remembers (one registry read each, then watched). */
const KINDS_MAX = 1024;
/** gRPC nodes of a service asked in turn for a method's kind when one cannot be reached. */
const GRPC_NODES_ASKED = 3;

/** A gRPC node of a service: what the gRPC transport needs to find a method's kind. */
interface GrpcNode {
  key: string;
  metadata: Record<string, string>;
}

/**
 * The kinds of the streaming endpoints of services, read from the registry once per service and
 * forgotten when the registry reports a change of that service (one watch for the front end,
 * started on first use): opening a stream reads no registry. Bounded: dropped whole when full.
 */
export class StreamKinds {
  /** Per service: the kinds its records list, and its first gRPC nodes (none: not a gRPC service). */
  private readonly known = new Map<string, { kinds: Map<string, StreamKind>; grpc: GrpcNode[] }>();
  private watcher?: { stop(): void };

  constructor(private readonly fe: EdgeHandlerContext) {}

  /** The kind of a streaming endpoint; undefined for a unary (or unlisted) one. Unknown service: 404. */
  async of(route: RpcRoute): Promise<StreamKind | undefined> {
    let entry = this.known.get(route.service);
    if (!entry) {
      const registry = this.fe.edge.registry;
      this.watcher ??= registry.watch((event) => this.known.delete(event.service?.name));
      let versions;
      try {
        versions = await registry.getService(route.service);
      } catch (err) {
        throw serviceUnavailable(this.fe.errorId, `registry: ${(err as Error).message}`);
      }
      if (versions.length === 0) throw serviceNotFound(this.fe.errorId, route.service);
      const kinds = new Map<string, StreamKind>();
      const grpc: GrpcNode[] = [];
      for (const version of versions) {
        for (const endpoint of version.endpoints ?? []) {
          const kind = endpoint.metadata?.stream;
          if (isStreamKind(kind) && !kinds.has(endpoint.name)) kinds.set(endpoint.name, kind);
        }
        for (const node of version.nodes ?? []) {
          if (grpc.length < GRPC_NODES_ASKED && node.metadata?.protocol === GRPC_PROTOCOL) grpc.push({ key: hostKey(node.address, node.port), metadata: node.metadata });
        }
      }
      if (this.known.size >= KINDS_MAX) this.known.clear();
      entry = { kinds, grpc };
      this.known.set(route.service, entry);
    }
    const kind = entry.kinds.get(route.method);
    if (kind || entry.grpc.length === 0) return kind;
    // A gRPC node lists no endpoints: its methods' kinds are in the loaded .proto files, or its reflection service.
    const grpcKind = await this.grpcKind(route, entry.grpc);
    return grpcKind === 'unary' ? undefined : grpcKind;
  }

  /**
   * The kind of a gRPC method, asking the nodes in turn while they cannot be reached. The
   * transport keeps what each node's reflection service said (a minute), so this asks no node
   * again meanwhile; a node that did not answer is asked again next time.
   */
  private async grpcKind(route: RpcRoute, nodes: GrpcNode[]): Promise<'unary' | StreamKind> {
    const timeoutMs = this.fe.edge.settings.clientRequestTimeoutMs;
    let failure: MeshError | undefined;
    for (const node of nodes) {
      try {
        return await this.fe.edge.grpc.methodKind(route.service, route.method, node, timeoutMs);
      } catch (err) {
        if (!(err instanceof TransportError)) throw asFrontEndError(err, this.fe.errorId);
        const what = `service ${route.service}: the kind of ${route.method} from the reflection service of ${node.key}`;
        failure ??= err.outcome.kind === 'timeout' ? gatewayTimeout(this.fe.errorId, `${what}: no answer within ${timeoutMs}ms`) : badGateway(this.fe.errorId, `${what}: ${err.message}`);
      }
    }
    throw failure!;
  }

  stop(): void {
    this.watcher?.stop();
    this.watcher = undefined;
    this.known.clear();
  }
}

function notStreaming(fe: EdgeHandlerContext, route: RpcRoute, code: number, what: string): MeshError {
  return errorWithStatus(fe.errorId, code, `endpoint ${route.method} of ${route.service} is not a streaming endpoint: ${what}`);
}

/** Metadata of an edge request without the WebSocket handshake's own headers. */
function edgeCallOptions(req: FrontRequest) {
  const options = callOptionsFrom(req, 'application/json');
  const metadata = options.metadata;
  if (metadata) for (const name of Object.keys(metadata)) if (name.startsWith('sec-websocket-')) delete metadata[name];
  return options;
}

/** One SSE event of a message: `data:` lines (a payload with line breaks takes several). */
export function sseEvent(payload: Buffer, event?: string): string {
  const text = payload.toString('utf8');
  const head = event ? `event: ${event}\n` : '';
  if (!/[\r\n]/.test(text)) return `${head}data: ${text}\n\n`;
  return `${head}${text
    .split(/\r\n|\r|\n/)
    .map((line) => `data: ${line}\n`)
    .join('')}\n`;
}

/** Server-Sent Events of a server stream (the request asked for `Accept: text/event-stream`). */
export async function handleSse(fe: EdgeHandlerContext, streams: StreamSockets, route: RpcRoute, req: FrontRequest, res: FrontResponse): Promise<void> {
  const method = req.method ?? 'GET';
  const fromQuery = method === 'GET' || method === 'HEAD' || method === 'DELETE';
  if (fromQuery) req.resume();
  let kind: StreamKind | undefined;
  try {
    kind = await streams.kinds.of(route);
  } catch (err) {
    req.resume();
    throw err;
  }
  if (kind !== 'server') {
    req.resume();
    throw kind ? notAcceptable(fe.errorId, `endpoint ${route.method} of ${route.service} is a ${kind} stream: text/event-stream serves server streams only (use a WebSocket)`) : notStreaming(fe, route, 406, 'text/event-stream serves server streams only');
  }
  let body: Buffer;
  if (fromQuery) body = Buffer.from(JSON.stringify(queryObject(req)));
  else {
    const media = mediaType(req.headers['content-type']);
    if (media !== '' && media !== 'application/json') {
      req.resume();
      throw unsupportedMediaType(fe.errorId, `unsupported content type ${media}: the request of a stream is application/json`);
    }
    body = await readBody(req, fe.maxBodyBytes, fe.errorId);
    if (body.byteLength === 0) body = Buffer.from('{}');
    else if (jsonNestingExceeds(body)) throw badRequest(fe.errorId, `body: ${new JsonDepthError().message}`);
  }
  const call = await fe.edge.client.stream(route.service, route.method, { ...edgeCallOptions(req), kind: 'server', request: body });
  let done = false;
  res.on('close', () => {
    if (!done) call.cancel('the event-stream client went away');
  });
  try {
    await call.opened;
  } catch (err) {
    done = true;
    sendError(res, asFrontEndError(err, fe.errorId));
    return;
  }
  if (res.destroyed) return call.cancel('the event-stream client went away');
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  flushHead(res);
  try {
    for await (const message of call) {
      // Leaving the loop early cancels the call (StreamCall's iterator).
      if (res.destroyed) return;
      if (!writeChunk(res, sseEvent(message)) && !res.destroyed) await drained(res);
    }
    done = true;
    res.end();
  } catch (err) {
    done = true;
    if (!res.destroyed) res.end(sseEvent(Buffer.from(asFrontEndError(err, fe.errorId).toBody()), 'error'));
  }
}

/** The close code of an error: 1009 for a message too large, 4000 + the error code otherwise. */
export function closeCodeOf(err: MeshError): number {
  if (err.code === 413) return 1009;
  return err.code >= 100 && err.code <= 599 ? 4000 + err.code : 1011;
}

/** A close reason fits 123 bytes. */
function closeReason(detail: string): string {
  let out = detail;
  while (Buffer.byteLength(out) > 123) out = out.slice(0, out.length - 4) + '...';
  return out;
}

/** The WebSocket face of streaming endpoints, one per front end (and the endpoint kinds of its SSE). */
export class StreamSockets {
  /** Made at the first upgrade: a front end that never upgrades does not load ws. */
  private wss?: WebSocketServer;
  private readonly open = new Set<WebSocket>();
  private closed = false;
  /** The endpoint kinds, shared with the SSE handler of the same front end. */
  readonly kinds: StreamKinds;

  constructor(private readonly fe: EdgeHandlerContext) {
    this.kinds = new StreamKinds(fe);
  }

  private server(): WebSocketServer {
    const options = { noServer: true, maxPayload: this.fe.maxBodyBytes, perMessageDeflate: false, clientTracking: false, closeTimeout: CLOSE_GRACE_MS };
    return (this.wss ??= new (wsLibrary().WebSocketServer)(options as ConstructorParameters<typeof WebSocketServer>[0]));
  }

  /**
   * A WebSocket upgrade on an endpoint's path (or at /rpc): refused with error JSON (404 unknown
   * service or not a streaming endpoint, `unary` saying what to do instead) before the handshake;
   * otherwise the stream runs on the socket.
   */
  async upgrade(route: RpcRoute, req: IncomingMessage, socket: Duplex, head: Buffer, unary = 'no WebSocket endpoint here (a WebSocket serves streaming endpoints only)'): Promise<void> {
    const fe = this.fe;
    const refuse = (err: MeshError): void => refuseSocket(socket, err, fe.errorId, { linger: false });
    if (this.closed) return refuse(serviceUnavailable(fe.errorId, 'shutting down'));
    if (req.method !== 'GET') return refuse(methodNotAllowed(fe.errorId, 'a WebSocket stream is a GET'));
    if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') return refuse(badRequest(fe.errorId, `upgrade to ${req.headers.upgrade} not supported: use websocket`));
    let kind: StreamKind | undefined;
    try {
      kind = await this.kinds.of(route);
    } catch (err) {
      return refuse(asFrontEndError(err, fe.errorId));
    }
    if (!kind) return refuse(notStreaming(fe, route, 404, unary));
    if (socket.destroyed) return;
    const streamKind = kind;
    this.server().handleUpgrade(req, socket, head, (ws) => this.run(route, streamKind, req, ws));
  }

  /** Ends every stream socket with 1001 (shutdown) and stops watching the registry. */
  close(): void {
    this.closed = true;
    this.kinds.stop();
    for (const ws of this.open) ws.close(1001, 'shutting down');
  }

  private run(route: RpcRoute, kind: StreamKind, req: IncomingMessage, ws: WebSocket): void {
    const fe = this.fe;
    this.open.add(ws);
    let call: StreamCall | undefined;
    let gone = false;
    ws.on('error', () => {});
    ws.on('close', () => {
      gone = true;
      this.open.delete(ws);
      call?.cancel('the WebSocket client closed');
    });
    const fail = (err: unknown): void => {
      if (gone) return;
      const e = asFrontEndError(err, fe.errorId);
      ws.close(closeCodeOf(e), closeReason(e.detail));
    };
    const options = edgeCallOptions(req);
    const pump = async (c: StreamCall): Promise<void> => {
      try {
        for await (const message of c) {
          if (gone) return;
          const sent = new Promise<void>((resolve) => ws.send(message.toString('utf8'), () => resolve()));
          // A client that does not read: wait until the socket takes the queue, and pull nothing more meanwhile.
          if (ws.bufferedAmount > WS_HIGH_WATER) await sent;
        }
        if (!gone) ws.close(1000);
      } catch (err) {
        fail(err);
      }
    };
    if (kind === 'server') {
      let started = false;
      ws.on('message', (data: RawData) => {
        if (started) return fail(badRequest(fe.errorId, 'a server stream takes one request: send it as the first message only'));
        started = true;
        const request = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]);
        fe.edge.client.stream(route.service, route.method, { ...options, kind, request: request.byteLength === 0 ? Buffer.from('{}') : request }).then((c) => {
          call = c;
          if (gone) c.cancel('the WebSocket client closed');
          else void pump(c);
        }, fail);
      });
      return;
    }
    ws.pause();
    fe.edge.client.stream(route.service, route.method, { ...options, kind }).then((c) => {
      call = c;
      if (gone) return c.cancel('the WebSocket client closed');
      ws.on('message', (data: RawData) => {
        const message = Buffer.isBuffer(data) ? data : Buffer.concat(Array.isArray(data) ? data : [Buffer.from(data)]);
        if (message.byteLength === 0) return c.end();
        const sending = c.send(message);
        // The backend does not read: stop reading the client until it does.
        ws.pause();
        sending.then(
          () => {
            if (!gone) ws.resume();
          },
          () => {},
        );
      });
      ws.resume();
      void pump(c);
    }, fail);
  }
}
