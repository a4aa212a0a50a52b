/**
 * Structured logs (pino) with one level per subsystem, changeable at run time (admin /logging,
 * --log_level). Levels use Envoy's names: trace debug info warning error critical off.
 *
 * Two formats (--log_format; by default text when the log stream, stderr, is a terminal, JSON
 * lines elsewhere). Both go through the same pino loggers, so levels, child bindings and the
 * error serializer are pino's; the text format is a synchronous, in-process destination that turns
 * each JSON line into one readable line. A disabled level is a no-op in pino: nothing is
 * serialized or formatted.
 */
import pino from 'pino';
import { LEVELS, isLevel, parseLevel, type Level, type LogFormat } from './levels.js';
import type { TraceContext } from './trace-context.js';

export { LEVELS, LOG_FORMATS, isLevel, parseLevel, type Level, type LogFormat } from './levels.js';
type Logger = pino.Logger;
type DestinationStream = pino.DestinationStream;

const TO_PINO: Record<Level, pino.LevelWithSilent> = {
  trace: 'trace',
  debug: 'debug',
  info: 'info',
  warning: 'warn',
  error: 'error',
  critical: 'fatal',
  off: 'silent',
};

/** Subsystems, in the order admin /logging lists them. */
export const SUBSYSTEMS = [
  'admin',
  'broker',
  'client',
  'config',
  'gateway',
  'hc',
  'http',
  'main',
  'registry',
  'router',
  'server',
  'sidecar',
  'upstream',
] as const;
export type Subsystem = (typeof SUBSYSTEMS)[number];

/** pino's level labels to ours: JSON lines say "warning" and "critical", like --log_level. */
const FROM_PINO: Record<string, Level> = { trace: 'trace', debug: 'debug', info: 'info', warn: 'warning', error: 'error', fatal: 'critical' };

/** --log_format wins; without it: text on a terminal, JSON lines elsewhere (files, pipes, collectors). */
export function chooseLogFormat(format: LogFormat | undefined, isTTY: boolean): LogFormat {
  return format ?? (isTTY ? 'text' : 'json');
}

/**
 * Whether text lines may carry colour: never with NO_COLOR (non-empty); with FORCE_COLOR, unless
 * it is 0 or false; otherwise when the stream is a terminal that has colours (TERM=dumb has none).
 */
export function colorEnabled(stream: { isTTY?: boolean; hasColors?: () => boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.NO_COLOR) return false;
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== '0' && force.toLowerCase() !== 'false';
  return stream.isTTY === true && typeof stream.hasColors === 'function' && stream.hasColors();
}

const LEVEL_WIDTH = 8; // CRITICAL
const COLORS: Record<Level, string> = {
  trace: '\x1b[90m',
  debug: '\x1b[36m',
  info: '\x1b[32m',
  warning: '\x1b[33m',
  error: '\x1b[31m',
  critical: '\x1b[1;31m',
  off: '',
};
const RESET = '\x1b[0m';
/** Keys the text line shows in its fixed columns (pid: one process's own terminal). */
const FIXED_KEYS = new Set(['level', 'time', 'pid', 'hostname', 'subsystem', 'msg']);

const pad2 = (n: number) => (n < 10 ? '0' : '') + n;
const pad3 = (n: number) => (n < 10 ? '00' : n < 100 ? '0' : '') + n;

