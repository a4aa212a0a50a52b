/**
 * `mesh register service JSON --register_ttl=1s` (docs/cli.md "Registering by hand"): the node
 * is listed, then expires since nothing registers it again, while a node registered without
 * --register_ttl stays. On the embedded registry and on etcd (our own etcd on free ports; skipped
 * loudly when the binary is absent). A watcher in this process sees the node come and go, so the
 * test waits on events, not on the clock.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { findBinary, OwnEtcd } from '../fixtures/engines-common.js';
import { collect } from '../registry-contract.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import type { Registry } from '../../src/engines/registry/registry.js';

const NAME = 'go.mesh.srv.byhand';
const record = (id: string, port: number) => JSON.stringify({ Name: NAME, Nodes: [{ Id: id, Address: '127.0.0.1', Port: port }] });

async function registerWithTtl(registry: Registry, env: Record<string, string>): Promise<void> {
  const seen = collect(registry, NAME);
  try {
    await seen.watcher.ready;
    const kept = await runCli(['register', 'service', record('kept', 9001)], env);
    assert.equal(kept.code, 0, kept.stderr);
    const r = await runCli(['register', 'service', record('leased', 9002), '--register_ttl=1s'], env);
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, 'ok\n');
    await seen.next((e) => e.service.nodes.some((n) => n.id === 'leased'), 10_000);
    // Nothing registers it again: it expires; the node registered without a TTL stays.
    const nodes = async () => (await registry.getService(NAME)).flatMap((s) => s.nodes.map((n) => n.id)).sort();
    await waitFor(async () => !(await nodes()).includes('leased'), 20_000, 100);
    assert.deepEqual(await nodes(), ['kept']);
    const listed = await runCli(['get', 'service', NAME, '--output=json'], env);
    assert.equal(listed.code, 0, listed.stderr);
    assert.deepEqual((JSON.parse(listed.stdout) as { nodes: Array<{ id: string }> }).nodes.map((n) => n.id), ['kept']);
  } finally {
    seen.watcher.stop();
  }
}

describe('mesh register --register_ttl: the record expires unless registered again', () => {
  it('embedded (local) registry', async () => {
    const home = tempDir();
    const registry = new LocalRegistry(home.path);
    try {
      await registerWithTtl(registry, { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' });
    } finally {
      await registry.close();
      home.cleanup();
    }
  });

  describe('etcd', () => {
    const bin = findBinary('etcd');
    if (!bin) {
      if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('MESH_TEST_REQUIRE_ENGINES=1 but the etcd binary is not on PATH');
      console.warn('SKIP: the etcd binary is not on PATH (apt-get install etcd-server): mesh register --register_ttl on etcd not tested');
    }
    const data = tempDir();
    let etcd: OwnEtcd | undefined;
    before(async () => {
      if (!bin) return;
      etcd = await OwnEtcd.onLoopback(bin);
      await etcd.start(data.path);
    });
    after(async () => {
      await etcd?.kill();
      data.cleanup();
    });

    it('etcd registry', { skip: !bin && 'no etcd binary' }, async () => {
      const registry = new EtcdRegistry(etcd!.address);
      try {
        await registerWithTtl(registry, { MESH_REGISTRY: 'etcd', MESH_REGISTRY_ADDRESS: etcd!.address, MESH_LOG_LEVEL: 'warning' });
      } finally {
        await registry.close();
      }
    });
  });
});
