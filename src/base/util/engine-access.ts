/**
 * How a process reaches etcd or NATS securely: TLS files from flags (`--registry_tls_*`,
 * `--broker_tls_*`) and a user name and password from the address itself
 * (`https://user:pass@host:2379`, `tls://user:pass@host:4222`), which is how both engines' own tools
 * take them. Passwords never appear in messages: addresses are shown without their credentials.
 */
import { readFileSync } from 'node:fs';
import { SchemaOptionError } from './option-error.js';
import { redactUrl } from './redact.js';

/** PEM files named by flags. */
export interface EngineTlsFiles {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

/** The same, read. `ca` absent: the system's roots. */
export interface EngineTls {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

export interface EngineCredentials {
  username: string;
  password: string;
}

/** One address of an engine, taken apart. */
export interface EngineEndpoint {
  /** The URL scheme without `:`, lower case (`http`, `https`, `nats`, `tls`); defaultScheme when none was written. */
  scheme: string;
  /** `host:port` (IPv6 in brackets), without credentials. */
  hostPort: string;
  credentials?: EngineCredentials;
}

/**
 * Reads the TLS files; undefined when none is named. A certificate without its key (or the other
 * way round) and an unreadable file are errors that name the flag.
 */
export function readEngineTls(flagPrefix: string, files: EngineTlsFiles | undefined): EngineTls | undefined {
  if (!files || (!files.caFile && !files.certFile && !files.keyFile)) return undefined;
  if (!!files.certFile !== !!files.keyFile) {
    throw new SchemaOptionError(`${flagPrefix}_cert_file`, `{${flagPrefix}_cert_file} and {${flagPrefix}_key_file} go together: give both for a client certificate, or neither`);
  }
  const read = (flag: string, path: string | undefined): Buffer | undefined => {
    if (!path) return undefined;
    let data: Buffer;
    try {
      data = readFileSync(path);
    } catch (err) {
      throw new Error(`--${flagPrefix}_${flag} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!data.includes('-----BEGIN ')) throw new Error(`--${flagPrefix}_${flag} ${path}: not a PEM file`);
    return data;
  };
  return { ca: read('ca_file', files.caFile), cert: read('cert_file', files.certFile), key: read('key_file', files.keyFile) };
}

/**
 * Parses `host[:port]` or `scheme://[user[:password]@]host[:port]` (a trailing `/` is allowed);
 * the port defaults to the engine's. `what` names the engine in errors.
 */
export function parseEngineEndpoint(text: string, defaults: { scheme: string; port: number }, what: string): EngineEndpoint {
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
  let url: URL;
  try {
    url = new URL(hasScheme ? text : `${defaults.scheme}://${text}`);
  } catch {
    throw new Error(`${what}: invalid address "${redactUrl(text)}" (use host:port)`);
  }
  if (!url.hostname || (url.pathname !== '' && url.pathname !== '/') || url.search || url.hash) {
    throw new Error(`${what}: invalid address "${redactUrl(text)}" (use host:port or scheme://host:port)`);
  }
  // URL drops a port equal to its scheme's default (http://h:80): take the written one back.
  const port = url.port || /:(\d{1,5})\/?$/.exec(text)?.[1] || String(defaults.port);
  const endpoint: EngineEndpoint = { scheme: url.protocol.slice(0, -1).toLowerCase(), hostPort: `${url.hostname}:${port}` };
  if (url.username || url.password) {
    endpoint.credentials = { username: decodeURIComponent(url.username), password: decodeURIComponent(url.password) };
  }
  return endpoint;
}

/**
 * The credentials of a list of endpoints: all of them name the same ones, or none does (one
 * client logs in once, whatever the server it reaches).
 */
export function sharedCredentials(endpoints: EngineEndpoint[], what: string): EngineCredentials | undefined {
  const first = endpoints[0]?.credentials;
  for (const e of endpoints) {
    const c = e.credentials;
    if (c?.username !== first?.username || c?.password !== first?.password) {
      throw new Error(`${what}: give the same user and password in every address, or in none`);
    }
  }
  return first;
}

