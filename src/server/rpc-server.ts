/**
 * The server side of the RPC wire protocol (DESIGN section 5): `POST /` with Mesh-Service and
 * Mesh-Endpoint, body in JSON or protobuf. Also answers `GET /health` (503 while draining), so
 * a framework service can be health-checked like any HTTP app.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Type } from 'protobufjs';
import type pino from 'pino';
import { MeshError } from '../errors.js';
import { JSON_CODEC, codecFor, mediaType, type CodecSet } from '../codec/codec.js';
import { JsonSyntaxError, stringifyJson } from '../codec/json.js';
import { readBody } from '../http/body.js';
import { httpServerOptions, listenOn, MAX_HEADER_COUNT, ServerLifecycle, tooManyHeaders, type Drainable, type DrainResult, type ServerLimits } from '../http/lifecycle.js';
import type { StatsStore } from '../stats/store.js';
import { sendBytes, sendError, sendJson } from '../http/respond.js';
import { endToEndHeaders, HEADER_ENDPOINT, HEADER_ID, HEADER_TIMEOUT } from '../transport/headers.js';
import type { Metadata } from '../registry/registry.js';

export interface HandlerContext {
  id: string;
  service: string;
  endpoint: string;
  /** The caller's end-to-end headers. */
  metadata: Record<string, string>;
  /** Epoch ms after which the caller no longer waits. */
  deadline: number;
}

export type Handler = (request: any, ctx: HandlerContext) => unknown | Promise<unknown>; // eslint-disable-line @typescript-eslint/no-explicit-any -- handlers type their own requests

export interface EndpointDefinition {
  /** `Endpoint.Method`, e.g. `Say.Hello`. */
  name: string;
  handler: Handler;
  /** Needed to accept and answer application/protobuf. */
  requestType?: Type;
  responseType?: Type;
  /** Endpoint metadata for the gateway router: handler, method, path, host, description. */
  metadata?: Metadata;
}

export interface RpcServerOptions {
  service: string;
  maxBodyBytes: number;
  logger?: pino.Logger;
  /** False while draining: GET /health answers 503. */
  isLive?: () => boolean;
  /** Server-side cap on how long a call may wait for its handler (ms). */
  defaultTimeoutMs?: number;
  /** Connection cap, read timeouts and drain timeout (from the flags: serverLimits()). */
  limits: ServerLimits;
  /** Where `http.rpc.downstream_cx_overflow` and the drain counters are kept. */
  stats: StatsStore;
  /** Codecs besides JSON and protobuf (the `codecs` option). */
  codecs?: CodecSet;
}

/** The stat prefix of the RPC servers of a process. */
export const RPC_STAT_PREFIX = 'http.rpc.';

export class RpcServer implements Drainable {
  private readonly endpoints = new Map<string, EndpointDefinition>();
  private server?: Server;
  private lifecycle?: ServerLifecycle;

  constructor(private readonly options: RpcServerOptions) {}

  handle(def: EndpointDefinition): void {
    if (!/^[A-Za-z_][\w]*\.[A-Za-z_][\w]*$/.test(def.name)) throw new Error(`invalid endpoint name "${def.name}" (use Endpoint.Method)`);
    this.endpoints.set(def.name, def);
  }

  listEndpoints(): EndpointDefinition[] {
    return [...this.endpoints.values()];
  }

  async listen(host: string, port: number): Promise<AddressInfo> {
    const server = createServer(httpServerOptions(this.options.limits), (req, res) => void this.onRequest(req, res));
    // Node's own answer to a read timeout (408, no body) is kept: callers are mesh clients.
    this.server = server;
    this.lifecycle = new ServerLifecycle(server, this.options.limits, { stats: this.options.stats, prefix: RPC_STAT_PREFIX });
    return listenOn(server, host, port);
  }

  beginDrain(): void {
    this.lifecycle?.beginDrain();
  }

  /** Drains (answers close their connections), stops accepting, lets in-flight calls finish (up to the drain timeout). */
  async close(): Promise<DrainResult> {
    return (await this.lifecycle?.close()) ?? { requestsCutOff: 0, connectionsCutOff: 0 };
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    this.lifecycle?.request(res);
    const path = req.url ?? '/';
    if (tooManyHeaders(req) > 0) {
      req.resume();
      res.shouldKeepAlive = false;
      sendError(res, new MeshError(this.options.service, 431, `more than ${MAX_HEADER_COUNT} header fields`));
      return;
    }
    if (req.method === 'GET' && (path === '/health' || path.startsWith('/health?'))) {
      const live = this.options.isLive?.() ?? true;
      sendJson(res, live ? 200 : 503, live ? '{"status":"ok"}' : '{"status":"draining"}');
      return;
    }
    const id = this.options.service;
    if (path !== '/' && !path.startsWith('/?')) {
      sendError(res, new MeshError(id, 404, `path ${path.split('?')[0]} not found: RPC calls are POST /`));
      return;
    }
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      sendError(res, new MeshError(id, 405, `method ${req.method} not allowed: RPC calls are POST /`));
      return;
    }
    void this.call(req, res);
  }

  /**
   * One call, in flight from here until its answer or error is written: read the body, decode,
   * run the handler, encode, write. One async frame per call.
   */
  private async call(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const id = this.options.service;
    try {
      const headers = req.headers;
      const endpointName = headerValue(headers, HEADER_ENDPOINT);
      if (!endpointName) throw new MeshError(id, 400, 'missing Mesh-Endpoint header');
      const def = this.endpoints.get(endpointName);
      const contentType = headerValue(headers, 'content-type');
      const codec = this.options.codecs ? this.options.codecs.for(contentType) : codecFor(contentType);
      if (!codec) {
        req.resume();
        throw new MeshError(id, 415, `unsupported content type ${mediaType(contentType)}: use application/json or application/protobuf`);
      }
      const body = await readBody(req, this.options.maxBodyBytes, id);
      if (!def) throw new MeshError(id, 404, `endpoint ${endpointName} not found on ${id}`);
      if (codec.contentType === 'application/protobuf' && (!def.requestType || !def.responseType))
        throw new MeshError(id, 415, `endpoint ${endpointName} does not accept application/protobuf`);
      let request: unknown;
      try {
        request = codec.decode(body, def.requestType);
      } catch (err) {
        const what = err instanceof JsonSyntaxError || err instanceof SyntaxError ? 'malformed JSON' : 'malformed request';
        throw new MeshError(id, 400, `${what}: ${(err as Error).message}`);
      }
      const timeoutHeader = Number(headerValue(headers, HEADER_TIMEOUT));
      const budget = Number.isFinite(timeoutHeader) && timeoutHeader > 0 ? timeoutHeader : (this.options.defaultTimeoutMs ?? 30_000);
      const ctx: HandlerContext = {
        id: headerValue(headers, HEADER_ID) ?? '',
        service: id,
        endpoint: endpointName,
        metadata: endToEndHeaders(headers),
        deadline: Date.now() + budget,
      };
      const result = await def.handler(request, ctx);
      // JSON is written as a string: no intermediate Buffer, the same bytes on the wire (the
      // header block is ASCII, so Node sends header and body in one write).
      let encoded: Uint8Array | string;
      try {
        encoded = codec === JSON_CODEC ? stringifyJson(result ?? {}) : codec.encode(result ?? {}, def.responseType);
      } catch (err) {
        throw new MeshError(id, 500, `encoding response: ${(err as Error).message}`);
      }
      sendBytes(res, 200, codec.contentType, encoded);
    } catch (err) {
      sendError(res, err, id);
    }
  }
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}
