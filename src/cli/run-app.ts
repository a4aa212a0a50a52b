/**
 * One app of `mesh run` (docs/run.md): its description (name, command, port, health path,
 * environment), the checks of its fields, and its child process: started without a shell in a
 * process group of its own, its output prefixed with `[NAME] ` line by line (stdout to stdout,
 * stderr to stderr), signals passed on to the group, its exit status as a shell reports it.
 */
import { createWriteStream, openSync, type WriteStream } from 'node:fs';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { constants } from 'node:os';
import { serviceNameProblem } from '../engines/registry/validate.js';
import { LinePrefixer } from '../base/util/line-prefixer.js';

export interface RunApp {
  name: string;
  /** The program and its arguments, run without a shell. */
  command: string[];
  /** The app's port, or auto (a free port). */
  port: number | 'auto';
  /** The health path, or undefined: registered at start without a check. */
  healthPath?: string;
  /** More environment for the app (MESH_SIDECAR, MESH_SIDECAR_TOKEN and PORT win). */
  env: Record<string, string>;
  /** The working directory of the app (default: the current one). */
  dir?: string;
  /** A file the app's output is appended to as well (mode 0600 when made), line by line, without the prefix. */
  log?: string;
}

/** Why a service name cannot name an app, or undefined. */
export function appNameProblem(name: string): string | undefined {
  return serviceNameProblem(name);
}

/** The app's port from text (auto, or 1..65535), or a problem. */
export function parseAppPort(text: string): number | 'auto' | { problem: string } {
  if (text === 'auto') return 'auto';
  if (!/^\d{1,5}$/.test(text) || Number(text) < 1 || Number(text) > 65535) return { problem: 'use a port from 1 to 65535, or auto' };
  return Number(text);
}

