/** Go-syntax durations ("300ms", "1m30s", "1.5h") and byte sizes ("4MiB", "1024"). */

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  'µs': 1e-3,
  'μs': 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Parses a Go duration into milliseconds. Throws on anything else. */
/**
 * The longest duration accepted: what Node's timers can wait (2^31 - 1 ms, about 24.8 days).
 * Longer values would make a timer fire at once, so they are refused, not clamped.
 */
export const MAX_DURATION_MS = 2 ** 31 - 1;

export function parseDuration(text: string): number {
  const input = text.trim();
  if (input === '') throw new Error(`invalid duration ""`);
  if (input === '0') return 0;
  let rest = input;
  let sign = 1;
  if (rest[0] === '-' || rest[0] === '+') {
    if (rest[0] === '-') sign = -1;
    rest = rest.slice(1);
  }
  const part = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
  let total = 0;
  if (rest === '') throw new Error(`invalid duration "${text}"`);
  while (rest.length > 0) {
    const m = part.exec(rest);
    if (!m) throw new Error(`invalid duration "${text}"`);
    total += Number(m[1]) * UNIT_MS[m[2]!]!;
    rest = rest.slice(m[0].length);
  }
  if (sign < 0) throw new Error(`invalid duration "${text}": negative`);
  if (!(total <= MAX_DURATION_MS)) throw new Error(`invalid duration "${text}": longer than ${formatDuration(MAX_DURATION_MS)}`);
  return total;
}

/** Formats milliseconds the way Go prints a duration (used in messages). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${+ms.toFixed(3)}ms`;
  let s = ms / 1000;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${+s.toFixed(3)}s`;
}

const SIZE_UNITS: Record<string, number> = { '': 1, B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 };

/** Parses "4MiB", "512KiB", "1024" into bytes. Throws on anything else. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB)?\s*$/.exec(text);
  if (!m) throw new Error(`invalid size "${text}" (use bytes or KiB, MiB, GiB)`);
  const size = Math.floor(Number(m[1]) * SIZE_UNITS[m[2] ?? '']!);
  if (!Number.isSafeInteger(size)) throw new Error(`invalid size "${text}": too large`);
  return size;
}
