/**
 * An idle server gives back what its start-up used (src/cli/heap-size.ts, letIdleHeapShrink): V8's
 * memory reducer shrinks the heap once the process has allocated little for 8 s. On Node 24 it
 * would not before its 100 s watchdog (it took a zero allocation rate on the embedder's heap for a
 * high one) unless the server compiled a vm.Script once started. The real sidecar, asked nothing
 * but its stats: the heap it reserves (`server.memory_heap_size`, V8's heapTotal) drops by at
 * least 4 MiB (the young generation going back to 1 MiB) well before 100 s.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { http, PRINTED, startProcess, tempDir, waitFor } from '../helpers.js';

const MiB = 1024 * 1024;

describe('an idle server', () => {
  it('mesh sidecar, asked nothing, gives back its young generation within 60 s of start', async () => {
    const dir = tempDir('mesh-idle-heap-');
    const proc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--registry=memory', '--log_level=warning'], { MESH_HOME: dir.path });
    try {
      const admin = `http://127.0.0.1:${await proc.waitForPort(PRINTED.sidecarAdmin)}`;
      const heapSize = async () => {
        const r = await http('GET', `${admin}/stats`);
        assert.equal(r.status, 200, r.text);
        const m = /^server\.memory_heap_size: (\d+)$/m.exec(r.text);
        assert.ok(m, r.text);
        return Number(m[1]);
      };
      const atStart = await heapSize();
      let last = atStart;
      await waitFor(async () => (last = await heapSize()) <= atStart - 4 * MiB, 60_000, 1000).catch((err: Error) => {
        throw new Error(`${err.message}: heap ${(atStart / MiB).toFixed(1)} MiB at start, ${(last / MiB).toFixed(1)} MiB now`);
      });
    } finally {
      await proc.stop();
      dir.cleanup();
    }
  });
});
