/**
 * A small load generator for the reliability suite: N keep-alive clients (one undici Pool with N
 * connections, N request loops) send a mix of requests to one origin for a duration or until
 * stopped, and count every answer by kind: `ok`, `status:<code>` (an answer the request's `ok`
 * predicate refused), `timeout` (no answer within `timeoutMs`), `error:<code>` (connection refused,
 * reset, closed...). Latency percentiles are over every request, failed ones included.
 *
 *   const load = startLoad({ origin: gw.url, concurrency: 8, mix: [{ method: 'POST', path: '/rpc', body }] });
 *   await waitFor(() => load.counts().ok >= 200);
 *   const report = await load.stop();
 *   assert.equal(report.failed, 0, formatReport(report));
 */
import { Pool, errors as undiciErrors, type Dispatcher } from 'undici';

type IncomingHttpHeaders = Dispatcher.ResponseData['headers'];

export interface LoadRequest {
  /** A name for the report (defaults to `METHOD path`). */
  name?: string;
  method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'HEAD';
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Whether an answer counts as a success (default: a 2xx status). */
  ok?: (status: number, body: string) => boolean;
}

export interface LoadOptions {
  /** http://host:port */
  origin: string;
  /** Keep-alive connections, and concurrent request loops (default 8). */
  concurrency?: number;
  /** Requests, chosen in turn; or a function of the request's sequence number. */
  mix: LoadRequest[] | ((seq: number) => LoadRequest);
  /** Stops by itself after this long (default: only when stop() is called). */
  durationMs?: number;
  /** No answer (headers and body) within this long is a `timeout` failure (default 10 s). */
  timeoutMs?: number;
  /** Pause of each loop between two requests (default 0: back to back). */
  pauseMs?: number;
  /** Sees every answer (e.g. to count which node served it). */
  onAnswer?: (req: LoadRequest, status: number, body: string, headers: IncomingHttpHeaders) => void;
}

export interface Counts {
  total: number;
  ok: number;
  failed: number;
  /** Failures by kind: `status:502`, `timeout`, `error:ECONNRESET`... */
  failures: Record<string, number>;
}

export interface LoadReport extends Counts {
  durationMs: number;
  /** Requests per second over the run. */
  rps: number;
  /** Latency in milliseconds of every request (successes and failures). */
  latency: { p50: number; p90: number; p99: number; max: number };
  /** The first few failures, with their time from the start and the request's name. */
  samples: Array<{ atMs: number; name: string; kind: string; detail: string }>;
  /** Per request name: total and ok. */
  byName: Record<string, { total: number; ok: number }>;
}

export interface RunningLoad {
  /** Counts so far (cheap: for waitFor). */
  counts(): Counts;
  /** Latencies of the requests completed since the given time (Date.now() clock). */
  latenciesSince(t: number): number[];
  /** Stops sending, waits for the requests in flight, closes the connections. */
  stop(): Promise<LoadReport>;
  /** Resolves when the duration ran out (or stop() was called). */
  done: Promise<LoadReport>;
}

const MAX_SAMPLES = 20;

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

function failureKind(err: unknown): { kind: string; detail: string } {
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError) {
    return { kind: 'timeout', detail: (err as Error).message };
  }
  const e = err as { code?: string; message?: string; cause?: { code?: string } };
  const code = e.cause?.code ?? e.code ?? 'unknown';
  return { kind: `error:${code}`, detail: e.message ?? String(err) };
}

