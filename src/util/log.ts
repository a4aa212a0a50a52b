/**
 * Structured logs (pino) with one level per subsystem, changeable at run time (admin /logging,
 * --log_level). Levels use Envoy's names: trace debug info warning error critical off.
 */
import pino from 'pino';
type Logger = pino.Logger;
type DestinationStream = pino.DestinationStream;

export const LEVELS = ['trace', 'debug', 'info', 'warning', 'error', 'critical', 'off'] as const;
export type Level = (typeof LEVELS)[number];

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

export function isLevel(value: string): value is Level {
  return (LEVELS as readonly string[]).includes(value);
}

/** Accepts pino/Go spellings too (warn, fatal, silent) so --log_level is forgiving but never silent about junk. */
export function parseLevel(value: string): Level {
  const v = value.toLowerCase();
  if (isLevel(v)) return v;
  if (v === 'warn') return 'warning';
  if (v === 'fatal') return 'critical';
  if (v === 'silent' || v === 'none') return 'off';
  throw new Error(`unknown log level "${value}" (use ${LEVELS.join(', ')})`);
}

export class Logging {
  private readonly root: Logger;
  private readonly loggers = new Map<Subsystem, Logger>();
  private readonly levels = new Map<Subsystem, Level>();

  constructor(level: Level = 'info', destination?: DestinationStream) {
    this.root = pino({ level: 'trace', base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, destination ?? pino.destination({ dest: 2, sync: false }));
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
