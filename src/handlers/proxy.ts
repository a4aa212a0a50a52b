/**
 * The proxy handler: a reverse proxy to a node of the service chosen by the cluster manager, with
 * the full original path and query, streaming both ways, X-Forwarded-For/-Proto/-Host set, and
 * WebSocket (any Upgrade) requests tunnelled. Talks plain HTTP to the node.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
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

export async function handleProxy(fe: FrontEnd, service: string, secure: boolean, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const headers = forwardedHeaders(req, secure);
  const retries = hasBody(req) ? 0 : fe.runtime.config.client_retries;
  const tried = new Set<string>();
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
    tried.add(lease.target.key);
    const started = Date.now();
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onClientGone = () => controller.abort();
    res.once('close', onClientGone);
    try {
      const upstream = await lease.target.dispatcher.request({
        path: req.url ?? '/',
        method: (req.method ?? 'GET') as 'GET',
        headers,
        body: hasBody(req) ? req : undefined,
        signal: controller.signal,
      });
      clearTimeout(timer);
      const outHeaders: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(upstream.headers)) {
        if (value === undefined || isHopByHop(name)) continue;
        outHeaders[name] = value;
      }
      if (upstream.headers['content-length'] !== undefined) outHeaders['content-length'] = upstream.headers['content-length'];
      res.writeHead(upstream.statusCode, outHeaders);
      try {
        for await (const chunk of upstream.body) {
          if (!res.write(chunk)) await new Promise<void>((r) => res.once('drain', r));
        }
        res.end();
        lease.release({ kind: 'response', status: upstream.statusCode }, Date.now() - started);
      } catch {
        lease.release({ kind: 'reset' }, Date.now() - started);
        res.destroy();
      }
      return;
    } catch (err) {
      clearTimeout(timer);
      const failure = classifyError(err, timedOut);
      lease.release(failure.outcome, Date.now() - started);
      if (res.destroyed || res.writableEnded) return; // the client went away
      const kind = failure.outcome.kind;
      lastError =
        kind === 'timeout'
          ? new MeshError(fe.errorId, 504, `proxy to ${service} on ${lease.target.key}: timeout after ${timeoutMs}ms`)
          : new MeshError(fe.errorId, 502, `proxy to ${service} on ${lease.target.key}: ${failure.message}`);
      if (kind !== 'connect_failure') break;
    } finally {
      res.off('close', onClientGone);
    }
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
