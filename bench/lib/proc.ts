/**
 * Child processes for the benchmark: start, wait for a port, measure CPU from /proc, stop by pid.
 * Every process the harness starts goes through here so that it is stopped by its own pid.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { availableParallelism } from 'node:os';

export class NotAvailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotAvailable';
  }
}

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  /** Last lines of stdout and stderr, for diagnostics. */
  output(): string;
  exited(): boolean;
  /** Resolves when the process has exited. */
  waitExit(): Promise<void>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

const started = new Set<Proc>();

export interface StartOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Keep stdout lines (e.g. for a child that reports results). */
  onLine?: (line: string) => void;
}

export function startProcess(name: string, command: string, args: string[], opts: StartOptions = {}): Proc {
  const child = spawn(command, args, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const tail: string[] = [];
  let exited = false;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
    child.once('error', (err) => {
      tail.push(`spawn error: ${err.message}`);
      exited = true;
      resolve();
    });
  });
  const push = (chunk: Buffer, stream: 'out' | 'err') => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line.trim() === '') continue;
      if (stream === 'out') opts.onLine?.(line);
      tail.push(line.length > 400 ? line.slice(0, 400) + '…' : line);
      if (tail.length > 40) tail.shift();
    }
  };
  let outBuf = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    // Re-join partial lines for onLine consumers.
    outBuf += chunk.toString('utf8');
    const lines = outBuf.split('\n');
    outBuf = lines.pop() ?? '';
    if (lines.length) push(Buffer.from(lines.join('\n')), 'out');
  });
  child.stderr!.on('data', (chunk: Buffer) => push(chunk, 'err'));
  const proc: Proc = {
    name,
    child,
    pid: child.pid ?? -1,
    output: () => tail.join('\n'),
    exited: () => exited,
    waitExit: () => exitPromise,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      started.delete(proc);
      if (exited || child.pid === undefined) return;
      try {
        process.kill(child.pid, signal);
      } catch {
        return;
      }
      const timer = setTimeout(() => {
        if (!exited && child.pid !== undefined) {
          try {
            process.kill(child.pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
      }, 8000);
      await exitPromise;
      clearTimeout(timer);
    },
  };
  started.add(proc);
  return proc;
}

/** Stops every process still running (on exit or on a signal). */
export async function stopAll(): Promise<void> {
  await Promise.all([...started].map((p) => p.stop()));
}

/** Synchronous last resort (process 'exit' handler): SIGKILL every started pid. */
export function killAllSync(): void {
  for (const p of started) {
    if (!p.exited() && p.pid > 0) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function tryConnect(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ port, host });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until host:port accepts connections. Throws NotAvailable when the process exits first
 * (e.g. a command that does not exist yet) or when the timeout passes.
 */
export async function waitForPort(proc: Proc, port: number, timeoutMs = 20000, host = '127.0.0.1'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exited()) {
      const code = proc.child.exitCode;
      throw new NotAvailable(`${proc.name} exited (code ${code ?? proc.child.signalCode}) before listening: ${lastLine(proc.output())}`);
    }
    if (await tryConnect(port, host)) return;
    await sleep(50);
  }
  throw new NotAvailable(`${proc.name} did not listen on ${host}:${port} within ${timeoutMs} ms: ${lastLine(proc.output())}`);
}

function lastLine(text: string): string {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  // Prefer an error-looking line.
  const err = [...lines].reverse().find((l) => /error|cannot|unknown|not found|usage/i.test(l));
  return (err ?? lines[lines.length - 1] ?? '(no output)').trim().slice(0, 300);
}

// ---------------------------------------------------------------- CPU from /proc

let clockTicks: number | undefined;
export function clkTck(): number {
  if (clockTicks === undefined) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const n = Number(r.stdout?.trim());
    clockTicks = Number.isFinite(n) && n > 0 ? n : 100;
  }
  return clockTicks;
}

export const procAvailable = existsSync('/proc/self/stat');

interface StatLine {
  ppid: number;
  ticks: number;
  /** Time of waited-for (reaped) children. */
  childTicks: number;
}

