/**
 * The RPC wire protocol over HTTP/2 cleartext (prior knowledge): one multiplexed node:http2
 * session per host, opened on first use and again after it closes. Same request headers, same
 * answers, same failure classes as the HTTP/1.1 transport (rpc.ts).
 */
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import { HEADER_ENDPOINT, HEADER_ID, HEADER_SERVICE, HEADER_TIMEOUT } from './headers.js';
import { classifyError, TransportError, type RpcControl, type RpcRequest, type RpcResponse } from './rpc.js';

const DEFAULT_MAX_RESPONSE = 64 * 1024 * 1024;
const PROTOCOL_HEADERS = new Set(['content-type', HEADER_SERVICE, HEADER_ENDPOINT, HEADER_ID, HEADER_TIMEOUT]);

export class H2cConnection {
  private session?: ClientHttp2Session;

  constructor(
    private readonly authority: string,
    private readonly connectTimeoutMs: number,
  ) {}

  get(): ClientHttp2Session {
    const s = this.session;
    if (s && !s.closed && !s.destroyed) return s;
    const session = connect(`http://${this.authority}`, { settings: { enablePush: false } });
    session.on('error', () => {}); // each stream reports its own failure
    session.once('close', () => {
      if (this.session === session) this.session = undefined;
    });
    session.setTimeout(0);
    this.session = session;
    void this.connectTimeoutMs;
    return session;
  }

  close(): void {
    this.session?.close();
    this.session = undefined;
  }
}

export function sendRpcH2(conn: H2cConnection, request: RpcRequest, control?: RpcControl): Promise<RpcResponse> {
  return new Promise<RpcResponse>((resolve, reject) => {
    const headers: OutgoingHttpHeaders = { ':method': 'POST', ':path': '/' };
    const metadata = request.metadata;
    if (metadata) for (const name in metadata) if (!PROTOCOL_HEADERS.has(name.toLowerCase())) headers[name.toLowerCase()] = metadata[name]!;
    headers['content-type'] = request.contentType;
    headers[HEADER_SERVICE] = request.service;
    headers[HEADER_ENDPOINT] = request.endpoint;
    headers[HEADER_ID] = request.id;
    headers[HEADER_TIMEOUT] = String(Math.max(1, Math.floor(request.timeoutMs)));
    const limit = request.maxResponseBytes ?? DEFAULT_MAX_RESPONSE;
    let settled = false;
    let timedOut = false;
    let status = 0;
    let contentType = '';
    const chunks: Buffer[] = [];
    let size = 0;
    let stream: ClientHttp2Stream;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(err instanceof TransportError ? err : classifyError(err, timedOut));
      if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      fail(new TransportError({ kind: 'timeout' }, 'request timed out'));
    }, request.timeoutMs);
    try {
      stream = conn.get().request(headers, { endStream: false });
    } catch (err) {
      clearTimeout(timer);
      reject(classifyError(err, false));
      return;
    }
    if (control) control.cancel = (reason) => fail(new TransportError({ kind: 'cancelled' }, reason));
    stream.on('response', (h: IncomingHttpHeaders) => {
      status = Number(h[':status']);
      const ct = h['content-type'];
      contentType = typeof ct === 'string' ? ct : '';
    });
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return fail(new TransportError({ kind: 'reset' }, `response larger than ${limit} bytes`));
      chunks.push(chunk);
    });
    stream.on('end', () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ status, contentType, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    });
    stream.on('error', fail);
    stream.on('close', () => fail(new TransportError({ kind: 'reset' }, `stream closed (code ${stream.rstCode})`)));
    stream.end(Buffer.isBuffer(request.body) ? request.body : Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength));
  });
}
