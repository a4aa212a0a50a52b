/**
 * An etcd that goes silent (a lost link: nothing closed, nothing answered) shows at once in the
 * gauge registry.stale_seconds, counted from etcd's last answer (src/engines/registry/etcd/contact.ts),
 * not only once a call has failed (which a call deadline of 30 s would take 30 s to say).
 * etcd here is a TCP black hole on loopback that accepts connections and never answers, so the
 * last contact is when the registry was made. In process, no etcd binary needed.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { waitFor } from '../helpers.js';

describe('etcd registry: a silent etcd', () => {
  let hole: Server;
  const held = new Set<Socket>();
  let port = 0;
  before(async () => {
    hole = createServer((socket) => {
      held.add(socket);
      socket.on('close', () => held.delete(socket));
      socket.resume(); // read everything, answer nothing
    });
    hole.listen(0, '127.0.0.1');
    await once(hole, 'listening');
    port = (hole.address() as { port: number }).port;
  });
  after(async () => {
    for (const s of held) s.destroy();
    await new Promise<void>((r) => hole.close(() => r()));
  });

  it('registry.stale_seconds rises from the last contact within seconds, long before a call times out; one warning', async () => {
    const lines: Array<{ level: string; msg: string; as_of?: string; err?: unknown }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l));
        cb();
      },
    });
    const stats = new StatsStore();
    const made = Date.now();
    // A call waits up to 30 s: what told the view it was stale before this fix, after 30 s.
    const registry = new EtcdRegistry(`127.0.0.1:${port}`, {
      callTimeoutMs: 30_000,
      stats,
      logger: new Logging({ level: 'info', format: 'json', destination: sink }).get('registry'),
    });
    const madeBy = Date.now(); // the registry's last contact is somewhere in [made, madeBy]
    const stale = () => stats.gauge('registry.stale_seconds').value;
    try {
      const watcher = registry.watch(() => undefined);
      assert.equal(stale(), 0);
      // Bounded generously to catch a gauge that waits for the 30 s call deadline.
      await waitFor(() => stale() >= 4, 15_000, 50);
      const now = Date.now();
      const seconds = stale();
      // Counted from the last contact (the registry was made then), not from when the silence was noticed.
      assert.ok(seconds >= Math.floor((now - madeBy) / 1000) - 1 && seconds <= Math.ceil((now - made) / 1000), `stale_seconds ${seconds} ${(now - made) / 1000}s after the registry was made`);
      const warnings = lines.filter((l) => l.level === 'warning');
      assert.equal(warnings.length, 1, JSON.stringify(lines));
      assert.equal(warnings[0]!.msg, 'registry unreachable: keeping the last known view (nothing expires) until it answers again');
      const asOf = Date.parse(warnings[0]!.as_of!);
      assert.ok(asOf >= made - 1 && asOf <= madeBy + 1, `as_of ${warnings[0]!.as_of}: the last contact, when the registry was made`);
      watcher.stop();
    } finally {
      await registry.close();
    }
  });
});
