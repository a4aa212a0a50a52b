import { withTimeout } from '../../base/util/timeout.js';

/** What a check of `mesh check` finds: an error (exit 1) or a warning, one line each. */
export type Level = 'error' | 'warning';

export interface Finding {
  level: Level;
  /** The check that found it: registry, broker, nodes, services, mtls, files, certificates, node_version, rate_limit_store, routes. */
  check: string;
  message: string;
}

/** The line printed when no check finds anything. */
export const ALL_WELL = 'ok: no problem found (registry, broker, nodes, files, certificates, Node.js version)';

export function formatFindings(findings: Finding[]): string {
  if (findings.length === 0) return ALL_WELL + '\n';
  return findings.map((f) => `${f.level}: ${f.check}: ${f.message}\n`).join('');
}

export function errorOf(err: unknown): string {
  const e = err as { detail?: unknown; code?: unknown; message?: unknown };
  if (typeof e?.detail === 'string') return e.detail;
  if (typeof e?.message === 'string') return e.message;
  return String(err);
}

/** Rejects after `ms` with "no answer within …" when `p` has not settled. */
export function within<T>(p: Promise<T>, ms: number): Promise<T> {
  return withTimeout(p, ms, `no answer within ${ms / 1000}s`);
}
