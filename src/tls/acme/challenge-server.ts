/**
 * The HTTP-01 challenge listener (`--acme_http_port`, default 80 on every interface): answers
 * `GET /.well-known/acme-challenge/<token>` with the key authorization of an order in progress, and
 * redirects anything else for an allowed host to HTTPS (308). Everything else: 404.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from '../../base/http/node-http.js';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { formatAddress, parseAddress } from '../../base/util/address.js';
import { normalizeHost } from './hosts.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { splitTarget } from '../../base/http/target.js';

export const CHALLENGE_PREFIX = '/.well-known/acme-challenge/';

export interface ChallengeServerOptions {
  /** `--acme_http_port`: `PORT` (every interface) or `HOST:PORT`. */
  address: string;
  challenges: Map<string, string>;
  allowed: (host: string) => boolean;
  /** The HTTPS port to redirect to (443 is left out of the URL). */
  httpsPort: () => number | undefined;
  log: Logger;
}

/** Parses `--acme_http_port`; throws a message naming the flag. */
export function parseChallengeAddress(value: string): { host: string; port: number } {
  try {
    return parseAddress(value, { barePort: true });
  } catch (err) {
    throw new SchemaOptionError('acme_http_port', `${(err as Error).message} (use PORT or HOST:PORT)`, value);
  }
}

/** Answers one request of the challenge listener. Exported for tests and for embedding. */
export function answerChallenge(options: Omit<ChallengeServerOptions, 'address'>, req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  const path = splitTarget(req.url ?? '/').path;
  const hostHeader = req.headers.host ?? '';
  const host = normalizeHost(hostHeader.replace(/:\d+$/, '').replace(/^\[|\]$/g, ''));
  if (path.startsWith(CHALLENGE_PREFIX) && (req.method === 'GET' || req.method === 'HEAD')) {
    const token = path.slice(CHALLENGE_PREFIX.length);
    const answer = options.challenges.get(token);
    if (answer !== undefined) {
      options.log.info({ host, token }, `acme: answered HTTP-01 challenge for ${host}`);
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(answer) });
      res.end(req.method === 'HEAD' ? undefined : answer);
      return;
    }
    options.log.warn({ host, token }, 'acme: HTTP-01 challenge for an unknown token');
  } else if (host && options.allowed(host)) {
    const port = options.httpsPort();
    const location = `https://${host}${port && port !== 443 ? `:${port}` : ''}${req.url ?? '/'}`;
    res.writeHead(308, { location, 'content-length': 0 });
    res.end();
    return;
  }
  res.writeHead(404, { 'content-type': 'text/plain', 'content-length': 10 });
  res.end('not found\n');
}

export class ChallengeServer {
  private server?: Server;

  constructor(private readonly options: ChallengeServerOptions) {}

  /** Binds the listener; rejects with a start-up error naming the address and the flag. */
  async listen(): Promise<AddressInfo> {
    const { host, port } = parseChallengeAddress(this.options.address);
    const server = createServer({ requestTimeout: 10_000, headersTimeout: 10_000 }, (req, res) => answerChallenge(this.options, req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) => {
        const hint = err.code === 'EACCES' ? ' (ports below 1024 need root or CAP_NET_BIND_SERVICE; or set {acme_http_port} and forward port 80 to it)' : '';
        reject(new SchemaOptionError('acme_http_port', `cannot listen on ${host}:${port} for ACME HTTP-01 challenges ({acme_http_port}): ${err.code ?? err.message}${hint}`));
      });
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    const bound = server.address() as AddressInfo;
    this.options.log.info({ address: formatAddress(bound.address, bound.port) }, `acme: HTTP-01 challenges answered on ${formatAddress(bound.address, bound.port)}`);
    return bound;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    await new Promise<void>((r) => {
      server.close(() => r());
      server.closeAllConnections();
    });
  }
}
