/**
 * etcd goes away and comes back empty (killed, data wiped, restarted on the same ports): the
 * registrations this process made (TTL not yet passed, and without TTL) are written again, and
 * watchers resynchronise with the new cluster, also a watch opened just as etcd went away (its
 * first read, or its watch request, unanswered when etcd died). The test runs its OWN etcd (the
 * `etcd` binary on PATH, which CI installs) on free ports with a temp data dir, so it never
 * touches a shared one.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { join } from 'node:path';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { Logging } from '../../src/base/util/log.js';
import { collect, node, svc } from '../registry-contract.js';
import { engine, tempDir, waitFor } from '../helpers.js';
import { OwnEtcd, findBinary } from '../fixtures/engines-common.js';

const address = engine('MESH_TEST_ETCD_ADDRESS', 'etcd');
const etcdBin = address ? findBinary('etcd') : undefined;
const skip = !address ? 'etcd not available: set MESH_TEST_ETCD_ADDRESS' : !etcdBin ? 'the etcd binary is not on PATH' : false;
if (address && !etcdBin && process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('MESH_TEST_REQUIRE_ENGINES=1 but the etcd binary is not on PATH');

describe('etcd restart', { skip }, () => {
  const tmp = tempDir('mesh-etcd-restart-');
  let etcd: OwnEtcd;
  const registries: EtcdRegistry[] = [];
  before(async () => {
    etcd = await OwnEtcd.onLoopback(etcdBin!);
    await etcd.start(join(tmp.path, 'data-1'));
  });
  after(async () => {
    for (const r of registries) await r.close();
    await etcd?.kill();
    tmp.cleanup();
  });

  it('re-registers after etcd comes back empty, and watchers follow the new cluster', async () => {
    const prefix = `/mesh-restart/${process.pid}/`;
    const owner = new EtcdRegistry(etcd.address, { prefix, callTimeoutMs: 1000 });
    const observer = new EtcdRegistry(etcd.address, { prefix, callTimeoutMs: 1000 });
    registries.push(owner, observer);

    await owner.register(svc('phoenix', '1', [node('ph-1', 9501)]), { ttlMs: 30000 });
    await owner.register(svc('steady', '1', [node('st-1', 9502)]));
    await owner.register(svc('brief', '1', [node('br-1', 9503)]), { ttlMs: 300 });
    assert.equal((await observer.getService('phoenix')).length, 1);
    const w = collect(observer);
    // The watch is established before etcd goes (a watch opened during the outage is another case).
    await w.watcher.ready;

    await etcd.kill();
    const down = Date.now();
    // Same ports, empty data: a different cluster that has never seen our keys.
    await etcd.start(join(tmp.path, 'data-2'));
    const up = Date.now();

    await waitFor(async () => (await observer.getService('phoenix').catch(() => [])).length === 1, 15000, 100);
    const back = Date.now();
    console.log(`etcd restart: down ${up - down} ms; registration found again ${back - up} ms after etcd was back`);
    assert.deepEqual((await observer.getService('phoenix'))[0]!.nodes.map((n) => n.id), ['ph-1']);
    await waitFor(async () => (await observer.getService('steady')).length === 1, 5000, 100);
    assert.deepEqual(await observer.getService('brief'), [], 'an expired registration is not written again');
    assert.ok(back - up < 10000, `re-registered ${back - up} ms after etcd was back`);

    // The observer's watch follows the new cluster (whose revisions started again from 1).
    await waitFor(async () => {
      await owner.register(svc('newcomer', '1', [node('nc-1', 9504)]));
      return w.events.some((e) => e.service.name === 'newcomer' && e.action === 'create');
    }, 10000, 300).catch((err: Error) => {
      throw new Error(`${err.message}; observer events: ${JSON.stringify(w.events.map((e) => [e.action, e.service.name, e.revision]))}`);
    });
    w.watcher.stop();
  });

  it('a watch opened as etcd goes away is ready only once it has read etcd, and gets events once etcd is back empty (6 rounds)', async () => {
    const prefix = `/mesh-restart-unready/${process.pid}/`;
    const owner = new EtcdRegistry(etcd.address, { prefix, callTimeoutMs: 1000 });
    registries.push(owner);
    // How etcd goes away while the watch is being opened:
    // - 'read': killed right after watch(), before the watch has read its starting state;
    // - 'create': stopped (SIGSTOP) as the watch request is made, after that read was answered,
    //   so the request is sent and never confirmed; then killed;
    // - 'create, live stream': the same while another watch of this client is established, so
    //   the request goes on a watch stream that was working.
    const ways = ['read', 'create', 'create, live stream'] as const;
    for (let round = 1; round <= 6; round++) {
      const way = ways[(round - 1) % ways.length]!;
      const logged: string[] = [];
      const sink = new Writable({
        write(chunk: Buffer, _enc, cb) {
          for (const l of chunk.toString().split('\n')) if (l.trim()) logged.push((JSON.parse(l) as { msg: string }).msg);
          cb();
        },
      });
      const logger = new Logging({ level: 'info', format: 'json', destination: sink }).get('registry');
      const observer = new EtcdRegistry(etcd.address, { prefix, callTimeoutMs: 1000, logger });
      registries.push(observer);
      const anchor = way === 'create, live stream' ? collect(observer) : undefined;
      await anchor?.watcher.ready;
      let pauseAtWatch = way !== 'read';
      let paused = false;
      const watch = observer.client.watch.bind(observer.client);
      observer.client.watch = () => {
        if (pauseAtWatch) {
          pauseAtWatch = false;
          etcd.pause();
          paused = true;
        }
        return watch();
      };
      const w = collect(observer);
      let ready = false;
      void w.watcher.ready!.then(() => (ready = true));
      if (way !== 'read') await waitFor(() => paused, 10000, 5);
      await etcd.kill();
      // etcd is away and the watcher knows it (a read failed).
      await waitFor(() => logged.some((m) => m.startsWith('registry unreachable')), 10000, 5);
      assert.equal(ready, way !== 'read', way === 'read' ? 'ready before the watch could read etcd' : 'not ready though the watch read etcd');
      await etcd.start(join(tmp.path, `unready-${round}`));
      const up = Date.now();

      await waitFor(() => ready, 10000, 5);
      const name = `round-${round}`;
      await waitFor(async () => {
        await owner.register(svc(name, '1', [node(`r${round}`, 9600 + round)]));
        return true;
      }, 15000, 100);
      const seen = (c: typeof w) => c.events.some((e) => e.service.name === name && e.action === 'create');
      await waitFor(() => seen(w) && (!anchor || seen(anchor)), 10000, 5).catch((err: Error) => {
        throw new Error(`round ${round} (${way}): ${err.message}; watch events: ${JSON.stringify(w.events.map((e) => [e.action, e.service.name, e.revision]))}`);
      });
      console.log(`etcd restart, watch opened as etcd went away (${way}): event ${Date.now() - up} ms after etcd was back`);
      w.watcher.stop();
      anchor?.watcher.stop();
      await observer.close();
    }
  });
});
