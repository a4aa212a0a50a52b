/**
 * Engine restarts under load, on the test's OWN etcd and nats-server (free loopback ports; CI's
 * shared engines cannot be restarted), with real processes: two who services and a gateway on
 * `--registry=etcd`, a sidecar on `--registry=etcd --broker=nats`.
 *
 *  - etcd killed (SIGKILL) and started again on its data while RPC calls flow through the gateway:
 *    no call fails, the cluster manager keeps its last view of the registry meanwhile.
 *  - nats-server killed and started again while messages are published through the sidecar: a
 *    publish while NATS is down fails cleanly (503 error JSON, no hang, no reset), publishes succeed
 *    again once it is back; RPC calls through the gateway are not affected.
 *
 * Runs only where the engines are enabled (MESH_TEST_ETCD_ADDRESS and MESH_TEST_NATS_ADDRESS set,
 * as in CI) and the etcd and nats-server binaries exist; skips loudly otherwise, and fails instead
 * with MESH_TEST_REQUIRE_ENGINES=1.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { engine, tempDir, waitFor } from '../helpers.js';
import { OwnEtcd, OwnNats, findBinary } from '../fixtures/engines-common.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { formatReport, startLoad, type LoadRequest } from './load.js';
import { ProcessGroup, WHO, startService } from './harness.js';

const enabled = !!engine('MESH_TEST_ETCD_ADDRESS', 'etcd') && !!engine('MESH_TEST_NATS_ADDRESS', 'NATS');
const etcdBin = findBinary('etcd');
const natsBin = findBinary('nats-server');
const missingBins = [!etcdBin && 'etcd', !natsBin && 'nats-server'].filter(Boolean).join(' and ');
let skip: string | false = enabled ? false : 'engines not enabled (MESH_TEST_ETCD_ADDRESS, MESH_TEST_NATS_ADDRESS)';
if (!skip && missingBins) {
  skip = `the ${missingBins} binary is not on PATH, /usr/bin or /usr/sbin (apt-get install etcd-server nats-server)`;
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${skip}`);
  console.warn(`SKIP engine restarts under load: ${skip}`);
}

const RPC_WHO: LoadRequest = {
  name: 'rpc Who.Am',
  method: 'POST',
  path: '/rpc',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Am', request: {} }),
};

describe('engine restarts under load (own etcd and nats-server)', { skip }, () => {
  it('etcd killed and restarted: RPC calls through the gateway keep succeeding; NATS killed and restarted: publishes 503 while down, 200 after', async (t) => {
    const tmp = tempDir('mesh-rel-engines-');
    const group = new ProcessGroup();
    const etcd = await OwnEtcd.onLoopback(etcdBin!);
    const nats = await OwnNats.onLoopback(natsBin!);
    const stopEngines = async () => {
      await etcd.kill();
      await nats.kill();
    };
    try {
      await Promise.all([etcd.start(join(tmp.path, 'etcd')), nats.start()]);
      const registry = ['--registry=etcd', `--registry_address=${etcd.address}`];
      await Promise.all([0, 1].map(async () => group.add(await startService(WHO, 'go.mesh.srv.who', registry))));
      const gw = group.add(await startGatewayProcess(etcd.address, ['--registry=etcd', '--client_retries=1']));
      const sc = group.add(await startSidecar(etcd.address, ['--registry=etcd', '--broker=nats', `--broker_address=${nats.address}`]));

      const rpc = startLoad({ origin: gw.url, concurrency: 6, pauseMs: 20, mix: [RPC_WHO] });
      const publish: LoadRequest = {
        name: 'publish',
        method: 'POST',
        path: `/broker?topic=reliability.${process.pid}`,
        headers: { 'content-type': 'text/plain' },
        body: 'tick',
      };
      const pubs = startLoad({ origin: sc.base, concurrency: 2, pauseMs: 50, mix: [publish] });
      try {
        await waitFor(() => rpc.counts().ok >= 100 && pubs.counts().ok >= 20, 30_000, 100);

        // 1. etcd down for 5 s, then back on its data. Expectation: no RPC call fails. The gateway
        // routes on the cluster manager's last view (the nodes did not move), and its watch
        // reconnects when etcd is back; only registrations and lookups of new names need etcd.
        const beforeEtcd = rpc.counts();
        await etcd.kill();
        const etcdDownAt = Date.now();
        await waitFor(() => Date.now() - etcdDownAt >= 5000 && rpc.counts().ok >= beforeEtcd.ok + 200, 60_000, 100);
        const whileEtcdDown = rpc.counts();
        await etcd.start(join(tmp.path, 'etcd'));
        const etcdUpAt = Date.now();
        await waitFor(() => Date.now() - etcdUpAt >= 3000 && rpc.counts().ok >= whileEtcdDown.ok + 100, 60_000, 100);
        const afterEtcd = rpc.counts();
        t.diagnostic(
          `etcd down ${etcdUpAt - etcdDownAt}ms: ${whileEtcdDown.total - beforeEtcd.total} RPC calls while down, ` +
            `${afterEtcd.total - whileEtcdDown.total} after; failed ${afterEtcd.failed - beforeEtcd.failed} ${JSON.stringify(afterEtcd.failures)}`,
        );
        assert.equal(afterEtcd.failed, beforeEtcd.failed, `RPC calls failed around the etcd restart: ${JSON.stringify(afterEtcd.failures)}`);

        // 2. nats-server down, then back. Expectation: publishes answer 503 (error JSON) while it
        // is down — refused, never a hang, a reset or a silent 200 that loses the message for
        // good — and 200 again once the client reconnected. RPC calls do not need NATS.
        const beforeNats = pubs.counts();
        const rpcBeforeNats = rpc.counts();
        await nats.kill();
        const natsDownAt = Date.now();
        await waitFor(() => (pubs.counts().failures['status:503'] ?? 0) > (beforeNats.failures['status:503'] ?? 0), 20_000, 50);
        const firstRefusalMs = Date.now() - natsDownAt;
        await waitFor(() => Date.now() - natsDownAt >= 3000, 10_000, 100);
        const whileNatsDown = pubs.counts();
        await nats.start();
        const natsUpAt = Date.now();
        // Back: 20 publishes in a row succeed.
        await waitFor(() => pubs.counts().ok >= whileNatsDown.ok + 20, 30_000, 50);
        const recoveredMs = Date.now() - natsUpAt;
        const pubReport = await pubs.stop();
        const rpcReport = await rpc.stop();
        t.diagnostic(
          `nats down ${natsUpAt - natsDownAt}ms: first 503 after ${firstRefusalMs}ms; ${whileNatsDown.total - beforeNats.total} publishes while down, ` +
            `${whileNatsDown.ok - beforeNats.ok} of them 200 (taken before the client saw the loss), ${JSON.stringify(whileNatsDown.failures)}; ` +
            `publishes succeed again ${recoveredMs}ms after nats-server is back`,
        );
        t.diagnostic(formatReport(pubReport, 'publishes'));
        t.diagnostic(formatReport(rpcReport, 'rpc calls'));
        for (const kind of Object.keys(pubReport.failures)) assert.equal(kind, 'status:503', `publish failures must be clean 503s: ${formatReport(pubReport)}`);
        assert.ok(pubReport.samples.every((s) => /^\{"id":"[^"]+","code":503,"detail":".*","status":"Service Unavailable"\}$/.test(s.detail)), JSON.stringify(pubReport.samples));
        assert.equal(rpcReport.failed, rpcBeforeNats.failed, formatReport(rpcReport));
        assert.equal(rpcReport.failed, 0, formatReport(rpcReport));
      } finally {
        await Promise.all([rpc.stop(), pubs.stop()]);
      }
    } finally {
      await group.stopAll();
      await stopEngines();
      tmp.cleanup();
    }
  });
});
