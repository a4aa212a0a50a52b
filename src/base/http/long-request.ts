/**
 * A request whose body lasts as long as a stream (client and bidi streams): kept past the server's
 * whole-request timeout (--request_timeout), which would otherwise cut the stream off.
 *
 * Node checks that timeout on its own list of connections and reports an expired request as a
 * 'clientError' (ERR_HTTP_REQUEST_TIMEOUT), once per request. The server gets one listener that
 * ignores that error for a socket while it carries a long request, and otherwise does what Node
 * does when nobody listens: the same plain answer (400, 408, 413, 431), then destroys the socket.
 * (Taking the connection off Node's list, `parser.remove()`, worked on Node 20 but stops the
 * request body from being read on Node 24.)
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

const LONG = Symbol('mesh.longRequest');
const LISTENING = Symbol('mesh.longRequestListener');

type Marked = Duplex & { [LONG]?: boolean };

/** What node:http writes for a client error when the server has no 'clientError' listener. */
function nodeDefaultAnswer(code: string | undefined): string {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n';
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return 'HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n';
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n';
    default:
      return 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n';
  }
}

function onClientError(this: Server, err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT' && (socket as Marked)[LONG]) return;
  // Another listener of the server answers it.
  if (this.listenerCount('clientError') > 1) return;
  const s = socket as Duplex & { bytesWritten?: number };
  if (s.writable && (s.bytesWritten ?? 0) === 0) s.write(nodeDefaultAnswer(err.code));
  s.destroy(err);
}

/** Keeps this request's connection past the whole-request timeout until the answer is over. */
export function keepPastRequestTimeout(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket as Marked;
  const server = (req.socket as unknown as { server?: Server & { [LISTENING]?: boolean } }).server;
  if (!server) return;
  if (!server[LISTENING]) {
    server[LISTENING] = true;
    server.on('clientError', onClientError);
  }
  socket[LONG] = true;
  // The connection's next request (keep-alive) is timed again.
  res.once('close', () => (socket[LONG] = false));
}
