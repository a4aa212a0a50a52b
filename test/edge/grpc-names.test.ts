/** Which mesh service a native gRPC call is for (src/edge/handlers/grpc-names.ts), against a real in-memory registry. */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRegistry } from '../../src/engines/registry/create.js';
import { GrpcServiceNames, MAX_SERVICES, REFRESH_MS } from '../../src/edge/handlers/grpc-names.js';

describe('gRPC service names', () => {
  const registry = createRegistry('memory');
  after(() => registry.close());
  const node = (id: string, grpcService?: string) => ({ id, address: '127.0.0.1', port: 1000, metadata: grpcService ? { protocol: 'grpc', grpc_service: grpcService } : {} });

  it('takes mesh-service, then the authority, then the nodes\' grpc_service; never a name the registry does not have', async () => {
    let now = 1_000_000;
    const names = new GrpcServiceNames(registry, () => now);
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', 'helloworld.Greeter')] });
    await registry.register({ name: 'go.mesh.srv.other', version: 'v1', metadata: {}, endpoints: [], nodes: [node('b')] });
    assert.equal(await names.resolve('helloworld.Greeter', '127.0.0.1:8081', undefined), 'go.mesh.srv.greeter');
    assert.equal(await names.resolve('helloworld.Greeter', 'go.mesh.srv.other:443', undefined), 'go.mesh.srv.other');
    assert.equal(await names.resolve('helloworld.Greeter', 'GO.MESH.SRV.OTHER', undefined), 'go.mesh.srv.other');
    assert.equal(await names.resolve('helloworld.Greeter', '127.0.0.1:8081', 'go.mesh.srv.other'), 'go.mesh.srv.other');
    // A name that is not a service, or is not one at all, falls through to the index.
    assert.equal(await names.resolve('helloworld.Greeter', 'evil.example', '../../etc'), 'go.mesh.srv.greeter');
    assert.equal(await names.resolve('pkg.Unknown', '127.0.0.1', undefined), undefined);
    // A service registered later is found once the index is older than REFRESH_MS.
    await registry.register({ name: 'go.mesh.srv.late', version: 'v1', metadata: {}, endpoints: [], nodes: [node('c', 'pkg.Late')] });
    assert.equal(await names.resolve('pkg.Late', undefined, undefined), undefined);
    now += REFRESH_MS;
    assert.equal(await names.resolve('pkg.Late', undefined, undefined), 'go.mesh.srv.late');
  });

  it('reads the registry once per REFRESH_MS for a name, found or not (an address as the authority costs no read per call)', async () => {
    let now = 2_000_000;
    let reads = 0;
    const counting = new Proxy(registry, { get: (t, k) => (k === 'getService' ? (name: string) => (reads++, t.getService(name)) : Reflect.get(t, k)) });
    const names = new GrpcServiceNames(counting, () => now);
    await registry.register({ name: 'go.mesh.srv.counted', version: 'v1', metadata: {}, endpoints: [], nodes: [node('d', 'pkg.Counted')] });
    await names.resolve('pkg.Counted', '127.0.0.1:8081', undefined); // builds the index too
    const afterFirst = reads;
    for (let i = 0; i < 100; i++) assert.equal(await names.resolve('pkg.Counted', '127.0.0.1:8081', 'go.mesh.srv.counted'), 'go.mesh.srv.counted');
    for (let i = 0; i < 100; i++) assert.equal(await names.resolve('pkg.Counted', '127.0.0.1:8081', undefined), 'go.mesh.srv.counted');
    assert.equal(reads - afterFirst, 1, 'one read for go.mesh.srv.counted, none again for 127.0.0.1');
    // A service registered under a name asked about before is found once the answer is older than REFRESH_MS.
    assert.equal(await names.exists('go.mesh.srv.later'), false);
    await registry.register({ name: 'go.mesh.srv.later', version: 'v1', metadata: {}, endpoints: [], nodes: [node('e')] });
    assert.equal(await names.exists('go.mesh.srv.later'), false);
    now += REFRESH_MS;
    assert.equal(await names.exists('go.mesh.srv.later'), true);
  });

  it('keeps at most MAX_SERVICES names, however many a caller makes up (each new one is one registry read, as before)', async () => {
    const names = new GrpcServiceNames(registry, () => 3_000_000);
    for (let i = 0; i < MAX_SERVICES + 50; i++) assert.equal(await names.exists(`made-up-${i}.example`), false);
    const kept = (names as unknown as { known: Map<string, unknown> }).known.size;
    assert.ok(kept <= MAX_SERVICES, `${kept} names kept`);
  });
});
