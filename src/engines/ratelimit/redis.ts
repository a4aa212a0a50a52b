/**
 * The Redis (or Valkey) rate limit store of `--rate_limit_store=redis://…` (docs/gateway.md "Rate
 * limits"): one token bucket per key in a Redis hash, fields `t` tokens and `at` its time in ms,
 * expiring once it would be full again, named by `bucketKey` (whose front, which policy at which
 * rate and burst, the client key hashed), taken from atomically by a Lua
 * script on Redis's own clock, so that every instance draws from the same bucket whatever its
 * clock. The script is called by its SHA (EVALSHA) and sent whole (EVAL) when the server does not
 * know it yet (NOSCRIPT, as after a restart).
 *
 * The client reconnects by itself (backoff from 50 ms doubling to 2 s) and queues nothing while
 * disconnected: a grant then fails at once and the store's failure mode decides. The client library
 * is loaded when the first store is made, so a process without one does not carry it.
 */
import { createHash } from 'node:crypto';
import type { createClient } from 'redis';
import type { BucketBackend } from '../../base/http/rate-limit-store.js';
import type { BucketGrant, RatePolicy } from '../../base/http/rate-limit.js';
import { withTimeout } from '../../base/util/timeout.js';
import { readEngineTls, type EngineTlsFiles } from '../../base/util/engine-access.js';
import { redactUrl } from '../../base/util/redact.js';

/** KEYS[1] the bucket; ARGV rate (tokens/ms), burst, want. Returns {granted, tokens (string), ms until `want` are there when none was granted}. */
const SCRIPT = `
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) * 1000 + math.floor(tonumber(now_t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then tokens = math.min(burst, tokens + (now - at) * rate) end
local granted = math.min(want, math.floor(tokens + 1e-9))
if granted < 0 then granted = 0 end
tokens = tokens - granted
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate) + 1000)
local retry = 0
if granted == 0 then retry = math.ceil((want - tokens) / rate) end
return {granted, tostring(tokens), retry}
`;
const SHA = createHash('sha1').update(SCRIPT).digest('hex');
const DEFAULT_PORT = 6379;

/** A `--rate_limit_store` value taken apart. */
export interface RedisAddress {
  /** The URL for the client, credentials included. */
  url: string;
  tls: boolean;
  /** `redis://host:port/db` without credentials. */
  shown: string;
}

/**
 * Parses `redis://[[user]:password@]host[:port][/db]` or `rediss://…` (TLS). Throws naming the
 * problem; the password never appears in a message.
 */
export function parseRedisAddress(text: string): RedisAddress {
  const m = /^(rediss?):\/\//i.exec(text);
  if (!m) throw new Error('use local, or redis://[:password@]host:port[/db] (rediss:// for TLS)');
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error(`invalid address "${redactUrl(text)}" (use redis://[:password@]host:port[/db])`);
  }
  if (!url.hostname) throw new Error(`invalid address "${redactUrl(text)}": no host (use redis://[:password@]host:port[/db])`);
  if (url.search || url.hash) throw new Error(`invalid address "${redactUrl(text)}": no query or fragment (use redis://[:password@]host:port[/db])`);
  const db = url.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,2}$/.test(db)) throw new Error(`invalid database "${db}" in "${redactUrl(text)}": a number, e.g. redis://host:6379/0`);
  const port = url.port === '' ? DEFAULT_PORT : Number(url.port);
  if (!(port >= 1 && port <= 65535)) throw new Error(`invalid port in "${redactUrl(text)}"`);
  const scheme = m[1]!.toLowerCase();
  return { url: text, tls: scheme === 'rediss', shown: `${scheme}://${url.hostname}:${port}${db === '' ? '' : `/${db}`}` };
}

/**
 * The Redis key of a bucket: `mesh:rl:<role>:<namespace>:<policy>:<rate per s>:<burst>:<sha256 of
 * the client key, 32 hex>`. Fronts of another role or namespace, or with another rate or burst, on
 * the same Redis keep buckets of their own; the replicas of one front share theirs. The client key
 * (an address, a subject, a path) is hashed: a key of bounded length, whatever the client sends.
 */
export function bucketKey(front: RedisFront, policy: RatePolicy, key: string): string {
  const hash = createHash('sha256').update(key).digest('hex').slice(0, 32);
  return `mesh:rl:${front.role}:${front.namespace}:${policy.name}:${policy.ratePerSec}:${policy.burst}:${hash}`;
}

