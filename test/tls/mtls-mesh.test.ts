/**
 * Mutual TLS between framework processes, as a user runs them: Mesh instances with --mtls and a
 * mesh CA of their own (made on first use in a temporary --ca_dir), in process. A service in
 * strict mode registers mtls=true and is called over mutual TLS by a Mesh in strict or
 * permissive mode; a Mesh with --mtls=off is refused; a permissive service serves both.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Mesh } from '../../src/framework/mesh.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { MeshError } from '../../src/base/errors.js';
import { X509Certificate } from 'node:crypto';
import { http, tempDir, waitFor } from '../helpers.js';
import { finishRotation, rotateCa } from '../../src/tls/workload/ca.js';

const quiet = { logLevel: 'off', drainDelay: 0, broker: 'memory' } as const;

/** Four callers making `call` in a loop until stopped: how many calls were made, and the failures. */
function callLoop(call: (n: number) => Promise<void>) {
  const failures: unknown[] = [];
  let done = 0;
  let stopped = false;
  const worker = async () => {
    for (let n = 1; !stopped; n++) {
      try {
        await call(n);
      } catch (err) {
        failures.push(err);
      }
      done++;
    }
  };
  const workers = Array.from({ length: 4 }, worker);
  return {
    failures,
    get done() {
      return done;
    },
    async stop() {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

describe('framework to framework', () => {
  const ca = tempDir('mesh-mtls-ca-');
  const registry = new MemoryRegistry();
  const meshes: Mesh[] = [];
  const mesh = (mtls: 'off' | 'permissive' | 'strict') => {
    const m = new Mesh({ ...quiet, registry, mtls, caDir: ca.path });
    meshes.push(m);
    return m;
  };
  let strictPort = 0;
  let permissivePort = 0;

  before(async () => {
    const payments = mesh('strict');
    payments
      .service({ name: 'go.mesh.srv.payments' })
      .handle('Pay.Charge', () => ({ charged: true }))
      .stream(
        'Pay.History',
        async function* (req: { n: number }) {
          for (let i = 0; i < req.n; i++) yield { i };
        },
        { kind: 'server' },
      );
    const started = await payments.start();
    strictPort = started.services[0]!.nodes[0]!.port;
    const orders = mesh('permissive');
    orders.service({ name: 'go.mesh.srv.orders' }).handle('Order.Get', () => ({ order: 1 }));
    permissivePort = (await orders.start()).services[0]!.nodes[0]!.port;
  });
  after(async () => {
    for (const m of meshes) await m.close();
    ca.cleanup();
  });

  test('a service with --mtls registers mtls=true', async () => {
    const [record] = await registry.getService('go.mesh.srv.payments');
    assert.equal(record!.nodes[0]!.metadata.mtls, 'true');
  });

  test('a strict and a permissive caller call a strict service over mutual TLS', async () => {
    const bare = mesh('strict');
    assert.deepEqual(await bare.call('go.mesh.srv.payments', 'Pay.Charge', {}), { charged: true });
    assert.equal(bare.runtime.callerWorkloadTls?.spiffeId, 'spiffe://mesh.local/svc/mesh.cli');
    const caller = mesh('permissive');
    caller.service({ name: 'go.mesh.srv.checkout' });
    assert.deepEqual(await caller.call('go.mesh.srv.payments', 'Pay.Charge', {}), { charged: true });
    assert.equal(caller.runtime.stats.counter('cluster.go.mesh.srv.payments.ssl.handshake').value, 1);
    // A caller with no service of its own presents the CLI's identity; one with a service, its service's.
    assert.equal(caller.runtime.callerWorkloadTls?.spiffeId, 'spiffe://mesh.local/svc/go.mesh.srv.checkout');
  });

  test('a stream from a strict caller to a strict service runs over mutual TLS', async () => {
    const caller = mesh('strict');
    const got: unknown[] = [];
    for await (const item of caller.stream('go.mesh.srv.payments', 'Pay.History', { n: 3 })) got.push(item);
    assert.deepEqual(got, [{ i: 0 }, { i: 1 }, { i: 2 }]);
    assert.equal(caller.runtime.stats.counter('cluster.go.mesh.srv.payments.ssl.handshake').value, 1);
  });

  test('a caller with --mtls=off is refused by the strict service with a 400 naming it', async () => {
    await assert.rejects(mesh('off').call('go.mesh.srv.payments', 'Pay.Charge', {}), (err: MeshError) => {
      assert.equal(err.code, 400);
      assert.equal(err.message, 'service go.mesh.srv.payments accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate');
      return true;
    });
    // Any plain HTTP client sees the same answer; the health path too.
    const r = await http('GET', `http://127.0.0.1:${strictPort}/health`);
    assert.equal(r.status, 400);
  });

  test('a permissive service is called plain by a caller with --mtls=off, and over mutual TLS by the others', async () => {
    assert.deepEqual(await mesh('off').call('go.mesh.srv.orders', 'Order.Get', {}), { order: 1 });
    const caller = mesh('strict');
    assert.deepEqual(await caller.call('go.mesh.srv.orders', 'Order.Get', {}), { order: 1 });
    assert.equal(caller.runtime.stats.counter('cluster.go.mesh.srv.orders.ssl.handshake').value, 1);
    assert.equal((await http('GET', `http://127.0.0.1:${permissivePort}/health`)).status, 200);
  });
});

describe('renewal under load', () => {
  test('certificates of a few seconds, renewed on both sides while calls run: no call fails', async () => {
    const ca = tempDir('mesh-mtls-ca-');
    const registry = new MemoryRegistry();
    const options = { ...quiet, registry, mtls: 'strict', caDir: ca.path, mtlsCertTtl: '6s' } as const; // renewed at 4 s: the child process that signs has 2 s
    const server = new Mesh(options);
    server.service({ name: 'go.mesh.srv.renew' }).handle('Echo.Call', (req: { n: number }) => req);
    await server.start();
    const caller = new Mesh(options);
    caller.service({ name: 'go.mesh.srv.renew.caller' });
    try {
      assert.deepEqual(await caller.call('go.mesh.srv.renew', 'Echo.Call', { n: 0 }), { n: 0 });
      const renewals = { server: 0, caller: 0 };
      server.runtime.callerWorkloadTls!.onChange(() => renewals.server++);
      caller.runtime.callerWorkloadTls!.onChange(() => renewals.caller++);
      const load = callLoop(async (n) => {
        assert.deepEqual(await caller.call('go.mesh.srv.renew', 'Echo.Call', { n }), { n });
      });
      // Two renewals on each side: the second happens while connections made after the first are in use.
      await waitFor(() => renewals.server >= 2 && renewals.caller >= 2, 30_000);
      const before = load.done;
      await waitFor(() => load.done > before + 20);
      await load.stop();
      assert.deepEqual(load.failures, []);
      // A new connection now: the server's first certificate has expired (6 s), so the handshake
      // succeeds only with the renewed one.
      const late = new Mesh(options);
      try {
        assert.deepEqual(await late.call('go.mesh.srv.renew', 'Echo.Call', { n: -1 }), { n: -1 });
        assert.equal(late.runtime.stats.counter('cluster.go.mesh.srv.renew.ssl.handshake').value, 1);
      } finally {
        await late.close();
      }
    } finally {
      await caller.close();
      await server.close();
      ca.cleanup();
    }
  });
});

describe('a CA rotation under load', () => {
  test('rotate, every workload reissued from the new root, the old root dropped: no call fails, and a newcomer trusting only the new root is served', async () => {
    const ca = tempDir('mesh-mtls-ca-');
    const registry = new MemoryRegistry();
    const options = { ...quiet, registry, mtls: 'strict', caDir: ca.path } as const;
    const server = new Mesh(options);
    server.service({ name: 'go.mesh.srv.rotate' }).handle('Echo.Call', (req: { n: number }) => req);
    await server.start();
    const caller = new Mesh(options);
    caller.service({ name: 'go.mesh.srv.rotate.caller' });
    try {
      assert.deepEqual(await caller.call('go.mesh.srv.rotate', 'Echo.Call', { n: 0 }), { n: 0 });
      const changes = { server: 0, caller: 0 };
      server.runtime.callerWorkloadTls!.onChange(() => changes.server++);
      caller.runtime.callerWorkloadTls!.onChange(() => changes.caller++);
      const load = callLoop(async (n) => {
        assert.deepEqual(await caller.call('go.mesh.srv.rotate', 'Echo.Call', { n }), { n });
      });
      const newRoot = await rotateCa(ca.path, { trustDomain: 'mesh.local' });
      // Each side: the new root trusted beside the old (one change), then a certificate from the new root (another).
      await waitFor(() => changes.server >= 2 && changes.caller >= 2, 30_000);
      const issuer = (m: Mesh) => new X509Certificate(m.runtime.callerWorkloadTls!.contextOptions().cert).verify(new X509Certificate(newRoot.pem).publicKey);
      assert.ok(issuer(server) && issuer(caller), 'both workloads hold a certificate of the new root');
      const afterReissue = load.done;
      await waitFor(() => load.done > afterReissue + 20);
      finishRotation(ca.path);
      await waitFor(() => changes.server >= 3 && changes.caller >= 3, 30_000);
      const afterFinish = load.done;
      await waitFor(() => load.done > afterFinish + 20);
      await load.stop();
      assert.deepEqual(load.failures, []);
      // A new process: it trusts only the new root, and the server's certificate is of it.
      const late = new Mesh(options);
      try {
        assert.deepEqual(await late.call('go.mesh.srv.rotate', 'Echo.Call', { n: -1 }), { n: -1 });
        assert.deepEqual(late.runtime.callerWorkloadTls!.contextOptions().ca, [newRoot.pem]);
      } finally {
        await late.close();
      }
    } finally {
      await caller.close();
      await server.close();
      ca.cleanup();
    }
  });
});

describe('turning mutual TLS on for a running mesh', () => {
  test('plain → permissive → strict, a node and a caller at a time, while calls run: no call fails', async () => {
    const ca = tempDir('mesh-mtls-ca-');
    // Each process its own registry handle on one shared embedded registry (closing a Mesh closes its handle).
    const dir = tempDir('mesh-mtls-registry-');
    const registry = new Mesh({ ...quiet, registry: 'local', registryAddress: dir.path }).runtime.registry;
    const meshOf = (mtls: 'off' | 'permissive' | 'strict') => new Mesh({ ...quiet, registry: 'local', registryAddress: dir.path, mtls, caDir: ca.path });
    // A node that leaves keeps serving for a while after it deregistered (--drain_delay), as in production: callers see it go first.
    const serve = async (mtls: 'off' | 'permissive' | 'strict') => {
      const m = new Mesh({ ...quiet, registry: 'local', registryAddress: dir.path, mtls, caDir: ca.path, drainDelay: '2s' });
      m.service({ name: 'go.mesh.srv.migrate' }).handle('Echo.Call', (req: { n: number }) => req);
      await m.start();
      return m;
    };
    const nodes = async () => (await registry.getService('go.mesh.srv.migrate')).flatMap((s) => s.nodes);
    let server = await serve('off');
    let caller = meshOf('off');
    const load = callLoop(async (n) => {
      assert.deepEqual(await caller.call('go.mesh.srv.migrate', 'Echo.Call', { n }), { n });
    });
    const calls = async (more: number) => {
      const from = load.done;
      await waitFor(() => load.done >= from + more, 20_000);
    };
    try {
      await calls(20);
      // Each service node in turn: a permissive node joins, the plain one leaves.
      const permissive = await serve('permissive');
      await waitFor(async () => (await nodes()).some((n) => n.metadata.mtls === 'true'));
      await server.close();
      server = permissive;
      await calls(50);
      // Each caller in turn: a permissive caller (mutual TLS to the node that serves it) replaces the plain one.
      const old = caller;
      caller = meshOf('permissive');
      await calls(50);
      await old.close();
      // Then strict: a strict node joins, the permissive one leaves; then the callers go strict.
      const strict = await serve('strict');
      await waitFor(async () => (await nodes()).length === 2);
      await server.close();
      server = strict;
      await calls(50);
      const permissiveCaller = caller;
      caller = meshOf('strict');
      await calls(50);
      await permissiveCaller.close();
      await load.stop();
      assert.deepEqual(load.failures, []);
      assert.equal(caller.runtime.stats.counter('cluster.go.mesh.srv.migrate.ssl.handshake').value >= 1, true);
    } finally {
      await load.stop();
      await caller.close();
      await server.close();
      await registry.close();
      ca.cleanup();
      dir.cleanup();
    }
  });
});
