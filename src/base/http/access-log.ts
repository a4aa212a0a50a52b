/**
 * Access logs of the front ends (docs/observability.md, "Access logs"): `--access_log=off|stdout|PATH`
 * and `--access_log_format=FORMAT|json`.
 *
 * - The format is compiled once into a list of functions (`compileAccessLogFormat`); a request
 *   costs one call of each, no parsing.
 * - `RequestInfo` is the one per-request record the handlers fill in (upstream host and cluster);
 *   failure flags (UH, UF, UT...) travel on the MeshError that decided the answer
 *   (`MeshError.responseFlag`) and are recorded by `sendError`.
 * - `AccessLogWriter` appends lines to a bounded in-memory buffer and writes it out off the hot
 *   path (every 100 ms, or sooner when 64 KiB are waiting), one write at a time; over 4 MiB waiting,
 *   lines are dropped and counted. Reopened on request (SIGUSR1), flushed on close.
 */
import { closeSync, openSync, write as fsWrite } from 'node:fs';
import { isHttp2Request, type FrontRequest, type FrontResponse } from './front-types.js';
import type { Logger } from 'pino';
import type { Counter } from '../stats/store.js';

/** Envoy's response flags that mesh sets, in the order they are printed. */
export const RESPONSE_FLAGS = ['UH', 'UF', 'UO', 'NR', 'NC', 'UT', 'UC', 'DC', 'RL', 'RLSE'] as const;
export type ResponseFlag = (typeof RESPONSE_FLAGS)[number];
const FLAG_BIT: Record<string, number> = Object.fromEntries(RESPONSE_FLAGS.map((f, i) => [f, 1 << i]));

/** Envoy's default format, with mesh's request id (`Mesh-Id`) and the upstream cluster (the service). */
export const DEFAULT_ACCESS_LOG_FORMAT =
  '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(MESH-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER%';

/** What the upstream side of a request learned, for the access log; the client and the proxy handler fill it in. */
export interface UpstreamInfo {
  upstreamHost?: string;
  upstreamCluster?: string;
}

/** The per-request record of a front end with an access log (none without one). */
/** What a line reads of a request's connection. */
export interface ConnectionFacts {
  readonly remoteAddress?: string;
  readonly remotePort?: number;
  readonly localAddress?: string;
  readonly localPort?: number;
  readonly encrypted?: boolean;
}

/** The connection of a logged request (see RequestInfo.connection). */
function connectionOf(e: AccessLogEntry): ConnectionFacts {
  return e.info.connection ?? (e.req.socket as ConnectionFacts);
}

export class RequestInfo implements UpstreamInfo {
  upstreamCluster?: string;
  private host?: string;
  /** Tries made upstream (each choice of a host is one): retries are tries - 1. */
  tries = 0;
  /** performance.now() of the request's start, of the last upstream host chosen, of the answer's first body byte. */
  readonly startPerf = performance.now();
  upstreamAt?: number;
  firstByteAt?: number;
  /** The name of the route file's rule that served the request (%ROUTE_NAME%). */
  routeName?: string;
  /** A native gRPC call's status, as the node (or the front end) ended it (%GRPC_STATUS%). */
  grpcStatus?: number;
  flags = 0;
  bytesReceived = 0;
  bytesSent = 0;
  /**
   * An HTTP/2 request's connection, read when it began: a stream loses its session (and its
   * `socket` the addresses) when it closes, before the line is written. HTTP/1.1: undefined, its
   * socket is read at the end.
   */
  connection?: ConnectionFacts;
  constructor(
    /** Epoch ms of the request's start. */
    readonly startMs: number,
    /** The path as received (handlers may rewrite req.url). */
    readonly path: string | undefined,
    /** The trace id of the request's hop (W3C trace context). */
    readonly traceId?: string,
  ) {}

  /** The upstream host of the last try; each one set is a try (counted, and timed for a tap). */
  get upstreamHost(): string | undefined {
    return this.host;
  }

