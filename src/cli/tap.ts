/**
 * `mesh tap --admin=HOST:PORT[,...]`: the admin `/tap` streams of one or more processes, merged
 * as the events arrive, one line per request (-o json: the events as JSON lines, each with the
 * admin it came from; --bodies: with the bodies, which `mesh tap replay` sends again,
 * src/cli/tap-replay.ts). The filters are checked here as the admin checks them (a bad one exits 2
 * naming the flag). A stream that ends, or a process that cannot be reached, is said once on
 * stderr and opened again (after 0.5 s, doubling up to 5 s), as is a 502, 503 (too many taps) or
 * 504; an admin that refuses the tap otherwise (400, 401, 403, 404, 501) is said on stderr and not
 * asked again; the command exits 1 when every admin
 * refused. Ctrl-C or SIGTERM ends it with 0. Without --admin, the processes are those the
 * registry records (src/cli/ps.ts), read again every REDISCOVER_MS: a process that starts later
 * is tapped once its record is there, one whose record is gone is let go.
 */
import type { ClientRequest, IncomingMessage } from 'node:http';
import { request } from '../base/http/node-http.js';
import { request as httpsRequest, type RequestOptions as HttpsRequestOptions } from 'node:https';
import type { PeerCertificate, SecureContext } from 'node:tls';
import { CALLER_NAMES, peerIdentityProblem } from '../base/mtls/workload-tls.js';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { parseQuery } from '../admin/query.js';
import { NDJSON, parseTapQuery } from '../admin/tap.js';
import type { TapEvent } from '../base/http/tap.js';
import { formatAddress, parseAddress } from '../base/util/address.js';
import { printable } from '../base/util/text.js';

/** The flag of each /tap parameter (a refusal names the flag). */
const FLAG_OF: Record<string, string> = {
  service: 'service',
  route: 'route',
  path_prefix: 'path',
  method: 'method',
  status: 'status',
  identity: 'identity',
  min_duration_ms: 'min_duration',
  sample: 'sample',
  rate: 'rate',
  bodies: 'bodies',
};

const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 5000;
/** How often the recorded processes are read again (without --admin). */
const REDISCOVER_MS = 5000;

/** The /tap query string of the flags; a value the admin would refuse is a UsageError naming its flag. */
export function tapQueryOf(config: Config, given: ReadonlySet<string>): string {
  const params = new URLSearchParams();
  const set = (name: string, value: string | number | undefined) => {
    if (value !== undefined) params.set(name, String(value));
  };
  set('service', config.service);
  set('route', config.route);
  set('path_prefix', config.path);
  set('method', config.method);
  set('status', config.status);
  set('identity', config.identity);
  set('min_duration_ms', config.min_duration);
  set('sample', config.sample);
  if (given.has('rate')) set('rate', config.rate);
  if (config.bodies) set('bodies', 'true');
  const text = params.toString();
  const parsed = parseTapQuery(parseQuery(text));
  if ('parameter' in parsed) {
    const flag = FLAG_OF[parsed.parameter] ?? parsed.parameter;
    throw new UsageError(`invalid value ${JSON.stringify(params.get(parsed.parameter) ?? '')} for flag --${flag}: ${parsed.detail.replace(/^[^:]*: /, '')}`);
  }
  return text === '' ? '' : `?${text}`;
}

/** One event as a line: `TIME FRONT METHOD PATH STATUS DURATIONms route=… upstream=CLUSTER@HOST trace=…` (then what is set of flags, retries, identity). */
export function formatTapEvent(e: TapEvent, admin?: string): string {
  const p = (v: string | null | undefined) => (v === null || v === undefined || v === '' ? '-' : printable(v));
  const target = e.query === null ? e.path : `${e.path}?${e.query}`;
  let line = `${e.time} ${p(e.front)} ${p(e.method)} ${p(target)} ${e.status} ${e.duration_ms}ms route=${p(e.route)} upstream=${e.cluster === null && e.host === null ? '-' : `${p(e.cluster)}@${p(e.host)}`} trace=${p(e.trace_id)}`;
  if (e.response_flags !== '-') line += ` flags=${p(e.response_flags)}`;
  if (e.retries > 0) line += ` retries=${e.retries}`;
  if (e.identity !== null) line += ` identity=${p(e.identity)}`;
  if (admin !== undefined) line += ` admin=${admin}`;
  return `${line}\n`;
}

/**
 * Without --admin, reads the recorded processes' admins again (what the registry says now; what
 * cannot be read is not said again); with --admin, undefined: the admins are fixed.
 */
export function tapDiscovery(config: Config): (() => Promise<string[]>) | undefined {
  if (config.admin.length > 0) return undefined;
  const quiet = { err: () => undefined };
  return async () => {
    const { processAdmins } = await import('./ps.js');
    return processAdmins(config, quiet);
  };
}

