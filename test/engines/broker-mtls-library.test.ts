/**
 * The http broker's deliveries between framework processes with --mtls, in process: Mesh instances
 * with a mesh CA of their own (made on first use in a temporary --ca_dir). A Mesh without any
 * service subscribes and publishes with its caller's certificate (mesh.cli): the subscription's
 * endpoint serves mutual TLS (mtls=true in the registry) and a strict publisher delivers to it
 * over mutual TLS.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Mesh } from '../../src/framework/mesh.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { tempDir, waitFor } from '../helpers.js';

describe('http broker deliveries between Mesh instances with --mtls=strict', () => {
  const ca = tempDir('mesh-broker-mtls-ca-');
  const registry = new MemoryRegistry();
  const meshes: Mesh[] = [];
  const mesh = () => {
    const m = new Mesh({ logLevel: 'off', drainDelay: 0, registry, broker: 'http', brokerSecret: 'a-secret-of-the-test-0123456789', mtls: 'strict', caDir: ca.path });
    meshes.push(m);
    return m;
  };
  after(async () => {
    for (const m of meshes) await m.close();
    ca.cleanup();
  });

  test('a subscription says mtls=true and gets a strict publisher\'s message over mutual TLS', async () => {
    const subscriber = mesh();
    const got: unknown[] = [];
    await subscriber.subscribe('orders', (event) => {
      got.push(event);
    });
    const [record] = await registry.getService('topic:orders');
    assert.equal(record!.nodes[0]!.metadata.mtls, 'true');
    assert.equal(subscriber.runtime.callerWorkloadTls?.spiffeId, 'spiffe://mesh.local/svc/mesh.cli');
    const publisher = mesh();
    await publisher.publish('orders', { id: 7 });
    await waitFor(() => got.length === 1, 10_000);
    assert.deepEqual(got, [{ id: 7 }]);
    assert.equal(publisher.runtime.stats.counter('broker.http.ssl.handshake').value, 1);
    assert.equal(subscriber.runtime.stats.counter('http.broker.ssl.handshake').value, 1);
  });
});
