/**
 * Log level and format names (Envoy's level names), without the logger: the command line parses
 * them before anything heavy is loaded (`mesh --help` and `--version` never load pino).
 */

export const LEVELS = ['trace', 'debug', 'info', 'warning', 'error', 'critical', 'off'] as const;
export type Level = (typeof LEVELS)[number];

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

export const LOG_FORMATS = ['text', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];