  set upstreamHost(host: string | undefined) {
    this.host = host;
    this.tries++;
    this.upstreamAt = performance.now();
  }

  addFlag(flag: string): void {
    this.flags |= FLAG_BIT[flag] ?? 0;
  }

  flagText(): string {
    if (this.flags === 0) return '-';
    let out = '';
    for (let i = 0; i < RESPONSE_FLAGS.length; i++) if (this.flags & (1 << i)) out += out === '' ? RESPONSE_FLAGS[i] : `,${RESPONSE_FLAGS[i]}`;
    return out;
  }
}

const INFO = Symbol('mesh.requestInfo');
type WithInfo = { [INFO]?: RequestInfo };

/** The record of a request, when its front end keeps an access log. */
export function requestInfo(req: FrontRequest | undefined): RequestInfo | undefined {
  return req ? (req as WithInfo)[INFO] : undefined;
}

export function attachRequestInfo(req: FrontRequest, info: RequestInfo): void {
  (req as WithInfo)[INFO] = info;
}

/** What one access log entry is made from. */
export interface AccessLogEntry {
  req: FrontRequest;
  res: FrontResponse;
  info: RequestInfo;
  durationMs: number;
}

type Field = (e: AccessLogEntry) => string | number | undefined;

/** A compiled format: call `line(entry)` for one line, newline included. */
export interface AccessLogFormat {
  line(e: AccessLogEntry): string;
  /** The format prints byte counts: the front server counts them only then. */
  readonly needsBytes: boolean;
}

export class AccessLogFormatError extends Error {}

/** A request header by name (lower case), or a pseudo-header `:method :path :authority :scheme`. */
function requestHeader(name: string): Field {
  switch (name) {
    case ':method':
      return (e) => e.req.method;
    case ':path':
      return (e) => e.info.path;
    case ':authority':
      return (e) => e.req.headers.host;
    case ':scheme':
      return (e) => (connectionOf(e).encrypted ? 'https' : 'http');
  }
  return (e) => {
    const v = e.req.headers[name];
    return Array.isArray(v) ? v.join(',') : v;
  };
}

/** A header of the answer as sent (also those given to writeHead, which getHeader does not see). */
function responseHeader(name: string): Field {
  return (e) => {
    const v = e.res.getHeader(name);
    if (v !== undefined) return Array.isArray(v) ? v.join(',') : String(v);
    const head = (e.res as unknown as { _header?: string | null })._header;
    if (typeof head !== 'string') return undefined;
    const lower = head.toLowerCase();
    const at = lower.indexOf(`\r\n${name}:`);
    if (at === -1) return undefined;
    const start = at + name.length + 3;
    const end = head.indexOf('\r\n', start);
    return head.slice(start, end === -1 ? undefined : end).trim();
  };
}

function nonEmpty(v: string | number | undefined): boolean {
  return v !== undefined && v !== '';
}