export function startLoad(options: LoadOptions): RunningLoad {
  const concurrency = options.concurrency ?? 8;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const pool = new Pool(options.origin, {
    connections: concurrency,
    pipelining: 1,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    keepAliveTimeout: 30_000,
  });
  const mix = options.mix;
  const pick = typeof mix === 'function' ? mix : (seq: number) => mix[seq % mix.length]!;
  const started = Date.now();
  const counts: Counts = { total: 0, ok: 0, failed: 0, failures: {} };
  const latencies: number[] = [];
  const finishedAt: number[] = [];
  const samples: LoadReport['samples'] = [];
  const byName: LoadReport['byName'] = {};
  let seq = 0;
  let stopping = false;
  let timer: NodeJS.Timeout | undefined;

  const record = (req: LoadRequest, t0: number, ok: boolean, kind: string, detail: string) => {
    const now = Date.now();
    const name = req.name ?? `${req.method} ${req.path}`;
    const entry = (byName[name] ??= { total: 0, ok: 0 });
    entry.total++;
    counts.total++;
    latencies.push(now - t0);
    finishedAt.push(now);
    if (ok) {
      counts.ok++;
      entry.ok++;
      return;
    }
    counts.failed++;
    counts.failures[kind] = (counts.failures[kind] ?? 0) + 1;
    if (samples.length < MAX_SAMPLES) samples.push({ atMs: now - started, name, kind, detail: detail.slice(0, 300) });
  };

  const loop = async () => {
    while (!stopping) {
      const req = pick(seq++);
      const t0 = Date.now();
      try {
        const res = await pool.request({
          method: req.method,
          path: req.path,
          headers: req.headers,
          body: req.body,
        });
        const text = await res.body.text();
        const ok = req.ok ? req.ok(res.statusCode, text) : res.statusCode >= 200 && res.statusCode < 300;
        record(req, t0, ok, `status:${res.statusCode}`, text);
        options.onAnswer?.(req, res.statusCode, text, res.headers);
      } catch (err) {
        const f = failureKind(err);
        record(req, t0, false, f.kind, f.detail);
        // A refused connection fails at once: do not spin.
        if (!stopping) await new Promise((r) => setTimeout(r, 5)); // load generator back-off, not ordering
      }
      if (options.pauseMs && !stopping) await new Promise((r) => setTimeout(r, options.pauseMs)); // load generator pause, not ordering
    }
  };

  const loops = Array.from({ length: concurrency }, loop);
  let report: Promise<LoadReport> | undefined;
  const stop = (): Promise<LoadReport> => {
    if (report) return report;
    stopping = true;
    if (timer) clearTimeout(timer);
    report = (async () => {
      await Promise.all(loops);
      const durationMs = Date.now() - started;
      await pool.close().catch(() => undefined);
      const sorted = [...latencies].sort((a, b) => a - b);
      return {
        ...counts,
        failures: { ...counts.failures },
        durationMs,
        rps: Math.round((counts.total / Math.max(1, durationMs)) * 1000),
        latency: {
          p50: percentile(sorted, 50),
          p90: percentile(sorted, 90),
          p99: percentile(sorted, 99),
          max: sorted.at(-1) ?? 0,
        },
        samples,
        byName,
      };
    })();
    return report;
  };
  let resolveDone!: (r: LoadReport) => void;
  const done = new Promise<LoadReport>((r) => (resolveDone = r));
  if (options.durationMs !== undefined) timer = setTimeout(() => void stop().then(resolveDone), options.durationMs);

  return {
    counts: () => ({ ...counts, failures: { ...counts.failures } }),
    latenciesSince: (t) => {
      const out: number[] = [];
      for (let i = finishedAt.length - 1; i >= 0 && finishedAt[i]! >= t; i--) out.push(latencies[i]!);
      return out;
    },
    stop: () => stop().then((r) => (resolveDone(r), r)),
    done,
  };
}

/** One line for diagnostics and assertion messages. */
export function formatReport(r: LoadReport, label = 'load'): string {
  const failures = Object.entries(r.failures)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  const first = r.samples[0] ? ` first failure at ${r.samples[0].atMs}ms ${r.samples[0].name} ${r.samples[0].kind}: ${r.samples[0].detail}` : '';
  return (
    `${label}: ${r.total} requests in ${(r.durationMs / 1000).toFixed(1)}s (${r.rps}/s), ${r.ok} ok, ${r.failed} failed` +
    `${failures ? ` (${failures})` : ''}; latency ms p50=${r.latency.p50} p90=${r.latency.p90} p99=${r.latency.p99} max=${r.latency.max}${first}`
  );
}
