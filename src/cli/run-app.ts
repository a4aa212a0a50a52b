/**
 * One app of `mesh run` (docs/run.md): its description (name, command, port, health path,
 * environment), the checks of its fields, and its child process: started without a shell in a
 * process group of its own, its output prefixed with `[NAME] ` line by line (stdout to stdout,
 * stderr to stderr), signals passed on to the group, its exit status as a shell reports it.
 */
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

/** A port that was free a moment ago on 127.0.0.1 (the app listens on it a moment later). */
export async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  await new Promise<void>((r) => server.close(() => r()));
  if (typeof address !== 'object' || address === null) throw new Error('no free port on 127.0.0.1');
  return address.port;
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
    // A process group of its own (detached): the signals passed on reach what the app starts too
    // (a shell script's children), and a Ctrl-C in the terminal reaches mesh run alone, which
    // deregisters the app before passing it on.
    let child: ChildProcess;
    try {
      child = spawn(program!, args, { env, cwd: app.dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    } catch (e) {
      // Refused before any process (e.g. ERR_INVALID_ARG_VALUE): a start failure as a shell says.
      this.exited = Promise.resolve({ status: 126, code: null, signal: null, startError: `${program}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
      return;
    }
    this.child = child;
    const prefix = `[${app.name}] `;
    const streams = [child.stdout!, child.stderr!];
    child.stdout!.pipe(new LinePrefixer(prefix)).pipe(out, { end: false });
    child.stderr!.pipe(new LinePrefixer(prefix)).pipe(err, { end: false });
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
        void Promise.race([ended, cap]).then(() => {
          for (const s of streams) s.destroy();
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
