/**
 * HTTP/2 cleartext (prior knowledge, RFC 9113 3.3) on the port of a node:http server: each new
 * connection's first bytes are read once; a connection that starts with the HTTP/2 preface goes
 * to a node:http2 server, any other to the HTTP/1.1 server as before. One port, one registry
 * address: a mesh client that knows the node speaks h2c (node metadata) multiplexes its calls on
 * one connection; every other client keeps speaking HTTP/1.1.
 */
import { createServer as createH2Server, type Http2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Session } from 'node:http2';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/** The client connection preface of HTTP/2 (RFC 9113 3.4). */
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface H2cOptions {
  /** Streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS). */
  maxConcurrentStreams: number;
  /** Largest header block accepted (bytes). */
  maxHeaderListSize?: number;
}

export type H2Handler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;

/**
 * Routes the connections of `http1` by their first bytes. Must be called before anything else
 * listens for 'connection' on it that should see HTTP/2 connections too: listeners added later
 * see only HTTP/1.1 ones; `onH2Connection` is told of each HTTP/2 connection.
 * Returns the HTTP/2 server (not listening itself) and its sessions.
 */
export function serveH2cOnSamePort(http1: Server, options: H2cOptions, handler: H2Handler, onH2Connection?: (socket: Socket) => void): { h2: Http2Server; sessions: Set<Http2Session> } {
  const h2 = createH2Server({
    settings: { maxConcurrentStreams: options.maxConcurrentStreams, maxHeaderListSize: options.maxHeaderListSize ?? 64 * 1024 },
    maxSessionMemory: 32,
  }, handler);
  const sessions = new Set<Http2Session>();
  h2.on('session', (session: Http2Session) => {
    sessions.add(session);
    session.once('close', () => sessions.delete(session));
  });
  const http1Listeners = http1.listeners('connection') as Array<(socket: Socket) => void>;
  http1.removeAllListeners('connection');
  const toHttp1 = (socket: Socket) => {
    for (const l of http1Listeners) l.call(http1, socket);
  };
  http1.on('connection', (socket: Socket) => {
    const onData = (chunk: Buffer) => {
      socket.off('data', onData);
      socket.pause();
      socket.unshift(chunk);
      if (isPrefacePrefix(chunk)) {
        onH2Connection?.(socket);
        h2.emit('connection', socket);
      } else {
        toHttp1(socket);
        // node:http resumes the socket itself when it attaches its parser; make sure it flows.
        socket.resume();
      }
    };
    socket.on('data', onData);
  });
  return { h2, sessions };
}

/** Whether the first bytes of a connection are (the start of) the HTTP/2 preface. */
function isPrefacePrefix(chunk: Buffer): boolean {
  const n = Math.min(chunk.length, PREFACE.length);
  return n >= 3 && chunk.compare(PREFACE, 0, n, 0, n) === 0;
}
