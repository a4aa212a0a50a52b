/**
 * admin `/tap` (docs/admin.md): a live NDJSON stream of the requests this process's front ends
 * finish, one JSON event a line, filtered by the query parameters (parseTapQuery), paced by a
 * rate cap per tap (events over it are dropped and counted, never queued), and dropped rather
 * than buffered while the reader is slow (socket backpressure). The events come from the
 * process's tap hub (src/base/http/tap.ts); with `bodies=true` (refused by the admin unless the
 * process allows bodies) they carry the request and response bodies (src/base/http/tap-body.ts).
 */
import type { ServerResponse } from 'node:http';
import type { TapEvent, TapSink } from '../base/http/tap.js';
import type { Counter, Gauge } from '../base/stats/store.js';
import type { Query } from './query.js';

/** The content type of the stream: one JSON object a line. */
export const NDJSON = 'application/x-ndjson';
/** Events a second a tap gets when it names no `rate`, and the most it may name. */
export const DEFAULT_TAP_RATE = 100;
export const MAX_TAP_RATE = 1000;
/** How often a tap that dropped events says how many (`{"dropped":N}`). */
export const DROPPED_REPORT_MS = 1000;
/**
 * The events a tap took are sent together at most this often: one write (or one IPC message) for
 * all of them, not one per event, which cost more than building the event (a system call each).
 */
export const TAP_FLUSH_MS = 20;
/** Bytes of events a stream holds between flushes; past them (and while the socket needs a drain) events are dropped. */
export const TAP_PENDING_MAX_BYTES = 256 * 1024;

/** The query parameters of /tap, in the order the docs list them. */
export const TAP_PARAMETERS = ['service', 'route', 'path_prefix', 'method', 'status', 'identity', 'min_duration_ms', 'sample', 'rate', 'bodies'] as const;

/** What a tap takes: every field set must match (absent: any). */
export interface TapFilter {
  /** The upstream cluster (service) the request went to. */
  service?: string;
  route?: string;
  pathPrefix?: string;
  /** Upper case. */
  method?: string;
  /** Status range, both ends included: a class (`4xx`: 400..499) or one code. */
  status?: { min: number; max: number };
  /** The caller's SPIFFE ID, exactly. */
  identity?: string;
  minDurationMs?: number;
  /** Share of the matching events taken, 0 to 1. */
  sample: number;
  /** Events a second, at most. */
  rate: number;
  /** The events carry the request and response bodies (when the process allows them). */
  bodies: boolean;
}

