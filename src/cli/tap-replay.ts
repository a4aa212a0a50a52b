/**
 * `mesh tap replay FILE [--line=N] [--to=URL]` (docs/cli.md): sends again the requests of events
 * that `mesh tap --bodies -o json` wrote, one JSON event a line: the method, the path and query,
 * the headers (without the redacted ones, the hop-by-hop ones and HTTP/2 pseudo-headers; Host
 * kept) and the captured body, to the front end the event names (its scheme and authority) or to
 * --to. An event whose request body was not captured, was truncated or was redacted is refused:
 * what would be sent is not what was. The file is outside input: every selected line is checked
 * before anything is sent, and a line that is not such an event is an error naming it (exit 1).
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { request as httpRequest } from '../base/http/node-http.js';
import { request as httpsRequest } from 'node:https';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { isRedacted, REDACTED } from '../base/http/tap.js';
import { isHopByHop } from '../core/transport/headers.js';
import { printable } from '../base/util/text.js';

/** How long a replayed request may take, answer included. */
export const REPLAY_TIMEOUT_MS = 30_000;

/** A request to send again, from one line of the file. */
export interface Replay {
  line: number;
  method: string;
  /** Where it goes, for display (its path and query percent-encoded as URL does). */
  url: URL;
  /** The request target as captured: the path, then `?` and the query when there was one. */
  target: string;
  headers: Record<string, string>;
  body: Buffer;
}