/** The value of an operator by name and argument; undefined for an unknown one. */
function operator(name: string, arg: string | undefined): Field | undefined {
  const noArg = <T>(f: T): T | undefined => (arg === undefined ? f : undefined);
  switch (name) {
    case 'START_TIME':
      return noArg((e: AccessLogEntry) => new Date(e.info.startMs).toISOString());
    case 'REQ': {
      if (arg === undefined || arg === '') return undefined;
      const [main, alt, extra] = arg.toLowerCase().split('?');
      if (extra !== undefined || main === '' || alt === '') return undefined;
      const first = requestHeader(main!);
      if (alt === undefined) return first;
      const second = requestHeader(alt);
      return (e) => {
        const v = first(e);
        return nonEmpty(v) ? v : second(e);
      };
    }
    case 'RESP':
      if (arg === undefined || arg === '' || arg.includes('?')) return undefined;
      return responseHeader(arg.toLowerCase());
    case 'PROTOCOL':
      // As Envoy writes it: HTTP/1.1, HTTP/2.
      return noArg((e: AccessLogEntry) => (e.req.httpVersionMajor === 2 ? 'HTTP/2' : `HTTP/${e.req.httpVersion}`));
    case 'RESPONSE_CODE':
      return noArg((e: AccessLogEntry) => (e.res.headersSent ? e.res.statusCode : 0));
    case 'RESPONSE_FLAGS':
      return noArg((e: AccessLogEntry) => e.info.flagText());
    case 'BYTES_RECEIVED':
      return noArg((e: AccessLogEntry) => e.info.bytesReceived);
    case 'BYTES_SENT':
      return noArg((e: AccessLogEntry) => e.info.bytesSent);
    case 'DURATION':
      return noArg((e: AccessLogEntry) => Math.floor(e.durationMs));
    case 'UPSTREAM_HOST':
      return noArg((e: AccessLogEntry) => e.info.upstreamHost);
    case 'UPSTREAM_CLUSTER':
      return noArg((e: AccessLogEntry) => e.info.upstreamCluster);
    case 'DOWNSTREAM_REMOTE_ADDRESS':
      return noArg((e: AccessLogEntry) => {
        const c = connectionOf(e);
        return addressOf(c.remoteAddress, c.remotePort);
      });
    case 'DOWNSTREAM_LOCAL_ADDRESS':
      return noArg((e: AccessLogEntry) => {
        const c = connectionOf(e);
        return addressOf(c.localAddress, c.localPort);
      });
    case 'TRACE_ID':
      return noArg((e: AccessLogEntry) => e.info.traceId);
    case 'ROUTE_NAME':
      return noArg((e: AccessLogEntry) => e.info.routeName);
    case 'GRPC_STATUS':
      return noArg((e: AccessLogEntry) => e.info.grpcStatus);
  }
  return undefined;
}

function addressOf(host: string | undefined, port: number | undefined): string | undefined {
  if (host === undefined) return undefined;
  const h = host.startsWith('::ffff:') ? host.slice(7) : host;
  return h.includes(':') ? `[${h}]:${port}` : `${h}:${port}`;
}

/** The operators of the text format, as the docs list them. */
export const ACCESS_LOG_OPERATORS = [
  'START_TIME', 'REQ(X)', 'REQ(X?Y)', 'RESP(X)', 'PROTOCOL', 'RESPONSE_CODE', 'RESPONSE_FLAGS', 'BYTES_RECEIVED', 'BYTES_SENT',
  'DURATION', 'UPSTREAM_HOST', 'UPSTREAM_CLUSTER', 'DOWNSTREAM_REMOTE_ADDRESS', 'DOWNSTREAM_LOCAL_ADDRESS', 'TRACE_ID',
  'ROUTE_NAME', 'GRPC_STATUS',
];

/** The fields of `--access_log_format=json`, in order: one JSON object per line. */
const JSON_FIELDS: Array<[string, string]> = [
  ['start_time', 'START_TIME'],
  ['method', 'REQ(:METHOD)'],
  ['path', 'REQ(X-ENVOY-ORIGINAL-PATH?:PATH)'],
  ['protocol', 'PROTOCOL'],
  ['response_code', 'RESPONSE_CODE'],
  ['response_flags', 'RESPONSE_FLAGS'],
  ['bytes_received', 'BYTES_RECEIVED'],
  ['bytes_sent', 'BYTES_SENT'],
  ['duration', 'DURATION'],
  ['x_forwarded_for', 'REQ(X-FORWARDED-FOR)'],
  ['user_agent', 'REQ(USER-AGENT)'],
  ['request_id', 'REQ(MESH-ID)'],
  ['authority', 'REQ(:AUTHORITY)'],
  ['upstream_host', 'UPSTREAM_HOST'],
  ['upstream_cluster', 'UPSTREAM_CLUSTER'],
  ['downstream_remote_address', 'DOWNSTREAM_REMOTE_ADDRESS'],
  ['trace_id', 'TRACE_ID'],
];

