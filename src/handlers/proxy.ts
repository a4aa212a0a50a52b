/**
 * The proxy handler: a reverse proxy to a node of the service chosen by the cluster manager, with
 * the full original path and query, streaming both ways, X-Forwarded-For/-Proto/-Host set, and
 * WebSocket (any Upgrade) requests tunnelled. Talks plain HTTP to the node.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { MeshError, asFrontEndError } from '../errors.js';
import { sendError } from '../http/respond.js';
import { classifyError } from '../transport/rpc.js';
import { isHopByHop } from '../transport/headers.js';
import type { UpstreamLease } from '../upstream/types.js';
import type { FrontEnd } from './front-end.js';

function forwardedHeaders(req: IncomingMessage, secure: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  const named = new Set<string>();
  const connection = req.headers.connection;
  if (connection) for (const n of connection.split(',')) named.add(n.trim().toLowerCase());
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || isHopByHop(name) || named.has(name)) continue;
    if (name === 'x-forwarded-for' || name === 'x-forwarded-proto' || name === 'x-forwarded-host') continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  const peer = req.socket.remoteAddress ?? '';
  const prior = req.headers['x-forwarded-for'];
  out['x-forwarded-for'] = prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${peer}` : peer;
  out['x-forwarded-proto'] = (req.headers['x-forwarded-proto'] as string | undefined) ?? (secure ? 'https' : 'http');
  out['x-forwarded-host'] = (req.headers['x-forwarded-host'] as string | undefined) ?? req.headers.host ?? '';
  if (req.headers.host) out['host'] = req.headers.host;
  return out;
}

function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

type ForwardResult = { kind: 'response'; status: number } | { kind: 'error'; err: unknown; timedOut: boolean; responded: boolean };

/**
 * One attempt: streams the request to the host and the answer back into `res`, through undici's
 * dispatch API (no intermediate streams, no AbortSignal). Only the wait for the answer's head is
 * bounded by timeoutMs; a body may take as long as it needs.
 */
function forward(dispatcher: Dispatcher, req: IncomingMessage, res: ServerResponse, headers: Record<string, string>, withBody: boolean, timeoutMs: number): Promise<ForwardResult> {
  return new Promise<ForwardResult>((resolve) => {
    let controller: Dispatcher.DispatchController | undefined;
    let timedOut = false;
    let responded = false;
    let done = false;
    let status = 0;
    const finish = (result: ForwardResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      res.off('close', onClientGone);
      resolve(result);
    };
    const timer = setTimeout(() => {
      if (responded) return;
      timedOut = true;
      controller?.abort(new Error('timeout waiting for the upstream answer'));
    }, timeoutMs);
    const onClientGone = () => {
      if (!res.writableFinished) controller?.abort(new Error('client went away'));
    };
    res.once('close', onClientGone);
    try {
      dispatcher.dispatch(
        { path: req.url ?? '/', method: (req.method ?? 'GET') as Dispatcher.HttpMethod, headers, body: withBody ? req : undefined },
        {
          onRequestStart(c) {
            controller = c;
            if (timedOut) c.abort(new Error('timeout waiting for the upstream answer'));
          },
          onResponseStart(_c, statusCode, upstreamHeaders) {
            responded = true;
            status = statusCode;
            clearTimeout(timer);
            const out: Record<string, string | string[]> = {};
            for (const name in upstreamHeaders) {
              const value = upstreamHeaders[name];
              if (value === undefined || isHopByHop(name)) continue;
              out[name] = value;
            }
            const length = upstreamHeaders['content-length'];
            if (length !== undefined) out['content-length'] = length;
            res.writeHead(statusCode, out);
          },
          onResponseData(c, chunk) {
            if (!res.write(chunk)) {
              c.pause();
              res.once('drain', () => c.resume());
            }
          },
          onResponseEnd() {
            res.end();
            finish({ kind: 'response', status });
          },
          onResponseError(_c, err) {
            finish({ kind: 'error', err, timedOut, responded });
          },
        },
      );
    } catch (err) {
      finish({ kind: 'error', err, timedOut, responded });
    }
  });
}

