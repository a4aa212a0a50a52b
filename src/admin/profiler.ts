/**
 * admin /cpuprofiler: a V8 CPU profile of this process through node:inspector (the Profiler
 * domain of an in-process inspector session). Stopping writes a `.cpuprofile` file (JSON with
 * `nodes`, `startTime`, `endTime`, `samples`, `timeDeltas`) that Chrome DevTools and VS Code load.
 */
import { Session } from 'node:inspector/promises';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export class CpuProfiler {
  private session: Session | undefined;
  /** Serialises start/stop so concurrent requests cannot interleave. */
  private queue: Promise<unknown> = Promise.resolve();
  private sequence = 0;

  get running(): boolean {
    return this.session !== undefined;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Starts profiling; a no-op while running. */
  start(): Promise<void> {
    return this.serial(async () => {
      if (this.session) return;
      const session = new Session();
      session.connect();
      try {
        await session.post('Profiler.enable');
        await session.post('Profiler.start');
      } catch (err) {
        session.disconnect();
        throw err;
      }
      this.session = session;
    });
  }

  /**
   * Stops profiling and writes the profile to `<dir>/mesh-<pid>-<time>-<n>.cpuprofile`; resolves
   * to the file's path, or undefined when the profiler was not running.
   */
  stop(dir: string): Promise<string | undefined> {
    return this.serial(async () => {
      const session = this.session;
      if (!session) return undefined;
      this.session = undefined;
      let profile: unknown;
      try {
        ({ profile } = await session.post('Profiler.stop'));
      } finally {
        session.disconnect();
      }
      await mkdir(dir, { recursive: true });
      const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
      const file = join(dir, `mesh-${process.pid}-${stamp}-${++this.sequence}.cpuprofile`);
      await writeFile(file, JSON.stringify(profile));
      return file;
    });
  }

  /** Stops without writing anything (server shutdown). */
  async dispose(): Promise<void> {
    await this.serial(async () => {
      const session = this.session;
      this.session = undefined;
      if (!session) return;
      try {
        await session.post('Profiler.stop');
      } catch {
        // already gone
      }
      session.disconnect();
    });
  }
}
