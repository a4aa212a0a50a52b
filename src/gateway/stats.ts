/**
 * `/stats` of the gateway (`--enable_stats`): request counts by status class in 5-second windows
 * (the last 24 kept, two minutes), with start time, uptime and memory. JSON for
 * `Accept: application/json` (or a JSON Content-Type, as micro's dashboard sent), otherwise a
 * small HTML page. Requests to /stats itself are not counted.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { MeshError } from '../errors.js';
import { sendBytes, sendError, sendJson } from '../http/respond.js';

export const STATUS_CLASSES = ['20x', '30x', '40x', '50x'] as const;
export type StatusClass = (typeof STATUS_CLASSES)[number];
export type StatusCounts = Record<StatusClass, number>;

export interface StatsWindow {
  /** Epoch seconds at the end of the window. */
  timestamp: number;
  status_codes: StatusCounts;
  total_reqs: number;
}

export interface GatewayStatsJson {
  /** Epoch seconds when the gateway started. */
  started: number;
  /** Whole seconds since then. */
  uptime: number;
  /** Bytes: resident set size, V8 heap in use, V8 heap reserved. */
  memory: { rss: number; heap_used: number; heap_total: number };
  /** Since start. */
  total_reqs: number;
  status_codes: StatusCounts;
  /** Closed windows, oldest first. */
  counters: StatsWindow[];
  /** Window length in seconds. */
  interval: number;
}

const zero = (): StatusCounts => ({ '20x': 0, '30x': 0, '40x': 0, '50x': 0 });

function classOf(status: number): StatusClass | undefined {
  if (status >= 200 && status < 300) return '20x';
  if (status >= 300 && status < 400) return '30x';
  if (status >= 400 && status < 500) return '40x';
  if (status >= 500 && status < 600) return '50x';
  return undefined;
}

export class GatewayStats {
  readonly startedAt = Date.now();
  private total = 0;
  private readonly totals = zero();
  private current = zero();
  private currentTotal = 0;
  private readonly windows: StatsWindow[] = [];
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly errorId = 'go.mesh.api',
    private readonly intervalMs = 5_000,
    private readonly keep = 24,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => this.roll(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Counts one answered request by its status. */
  record(status: number): void {
    this.total++;
    this.currentTotal++;
    const c = classOf(status);
    if (c) {
      this.totals[c]++;
      this.current[c]++;
    }
  }

  /** Closes the current window. */
  roll(now = Date.now()): void {
    this.windows.push({ timestamp: Math.floor(now / 1000), status_codes: this.current, total_reqs: this.currentTotal });
    if (this.windows.length > this.keep) this.windows.shift();
    this.current = zero();
    this.currentTotal = 0;
  }

  snapshot(now = Date.now()): GatewayStatsJson {
    const m = process.memoryUsage();
    return {
      started: Math.floor(this.startedAt / 1000),
      uptime: Math.max(0, Math.floor((now - this.startedAt) / 1000)),
      memory: { rss: m.rss, heap_used: m.heapUsed, heap_total: m.heapTotal },
      total_reqs: this.total,
      status_codes: { ...this.totals },
      counters: this.windows.map((w) => ({ ...w, status_codes: { ...w.status_codes } })),
      interval: this.intervalMs / 1000,
    };
  }

  /** Answers GET /stats: JSON or the HTML page. */
  serve(req: IncomingMessage, res: ServerResponse): void {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      req.resume();
      res.setHeader('allow', 'GET, HEAD');
      sendError(res, new MeshError(this.errorId, 405, `method ${req.method} not allowed on /stats: use GET`));
      return;
    }
    const accept = String(req.headers.accept ?? '');
    const contentType = String(req.headers['content-type'] ?? '');
    if (/application\/json/i.test(accept) || /application\/json/i.test(contentType)) {
      sendJson(res, 200, this.snapshot(), { 'cache-control': 'no-store' });
      return;
    }
    res.setHeader('cache-control', 'no-store');
    sendBytes(res, 200, 'text/html; charset=utf-8', this.html());
  }

  /** A plain page with the same numbers; it reloads itself every 5 seconds. */
  html(): string {
    const s = this.snapshot();
    const mb = (n: number) => `${(n / (1024 * 1024)).toFixed(2)} MiB`;
    const row = (k: string, v: string | number) => `<tr><th>${k}</th><td>${v}</td></tr>`;
    const windows = s.counters
      .slice()
      .reverse()
      .map((w) => `<tr><td>${new Date(w.timestamp * 1000).toISOString()}</td><td>${w.total_reqs}</td>${STATUS_CLASSES.map((c) => `<td>${w.status_codes[c]}</td>`).join('')}</tr>`)
      .join('');
    return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5"><title>mesh api stats</title>
<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}th,td{border:1px solid #ccc;padding:.3em .8em;text-align:left}</style>
</head><body>
<h1>mesh api</h1>
<p>JSON: <code>curl -H 'Accept: application/json' /stats</code>. This page reloads every 5 seconds.</p>
<h2>Info</h2><table>
${row('Started', new Date(s.started * 1000).toISOString())}${row('Uptime', `${s.uptime} s`)}${row('Memory (RSS)', mb(s.memory.rss))}${row('Heap in use', mb(s.memory.heap_used))}
</table>
<h2>Requests</h2><table>
${row('Total', s.total_reqs)}${STATUS_CLASSES.map((c) => row(c, s.status_codes[c])).join('')}
</table>
<h2>Last windows (${s.interval} s each)</h2><table><tr><th>end</th><th>total</th>${STATUS_CLASSES.map((c) => `<th>${c}</th>`).join('')}</tr>${windows}</table>
</body></html>
`;
  }
}