/** The admin addresses of --admin, each as HOST:PORT (a bad one is a UsageError); none given: every process the registry records (src/cli/ps.ts). */
export async function tapAdmins(config: Config, io: Pick<Output, 'err'>): Promise<string[]> {
  if (config.admin.length === 0) {
    const { processAdmins } = await import('./ps.js');
    const found = await processAdmins(config, io);
    if (found.length === 0) throw new UsageError('no mesh process is recorded in this registry (see mesh ps); name the admin interfaces with --admin=HOST:PORT[,HOST:PORT...]');
    return found;
  }
  return config.admin.map((a) => {
    try {
      const { host, port } = parseAddress(a, { what: 'admin address' });
      if (port === 0) throw new Error('port 0 names no process');
      return formatAddress(host === '' || host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host, port);
    } catch (err) {
      throw new UsageError(`invalid value "${a}" for flag --admin: ${(err as Error).message}`);
    }
  });
}

interface Source {
  admin: string;
  req?: ClientRequest;
  res?: IncomingMessage;
  /** The admin refused the tap: not asked again. */
  refused: boolean;
  /** Said that it is down (said again only once it was back). */
  saidDown: boolean;
  retryMs: number;
  timer?: NodeJS.Timeout;
}

/** The CLI's side of a tap over mutual TLS: its certificate and roots, and the trust domain the admins' certificates must name. */
export interface TapClientTls {
  secureContext(): SecureContext;
  trustDomain: string;
}

/**
 * With --mtls (permissive or strict): the CLI's workload certificate (identity mesh.cli from the
 * mesh CA, or the --mtls_cert_file's), kept (and renewed) until `close`, so that `mesh tap` and
 * `mesh top` tap over mutual TLS (admins started with --tap_allowed_identities). Undefined with --mtls=off.
 */
export async function tapClientTls(config: Config): Promise<{ tls: TapClientTls; close: () => Promise<void> } | undefined> {
  if (config.mtls === 'off') return undefined;
  const { DirectOperations } = await import('./operations.js');
  const ops = new DirectOperations(config);
  try {
    const workload = (await ops.runtime.workloadTls(CALLER_NAMES.cli))!;
    return { tls: { secureContext: () => workload.secureContext(), trustDomain: workload.trustDomain }, close: () => ops.close() };
  } catch (err) {
    await ops.close();
    throw err;
  }
}

/** What tapStreams takes. */
export interface TapStreamsOptions {
  admins: readonly string[];
  /** The /tap query string (tapQueryOf). */
  query: string;
  adminToken?: string;
  /** Set: every admin is tapped over mutual TLS with this certificate (tapClientTls). */
  tls?: TapClientTls;
  io: Pick<Output, 'err'>;
  /**
   * One event of one admin (a JSON object, not the `{"dropped":N}` reports: those are said on
   * stderr). A promise returned: every stream pauses until it settles (a slow reader).
   */
  onEvent: (admin: string, event: Record<string, unknown>, tapped: number) => Promise<void> | void;
  /** The recorded processes' admins as they are now (tapDiscovery), asked every REDISCOVER_MS; unset: `admins` only. */
  discover?: () => Promise<readonly string[]>;
  signals?: NodeJS.EventEmitter;
  /** What starts each line on stderr (default `mesh tap`). */
  label?: string;
}

/**
 * The /tap streams of the admins, merged as the events arrive; resolves with the exit code once a
 * signal ends it (0) or every admin refused (1). The stream handling of `mesh tap` and `mesh top`.
 */