/** The front whose buckets these are: `api` or `sidecar`, and its --namespace. */
export interface RedisFront {
  role: string;
  namespace: string;
}

export interface RedisBucketsOptions {
  address: string;
  /** Whose buckets (mesh check, which takes none, gives none). */
  front?: RedisFront;
  /** --rate_limit_store_tls_*: for rediss:// (a CA file replaces the system's roots). */
  tls?: EngineTlsFiles;
}

type Client = ReturnType<typeof createClient>;

export class RedisBuckets implements BucketBackend {
  readonly kind = 'redis';
  readonly address: string;
  /** Undefined until the library is loaded (a few ms after the store is made). */
  private client?: Client;
  /** Settles with the client once the library is loaded and the client made. */
  private readonly opened: Promise<Client>;
  private readonly front: RedisFront;
  private closed = false;
  /** The client's last connection error, for messages. */
  private lastError = '';
  /** Settles on the next 'ready' of the client: one listener however many grants wait. */
  private readyWait?: Promise<void>;

  constructor(options: RedisBucketsOptions) {
    const parsed = parseRedisAddress(options.address);
    this.address = parsed.shown;
    this.front = options.front ?? { role: 'check', namespace: '-' };
    const files = readEngineTls('rate_limit_store_tls', options.tls);
    if (files && !parsed.tls) throw new Error('--rate_limit_store_tls_* files need a rediss:// address');
    const make = (create: typeof createClient): Client => {
      const client = create({
        url: parsed.url,
        disableOfflineQueue: true,
        socket: {
          connectTimeout: 1000,
          reconnectStrategy: (retries: number) => Math.min(2000, 50 * 2 ** Math.min(retries, 6)),
          ...(parsed.tls ? { tls: true as const, ...(files?.ca ? { ca: files.ca } : {}), ...(files?.cert ? { cert: files.cert, key: files.key } : {}) } : {}),
        },
      });
      // Errors surface through the calls (and the store's outage log); the client reconnects itself.
      client.on('error', (err: Error) => (this.lastError = err.message || (err as NodeJS.ErrnoException).code || String(err)));
      return client;
    };
    this.opened = import('redis').then(({ createClient: create }) => {
      const client = make(create);
      this.client = client;
      if (!this.closed) this.connect(client);
      return client;
    });
  }

  private connect(client: Client): void {
    client.connect().catch(() => {
      // A first connection that failed for good: try again later (the store counts the failures meanwhile).
      if (!this.closed) setTimeout(() => !this.closed && !client.isOpen && this.connect(client), 1000).unref();
    });
  }

  private whenReady(client: Client): Promise<void> {
    this.readyWait ??= new Promise((resolve) =>
      client.once('ready', () => {
        this.readyWait = undefined;
        resolve();
      }),
    );
    return this.readyWait;
  }

  /** Whether the client holds a connection now. */
  get ready(): boolean {
    return this.client?.isReady ?? false;
  }

  async grant(key: string, policy: RatePolicy, want: number): Promise<BucketGrant> {
    // Connecting (at start, or again after a loss): the answer may still come within the store's timeout.
    const client = this.client ?? (await this.opened);
    if (!client.isReady) {
      if (!client.isOpen) throw new Error(`not connected to ${this.address}`);
      await this.whenReady(client);
    }
    const args = { keys: [bucketKey(this.front, policy, key)], arguments: [String(policy.ratePerSec / 1000), String(policy.burst), String(want)] };
    let reply: unknown;
    try {
      reply = await client.evalSha(SHA, args);
    } catch (err) {
      if (!/NOSCRIPT/.test((err as Error).message)) throw err;
      reply = await client.eval(SCRIPT, args);
    }
    const [granted, tokens, retry] = reply as [number, string, number];
    return { granted: Number(granted), tokens: Number(tokens), retryMs: Number(retry) };
  }

  /** PING within `timeoutMs` (mesh check). */
  async ping(timeoutMs: number): Promise<void> {
    const pong = async () => {
      const client = this.client ?? (await this.opened);
      if (!client.isReady) await this.whenReady(client);
      await client.ping();
    };
    await withTimeout(pong(), timeoutMs, () => `no answer within ${timeoutMs}ms${this.lastError ? ` (${this.lastError})` : ''}`);
  }

  /** At once: the commands still queued (a Redis that takes them but does not answer) are dropped, not waited for. */
  async close(): Promise<void> {
    this.closed = true;
    this.client?.destroy();
  }
}
