/**
 * `mesh ps` and `mesh stop` (docs/cli.md, "The processes of a mesh"): the processes that record
 * themselves in the registry (src/engines/registry/processes.ts), listed, and one stopped through
 * its admin's /quitquitquit. `mesh tap` finds its admins here too (processAdmins).
 *
 * The records are outside input: every string is printed through printable, a record that does
 * not parse is said on stderr and skipped, and `mesh stop` quits a process only when its admin
 * says it is the process of the record (`/quitquitquit?process=ID`: a record outlives a process
 * killed hard by up to its TTL, and its admin port may be another process's by then).
 */
import { request } from '../base/http/undici.js';
import type { Config } from './flags.js';
import { UsageError, operationsFor, type Output } from './commands.js';
import type { Operations } from './operations.js';
import { processOfNode, PROCESS_TTL_MS, type ProcessRecord } from '../engines/registry/processes.js';
import { PROCESS_SERVICE } from '../engines/registry/validate.js';
import { formatAddress } from '../base/util/address.js';
import { printable } from '../base/util/text.js';
import { byteOrder, formatTable } from './table.js';

/** The processes the registry records (sorted by kind, name, id); the records skipped are said on stderr. */
export async function recordedProcesses(ops: Operations, io: Pick<Output, 'err'>): Promise<ProcessRecord[]> {
  const service = await ops.getService(PROCESS_SERVICE);
  const processes: ProcessRecord[] = [];
  for (const node of service?.nodes ?? []) {
    const p = processOfNode(node);
    if ('skipped' in p) io.err(`mesh: skipped ${p.skipped}\n`);
    else processes.push(p);
  }
  return processes.sort((a, b) => byteOrder(a.kind, b.kind) || byteOrder(a.name, b.name) || byteOrder(a.id, b.id));
}

/** `2d3h`, `4h05m`, `3m12s`, `9s`. */
export function formatUptime(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d${h}h`;
  if (h > 0) return `${h}h${String(m).padStart(2, '0')}m`;
  if (m > 0) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${s}s`;
}

const COLUMNS = ['ID', 'KIND', 'NAME', 'PID', 'HOST', 'ADMIN', 'UPTIME', 'MTLS', 'LISTENERS'] as const;

/** The table of `mesh ps`: one row per process, columns padded to the widest cell, `-` for an empty one. */
export function formatProcesses(processes: readonly ProcessRecord[], now: number): string {
  const p = (v: string) => (v === '' ? '-' : printable(v));
  const rows = processes.map((r) => [
    p(r.id),
    p(r.kind),
    p(r.name),
    String(r.pid),
    p(r.host),
    formatAddress(printable(r.admin.address), r.admin.port),
    formatUptime(now - r.startedMs),
    p(r.mtls),
    p(r.listeners.join(',')),
  ]);
  return formatTable(COLUMNS, rows);
}

/** One process in `mesh ps -o json`. */
export function processJson(r: ProcessRecord, now: number): Record<string, unknown> {
  return {
    id: r.id,
    kind: r.kind,
    name: r.name,
    pid: r.pid,
    host: r.host,
    admin: formatAddress(r.admin.address, r.admin.port),
    started: new Date(r.startedMs).toISOString(),
    uptime_s: Math.max(0, Math.floor((now - r.startedMs) / 1000)),
    mtls: r.mtls,
    listeners: r.listeners,
    version: r.version,
  };
}

/** `mesh ps [-o json]`. */
export async function runPs(positionals: string[], config: Config, io: Output): Promise<number> {
  if (positionals.length > 1) throw new UsageError(`mesh ps takes no argument (got "${printable(positionals[1]!)}")`);
  const ops = operationsFor(config);
  try {
    const processes = await recordedProcesses(ops, io);
    if (config.output === 'json') io.out(JSON.stringify(processes.map((r) => processJson(r, Date.now()))) + '\n');
    else if (processes.length === 0) io.err('mesh: no mesh process is recorded in this registry (a process records itself when it serves an admin interface)\n');
    else io.out(formatProcesses(processes, Date.now()));
    return 0;
  } finally {
    await ops.close();
  }
}

