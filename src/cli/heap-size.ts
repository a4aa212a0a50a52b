/**
 * The young generation of a server process (`--semi_space_mb`). V8 sizes its semi-spaces at start
 * only (a flag set later is not taken), and Node's default (16 MiB or more each) lets a busy proxy
 * hold tens of MiB of short-lived garbage. So a server command restarts itself, once, at start and
 * before it has done anything, with `--max-semi-space-size`: process.execve (Node 22.15 and later)
 * replaces the process in place (same pid, same stdio, same environment). Without execve (Node 20)
 * the process runs with Node's size, as it does when the user gave node the flag
 * (`node --max-semi-space-size=N`, or in NODE_OPTIONS), which always wins.
 */

import { Script } from 'node:vm';

export const SEMI_SPACE_FLAG = '--max-semi-space-size';

export interface HeapSizing {
  /** What `process` gives: execArgv, argv, env, execPath and (Node 22.15+) execve. */
  execArgv: readonly string[];
  argv: readonly string[];
  env: NodeJS.ProcessEnv;
  execPath: string;
  execve?: (file: string, args: string[], env: NodeJS.ProcessEnv) => never;
}

/** Why the process keeps Node's semi-space; undefined when it restarts with `semiSpaceMb`. */
export function keepsNodeHeap(semiSpaceMb: number, p: HeapSizing): string | undefined {
  if (semiSpaceMb === 0) return '--semi_space_mb=0';
  const given = (flags: readonly string[]) => flags.some((f) => f === SEMI_SPACE_FLAG || f.startsWith(`${SEMI_SPACE_FLAG}=`) || f.startsWith('--max_semi_space_size'));
  if (given(p.execArgv) || given((p.env.NODE_OPTIONS ?? '').split(/\s+/))) return `node was given ${SEMI_SPACE_FLAG}`;
  if (typeof p.execve !== 'function') return `this Node.js (${process.version}) cannot restart a process in place (process.execve: Node 22.15 or later)`;
  return undefined;
}

/** Restarts the process with the semi-space of `semiSpaceMb` (does not return), unless keepsNodeHeap says why not: that reason. */
export function sizeYoungGeneration(semiSpaceMb: number, p: HeapSizing = process): string | undefined {
  const why = keepsNodeHeap(semiSpaceMb, p);
  if (why !== undefined) return why;
  p.execve!(p.execPath, [p.execPath, `${SEMI_SPACE_FLAG}=${semiSpaceMb}`, ...p.execArgv, ...p.argv.slice(1)], p.env);
}

/**
 * What to tell a user who asked for a size (`--semi_space_mb` given, above 0) that this process
 * cannot take (an older Node.js): the line for stderr; undefined when there is nothing to say.
 */
export function notAppliedWarning(semiSpaceMb: number, why: string | undefined, given: boolean): string | undefined {
  if (!given || why === undefined || semiSpaceMb === 0 || why.startsWith('node was given')) return undefined;
  return `mesh: --semi_space_mb=${semiSpaceMb} is not applied: ${why}; give node the size instead: NODE_OPTIONS=${SEMI_SPACE_FLAG}=${semiSpaceMb}\n`;
}

/**
 * Lets V8 give back what the start-up used once the process is idle (docs/sidecar.md, "Memory"):
 * called once a server has started. V8's memory reducer shrinks the heap (the young generation to
 * 1 MiB) when the process has allocated little for 8 s. Since V8 13.1 (Node 24) it counts an
 * allocation rate of exactly zero on the embedder's heap (cppgc) as a high one, so a process that
 * never allocated there never looks idle to it and only its watchdog collects, 100 s after the last
 * full collection. Node allocates a vm.Script there: one, compiled now, makes that rate small
 * instead of zero, and the reducer collects about 8 s after start, as it does on Node 20.
 */
export function letIdleHeapShrink(): void {
  void new Script('');
}