function parseOperator(text: string): Field {
  const m = /^([A-Z_]+)(?:\((.*)\))?$/.exec(text);
  const field = m ? operator(m[1]!, m[2]) : undefined;
  if (!field) throw new AccessLogFormatError(`unknown operator %${text}%`);
  return field;
}

/**
 * Compiles `--access_log_format`: `json`, or text where `%OPERATOR%` and `%OPERATOR(ARG)%` are
 * replaced by their values (`-` when there is none) and `%%` is a `%`. Each entry is one line: a
 * newline is added. Throws AccessLogFormatError for an unknown operator or a lone `%`.
 */
export function compileAccessLogFormat(format: string): AccessLogFormat {
  if (format === 'json') {
    const fields = JSON_FIELDS.map(([key, op]) => [JSON.stringify(key), parseOperator(op)] as const);
    return {
      needsBytes: true,
      line(e) {
        let out = '{';
        for (let i = 0; i < fields.length; i++) {
          const [key, f] = fields[i]!;
          const v = f(e);
          out += `${i === 0 ? '' : ','}${key}:${v === undefined || v === '' ? 'null' : typeof v === 'number' ? String(v) : JSON.stringify(v)}`;
        }
        return `${out}}\n`;
      },
    };
  }
  if (/[\r\n]/.test(format)) throw new AccessLogFormatError('a format is one line: each entry gets its own newline');
  const parts: Array<string | Field> = [];
  let needsBytes = false;
  let literal = '';
  let i = 0;
  while (i < format.length) {
    const at = format.indexOf('%', i);
    if (at === -1) {
      literal += format.slice(i);
      break;
    }
    literal += format.slice(i, at);
    if (format[at + 1] === '%') {
      literal += '%';
      i = at + 2;
      continue;
    }
    const end = format.indexOf('%', at + 1);
    if (end === -1) throw new AccessLogFormatError(`unterminated operator at "${format.slice(at, at + 30)}" (a literal % is written %%)`);
    const text = format.slice(at + 1, end);
    if (text.startsWith('BYTES_')) needsBytes = true;
    if (literal !== '') parts.push(literal);
    literal = '';
    parts.push(parseOperator(text));
    i = end + 1;
  }
  if (literal !== '') parts.push(literal);
  return {
    needsBytes,
    line(e) {
      let out = '';
      for (let k = 0; k < parts.length; k++) {
        const p = parts[k]!;
        if (typeof p === 'string') out += p;
        else {
          const v = p(e);
          out += v === undefined || v === '' ? '-' : v;
        }
      }
      return `${out}\n`;
    },
  };
}

/** `off`, `stdout` or a file path. */
export type AccessLogDestination = string;

export interface AccessLogStats {
  written: Counter;
  dropped: Counter;
  writeErrors: Counter;
  reopened: Counter;
}

export interface AccessLogWriterOptions {
  destination: AccessLogDestination;
  stats: AccessLogStats;
  log: Logger;
  flushIntervalMs?: number;
  /** Write as soon as this many characters wait. */
  flushSize?: number;
  /** Drop lines while this many characters wait (the writer cannot keep up). */
  maxBuffered?: number;
}

const FLUSH_INTERVAL_MS = 100;
const FLUSH_SIZE = 64 * 1024;
const MAX_BUFFERED = 4 * 1024 * 1024;

/**
 * Buffered, bounded writes of access log lines to stdout or a file, one write in flight at a time.
 * A file that cannot be written (or reopened) costs dropped lines and one error line, never the
 * process.
 */
export class AccessLogWriter {
  private pending: string[] = [];
  private pendingChars = 0;
  private pendingLines = 0;
  private writing?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private fd?: number;
  /** The last error was logged: the next ones are only counted until a write succeeds. */
  private failing = false;
  private closed = false;
  private readonly flushIntervalMs: number;
  private readonly flushSize: number;
  private readonly maxBuffered: number;

