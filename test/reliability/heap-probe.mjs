/**
 * Preload for the soak (`node --expose-gc --import <this file>`, through NODE_OPTIONS): every
 * MESH_HEAP_PROBE_MS milliseconds it reads the heap in use, forces a full collection with gc() and
 * reads it again, and appends `<ms since start> <heap before> <heap after>` (bytes) as one line to
 * MESH_HEAP_PROBE_DIR/<pid>. The figure after a collection is what the process really keeps alive:
 * a leak raises it, while the figure before only says how much garbage waited for the collector.
 * Plain JavaScript so it loads into the built CLI as well as into tsx services. It never keeps the
 * process alive and never throws (a write error, e.g. the directory removed at the end of the test,
 * stops the probe).
 */
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.MESH_HEAP_PROBE_DIR;
const everyMs = Number(process.env.MESH_HEAP_PROBE_MS ?? 2000);
if (dir && typeof globalThis.gc === 'function' && Number.isFinite(everyMs) && everyMs >= 100) {
  const file = join(dir, String(process.pid));
  const started = Date.now();
  const timer = setInterval(() => {
    try {
      const before = process.memoryUsage().heapUsed;
      globalThis.gc();
      const after = process.memoryUsage().heapUsed;
      appendFileSync(file, `${Date.now() - started} ${before} ${after}\n`);
    } catch {
      clearInterval(timer);
    }
  }, everyMs);
  timer.unref();
}
