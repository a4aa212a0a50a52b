/**
 * Processes for the reliability suite, on top of the shared test helpers (test/helpers.ts,
 * test/fixtures/*): framework services as real processes on a fixed port (so one can be killed and
 * started again on the same port), a process group that is always stopped in `finally`, and
 * memory readings of a process.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, startProcess, type RunningProcess } from '../helpers.js';
import { serviceListening } from '../fixtures/engines-common.js';

export const WHO = join(ROOT, 'test/fixtures/who-service.ts');
export const ENGINES_SERVICE = join(ROOT, 'test/fixtures/engines-service.ts');

/** Processes started by one test; `stopAll()` (in `finally`) kills whatever is still running, SIGCONT first. */
export class ProcessGroup {
  readonly procs: RunningProcess[] = [];

  add<T extends { proc: RunningProcess } | RunningProcess>(p: T): T {
    this.procs.push('proc' in p ? p.proc : p);
    return p;
  }

  async stopAll(): Promise<void> {
    await Promise.all(
      this.procs.map(async (p) => {
        if (p.child.exitCode === null && p.child.signalCode === null) {
          // A stopped (SIGSTOP) process would not handle SIGTERM: resume it first.
          try {
            p.child.kill('SIGCONT');
          } catch {
            // already gone
          }
        }
        await p.stop('SIGKILL').catch(() => undefined);
      }),
    );
  }
}

export interface ServiceProcess {
  proc: RunningProcess;
  name: string;
  port: number;
  pid: number;
  /** Node id printed at start. */
  nodeId: string;
  /** http://host:port of the service's admin interface. */
  admin: string;
}

/**
 * Starts a framework service process (`node --import tsx <script> [args] <flags>`) listening on
 * 127.0.0.1:port (a free port when not given); resolves once it printed `<name> listening on`.
 */
export async function startService(
  script: string,
  name: string,
  registryFlags: string[],
  opts: { port?: number; args?: string[]; flags?: string[]; env?: Record<string, string> } = {},
): Promise<ServiceProcess> {
  const proc = startProcess(
    ['--import', 'tsx', script, ...(opts.args ?? []), ...registryFlags, `--address=127.0.0.1:${opts.port ?? 0}`, '--log_level=warning', ...(opts.flags ?? [])],
    opts.env ?? {},
    '',
  );
  const line = await proc.waitForOutput(new RegExp(`${serviceListening(name).source}[^\\n]*`), 40_000);
  const port = Number(/ listening on \S+:(\d+) /.exec(line)?.[1]);
  const node = /\(node ([^)]+)\)/.exec(line)![1]!;
  const admin = /admin on (\S+)/.exec(line)?.[1] ?? '';
  return { proc, name, port, pid: proc.child.pid!, nodeId: node, admin: admin ? `http://${admin}` : '' };
}

/** go.mesh.srv.who (test/fixtures/who-service.ts) on the local registry in `dir`. */
export function startWho(dir: string, opts: { port?: number; flags?: string[] } = {}): Promise<ServiceProcess> {
  return startService(WHO, 'go.mesh.srv.who', [`--registry_address=${dir}`], opts);
}

/** Resident set size of a live process in bytes (Linux /proc/<pid>/status VmRSS), undefined elsewhere. */
export function rssBytes(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Whether the process is alive (and not a zombie). */
export function alive(p: RunningProcess): boolean {
  return p.child.exitCode === null && p.child.signalCode === null;
}

/** Median of numbers (undefined for none). */
export function median(values: number[]): number | undefined {
  if (values.length === 0) return undefined;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export const MiB = 1024 * 1024;
export const mib = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${(bytes / MiB).toFixed(1)}MiB`);

/** test/reliability/heap-probe.mjs: the preload that forces a collection and records the heap in use. */
export const HEAP_PROBE = join(ROOT, 'test/reliability/heap-probe.mjs');

/**
 * Environment that starts a node process with the heap probe: `--expose-gc --import heap-probe.mjs`
 * added to NODE_OPTIONS, writing to `dir/<pid>` every `everyMs` milliseconds.
 */
export function heapProbeEnv(dir: string, everyMs: number): Record<string, string> {
  const inherited = process.env.NODE_OPTIONS ? `${process.env.NODE_OPTIONS} ` : '';
  return {
    NODE_OPTIONS: `${inherited}--expose-gc --import=${pathToFileURL(HEAP_PROBE).href}`,
    MESH_HEAP_PROBE_DIR: dir,
    MESH_HEAP_PROBE_MS: String(everyMs),
  };
}

export interface HeapProbeSample {
  /** Milliseconds since the probe started. */
  ms: number;
  /** Heap in use right before the forced collection (garbage included). */
  before: number;
  /** Heap in use right after it: what the process keeps alive. */
  after: number;
}

/** The samples the heap probe wrote for process `pid` in `dir` (complete lines only; none when absent). */
export function readHeapProbe(dir: string, pid: number): HeapProbeSample[] {
  let text: string;
  try {
    text = readFileSync(join(dir, String(pid)), 'utf8');
  } catch {
    return [];
  }
  const out: HeapProbeSample[] = [];
  for (const line of text.split('\n').slice(0, -1)) {
    const [ms, before, after] = line.split(' ').map(Number);
    if (Number.isFinite(ms) && Number.isFinite(before) && Number.isFinite(after)) out.push({ ms: ms!, before: before!, after: after! });
  }
  return out;
}
