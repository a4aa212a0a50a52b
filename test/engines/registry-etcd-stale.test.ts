/**
 * A watcher that cannot read etcd keeps its view: nothing expires on its own clock, the gauge
 * registry.stale_seconds rises, one line says so; once etcd answers again the watcher reads it
 * afresh, drops what etcd no longer holds and keeps what was refreshed meanwhile.
 *
 * The watcher reaches its own etcd (on loopback) through a TCP relay that the test can cut: cut,
 * the relay forwards nothing either way and keeps every connection open, as a lost link does
 * (packets dropped, nothing closed). The registering process talks to etcd directly and keeps
 * refreshing. Needs the etcd binary (skips loudly without it).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { collect, node, svc } from '../registry-contract.js';
import { tempDir, waitFor } from '../helpers.js';
import { OwnEtcd, findBinary } from '../fixtures/engines-common.js';

const etcdBin = findBinary('etcd');
if (!etcdBin) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('MESH_TEST_REQUIRE_ENGINES=1 but the etcd binary is not on PATH');
  console.warn('SKIP registry-etcd-stale: the etcd binary is not on PATH (apt-get install etcd-server)');
}

/** A TCP relay to `target` whose traffic can be held (cut) and let through again (restore). */
class Relay {
  private server!: Server;
  private readonly pairs = new Set<[Socket, Socket]>();
  private held = false;
  port = 0;

  async start(targetPort: number): Promise<void> {
    this.server = createServer((down) => {
      const up = connect(targetPort, '127.0.0.1');
      const pair: [Socket, Socket] = [down, up];
      this.pairs.add(pair);
      down.pipe(up);
      up.pipe(down);
      if (this.held) this.hold(pair);
      const end = () => {
        this.pairs.delete(pair);
        down.destroy();
        up.destroy();
      };
      down.on('error', end).on('close', end);
      up.on('error', end).on('close', end);
    });
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Nothing passes either way from now on; connections stay open (new ones too). */
  cut(): void {
    this.held = true;
    for (const pair of this.pairs) this.hold(pair);
  }

  restore(): void {
    this.held = false;
    for (const [down, up] of this.pairs) {
      down.pipe(up);
      up.pipe(down);
    }
  }

  private hold([down, up]: [Socket, Socket]): void {
    down.unpipe(up);
    up.unpipe(down);
    down.pause();
    up.pause();
  }

  async close(): Promise<void> {
    for (const [down, up] of this.pairs) {
      down.destroy();
      up.destroy();
    }
    await new Promise((r) => this.server.close(r));
  }
}

describe('etcd registry: a watcher cut off from etcd', { skip: etcdBin ? false : 'the etcd binary is not on PATH' }, () => {
  const tmp = tempDir('mesh-etcd-stale-');
  let etcd: OwnEtcd;
  const relay = new Relay();
  const closers: Array<() => Promise<unknown>> = [];

  before(async () => {
    etcd = await OwnEtcd.onLoopback(etcdBin!);
    await etcd.start(tmp.path);
    await relay.start(etcd.clientPort);
  });

  after(async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    await relay.close();
    await etcd?.kill();
    tmp.cleanup();
  });

  it('keeps its view past the TTL while cut off, then drops only what etcd dropped', async () => {
    const prefix = `/mesh-stale/${process.pid}/`;
    const owner = new EtcdRegistry(etcd.address, { prefix, callTimeoutMs: 1000 });
    const lines: Array<{ level: string; msg: string; stale_seconds?: number; as_of?: string }> = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l));
        cb();
      },
    });
    const stats = new StatsStore();
    const watcherSide = new EtcdRegistry(`127.0.0.1:${relay.port}`, {
      prefix,
      callTimeoutMs: 500,
      stats,
      logger: new Logging({ level: 'info', format: 'json', destination: sink }).get('registry'),
    });
    closers.push(() => owner.close(), () => watcherSide.close());
    const stale = () => stats.gauge('registry.stale_seconds').value;

    const w = collect(watcherSide);
    await w.watcher.ready;
    const TTL = 1500;
    const alpha = svc('alpha', '1', [node('alpha-1', 8001)]);
    await owner.register(alpha, { ttlMs: TTL });
    await owner.register(svc('beta', '1', [node('beta-1', 8002)]));
    // The owner refreshes alpha as a service does; etcd keeps seeing it.
    const refresh = setInterval(() => void owner.register(alpha, { ttlMs: TTL }).catch(() => undefined), 300);
    closers.push(async () => clearInterval(refresh));

    await w.next((e) => e.service.name === 'alpha' && e.action === 'create');
    await w.next((e) => e.service.name === 'beta' && e.action === 'create');
    assert.equal(stale(), 0);

    relay.cut();
    const cutAt = Date.now();
    // beta goes while the watcher cannot see it.
    await owner.deregister(svc('beta', '1', [node('beta-1', 8002)]));
    // Stale for longer than alpha's TTL: nothing expired on the watcher's clock.
    const deletes = () => w.events.filter((e) => e.action === 'delete').map((e) => e.service.name);
    await waitFor(() => deletes().length > 0 || (stale() >= 2 && Date.now() - cutAt > TTL + 500), 15000, 50);
    assert.deepEqual(
      deletes(),
      [],
      'no delete while cut off (without the fix alpha expired on the watcher clock)',
    );
    const warnings = lines.filter((l) => l.level === 'warning');
    assert.equal(warnings.length, 1, JSON.stringify(lines));
    assert.equal(warnings[0]!.msg, 'registry unreachable: keeping the last known view (nothing expires) until it answers again');
    assert.ok(Date.parse(warnings[0]!.as_of!) <= cutAt, `as_of ${warnings[0]!.as_of} is etcd's last answer, before the cut`);

    relay.restore();
    // Read again: beta (gone from etcd) is dropped, alpha (refreshed all along) stays.
    const gone = await w.next((e) => e.action === 'delete', 15000);
    assert.equal(gone.service.name, 'beta');
    await waitFor(() => stale() === 0, 15000, 50);
    const infos = lines.filter((l) => l.level === 'info');
    assert.equal(infos.length, 1, JSON.stringify(lines));
    assert.equal(infos[0]!.msg, 'registry reachable again: view resynchronised');
    assert.ok(infos[0]!.stale_seconds! >= 2);
    assert.equal(lines.filter((l) => l.level === 'warning').length, 1, 'one line per stale period, not per retry');
    assert.deepEqual(
      deletes(),
      ['beta'],
      'alpha was never dropped',
    );
    w.watcher.stop();
  });
});