  constructor(private readonly options: AccessLogWriterOptions) {
    this.flushIntervalMs = options.flushIntervalMs ?? FLUSH_INTERVAL_MS;
    this.flushSize = options.flushSize ?? FLUSH_SIZE;
    this.maxBuffered = options.maxBuffered ?? MAX_BUFFERED;
    // A file that cannot be opened at start is a start-up error.
    if (!this.toStdout) this.fd = openSync(options.destination, 'a');
  }

  private get toStdout(): boolean {
    return this.options.destination === 'stdout';
  }

  /** Appends a line (newline included); dropped and counted when too much is waiting. */
  write(line: string): void {
    if (this.closed || this.pendingChars + line.length > this.maxBuffered) {
      // The writer cannot keep up (or the process is past its shutdown): bounded memory first.
      this.options.stats.dropped.inc();
      return;
    }
    this.pending.push(line);
    this.pendingChars += line.length;
    this.pendingLines++;
    if (this.pendingChars >= this.flushSize) this.flushSoon(0);
    else this.flushSoon(this.flushIntervalMs);
  }

  private flushSoon(ms: number): void {
    if (this.writing) return; // the write in flight flushes again when it ends
    if (this.timer) {
      if (ms > 0) return;
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, ms);
    this.timer.unref();
  }

  /** Writes what is waiting (and what arrives meanwhile); resolves when all of it is written or dropped. */
  async flush(): Promise<void> {
    while (this.writing) await this.writing;
    if (this.closed) return;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.pendingLines === 0) return;
    const text = this.pending.join('');
    const lines = this.pendingLines;
    this.pending = [];
    this.pendingChars = 0;
    this.pendingLines = 0;
    this.writing = this.writeOut(text, lines).finally(() => {
      this.writing = undefined;
    });
    await this.writing;
    if (this.pendingLines > 0) this.flushSoon(this.pendingChars >= this.flushSize ? 0 : this.flushIntervalMs);
  }

  private async writeOut(text: string, lines: number): Promise<void> {
    try {
      if (this.toStdout) {
        await new Promise<void>((resolve, reject) => process.stdout.write(text, (err) => (err ? reject(err) : resolve())));
      } else {
        if (this.fd === undefined) this.fd = openSync(this.options.destination, 'a');
        await writeAll(this.fd, Buffer.from(text, 'utf8'));
      }
      this.options.stats.written.inc(lines);
      if (this.failing) this.options.log.info({ destination: this.options.destination }, 'access log: writing again');
      this.failing = false;
    } catch (err) {
      this.options.stats.dropped.inc(lines);
      this.options.stats.writeErrors.inc();
      if (!this.failing) this.options.log.error({ destination: this.options.destination, err: (err as Error).message, dropped: lines }, 'access log: write failed; lines are dropped until a write succeeds');
      this.failing = true;
    }
  }

  /** logrotate (SIGUSR1): writes what is waiting to the old file, then opens the path again. */
  async reopen(): Promise<void> {
    if (this.toStdout || this.closed) return;
    await this.flush();
    if (this.closed) return;
    // From here on synchronous: no write can start between the close and the open.
    const old = this.fd;
    this.fd = undefined;
    if (old !== undefined) {
      try {
        closeSync(old);
      } catch {
        // already gone
      }
    }
    try {
      this.fd = openSync(this.options.destination, 'a');
      this.options.stats.reopened.inc();
    } catch (err) {
      // Tried again at the next write.
      if (!this.failing) this.options.log.error({ destination: this.options.destination, err: (err as Error).message }, 'access log: reopen failed');
      this.failing = true;
    }
  }

  /** Flushes and closes the file; later lines are dropped. */
  async close(): Promise<void> {
    if (this.closed) return;
    do await this.flush();
    while (this.pendingLines > 0 || this.writing);
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.fd !== undefined) {
      try {
        closeSync(this.fd);
      } catch {
        // already gone
      }
      this.fd = undefined;
    }
  }
}