/** The health path from text (off: none), or a problem. */
export function parseHealthPath(text: string): string | undefined | { problem: string } {
  if (text === 'off') return undefined;
  if (!text.startsWith('/') || /[\s#]/.test(text) || text.length > 2048) return { problem: 'use a path starting with / (e.g. /health), or off' };
  return text;
}

/**
 * A port of 127.0.0.1 this process listens on until `release`: while it is held, no other listener
 * gets it, neither by asking for it nor by binding port 0 (the sidecars of mesh run).
 */
export interface HeldPort {
  readonly port: number;
  release(): Promise<void>;
}

/** Holds 127.0.0.1:`port` (0: a free port); undefined when the port is in use (or cannot be had). */
export async function holdLoopbackPort(port = 0): Promise<HeldPort | undefined> {
  // A connection meanwhile (the sidecar's first health check) is closed at once, as a refused one would be.
  const server = createServer((socket) => socket.destroy());
  server.listen({ port, host: '127.0.0.1' });
  try {
    await Promise.race([once(server, 'listening'), once(server, 'error').then(([err]) => Promise.reject(err as Error))]);
  } catch {
    return undefined;
  }
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('no free port on 127.0.0.1');
  return { port: address.port, release: () => new Promise<void>((r) => server.close(() => r())) };
}

/**
 * The ports of mesh run's apps, in order: a fixed port as given, `auto` a free port never one
 * another app has or got. Each is held (`hold`, by default a listener on 127.0.0.1; a fixed port
 * only when it is free) until the caller releases `held`: mesh run does so once every sidecar has
 * bound its ports and before the apps start, so a sidecar's port 0 cannot be an app's port.
 */
export async function holdAppPorts(
  ports: ReadonlyArray<number | 'auto'>,
  hold: (port: number) => Promise<HeldPort | undefined> = holdLoopbackPort,
): Promise<{ ports: number[]; held: HeldPort[] }> {
  const taken = new Set(ports.filter((p): p is number => p !== 'auto'));
  const held: HeldPort[] = [];
  const skipped: HeldPort[] = [];
  const chosen: number[] = [];
  try {
    for (const p of ports) {
      if (p !== 'auto') {
        const h = await hold(p);
        if (h) held.push(h);
        chosen.push(p);
        continue;
      }
      for (;;) {
        const h = await hold(0);
        if (!h) throw new Error('no free port on 127.0.0.1');
        // A port another app has: kept until the choice is made, so it is not handed out again.
        if (taken.has(h.port)) {
          skipped.push(h);
          continue;
        }
        taken.add(h.port);
        held.push(h);
        chosen.push(h.port);
        break;
      }
    }
  } catch (err) {
    await Promise.all(held.map((h) => h.release()));
    throw err;
  } finally {
    await Promise.all(skipped.map((h) => h.release()));
  }
  return { ports: chosen, held };
}

/** How an app ended: its exit code, or the signal that killed it (status 128 + its number). */
export interface AppExit {
  status: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The program could not be started (ENOENT, EACCES): status 127 or 126 as a shell says. */
  startError?: string;
}

/** What ended the app, in words: `exited with status 3`, `killed by SIGTERM (status 143)`. */
export function describeExit(exit: AppExit): string {
  if (exit.startError) return `could not be started: ${exit.startError} (status ${exit.status})`;
  if (exit.signal) return `killed by ${exit.signal} (status ${exit.status})`;
  return `exited with status ${exit.status}`;
}

/** The running app. */
export class AppProcess {
  readonly exited: Promise<AppExit>;
  /** Undefined when spawn itself threw (an argument it refuses): a start error. */
  private readonly child?: ChildProcess;

  constructor(app: RunApp, env: NodeJS.ProcessEnv, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr) {
    const [program, ...args] = app.command;
    let log: WriteStream | undefined;
    if (app.log !== undefined) {
      try {
        log = createWriteStream('', { fd: openSync(app.log, 'a', 0o600) });
      } catch (e) {
        // Said before anything starts: a log that cannot be written is a start failure.
        this.exited = Promise.resolve({ status: 126, code: null, signal: null, startError: `log ${app.log}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
        return;
      }
    }
    // A process group of its own (detached): the signals passed on reach what the app starts too
    // (a shell script's children), and a Ctrl-C in the terminal reaches mesh run alone, which
    // deregisters the app before passing it on.
    let child: ChildProcess;
    try {
      child = spawn(program!, args, { env, cwd: app.dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    } catch (e) {
      // Refused before any process (e.g. ERR_INVALID_ARG_VALUE): a start failure as a shell says.
      this.exited = Promise.resolve({ status: 126, code: null, signal: null, startError: `${program}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
      log?.destroy();
      return;
    }
    this.child = child;
    const prefix = `[${app.name}] `;
    const streams = [child.stdout!, child.stderr!];
    child.stdout!.pipe(new LinePrefixer(prefix)).pipe(out, { end: false });
    child.stderr!.pipe(new LinePrefixer(prefix)).pipe(err, { end: false });
    if (log) {
      // Whole lines from either stream, so that stdout and stderr never cut into each other's lines.
      const file = log;
      const lines = streams.map((s) => {
        const l = new LinePrefixer('');
        s.pipe(l).pipe(file, { end: false });
        return [s, l] as const;
      });
      file.once('error', (e: NodeJS.ErrnoException) => {
        err.write(`${prefix}mesh run: cannot write the log ${app.log}: ${e.code ?? e.message}; the output goes on here only\n`);
        for (const [s, l] of lines) s.unpipe(l);
        file.destroy();
      });
    }
    this.exited = new Promise<AppExit>((resolve) => {
      child.once('error', (e: NodeJS.ErrnoException) => {
        // Only a start failure: once running, errors come as the exit.
        if (child.pid === undefined) resolve({ status: e.code === 'ENOENT' ? 127 : 126, code: null, signal: null, startError: `${program}: ${e.code ?? e.message}` });
      });
      child.once('exit', (code, signal) => {
        const status = signal ? 128 + (constants.signals[signal] ?? 0) : (code ?? 0);
        // What the app started and left behind in its group goes with it.
        killGroup(child.pid!, 'SIGKILL');
        // The last lines of its output, unless something it started still holds the pipes.
        const ended = Promise.all(streams.map((s) => (s.readableEnded || s.destroyed ? undefined : once(s, 'close').catch(() => undefined))));
        const cap = new Promise((r) => setTimeout(r, 1000).unref());
        void Promise.race([ended, cap]).then(async () => {
          for (const s of streams) s.destroy();
          if (log && !log.destroyed) await new Promise<void>((r) => log!.end(r));
          resolve({ status, code, signal });
        });
      });
    });
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Sends the signal to the app's process group (nothing once it has exited). */
  signal(signal: NodeJS.Signals): void {
    const pid = this.child?.pid;
    if (pid === undefined || this.child!.exitCode !== null || this.child!.signalCode !== null) return;
    killGroup(pid, signal);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone (ESRCH).
  }
}
