/**
 * `mesh top` (docs/cli.md, "The busiest paths: mesh top"): the /tap streams of every process
 * `mesh ps` lists (or of --admin), counted per service, method and path since the command
 * started, the busiest shown in a table that is drawn again in place every --interval (on a
 * terminal; otherwise printed once per interval). Memory is bounded: at most MAX_ROWS rows, a
 * path never seen before past that is counted in one `(other)` row. The paths are other people's
 * input: printed through printable, and cut to MAX_PATH characters.
 */
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { tapAdmins, tapClientTls, tapDiscovery, tapQueryOf, tapStreams } from './tap.js';
import { byteOrder, formatTable } from './table.js';
import { printable } from '../base/util/text.js';

export const MAX_ROWS = 10_000;
const MAX_PATH = 120;
const OTHER = '(other)';

interface TopRow {
  service: string;
  method: string;
  path: string;
  count: number;
  failures: number;
  best: number;
  worst: number;
  last: number;
}

/** The counts of `mesh top`. */
export class TopTable {
  private readonly rows = new Map<string, TopRow>();
  /** The paths past maxRows, together. */
  private other: TopRow | undefined;
  total = 0;

  constructor(private readonly maxRows = MAX_ROWS) {}

  /** Counts one tap event; an event without the fields of one is ignored (false). */
  add(event: Record<string, unknown>): boolean {
    const { method, path, status, duration_ms: ms, cluster, grpc_status: grpc } = event;
    if (typeof method !== 'string' || typeof path !== 'string' || typeof status !== 'number' || typeof ms !== 'number' || !Number.isFinite(ms)) return false;
    const service = typeof cluster === 'string' ? cluster : '-';
    const key = JSON.stringify([service, method, path]);
    let row = this.rows.get(key);
    if (!row) {
      if (this.rows.size >= this.maxRows) row = this.other ??= newRow('-', '-', OTHER, ms);
      else this.rows.set(key, (row = newRow(service, method, path, ms)));
    }
    row.count++;
    // A failure: no answer, a 5xx, or a gRPC status other than OK.
    if (status === 0 || status >= 500 || (typeof grpc === 'number' && grpc !== 0)) row.failures++;
    row.best = Math.min(row.best, ms);
    row.worst = Math.max(row.worst, ms);
    row.last = ms;
    this.total++;
    return true;
  }

  /** The `limit` busiest rows (then by service, path, method), as a table. */
  render(limit: number): string {
    const busiest = [...this.rows.values(), ...(this.other ? [this.other] : [])]
      .sort((a, b) => b.count - a.count || byteOrder(a.service, b.service) || byteOrder(a.path, b.path) || byteOrder(a.method, b.method))
      .slice(0, Math.max(1, limit));
    const time = (x: number) => `${Math.round(x * 10) / 10}ms`;
    const cut = (p: string) => (p.length > MAX_PATH ? `${p.slice(0, MAX_PATH - 1)}…` : p);
    return formatTable(
      ['SERVICE', 'METHOD', 'PATH', 'COUNT', 'SUCCESS', 'BEST', 'WORST', 'LAST'],
      busiest.map((r) => [printable(r.service), printable(r.method), cut(printable(r.path)), String(r.count), `${(Math.floor(((r.count - r.failures) / r.count) * 1000) / 10).toFixed(1)}%`, time(r.best), time(r.worst), time(r.last)]),
    );
  }
}

const newRow = (service: string, method: string, path: string, ms: number): TopRow => ({ service, method, path, count: 0, failures: 0, best: ms, worst: ms, last: ms });


/** Clears the screen and puts the cursor at its top left. */
const HOME_AND_CLEAR = '\u001b[H\u001b[2J';

/** Runs `mesh top` until Ctrl-C or SIGTERM (0), or every admin refused the tap (1). */
export async function runTop(config: Config, given: ReadonlySet<string>, io: Output, signals: NodeJS.EventEmitter = process): Promise<number> {
  const interval = config.interval as number;
  if (interval < 100) throw new UsageError(`invalid value "${interval}ms" for flag --interval: at least 100ms`);
  const admins = await tapAdmins(config, io);
  const query = tapQueryOf(config, given);
  const top = new TopTable();
  const tty = process.stdout.isTTY === true;
  const started = Date.now();
  let tapped = admins.length;
  let drawn = -1;
  const draw = () => {
    if (!tty && top.total === drawn) return;
    drawn = top.total;
    const rows = tty ? Math.max(3, (process.stdout.rows || 24) - 3) : 20;
    const seconds = Math.round((Date.now() - started) / 1000);
    const head = `mesh top: ${top.total} requests from ${tapped} process(es) in ${seconds} s (Ctrl-C to stop)\n`;
    io.out(`${tty ? HOME_AND_CLEAR : ''}${head}${top.render(rows)}${tty ? '' : '\n'}`);
  };
  const mtls = await tapClientTls(config);
  draw();
  const timer = setInterval(draw, interval);
  try {
    return await tapStreams({
      admins,
      query,
      adminToken: config.admin_token,
      ...(mtls ? { tls: mtls.tls } : {}),
      io,
      signals,
      label: 'mesh top',
      discover: tapDiscovery(config),
      onEvent: (_admin, event, n) => {
        tapped = n;
        top.add(event);
      },
    });
  } finally {
    clearInterval(timer);
    draw();
    await mtls?.close();
  }
}
