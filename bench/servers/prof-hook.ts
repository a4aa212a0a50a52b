/**
 * Opt-in profiling hook for the bench's own Node servers (the Node floor), so that they can be
 * profiled in steady state like the mesh processes (admin /cpuprofiler): the first SIGUSR2 starts
 * the V8 profiler, the second stops it, writes BENCH_PROF_DIR/<name>-<pid>.cpuprofile and prints
 * "PROFILE <path>" on stdout. Loaded only when BENCH_PROF_DIR is set.
 */
import { Session } from 'node:inspector/promises';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

export function installProfileHook(name: string): void {
  const dir = process.env.BENCH_PROF_DIR;
  if (!dir) return;
  let session: Session | undefined;
  let busy = false;
  process.on('SIGUSR2', () => {
    if (busy) return;
    busy = true;
    void (async () => {
      if (!session) {
        session = new Session();
        session.connect();
        await session.post('Profiler.enable');
        await session.post('Profiler.start');
        process.stdout.write('PROFILING\n');
      } else {
        const { profile } = await session.post('Profiler.stop');
        session.disconnect();
        session = undefined;
        mkdirSync(dir, { recursive: true });
        const file = join(dir, `${name}-${process.pid}.cpuprofile`);
        writeFileSync(file, JSON.stringify(profile));
        process.stdout.write(`PROFILE ${file}\n`);
      }
    })().finally(() => (busy = false));
  });
}