function writeAll(fd: number, buf: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const step = (offset: number) => {
      fsWrite(fd, buf, offset, buf.length - offset, null, (err, n) => {
        if (err) return reject(err);
        if (offset + n < buf.length) step(offset + n);
        else resolve();
      });
    };
    step(0);
  });
}

/** A front end's access log: the compiled format and the writer. */
export class AccessLog {
  constructor(
    readonly format: AccessLogFormat,
    readonly writer: AccessLogWriter,
  ) {}

  /** Starts the record of a request; counts its body bytes when the format prints them. */
  begin(req: FrontRequest, res: FrontResponse, traceId?: string, tapping = false): RequestInfo {
    const info = new RequestInfo(Date.now(), req.url, traceId);
    if (isHttp2Request(req)) {
      const s = req.socket as ConnectionFacts;
      info.connection = { remoteAddress: s.remoteAddress, remotePort: s.remotePort, localAddress: s.localAddress, localPort: s.localPort, encrypted: s.encrypted === true };
    }
    attachRequestInfo(req, info);
    // A tap (src/base/http/tap.ts) shows the byte counts whatever the format prints.
    if (this.format.needsBytes || tapping) countBytes(req, res, info);
    return info;
  }

  log(req: FrontRequest, res: FrontResponse, info: RequestInfo, durationMs: number): void {
    // Cut off before the answer was complete, and not for an upstream reason: the client went away.
    if (!res.writableFinished && info.flags === 0) info.addFlag('DC');
    this.writer.write(this.format.line({ req, res, info, durationMs }));
  }
}

/** What sees the body bytes of one request (observeBodies). */
export interface BodyObserver {
  /** A chunk of the request body, as the parser hands it over. */
  received(chunk: { length: number } & object): void;
  /** A write or end of the answer (chunk: what was given, perhaps nothing or a callback). */
  sent(chunk: unknown, encoding: unknown): void;
}

/** Calls the observer with the request body chunks and the answer's writes, changing none of them. */
export function observeBodies(req: FrontRequest, res: FrontResponse, o: BodyObserver): void {
  const push = req.push;
  req.push = function (chunk: unknown, encoding?: BufferEncoding) {
    if (chunk !== null && chunk !== undefined) o.received(chunk as { length: number } & object);
    return push.call(this, chunk, encoding);
  };
  const write = res.write;
  const end = res.end;
  const w = res as unknown as { write: (...a: unknown[]) => boolean; end: (...a: unknown[]) => FrontResponse };
  w.write = function (this: FrontResponse, chunk: unknown, encoding?: unknown, cb?: unknown) {
    o.sent(chunk, encoding);
    return (write as (...a: unknown[]) => boolean).call(this, chunk, encoding, cb);
  };
  w.end = function (this: FrontResponse, chunk?: unknown, encoding?: unknown, cb?: unknown) {
    o.sent(chunk, encoding);
    return (end as (...a: unknown[]) => FrontResponse).call(this, chunk, encoding, cb);
  };
}

/** Counts the body bytes received (as the parser hands them over) and sent (as the handler writes them). */
export function countBytes(req: FrontRequest, res: FrontResponse, info: RequestInfo): void {
  const size = (chunk: unknown, encoding: unknown): number =>
    typeof chunk === 'string' ? Buffer.byteLength(chunk, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8') : chunk instanceof Uint8Array ? chunk.byteLength : 0;
  const head = req.method === 'HEAD';
  observeBodies(req, res, {
    received: (chunk) => {
      info.bytesReceived += chunk.length;
    },
    sent: (chunk, encoding) => {
      info.firstByteAt ??= performance.now();
      if (!head) info.bytesSent += size(chunk, encoding);
    },
  });
}