/** The processes `target` names: the one of that id, else every one of that name, kind or pid. */
export function processesNamed(processes: readonly ProcessRecord[], target: string): ProcessRecord[] {
  const byId = processes.filter((p) => p.id === target);
  if (byId.length > 0) return byId;
  return processes.filter((p) => p.name === target || p.kind === target || String(p.pid) === target);
}

/** How long `mesh stop` waits for a process's record to go after it accepted to quit. */
export const STOP_WAIT_MS = 60_000;
const POLL_MS = 200;

/** `mesh stop ID|NAME|KIND|PID`: asks the one process it names to drain and exit, and waits until its record is gone. */
export async function runStop(positionals: string[], config: Config, io: Output): Promise<number> {
  const target = positionals[1];
  if (!target || positionals.length > 2) throw new UsageError('usage: mesh stop ID|NAME|KIND|PID (see mesh ps)');
  const ops = operationsFor(config);
  try {
    const all = await recordedProcesses(ops, io);
    const named = processesNamed(all, target);
    if (named.length === 0) {
      io.err(`mesh: no recorded process is named "${printable(target)}" (mesh ps lists them)\n`);
      return 1;
    }
    if (named.length > 1) {
      io.err(`mesh: "${printable(target)}" names ${named.length} processes; name one by its ID:\n${formatProcesses(named, Date.now())}`);
      return 2;
    }
    const proc = named[0]!;
    const admin = formatAddress(proc.admin.address, proc.admin.port);
    const headers: Record<string, string> = {};
    if (config.admin_token) headers.authorization = `Bearer ${config.admin_token}`;
    let status: number;
    let body: string;
    try {
      const res = await request(`http://${admin}/quitquitquit?process=${encodeURIComponent(proc.id)}`, {
        method: 'POST',
        headers,
        headersTimeout: config.client_request_timeout,
        bodyTimeout: config.client_request_timeout,
      });
      status = res.statusCode;
      body = (await res.body.text()).slice(0, 512);
    } catch (err) {
      io.err(`mesh: ${printable(proc.id)} is not running: its admin at ${printable(admin)} does not answer (${printable((err as Error).message)}); its record expires within ${PROCESS_TTL_MS / 1000} s\n`);
      return 1;
    }
    if (status === 409) {
      io.err(`mesh: ${printable(proc.id)} is not running: its admin port ${printable(admin)} is another process's now; its record expires within ${PROCESS_TTL_MS / 1000} s\n`);
      return 1;
    }
    if (status !== 200) {
      io.err(`mesh: the admin at ${printable(admin)} refused to stop ${printable(proc.id)}: ${status} ${printable(body.trim())}${status === 401 ? ' (give its --admin_token)' : ''}\n`);
      return 1;
    }
    io.err(`mesh: stopping ${printable(proc.id)} (${printable(proc.kind)}${proc.name ? ` ${printable(proc.name)}` : ''}, pid ${proc.pid}): it drains, then exits\n`);
    const deadline = Date.now() + STOP_WAIT_MS;
    while (Date.now() < deadline) {
      const still = (await recordedProcesses(ops, { err: () => {} })).some((p) => p.id === proc.id);
      if (!still) {
        io.out(`stopped ${printable(proc.id)}\n`);
        return 0;
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    io.err(`mesh: ${printable(proc.id)} accepted to stop but is still recorded after ${STOP_WAIT_MS / 1000} s\n`);
    return 1;
  } finally {
    await ops.close();
  }
}

/** `mesh tap` without --admin: the admins of the recorded processes, as HOST:PORT. */
export async function processAdmins(config: Config, io: Pick<Output, 'err'>): Promise<string[]> {
  const ops = operationsFor(config);
  try {
    const processes = await recordedProcesses(ops, io);
    return [...new Set(processes.map((p) => formatAddress(p.admin.address, p.admin.port)))];
  } finally {
    await ops.close();
  }
}
