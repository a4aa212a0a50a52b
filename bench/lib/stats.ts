/** Small statistics and formatting helpers. */

export function median(values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid]! : (v[mid - 1]! + v[mid]!) / 2;
}

export function min(values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x));
  return v.length ? Math.min(...v) : NaN;
}

export function max(values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x));
  return v.length ? Math.max(...v) : NaN;
}

export function percentile(values: number[], p: number): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))]!;
}

/** 12345.6 → "12,346"; NaN → "–". */
export function int(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–';
}

export function fixed(n: number, digits = 2): string {
  return Number.isFinite(n) ? n.toFixed(digits) : '–';
}

export function ratio(n: number): string {
  return Number.isFinite(n) ? `${n.toFixed(2)}×` : '–';
}

/** "5s", "500ms", "1m", "2" (seconds) → seconds. */
export function parseSeconds(text: string | undefined, fallback: number): number {
  if (text === undefined || text.trim() === '') return fallback;
  const m = /^([\d.]+)\s*(ms|s|m)?$/.exec(text.trim());
  if (!m) throw new Error(`bad duration "${text}" (use e.g. 5s, 500ms, 1m)`);
  const v = Number(m[1]);
  return m[2] === 'ms' ? v / 1000 : m[2] === 'm' ? v * 60 : v;
}

export function markdownTable(header: string[], rows: string[][], align?: Array<'l' | 'r'>): string {
  const sep = header.map((_, i) => ((align?.[i] ?? 'l') === 'r' ? '---:' : '---'));
  return [header, sep, ...rows].map((r) => `| ${r.join(' | ')} |`).join('\n');
}