/** A parameter /tap refuses: its name and why (the 400's detail). */
export interface TapParameterError {
  parameter: string;
  detail: string;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Parses /tap's query; a parameter it does not know, or a bad value, is an error naming it. */
export function parseTapQuery(q: Query): TapFilter | TapParameterError {
  const filter: TapFilter = { sample: 1, rate: DEFAULT_TAP_RATE, bodies: false };
  const bad = (parameter: string, why: string): TapParameterError => ({ parameter, detail: `invalid tap parameter ${parameter}=${JSON.stringify(q.get(parameter) ?? '')}: ${why}` });
  for (const [name, value] of q) {
    switch (name) {
      case 'service':
      case 'route':
      case 'identity':
        if (value === '') return bad(name, 'empty');
        filter[name] = value;
        break;
      case 'path_prefix':
        if (!value.startsWith('/')) return bad(name, 'a path prefix starts with /');
        filter.pathPrefix = value;
        break;
      case 'method':
        if (!TOKEN.test(value)) return bad(name, 'not an HTTP method');
        filter.method = value.toUpperCase();
        break;
      case 'status': {
        const cls = /^([1-5])xx$/i.exec(value);
        if (cls) filter.status = { min: Number(cls[1]) * 100, max: Number(cls[1]) * 100 + 99 };
        else if (/^[1-5]\d\d$/.test(value)) filter.status = { min: Number(value), max: Number(value) };
        else return bad(name, 'use a class 1xx to 5xx or a status code 100 to 599');
        break;
      }
      case 'min_duration_ms': {
        const n = /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN;
        if (!Number.isFinite(n)) return bad(name, 'not a number of milliseconds');
        filter.minDurationMs = n;
        break;
      }
      case 'sample': {
        const n = /^(0(\.\d+)?|1(\.0+)?|\.\d+)$/.test(value) ? Number(value) : NaN;
        if (!Number.isFinite(n)) return bad(name, 'a share from 0 to 1');
        filter.sample = n;
        break;
      }
      case 'rate': {
        const n = /^\d+$/.test(value) ? Number(value) : NaN;
        if (!(n >= 1 && n <= MAX_TAP_RATE)) return bad(name, `events a second, 1 to ${MAX_TAP_RATE}`);
        filter.rate = n;
        break;
      }
      case 'bodies':
        if (value !== 'true' && value !== 'false') return bad(name, 'true or false');
        filter.bodies = value === 'true';
        break;
      default:
        return { parameter: name, detail: `unknown tap parameter ${JSON.stringify(name)}: use ${TAP_PARAMETERS.join(', ')}` };
    }
  }
  return filter;
}

/** Whether an event matches a filter (the sample not included). */
export function tapMatches(f: TapFilter, e: TapEvent): boolean {
  if (f.service !== undefined && e.cluster !== f.service) return false;
  if (f.route !== undefined && e.route !== f.route) return false;
  if (f.pathPrefix !== undefined && !e.path.startsWith(f.pathPrefix)) return false;
  if (f.method !== undefined && e.method.toUpperCase() !== f.method) return false;
  if (f.status !== undefined && (e.status < f.status.min || e.status > f.status.max)) return false;
  if (f.identity !== undefined && e.identity !== f.identity) return false;
  if (f.minDurationMs !== undefined && e.duration_ms < f.minDurationMs) return false;
  return true;
}

/** A token bucket of `rate` events a second, holding one second's worth. */
export class RateCap {
  private tokens: number;
  private last: number;

  constructor(
    private readonly rate: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = rate;
    this.last = now();
  }

  take(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.rate, this.tokens + ((t - this.last) * this.rate) / 1000);
    this.last = t;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

export interface TapStats {
  events: Counter;
  dropped: Counter;
  active: Gauge;
}

/**
 * An attached tap's pacing: takes the events its filter matches (and its sample draws), at most
 * `rate` a second, and hands each to `emit`, which holds it for the next flush (every
 * TAP_FLUSH_MS) or refuses it (no room); an event over the rate or refused is dropped and counted,
 * and every DROPPED_REPORT_MS `report` says how many since the last report.
 */
abstract class PacedTap implements TapSink {
  private readonly cap: RateCap;
  private readonly reportTimer: NodeJS.Timeout;
  private flushTimer?: NodeJS.Timeout;
  /** Dropped since the last report. */
  protected dropped = 0;
  protected ended = false;

  constructor(
    protected readonly filter: TapFilter,
    private readonly onDrop: () => void,
    private readonly random: () => number,
  ) {
    this.cap = new RateCap(filter.rate);
    this.reportTimer = setInterval(() => this.report(), DROPPED_REPORT_MS);
    this.reportTimer.unref();
  }

  get bodies(): boolean {
    return this.filter.bodies;
  }

  mayTake(method: string, path: string): boolean {
    const f = this.filter;
    return !this.ended && (f.pathPrefix === undefined || path.startsWith(f.pathPrefix)) && (f.method === undefined || method.toUpperCase() === f.method);
  }

  /** Takes the events its filter matches and its sample draws, at most `rate` a second (one over it is dropped and counted). */
  admits(event: TapEvent): boolean {
    if (this.ended || !tapMatches(this.filter, event)) return false;
    if (this.filter.sample < 1 && this.random() >= this.filter.sample) return false;
    if (this.cap.take()) return true;
    this.drop();
    return false;
  }

  /** An event admits took: held for the next flush, or dropped (and counted) when there is no room. */
  deliver(event: TapEvent): void {
    if (!this.emit(event)) this.drop();
  }

  /** admits, then deliver: for an event that does not come through a hub (a worker's, at the --concurrency primary). */
  offer(event: TapEvent): void {
    if (this.admits(event)) this.deliver(event);
  }

  private drop(): void {
    this.dropped++;
    this.onDrop();
  }