export async function handleProxy(fe: FrontEnd, service: string, secure: boolean, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const headers = forwardedHeaders(req, secure);
  const withBody = hasBody(req);
  // A body can be sent once only; without one, a refused connection is retried on another host.
  const retries = withBody ? 0 : fe.runtime.config.client_retries;
  let tried: Set<string> | undefined;
  const timeoutMs = fe.runtime.config.client_request_timeout;
  let lastError: MeshError | undefined;
  for (let attempt = 0; attempt <= retries; attempt++) {
    let lease: UpstreamLease;
    try {
      lease = await fe.runtime.clusters.acquire(service, { exclude: tried, retry: attempt > 0 });
    } catch (err) {
      req.resume();
      sendError(res, asFrontEndError(err, fe.errorId));
      return;
    }
    if (retries > 0) (tried ??= new Set()).add(lease.target.key);
    const started = Date.now();
    const result = await forward(lease.target.dispatcher, req, res, headers, withBody, timeoutMs);
    if (result.kind === 'response') {
      lease.release(result, Date.now() - started);
      return;
    }
    if (result.responded) {
      // The answer had started: nothing to do but cut the connection.
      lease.release({ kind: 'reset' }, Date.now() - started);
      res.destroy();
      return;
    }
    const failure = classifyError(result.err, result.timedOut);
    lease.release(failure.outcome, Date.now() - started);
    if (res.destroyed || res.writableEnded) return; // the client went away
    const kind = failure.outcome.kind;
    lastError =
      kind === 'timeout'
        ? new MeshError(fe.errorId, 504, `proxy to ${service} on ${lease.target.key}: timeout after ${timeoutMs}ms`)
        : new MeshError(fe.errorId, 502, `proxy to ${service} on ${lease.target.key}: ${failure.message}`);
    if (kind !== 'connect_failure') break;
  }
  sendError(res, lastError ?? new MeshError(fe.errorId, 502, `proxy to ${service} failed`));
}

/** Tunnels an Upgrade request (WebSocket) to a node of the service: bytes both ways until either side closes. */
export function handleProxyUpgrade(fe: FrontEnd, service: string, secure: boolean, req: IncomingMessage, socket: Duplex, head: Buffer): void {
  const refuse = (err: MeshError) => {
    const body = err.toBody();
    socket.end(`HTTP/1.1 ${err.code} ${err.statusText}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  };
  fe.runtime.clusters.acquire(service).then(
    (lease) => {
      const started = Date.now();
      const headers = forwardedHeaders(req, secure);
      headers['connection'] = 'Upgrade';
      headers['upgrade'] = req.headers.upgrade ?? 'websocket';
      let upstream: Socket | undefined;
      let released = false;
      const release = (outcome: Parameters<UpstreamLease['release']>[0]) => {
        if (released) return;
        released = true;
        lease.release(outcome, Date.now() - started);
      };
      upstream = connect({ host: lease.target.address, port: lease.target.port }, () => {
        let head1 = `${req.method} ${req.url} HTTP/1.1\r\n`;
        for (const [k, v] of Object.entries(headers)) head1 += `${k}: ${v}\r\n`;
        upstream!.write(head1 + '\r\n');
        if (head.length) upstream!.write(head);
        upstream!.pipe(socket);
        socket.pipe(upstream!);
        release({ kind: 'response', status: 101 });
      });
      upstream.setTimeout(fe.runtime.config.client_request_timeout, () => {
        // Only the connect phase is bounded; an open tunnel may idle.
        if (!released) {
          release({ kind: 'timeout' });
          refuse(new MeshError(fe.errorId, 504, `proxy to ${service}: timeout`));
          upstream?.destroy();
        }
      });
      upstream.once('connect', () => upstream!.setTimeout(0));
      upstream.on('error', (err) => {
        if (!released) {
          const failure = classifyError(err, false);
          release(failure.outcome);
          refuse(new MeshError(fe.errorId, 502, `proxy to ${service} on ${lease.target.key}: ${failure.message}`));
        } else socket.destroy();
      });
      socket.on('error', () => upstream?.destroy());
      socket.on('close', () => upstream?.destroy());
      upstream.on('close', () => socket.destroy());
    },
    (err: unknown) => refuse(asFrontEndError(err, fe.errorId)),
  );
}
