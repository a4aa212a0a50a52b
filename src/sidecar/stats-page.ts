/**
 * `/stats` of the sidecar (`--enable_stats`): JSON for `Accept: application/json` (or
 * `?format=json`, or a request `Content-Type: application/json` as micro's dashboard sent), else a
 * small HTML page that reloads itself every 5 s. The numbers come from the process's stats store
 * (`http.sidecar.downstream_rq_*`); requests to /stats are not counted.
 *
 * JSON shape:
 *   {"started":<epoch s>,"uptime":<s>,"memory":"<heap used>mb",
 *    "memory_bytes":{"heap_used":n,"heap_total":n,"rss":n},
 *    "counters":{"total":n,"1xx":n,"2xx":n,"3xx":n,"4xx":n,"5xx":n,"active":n},
 *    "latency_ms":{"p50":n|null,"p90":n|null,"p99":n|null},
 *    "subscribers":n}
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Runtime } from '../runtime.js';
import { sendBytes, sendJson } from '../http/respond.js';
import { MeshError } from '../errors.js';

export const STATS_PATH = '/stats';

export interface StatsSnapshot {
  started: number;
  uptime: number;
  memory: string;
  memory_bytes: { heap_used: number; heap_total: number; rss: number };
  counters: Record<'total' | '1xx' | '2xx' | '3xx' | '4xx' | '5xx' | 'active', number>;
  latency_ms: { p50: number | null; p90: number | null; p99: number | null };
  subscribers: number;
}

export function statsSnapshot(runtime: Runtime, prefix: string): StatsSnapshot {
  const s = runtime.stats;
  const p = `http.${prefix}.`;
  const mem = process.memoryUsage();
  const h = s.histogram(`${p}downstream_rq_time`);
  const q = (x: number) => {
    const v = h.quantile(x);
    return Number.isNaN(v) ? null : v;
  };
  return {
    started: Math.floor(runtime.state.startedAt / 1000),
    uptime: Math.max(0, Math.floor((Date.now() - runtime.state.startedAt) / 1000)),
    memory: `${(mem.heapUsed / 1024 / 1024).toFixed(2)}mb`,
    memory_bytes: { heap_used: mem.heapUsed, heap_total: mem.heapTotal, rss: mem.rss },
    counters: {
      total: s.counter(`${p}downstream_rq_total`).value,
      '1xx': s.counter(`${p}downstream_rq_1xx`).value,
      '2xx': s.counter(`${p}downstream_rq_2xx`).value,
      '3xx': s.counter(`${p}downstream_rq_3xx`).value,
      '4xx': s.counter(`${p}downstream_rq_4xx`).value,
      '5xx': s.counter(`${p}downstream_rq_5xx`).value,
      active: s.gauge(`${p}downstream_rq_active`).value,
    },
    latency_ms: { p50: q(0.5), p90: q(0.9), p99: q(0.99) },
    subscribers: s.gauge('sidecar.broker.subscribers_active').value,
  };
}

function wantsJson(req: IncomingMessage, url: URL): boolean {
  if (url.searchParams.get('format') === 'json') return true;
  const accept = (req.headers.accept ?? '').toLowerCase();
  if (accept.includes('application/json')) return true;
  return (req.headers['content-type'] ?? '').toLowerCase().startsWith('application/json');
}

const escapeHtml = (t: string) => t.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function renderHtml(snap: StatsSnapshot): string {
  const row = (k: string, v: string | number | null) => `<tr><th>${escapeHtml(k)}</th><td>${escapeHtml(String(v ?? '-'))}</td></tr>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>mesh sidecar stats</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}th,td{padding:.25em 1em;border-bottom:1px solid #ddd;text-align:left}</style>
</head><body>
<h1>mesh sidecar</h1>
<h2>Info</h2><table>
${row('Started', new Date(snap.started * 1000).toISOString())}
${row('Uptime', `${snap.uptime}s`)}
${row('Memory', snap.memory)}
${row('Subscribers', snap.subscribers)}
</table>
<h2>Requests</h2><table>
${row('Total', snap.counters.total)}
${row('2xx', snap.counters['2xx'])}
${row('3xx', snap.counters['3xx'])}
${row('4xx', snap.counters['4xx'])}
${row('5xx', snap.counters['5xx'])}
${row('Active', snap.counters.active)}
${row('Latency p50 (ms)', snap.latency_ms.p50)}
${row('Latency p99 (ms)', snap.latency_ms.p99)}
</table>
<p>JSON: <code>curl -H 'Accept: application/json' /stats</code>. Reloads every 5 s.</p>
</body></html>
`;
}

export function handleStats(runtime: Runtime, prefix: string, errorId: string, req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD');
    throw new MeshError(errorId, 405, `method ${req.method} not allowed on /stats: use GET`);
  }
  const url = new URL(req.url ?? '/', 'http://sidecar');
  const snap = statsSnapshot(runtime, prefix);
  if (wantsJson(req, url)) sendJson(res, 200, snap, { 'cache-control': 'no-store' });
  else sendBytes(res, 200, 'text/html; charset=utf-8', renderHtml(snap));
}