  /** Holds one event for the next flush; false when there is no room (it is then dropped). */
  protected abstract emit(event: TapEvent): boolean;
  /** Sends what emit held, at once. */
  protected abstract flush(): void;
  /** Says how many were dropped since the last report (when any). */
  protected abstract report(): void;

  /** A flush within TAP_FLUSH_MS (one for everything emitted meanwhile). */
  protected flushSoon(): void {
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = undefined;
      this.flush();
    }, TAP_FLUSH_MS);
  }

  /** Stops taking events (the client went away, or the admin closes); what was held is not sent. */
  stop(): void {
    this.ended = true;
    clearInterval(this.reportTimer);
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
  }
}

/**
 * One /tap answer: an attached sink that writes the events its filter takes, together every
 * TAP_FLUSH_MS. It holds at most TAP_PENDING_MAX_BYTES between writes, and nothing while the
 * socket needs a drain: events that come then are dropped (and counted), as are those over the
 * rate cap; every DROPPED_REPORT_MS a `{"dropped":N}` line says how many since the last such
 * line (and one more at the end).
 *
 * With --concurrency above 1 the primary's stream gets the events its workers' relays (TapRelay)
 * took: they matched and sampled them, so the stream is made with a sample of 1, and what they
 * dropped arrives through `droppedElsewhere`.
 */
export class TapStream extends PacedTap {
  /** Lines taken since the last flush. */
  private pending = '';

  constructor(
    private readonly res: ServerResponse,
    filter: TapFilter,
    private readonly stats: TapStats,
    random: () => number = Math.random,
  ) {
    super(filter, () => stats.dropped.inc(), random);
  }

  protected emit(event: TapEvent): boolean {
    if (this.res.writableNeedDrain || this.pending.length >= TAP_PENDING_MAX_BYTES) return false;
    this.pending += `${JSON.stringify(event)}\n`;
    this.stats.events.inc();
    this.flushSoon();
    return true;
  }

  protected flush(): void {
    if (this.pending === '' || this.res.writableEnded || this.res.destroyed) return;
    this.res.write(this.pending);
    this.pending = '';
  }

  /** Events a worker's relay dropped for this tap (counted there): said in the next `{"dropped":N}`. */
  droppedElsewhere(n: number): void {
    if (!this.ended) this.dropped += n;
  }

  protected report(): void {
    if (this.dropped === 0 || this.ended || this.res.writableNeedDrain) return;
    this.pending += `{"dropped":${this.dropped}}\n`;
    this.dropped = 0;
    this.flush();
  }

  /** Ends the stream cleanly (shutdown): the events taken, then a last `{"dropped":N}` line if events were dropped since the last one. */
  end(): Promise<void> {
    const res = this.res;
    if (!this.ended) {
      this.flush();
      this.report();
    }
    this.stop();
    if (res.writableEnded || res.destroyed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      res.once('close', () => resolve());
      res.end();
    });
  }
}

/** Where a worker's relay sends what it took: the events (every TAP_FLUSH_MS), and every DROPPED_REPORT_MS how many it dropped. */
export interface TapRelayOutput {
  events(events: TapEvent[]): void;
  dropped(n: number): void;
}

/**
 * A tap of the --concurrency primary, attached to one worker's hub: the same filter, sample and
 * rate as the primary's stream (so that the link carries at most `rate` events a second from each
 * worker), its events and drop counts sent to the primary (src/cli/concurrency.ts).
 */
export class TapRelay extends PacedTap {
  /** Taken since the last flush: at most a second's worth (the rate cap). */
  private pending: TapEvent[] = [];

  constructor(
    filter: TapFilter,
    private readonly out: TapRelayOutput,
    stats: Pick<TapStats, 'dropped'>,
    random: () => number = Math.random,
  ) {
    super(filter, () => stats.dropped.inc(), random);
  }

  protected emit(event: TapEvent): boolean {
    this.pending.push(event);
    this.flushSoon();
    return true;
  }

  protected flush(): void {
    if (this.pending.length === 0 || this.ended) return;
    const events = this.pending;
    this.pending = [];
    this.out.events(events);
  }

  protected report(): void {
    if (this.dropped === 0 || this.ended) return;
    this.out.dropped(this.dropped);
    this.dropped = 0;
  }

  override stop(): void {
    super.stop();
    this.pending = [];
  }
}