/** HH:MM:SS.mmm in local time. */
function clockTime(ms: number): string {
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}.${pad3(d.getMilliseconds())}`;
}

// C0, DEL and C1 controls (C1 includes the one-byte CSI): never written raw to a terminal.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\x00-\x1f\x7f-\x9f]/g;
const escapeControl = (c: string) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0');
// eslint-disable-next-line no-control-regex
const NEEDS_QUOTES = /[\s"'=\\\x00-\x1f\x7f-\x9f]/;

/** A string value as logfmt does: bare when it can be, else a JSON string with controls escaped. */
function quote(s: string): string {
  if (s !== '' && !NEEDS_QUOTES.test(s)) return s;
  return JSON.stringify(s).replace(CONTROL, escapeControl);
}

function renderValue(v: unknown): string {
  if (typeof v === 'string') return quote(v);
  if (v === null || typeof v !== 'object') return String(v);
  return (JSON.stringify(v) ?? String(v)).replace(CONTROL, escapeControl);
}

/** An error as pino's serializer writes it: { type, message, stack, ...own properties }. */
function isSerializedError(v: unknown): v is { type?: string; message: string; stack: string; [k: string]: unknown } {
  return typeof v === 'object' && v !== null && typeof (v as { stack?: unknown }).stack === 'string' && typeof (v as { message?: unknown }).message === 'string';
}

/**
 * One log event (a parsed pino JSON line: level name, time in epoch ms) as a readable line:
 * `HH:MM:SS.mmm LEVEL    subsystem message key=value ...`, then the stack of each error field on
 * the following lines, indented by four spaces. No trailing newline.
 */
export function formatTextLine(entry: Record<string, unknown>, color = false): string {
  const time = typeof entry.time === 'number' ? clockTime(entry.time) : typeof entry.time === 'string' ? clockTime(Date.parse(entry.time)) : '--:--:--.---';
  const level = (typeof entry.level === 'string' ? (FROM_PINO[entry.level] ?? entry.level) : 'info') as Level;
  const name = level.toUpperCase();
  const padding = ' '.repeat(Math.max(1, LEVEL_WIDTH + 1 - name.length));
  let line = time + ' ' + (color && COLORS[level] ? COLORS[level] + name + RESET : name) + padding;
  if (typeof entry.subsystem === 'string') line += entry.subsystem + ' ';
  line += typeof entry.msg === 'string' ? entry.msg.replace(CONTROL, escapeControl) : entry.msg === undefined ? '-' : renderValue(entry.msg);
  let stacks = '';
  for (const key in entry) {
    if (FIXED_KEYS.has(key)) continue;
    const v = entry[key];
    if (isSerializedError(v)) {
      line += ' ' + key + '=' + quote(v.message);
      for (const k in v) if (k !== 'type' && k !== 'message' && k !== 'stack') line += ' ' + key + '.' + k + '=' + renderValue(v[k]);
      for (const s of v.stack.split('\n')) stacks += '\n    ' + s.replace(CONTROL, escapeControl);
    } else {
      line += ' ' + key + '=' + renderValue(v);
    }
  }
  return line + stacks;
}

interface SonicLike extends DestinationStream {
  flush?: (cb?: (err?: Error) => void) => void;
  flushSync?: () => void;
}

/** The text format: a pino destination that writes each JSON line as formatted text. */
class TextDestination implements DestinationStream {
  constructor(
    private readonly out: SonicLike,
    private readonly color: boolean,
  ) {}

  write(line: string): void {
    let entry: Record<string, unknown>;
    try {
      entry = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.out.write(line);
      return;
    }
    this.out.write(formatTextLine(entry, this.color) + '\n');
  }

  flush(cb?: (err?: Error) => void): void {
    if (this.out.flush) this.out.flush(cb);
    else cb?.();
  }

  flushSync(): void {
    this.out.flushSync?.();
  }
}

export interface LoggingOptions {
  /** Starting level of every subsystem (default info). */
  level?: Level;
  /** text or json; undefined: text when the destination (stderr) is a terminal, JSON lines otherwise. */
  format?: LogFormat;
  /** Where lines go (default stderr, asynchronous, flushed on exit). */
  destination?: DestinationStream;
  /** Text format: colour the level names (default: colorEnabled(destination or stderr)). */
  color?: boolean;
  /** Clock of the time field, epoch ms (default Date.now). */
  now?: () => number;
  /**
   * The trace of the request being handled (the runtime's ContextStore): every line written while
   * one is handled carries its `trace_id` and `span_id` (unless the line sets them itself).
   */
  trace?: () => TraceContext | undefined;
}

/** What the trace mixin returns outside a request: merged as nothing. */
const NO_TRACE = Object.freeze({});

/** pino's mixin: `trace_id` and `span_id` of the current request, after the line's own fields. */
function traceMixin(current: () => TraceContext | undefined): Pick<pino.LoggerOptions, 'mixin' | 'mixinMergeStrategy'> {
  return {
    mixin: () => {
      const t = current();
      return t ? { trace_id: t.traceId, span_id: t.spanId } : NO_TRACE;
    },
    // After the line's own fields, which win (a line that names its trace keeps it); outside a
    // request the line is left as it is. The caller's object is not changed.
    mixinMergeStrategy: (fields: object, mixed: object) => (mixed === NO_TRACE || 'trace_id' in fields ? fields : { ...fields, ...mixed }),
  };
}

export class Logging {
  readonly format: LogFormat;
  private readonly root: Logger;
  private readonly loggers = new Map<Subsystem, Logger>();
  private readonly levels = new Map<Subsystem, Level>();

  /** A bare level is short for { level }. */
  constructor(options: LoggingOptions | Level = {}) {
    const o: LoggingOptions = typeof options === 'string' ? { level: options } : options;
    const level = o.level ?? 'info';
    const stream = (o.destination ?? process.stderr) as { isTTY?: boolean; hasColors?: () => boolean };
    this.format = chooseLogFormat(o.format, stream.isTTY === true);
    const out: SonicLike = o.destination ?? pino.destination({ dest: 2, sync: false });
    const now = o.now;
    const text = this.format === 'text';
    const timestamp = text
      ? () => ',"time":' + (now ? now() : Date.now())
      : now
        ? () => ',"time":"' + new Date(now()).toISOString() + '"'
        : pino.stdTimeFunctions.isoTime;
    this.root = pino(
      {
        level: 'trace',
        base: text ? null : { pid: process.pid },
        timestamp,
        formatters: { level: (label) => ({ level: FROM_PINO[label] ?? label }) },
        // Called only for lines that are written (a disabled level costs nothing).
        ...(o.trace ? traceMixin(o.trace) : {}),
      },
      text ? new TextDestination(out, o.color ?? colorEnabled(stream)) : out,
    );
    for (const s of SUBSYSTEMS) this.levels.set(s, level);
  }

  get(subsystem: Subsystem): Logger {
    let logger = this.loggers.get(subsystem);
    if (!logger) {
      logger = this.root.child({ subsystem });
      logger.level = TO_PINO[this.levels.get(subsystem) ?? 'info'];
      this.loggers.set(subsystem, logger);
    }
    return logger;
  }

  level(subsystem: Subsystem): Level {
    return this.levels.get(subsystem) ?? 'info';
  }

  setLevel(subsystem: Subsystem, level: Level): void {
    this.levels.set(subsystem, level);
    const logger = this.loggers.get(subsystem);
    if (logger) logger.level = TO_PINO[level];
  }

  setAll(level: Level): void {
    for (const s of SUBSYSTEMS) this.setLevel(s, level);
  }

  flush(): void {
    this.root.flush();
  }
}
