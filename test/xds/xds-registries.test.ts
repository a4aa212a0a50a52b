/**
 * `mesh xds` serves every registry backend the same: the embedded registry (local, SQLite) and
 * etcd (MESH_TEST_ETCD_ADDRESS, else an etcd of our own on free ports; skipped loudly without
 * the binary). One contract per backend, a real `mesh xds` process, a raw ADS stream: a service
 * registered appears in clusters and endpoints (the time from the write to the push is
 * reported), a node added and one removed are pushed, and a service gone leaves the clusters.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { engine, freePort, runCli, startProcess, tempDir, type RunningProcess } from '../helpers.js';
import { findBinary, OwnEtcd } from '../fixtures/engines-common.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import type { Registry, Service } from '../../src/engines/registry/registry.js';

interface Backend {
  registry: Registry;
  /** The registry flags of `mesh xds`. */
  flags: string[];
  cleanup(): Promise<void>;
}

function xdsContract(name: string, open: () => Promise<Backend | undefined>): void {
  describe(`mesh xds on the ${name} registry`, () => {
    let backend: Backend | undefined;
    let xds: RunningProcess | undefined;
    let address = '';
    const home = tempDir('mesh-xds-reg-');
    const service = `go.mesh.srv.xds-${randomUUID().slice(0, 8)}`;
    const record = (nodes: number[]): Service => ({
      name: service,
      version: '1',
      metadata: {},
      endpoints: [],
      nodes: nodes.map((port) => ({ id: `n${port}`, address: '127.0.0.1', port, metadata: {} })),
    });

    before(async () => {
      backend = await open();
      if (!backend) return;
      xds = startProcess(['xds', ...backend.flags, '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning'], { MESH_HOME: home.path });
      address = `127.0.0.1:${await xds.waitForPort(/mesh xds listening on grpc:\/\/\S+:(\d+)/)}`;
    });
    after(async () => {
      await xds?.stop();
      await backend?.cleanup();
      home.cleanup();
    });

    it('a service registered, a node added, a node removed, the service gone: each pushed', async (t) => {
      if (!backend) return t.skip('backend not available');
      const probe = new AdsProbe(address);
      try {
        const has = (r: { resources: unknown[] }, n: number) => r.resources.length === n;
        const cds0 = await probe.request(TYPE_URLS.cluster);
        const start = cds0.resources.length;
        const eds0 = await probe.request(TYPE_URLS.endpoint, [service]);
        assert.ok(has(eds0, 0));
        probe.send(TYPE_URLS.cluster, []);
        probe.send(TYPE_URLS.endpoint, [service]);

        let push = probe.next(TYPE_URLS.endpoint);
        const written = performance.now();
        await backend.registry.register(record([7001]));
        const eds1 = await push;
        t.diagnostic(`${name}: registry write to endpoint push ${Math.round(performance.now() - written)} ms`);
        assert.ok(has(eds1, 1));
        probe.send(TYPE_URLS.endpoint, [service]);

        push = probe.next(TYPE_URLS.endpoint);
        await backend.registry.register(record([7001, 7002]));
        const eds2 = await push;
        const decode = (r: typeof eds2) =>
          (probe.protos.root.lookupType('envoy.config.endpoint.v3.ClusterLoadAssignment').toObject(
            probe.protos.root.lookupType('envoy.config.endpoint.v3.ClusterLoadAssignment').decode(r.resources[0]!.value),
          ) as { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: { socket_address: { port_value: number } } } }> }> }).endpoints
            .flatMap((l) => l.lb_endpoints.map((e) => e.endpoint.address.socket_address.port_value))
            .sort();
        assert.deepEqual(decode(eds2), [7001, 7002]);
        probe.send(TYPE_URLS.endpoint, [service]);

        push = probe.next(TYPE_URLS.endpoint);
        await backend.registry.deregister(record([7001]));
        assert.deepEqual(decode(await push), [7002]);
        probe.send(TYPE_URLS.endpoint, [service]);

        const gone = probe.next(TYPE_URLS.cluster);
        await backend.registry.deregister(record([7002]));
        // The clusters went from start (+1 while registered, possibly pushed above) back to start.
        for (let r = await gone; r.resources.length !== start; r = await probe.next(TYPE_URLS.cluster)) probe.send(TYPE_URLS.cluster, []);
      } finally {
        probe.close();
      }
    });
  });
}

xdsContract('embedded (local)', async () => {
  const dir = tempDir('mesh-xds-local-');
  const registry = new LocalRegistry(dir.path);
  return {
    registry,
    flags: [`--registry_address=${dir.path}`],
    cleanup: async () => {
      await registry.close();
      dir.cleanup();
    },
  };
});

xdsContract('etcd', async () => {
  let address = engine('MESH_TEST_ETCD_ADDRESS', 'etcd');
  let own: OwnEtcd | undefined;
  const data = tempDir('mesh-xds-etcd-');
  if (!address) {
    const bin = findBinary('etcd');
    if (!bin) {
      if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('MESH_TEST_REQUIRE_ENGINES=1 but the etcd binary is not on PATH');
      console.warn('SKIP: no MESH_TEST_ETCD_ADDRESS and no etcd binary on PATH (apt-get install etcd-server): mesh xds on etcd not tested');
      return undefined;
    }
    own = await OwnEtcd.onLoopback(bin);
    await own.start(data.path);
    address = own.address;
  }
  const registry = new EtcdRegistry(address);
  return {
    registry,
    flags: ['--registry=etcd', `--registry_address=${address}`],
    cleanup: async () => {
      await registry.close();
      await own?.kill();
      data.cleanup();
    },
  };
});

describe('mesh xds on an etcd that cannot be reached', () => {
  it('exits 1 at start with the registry error, without waiting for etcd', async () => {
    const home = tempDir('mesh-xds-noetcd-');
    try {
      const port = await freePort(); // nothing listens there
      const res = await runCli(['xds', '--registry=etcd', `--registry_address=127.0.0.1:${port}`, '--address=127.0.0.1:0', '--admin_address=off'], { MESH_HOME: home.path }, 20000);
      assert.equal(res.code, 1, res.stdout + res.stderr);
      assert.match(res.stderr, new RegExp(`^mesh: registry etcd \\(http://127\\.0\\.0\\.1:${port}\\): list services: 14 UNAVAILABLE.*\\(is etcd running there\\?`, 'm'));
    } finally {
      home.cleanup();
    }
  });
});
