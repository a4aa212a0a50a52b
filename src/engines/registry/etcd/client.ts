/**
 * Connecting to etcd: the address list (`host:port[,...]` or `https://[user:password@]host:port`)
 * and the etcd3 client, loaded on first use, with TLS, authentication, call deadlines and fault
 * handling that lets a restarted etcd be used again at once.
 */
import { createRequire } from 'node:module';
import type { Etcd3, IOptions } from 'etcd3';
import { parseEngineEndpoint, sharedCredentials, type EngineCredentials, type EngineTls } from '../../../base/util/engine-access.js';
import { redactUrl } from '../../../base/util/redact.js';

// etcd3 (and the gRPC stack under it) is loaded only by a process that uses etcd: it costs half
// a second of start-up, which every short CLI command would otherwise pay.
const loadEtcd3 = () => createRequire(import.meta.url)('etcd3') as typeof import('etcd3');

/** What an etcd address list says: the endpoints as URLs (no credentials) and the login, if any. */
export interface EtcdAddress {
  hosts: string[];
  credentials?: EngineCredentials;
  secure: boolean;
}

/**
 * `host:port[,host:port]` → http://host:port; `https://[user:password@]host:port[,...]` for TLS
 * and etcd's authentication. Every address uses the same scheme and the same login.
 */
export function parseEtcdAddress(address: string): EtcdAddress {
  const what = 'registry etcd';
  const parts = address
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h !== '');
  if (parts.length === 0) throw new Error(`${what}: invalid address "${redactUrl(address)}" (use host:port[,host:port])`);
  const endpoints = parts.map((h) => parseEngineEndpoint(h, { scheme: 'http', port: 2379 }, what));
  for (const e of endpoints) {
    if (e.scheme !== 'http' && e.scheme !== 'https') throw new Error(`${what}: address scheme ${e.scheme}:// is not http:// or https://`);
  }
  const secure = endpoints[0]!.scheme === 'https';
  if (endpoints.some((e) => (e.scheme === 'https') !== secure)) throw new Error(`${what}: mix of http:// and https:// addresses: use one`);
  return { hosts: endpoints.map((e) => `${e.scheme}://${e.hostPort}`), credentials: sharedCredentials(endpoints, what), secure };
}

/** A cockatiel-compatible policy that just runs the call: no circuit breaker keeping a restarted etcd closed for 5s. */
const passThrough = {
  execute: <T>(fn: (ctx: { signal: AbortSignal; attempt: number }) => T | Promise<T>) =>
    Promise.resolve().then(() => fn({ signal: new AbortController().signal, attempt: 0 })),
};
/** Watch streams reconnect every 250 ms instead of backing off up to 30 s. */
const constantBackoff: { duration: number; next(): unknown } = { duration: 250, next: () => constantBackoff };

type FaultHandling = NonNullable<IOptions['faultHandling']>;

/** The client of `parsed`'s hosts; `tls`: the files read (https:// without them: the system's roots). */
export function createEtcdClient(
  parsed: EtcdAddress,
  tls: EngineTls | undefined,
  callTimeoutMs: number,
): Etcd3 {
  return new (loadEtcd3().Etcd3)({
    hosts: parsed.hosts,
    // https:// without files: the system's roots; with them: that CA and/or a client certificate.
    credentials: tls ? { rootCertificate: tls.ca as Buffer, privateKey: tls.key, certChain: tls.cert } : undefined,
    auth: parsed.credentials ? { username: parsed.credentials.username, password: parsed.credentials.password } : undefined,
    dialTimeout: callTimeoutMs,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
    faultHandling: {
      host: () => passThrough as unknown as ReturnType<NonNullable<FaultHandling['host']>>,
      watchBackoff: constantBackoff as unknown as FaultHandling['watchBackoff'],
    },
  });
}