function readStat(pid: number): StatLine | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
    return { ppid: Number(rest[1]), ticks: Number(rest[11]) + Number(rest[12]), childTicks: Number(rest[13]) + Number(rest[14]) };
  } catch {
    return undefined;
  }
}

/** pid and all its descendants, read from /proc. */
function tree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = readStat(Number(name));
    if (!s) continue;
    const list = children.get(s.ppid) ?? [];
    list.push(Number(name));
    children.set(s.ppid, list);
  }
  const out: number[] = [];
  const stack = [pid];
  while (stack.length) {
    const p = stack.pop()!;
    out.push(p);
    stack.push(...(children.get(p) ?? []));
  }
  return out;
}

/** CPU time (user + system) of the processes and their descendants, in microseconds. */
export function cpuMicros(pids: number[]): number | undefined {
  if (!procAvailable || pids.length === 0) return undefined;
  let ticks = 0;
  for (const root of pids) for (const p of tree(root)) ticks += readStat(p)?.ticks ?? 0;
  return (ticks * 1e6) / clkTck();
}

export function commandExists(cmd: string, args: string[] = ['-v']): boolean {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return !r.error;
}

/** CPU time of the whole machine that was not idle (all CPUs), in microseconds; /proc/stat. */
export function machineBusyMicros(): number | undefined {
  if (!procAvailable) return undefined;
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal
    const busy = cpu[0]! + cpu[1]! + cpu[2]! + cpu[5]! + cpu[6]! + (cpu[7] ?? 0);
    return (busy * 1e6) / clkTck();
  } catch {
    return undefined;
  }
}

/**
 * CPU time of this process and everything it started, living (its process tree) or already
 * reaped (cutime + cstime: the load generator after it exits), in microseconds.
 */
export function ownTreeMicros(): number | undefined {
  if (!procAvailable) return undefined;
  const self = readStat(process.pid);
  if (!self) return undefined;
  let ticks = self.childTicks;
  for (const p of tree(process.pid)) ticks += readStat(p)?.ticks ?? 0;
  return (ticks * 1e6) / clkTck();
}

/**
 * BENCH_PIN (default on with 2+ CPUs and taskset): the measured proxy gets CPU 0 to itself (as
 * far as this benchmark goes); the load generator, the backend and everything behind the proxy
 * share the others. Without it the scheduler's placement of three busy processes on two CPUs
 * changes from round to round and the numbers swing (seen here: 80 vs 140 µs/request for the
 * same proxy).
 */
export function pinning(): { proxy: string; rest: string } | undefined {
  if (process.env.BENCH_PIN === '0') return undefined;
  const n = availableParallelism();
  if (n < 2 || !commandExists('taskset', ['-V'])) return undefined;
  return { proxy: '0', rest: n === 2 ? '1' : `1-${n - 1}` };
}
/**
 * Sets the CPU affinity of the processes, their threads and their children (taskset -a -p).
 * Returns false when taskset is missing or fails.
 */
export function pin(pids: number[], cpuList: string): boolean {
  if (!procAvailable) return false;
  let ok = true;
  for (const root of pids) {
    for (const p of tree(root)) {
      const r = spawnSync('taskset', ['-a', '-p', '-c', cpuList, String(p)], { encoding: 'utf8' });
      if (r.error || r.status !== 0) ok = false;
    }
  }
  return ok;
}

/** Resident set size of one process in KiB (VmRSS of /proc/<pid>/status), undefined when unknown. */
export function rssKiB(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** Peak resident set size of one process in KiB (VmHWM of /proc/<pid>/status), undefined when unknown. */
export function peakRssKiB(pid: number): number | undefined {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * command + args wrapped in `sh -c 'ulimit -n …; exec …'`: the child's soft limit of open files
 * raised to `want` (or to the hard limit when that is lower), for processes holding thousands of
 * sockets. exec keeps the pid, so the Proc is the command itself.
 */
export function withNofile(want: number, command: string, args: string[]): { command: string; args: string[] } {
  const script = `n=${Math.floor(want)}; h=$(ulimit -Hn); if [ "$h" != unlimited ] && [ "$h" -lt "$n" ]; then n=$h; fi; ulimit -n "$n" && exec "$@"`;
  return { command: 'sh', args: ['-c', script, 'sh', command, ...args] };
}