export async function tapStreams(o: TapStreamsOptions): Promise<number> {
  const { admins, query, io } = o;
  const signals = o.signals ?? process;
  const label = o.label ?? 'mesh tap';
  const headers: Record<string, string> = { accept: NDJSON };
  if (o.adminToken) headers.authorization = `Bearer ${o.adminToken}`;
  const sourceOf = (admin: string): Source => ({ admin, refused: false, saidDown: false, retryMs: RETRY_FIRST_MS });
  const sources: Source[] = admins.map(sourceOf);
  let stopped = false;
  let finish: (code: number) => void = () => {};
  const done = new Promise<number>((resolve) => (finish = resolve));
  let paused = false;

  const line = (s: Source, text: string): void => {
    if (text === '') return;
    let value: Record<string, unknown>;
    try {
      value = JSON.parse(text) as Record<string, unknown>;
    } catch {
      io.err(`${label}: ${s.admin}: not a JSON line: ${printable(text.slice(0, 200))}\n`);
      return;
    }
    if (typeof value.dropped === 'number' && Object.keys(value).length === 1) {
      io.err(`${label}: ${s.admin}: ${value.dropped} events dropped (over --rate, or not read fast enough)\n`);
      return;
    }
    const drained = o.onEvent(s.admin, value, sources.length);
    // A slow reader: stop reading until it caught up (the admins then drop what does not fit, and say so).
    if (drained && !paused) {
      paused = true;
      for (const x of sources) x.res?.pause();
      void drained.then(() => {
        paused = false;
        for (const x of sources) x.res?.resume();
      });
    }
  };

  const retry = (s: Source, why: string): void => {
    s.req = undefined;
    s.res = undefined;
    if (stopped || s.refused) return;
    if (!s.saidDown) io.err(`${label}: ${s.admin}: ${why}; trying again\n`);
    s.saidDown = true;
    s.timer = setTimeout(() => open(s), s.retryMs);
    s.retryMs = Math.min(RETRY_MAX_MS, s.retryMs * 2);
  };

  const refuse = (s: Source, why: string): void => {
    s.refused = true;
    io.err(`${label}: ${s.admin}: ${why}\n`);
    if (sources.every((x) => x.refused)) {
      stopped = true;
      finish(1);
    }
  };

  const open = (s: Source): void => {
    if (stopped) return;
    const tls = o.tls;
    // Over mutual TLS the admin proves a SPIFFE ID of the trust domain (its certificate names no host).
    const checkServerIdentity = (_host: string, cert: PeerCertificate): Error | undefined => {
      const problem = tls && peerIdentityProblem(cert, tls.trustDomain);
      return problem ? new Error(`the admin's certificate: ${problem}`) : undefined;
    };
    const req = tls
      ? httpsRequest(`https://${s.admin}/tap${query}`, { headers, agent: false, secureContext: tls.secureContext(), checkServerIdentity } as HttpsRequestOptions & { secureContext: SecureContext })
      : request(`http://${s.admin}/tap${query}`, { headers, agent: false });
    s.req = req;
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (s.req === req) retry(s, `cannot reach the admin (${err.code ?? err.message})`);
    });
    req.on('response', (res) => {
      s.res = res;
      if (res.statusCode !== 200) {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d.length + body.length <= 4096 ? d : ''));
        res.on('end', () => {
          const detail = printable(body.trim()) || String(res.statusCode);
          // Too many taps there (503), or a proxy's 502 or 504: perhaps later; any other answer (501 included) will not change.
          if ([502, 503, 504].includes(res.statusCode ?? 0)) retry(s, `tap refused: ${detail}`);
          else refuse(s, `tap refused (${res.statusCode}): ${detail}`);
        });
        return;
      }
      io.err(`${label}: ${s.admin}: tapping${s.saidDown ? ' again' : ''}\n`);
      s.saidDown = false;
      s.retryMs = RETRY_FIRST_MS;
      if (paused) res.pause();
      let rest = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        rest += d;
        let nl: number;
        while ((nl = rest.indexOf('\n')) !== -1) {
          line(s, rest.slice(0, nl));
          rest = rest.slice(nl + 1);
        }
      });
      res.on('error', () => undefined);
      res.on('close', () => {
        if (s.req === req) retry(s, 'the stream ended');
      });
    });
    req.end();
  };

  /** Taps the processes recorded since, lets go of those whose record is gone. */
  const rediscover = async (): Promise<void> => {
    let now: readonly string[];
    try {
      now = await o.discover!();
    } catch {
      return; // the registry cannot be read now: the streams as they are
    }
    if (stopped) return;
    const wanted = new Set(now);
    for (const s of [...sources]) {
      if (wanted.has(s.admin)) continue;
      sources.splice(sources.indexOf(s), 1);
      clearTimeout(s.timer);
      const req = s.req;
      s.req = undefined;
      req?.destroy();
      io.err(`${label}: ${s.admin}: its process is no longer recorded; let go\n`);
    }
    for (const admin of wanted) {
      if (sources.some((s) => s.admin === admin)) continue;
      const s = sourceOf(admin);
      sources.push(s);
      open(s);
    }
  };
  let discovering: NodeJS.Timeout | undefined;
  if (o.discover) {
    let busy = false;
    discovering = setInterval(() => {
      if (busy) return;
      busy = true;
      void rediscover().finally(() => (busy = false));
    }, REDISCOVER_MS);
  }

  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    for (const s of sources) {
      clearTimeout(s.timer);
      const req = s.req;
      s.req = undefined;
      req?.destroy();
    }
    finish(0);
  };
  signals.once('SIGINT', stop);
  signals.once('SIGTERM', stop);
  for (const s of sources) open(s);
  const code = await done;
  clearInterval(discovering);
  signals.removeListener('SIGINT', stop);
  signals.removeListener('SIGTERM', stop);
  for (const s of sources) {
    clearTimeout(s.timer);
    s.req?.destroy();
  }
  return code;
}

/** Runs `mesh tap`; resolves with the exit code once a signal ends it (0) or every admin refused (1). */
export async function runTap(config: Config, given: ReadonlySet<string>, io: Output, signals: NodeJS.EventEmitter = process): Promise<number> {
  const admins = await tapAdmins(config, io);
  const query = tapQueryOf(config, given);
  const json = config.output === 'json';
  const mtls = await tapClientTls(config);
  try {
    return await tapStreams({
      admins,
      query,
      adminToken: config.admin_token,
      ...(mtls ? { tls: mtls.tls } : {}),
      io,
      signals,
      discover: tapDiscovery(config),
      onEvent: (admin, value, tapped) => {
        io.out(json ? `${JSON.stringify({ admin, ...value })}\n` : formatTapEvent(value as unknown as TapEvent, tapped > 1 ? admin : undefined));
        // A slow stdout: wait until it drained.
        return io.drain && process.stdout.writableNeedDrain ? io.drain() : undefined;
      },
    });
  } finally {
    await mtls?.close();
  }
}
