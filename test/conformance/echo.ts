/**
 * The conformance echo backend: a plain node:http server that answers every request with what it
 * received, in the JSON the upstream Gateway API echo server writes (`path` is the request target
 * with its query, `host`, `method`, `proto`, `headers` as name → list of values, one per header
 * line, `namespace`, `service`, `pod`), so expectations written for the upstream suite read the
 * same here. Like the upstream server it also obeys two test controls:
 *  - header `X-Echo-Set-Header: Name:value,Name:value` → those headers are set on the answer;
 *  - query `delay=<duration>` (`500ms`, `1s`) → the answer waits that long.
 *  - the retry simulation of the upstream retry cases: query `uuid=<id>&succeedAfter=N`, with
 *    optional `responseCode=C` and `delayRetry=<duration>`: the first N requests with that id
 *    fail (after `delayRetry`, if given) with status C, or, without `responseCode`, by the
 *    connection being closed unanswered; the next ones are answered as usual;
 *  - a WebSocket at any path: every message (text or binary) is sent back as it came.
 * Every request is kept in `received` (the mirror cases look there for their copies).
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';

export const ECHO_NAMESPACE = 'gateway-conformance-infra';

export interface EchoedRequest {
  path: string;
  host: string;
  method: string;
  proto: string;
  headers: Record<string, string[]>;
  namespace: string;
  service: string;
  pod: string;
}

export interface EchoBackend {
  /** The backend's name: the registry service the routes' backendRefs name. */
  name: string;
  /** The pod it reports: `<name>-<port>`, so a pod name starts with its backend's name as upstream. */
  pod: string;
  port: number;
  received: EchoedRequest[];
  close(): Promise<void>;
}

/** `1s`, `500ms`, `1m`, `1.5s` → milliseconds; undefined when not a duration. */
export function durationMs(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(text);
  if (!m) return undefined;
  const n = Number(m[1]);
  return m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
}

/** `Abc-def` → `Abc-Def`, as Go writes header names. */
function canonical(name: string): string {
  return name
    .split('-')
    .map((p) => (p ? p[0]!.toUpperCase() + p.slice(1).toLowerCase() : p))
    .join('-');
}

function echoOf(req: IncomingMessage, name: string, pod: string): EchoedRequest {
  const headers: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(req.headersDistinct)) if (k !== 'host' && v) headers[canonical(k)] = [...v];
  return {
    path: req.url ?? '',
    host: req.headers.host ?? '',
    method: req.method ?? '',
    proto: `HTTP/${req.httpVersion}`,
    headers,
    namespace: ECHO_NAMESPACE,
    service: name,
    pod,
  };
}

export async function startEcho(name: string): Promise<EchoBackend> {
  const received: EchoedRequest[] = [];
  const timers = new Set<NodeJS.Timeout>();
  const attempts = new Map<string, number>();
  let pod = name;
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const echoed = echoOf(req, name, pod);
      received.push(echoed);
      const query = new URL(req.url ?? '/', 'http://echo').searchParams;
      const uuid = query.get('uuid');
      const succeedAfter = Number(query.get('succeedAfter') ?? 'NaN');
      if (uuid && Number.isInteger(succeedAfter)) {
        const tries = (attempts.get(uuid) ?? 0) + 1;
        attempts.set(uuid, tries);
        if (tries <= succeedAfter) {
          const code = Number(query.get('responseCode') ?? '0');
          const fail = () => {
            if (res.destroyed) return;
            if (!code) return void req.socket.destroy();
            res.writeHead(code, { 'content-type': 'text/plain' });
            res.end(`try ${tries} of ${uuid} fails with ${code}`);
          };
          const wait = durationMs(query.get('delayRetry') ?? '') ?? 0;
          if (wait <= 0) return fail();
          // The slow try is the backend behaviour under test, not a wait of the test.
          const timer = setTimeout(() => {
            timers.delete(timer);
            fail();
          }, wait);
          return void timers.add(timer);
        }
      }
      const delay = durationMs(query.get('delay') ?? '') ?? 0;
      const answer = () => {
        const text = JSON.stringify(echoed);
        const headers: Array<[string, string]> = [
          ['content-type', 'application/json'],
          ['content-length', String(Buffer.byteLength(text))],
        ];
        for (const pair of String(req.headers['x-echo-set-header'] ?? '').split(',')) {
          const at = pair.indexOf(':');
          if (at > 0) headers.push([pair.slice(0, at).trim(), pair.slice(at + 1).trim()]);
        }
        res.writeHead(200, headers.flat());
        res.end(text);
      };
      if (delay <= 0) return answer();
      // The delay is the backend's behaviour under test (a slow pod), not a wait of the test.
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (!res.destroyed) answer();
      }, delay);
      timers.add(timer);
    });
  });
  const wss = new WebSocketServer({ noServer: true });
  wss.on('connection', (ws) => ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary })));
  server.on('upgrade', (req, socket, head) => {
    received.push(echoOf(req, name, pod));
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  pod = `${name}-${port}`;
  return {
    name,
    pod,
    port,
    received,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      for (const c of wss.clients) c.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