/** A line that cannot be replayed: the message names the file and the line. */
export class ReplayError extends Error {}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const NONE = new Set<string>();

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The request of one event line; a ReplayError saying why it cannot be sent. */
export function replayOf(text: string, line: number, where: string, to: URL | undefined): Replay {
  const fail = (why: string): never => {
    throw new ReplayError(`${where}:${line}: ${why}`);
  };
  let e: unknown;
  try {
    e = JSON.parse(text);
  } catch (err) {
    return fail(`not a JSON line (${(err as Error).message})`);
  }
  if (!isRecord(e)) return fail('not a tap event (not a JSON object)');
  const { method, path, query, authority, scheme, request_headers: headers, request_body: body } = e;
  if (typeof method !== 'string' || !TOKEN.test(method)) return fail('not a tap event: "method" is not an HTTP method');
  if (typeof path !== 'string' || !path.startsWith('/') || /[\s\0]/.test(path)) return fail('not a tap event: "path" is not a path');
  if (query !== null && query !== undefined && (typeof query !== 'string' || /[\s\0#]/.test(query))) return fail('not a tap event: "query" is not a query');
  if (!isRecord(headers) || Object.values(headers).some((v) => typeof v !== 'string')) return fail('not a tap event: "request_headers" is not an object of strings');
  if (body === undefined || body === null) return fail('the request body was not captured (tap with mesh tap --bodies, on a process started with --tap_bodies_max_bytes): not replayed');
  if (!isRecord(body) || typeof body.bytes !== 'number' || typeof body.data !== 'string' || (body.encoding !== 'utf8' && body.encoding !== 'base64')) return fail('not a tap event: "request_body" is not a captured body');
  if (body.truncated === true) return fail(`the request body was truncated (${body.bytes} bytes, more than --tap_bodies_max_bytes): not replayed`);
  if (body.redacted === true) return fail('the request body was redacted (--tap_redact_json_fields): not replayed');
  const bytes = body.encoding === 'base64' ? Buffer.from(body.data, 'base64') : Buffer.from(body.data, 'utf8');
  if (bytes.byteLength !== body.bytes) return fail(`the request body holds ${bytes.byteLength} bytes, the event says ${body.bytes}: not replayed`);
  let base: URL;
  if (to) base = to;
  else {
    if (typeof authority !== 'string' || authority === '') return fail('the event names no authority (Host): give --to=URL');
    if (scheme !== undefined && scheme !== 'http' && scheme !== 'https') return fail('not a tap event: "scheme" is neither http nor https');
    try {
      base = new URL(`${scheme ?? 'http'}://${authority}`);
    } catch {
      return fail(`the event's authority ${JSON.stringify(printable(authority))} is not a host[:port]: give --to=URL`);
    }
  }
  const url = new URL(base.origin);
  url.pathname = path;
  url.search = typeof query === 'string' ? query : '';
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers as Record<string, string>)) {
    const n = name.toLowerCase();
    if (!TOKEN.test(name) || value === REDACTED || isRedacted(n, NONE) || isHopByHop(n)) continue;
    if (/[\r\n\0]/.test(value)) return fail(`not a tap event: header ${JSON.stringify(printable(name))} holds a line break`);
    out[n] = value;
  }
  // The request as the front end saw it: its Host, wherever it is sent.
  if (typeof authority === 'string' && authority !== '' && !/[\s\0]/.test(authority)) out.host = authority;
  if (bytes.byteLength > 0 || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(method.toUpperCase())) out['content-length'] = String(bytes.byteLength);
  const target = typeof query === 'string' ? `${path}?${query}` : path;
  return { line, method, url, target, headers: out, body: bytes };
}

/** The replays of the file's event lines (one line, with `line`); every one checked before any is sent. */
export function replaysOf(text: string, where: string, only: number | undefined, to: URL | undefined): Replay[] {
  const lines = text.split('\n');
  if (only !== undefined) {
    if (only > lines.length || lines[only - 1]!.trim() === '') throw new UsageError(`invalid value "${only}" for flag --line: ${where} has no event on line ${only}`);
    return [replayOf(lines[only - 1]!, only, where, to)];
  }
  const out: Replay[] = [];
  lines.forEach((l, i) => {
    if (l.trim() !== '') out.push(replayOf(l, i + 1, where, to));
  });
  if (out.length === 0) throw new ReplayError(`${where}: no event to replay (an empty file)`);
  return out;
}

/** What came back. */
export interface ReplayAnswer {
  status: number;
  statusText: string;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

/** Sends one replay; rejects when no answer came (the message says why). */
export function sendReplay(r: Replay, timeoutMs = REPLAY_TIMEOUT_MS): Promise<ReplayAnswer> {
  return new Promise((resolve, reject) => {
    const send = r.url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send({ protocol: r.url.protocol, hostname: r.url.hostname.replace(/^\[|\]$/g, ''), port: r.url.port, path: r.target, method: r.method, headers: r.headers, agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, statusText: res.statusMessage ?? '', headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs / 1000}s`)));
    req.on('error', reject);
    req.end(r.body);
  });
}

/** The --to URL: http(s)://host[:port], nothing else. */
export function parseReplayTarget(to: string): URL {
  let url: URL;
  try {
    url = new URL(to);
  } catch {
    throw new UsageError(`invalid value "${to}" for flag --to: not a URL; use http://HOST:PORT or https://HOST:PORT`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '' || (url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '') {
    throw new UsageError(`invalid value "${to}" for flag --to: use http://HOST:PORT or https://HOST:PORT (the path is the event's)`);
  }
  return url;
}

/**
 * Runs `mesh tap replay FILE`: 0 when every request got an answer (whatever its status), 1 when a
 * line cannot be replayed (nothing is sent then) or a request got no answer; 2 for bad arguments.
 */
export async function runTapReplay(args: readonly string[], config: Config, io: Output): Promise<number> {
  if (args.length === 0) throw new UsageError('mesh tap replay needs FILE: the lines mesh tap --bodies -o json wrote');
  if (args.length > 1) throw new UsageError(`mesh tap replay takes one FILE (got "${args[1]}" too)`);
  const file = args[0]!;
  const to = config.to !== undefined ? parseReplayTarget(config.to) : undefined;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    io.err(`mesh tap replay: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}\n`);
    return 1;
  }
  let replays: Replay[];
  try {
    replays = replaysOf(text, file, config.line, to);
  } catch (err) {
    if (!(err instanceof ReplayError)) throw err;
    io.err(`mesh tap replay: ${err.message}\n`);
    return 1;
  }
  const json = config.output === 'json';
  let code = 0;
  for (const r of replays) {
    let answer: ReplayAnswer;
    try {
      answer = await sendReplay(r);
    } catch (err) {
      io.err(`mesh tap replay: ${file}:${r.line}: ${r.method} ${r.url.href}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}\n`);
      code = 1;
      continue;
    }
    if (json) {
      const utf8 = answer.body.toString('utf8');
      const text = Buffer.from(utf8, 'utf8').equals(answer.body);
      io.out(`${JSON.stringify({ line: r.line, method: r.method, url: r.url.href, status: answer.status, headers: answer.headers, body: { encoding: text ? 'utf8' : 'base64', data: text ? utf8 : answer.body.toString('base64') } })}\n`);
    } else {
      io.err(`mesh tap replay: ${file}:${r.line}: ${r.method} ${r.url.href}\n`);
      io.out(`${answer.status} ${answer.statusText}\n`);
      if (answer.body.byteLength > 0) io.out(answer.body.toString('utf8') + (answer.body.at(-1) === 0x0a ? '' : '\n'));
    }
  }
  return code;
}
