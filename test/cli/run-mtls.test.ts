/**
 * `mesh run`'s mutual TLS mode from the mesh it joins, and `mesh check`'s plain node among nodes
 * that serve mutual TLS: the census of a real (in-memory) registry, the decision and the lines.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { checkPlainNodes, mtlsCensus } from '../../src/cli/check/mtls.js';
import { decideMtls, certificateSource } from '../../src/cli/run-mtls.js';
import { tempDir } from '../helpers.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const node = (id: string, port: number, mtls: boolean) => ({ id, address: '127.0.0.1', port, metadata: mtls ? { mtls: 'true' } : {} });

async function registryOf(services: Array<{ name: string; version?: string; nodes: ReturnType<typeof node>[] }>): Promise<MemoryRegistry> {
  const r = new MemoryRegistry();
  for (const s of services) await r.register({ name: s.name, version: s.version ?? '', metadata: {}, endpoints: [], nodes: s.nodes });
  return r;
}

const CA = { from: 'the mesh CA in /h/ca', missing: '/h/ca' };

describe('mesh run: the mode of the mesh it joins', () => {
  it('every node serves mutual TLS: strict; some: permissive; none, or no node: off (and no line)', async () => {
    const strict = await mtlsCensus(await registryOf([{ name: 'go.mesh.srv.greeter', nodes: [node('g-1', 9090, true)] }, { name: 'go.mesh.api.greeter', nodes: [node('a-1', 9091, true)] }]), 1000);
    assert.deepEqual(decideMtls(strict, CA), { mode: 'strict', line: "mTLS strict, as the mesh's: its 2 nodes serve mutual TLS; certificates from the mesh CA in /h/ca (--mtls=off runs the app without)" });
    const one = await mtlsCensus(await registryOf([{ name: 'go.mesh.srv.greeter', nodes: [node('g-1', 9090, true)] }]), 1000);
    assert.equal(decideMtls(one, CA).line, "mTLS strict, as the mesh's: its 1 node serves mutual TLS; certificates from the mesh CA in /h/ca (--mtls=off runs the app without)");
    const mixed = await mtlsCensus(await registryOf([{ name: 'a', version: 'v1', nodes: [node('a-1', 1, true)] }, { name: 'a', version: 'v2', nodes: [node('a-2', 2, false), node('a-3', 3, false)] }]), 1000);
    assert.deepEqual(decideMtls(mixed, CA), { mode: 'permissive', line: "mTLS permissive, as the mesh's: 1 of its 3 nodes serves mutual TLS; certificates from the mesh CA in /h/ca (--mtls=strict or --mtls=off to choose)" });
    assert.deepEqual(decideMtls(await mtlsCensus(await registryOf([{ name: 'p', nodes: [node('p-1', 1, false)] }]), 1000), CA), { mode: 'off' });
    assert.deepEqual(decideMtls(await mtlsCensus(new MemoryRegistry(), 1000), CA), { mode: 'off' });
  });

  it('nodes that serve mutual TLS but no certificate at hand: off, and a line saying strict callers will not reach the app', async () => {
    const census = await mtlsCensus(await registryOf([{ name: 'go.mesh.srv.greeter', nodes: [node('g-1', 9090, true), node('g-2', 9092, true)] }]), 1000);
    assert.deepEqual(decideMtls(census, { missing: '/h/ca' }), {
      mode: 'off',
      line: 'mTLS off: 2 nodes of the mesh serve mutual TLS, but there is no mesh CA in /h/ca: callers with --mtls=strict will not reach the app (give --ca_dir, --mtls_cert_file or --ca_server, with --mtls=strict)',
    });
  });

  it("the apps' own names and the broker's topic entries do not count", async () => {
    const r = await registryOf([
      { name: 'go.mesh.srv.greeter', nodes: [node('g-1', 9090, true)] },
      { name: 'go.mesh.srv.python', nodes: [node('stale-1', 4000, false)] },
      { name: 'topic:orders', nodes: [node('sub-1', 4001, false)] },
    ]);
    const census = await mtlsCensus(r, 1000, new Set(['go.mesh.srv.python']));
    assert.deepEqual(census, { mtls: [{ service: 'go.mesh.srv.greeter', id: 'g-1', address: '127.0.0.1', port: 9090 }], plain: [] });
  });

  it('where the certificates come from: --mtls_cert_file, --ca_server, else the mesh CA when it exists', () => {
    const home = tempDir('mesh-run-mtls-');
    try {
      const ca = join(home.path, 'ca');
      assert.deepEqual(certificateSource({ mesh_home: home.path } as never), { missing: ca });
      mkdirSync(ca);
      writeFileSync(join(ca, 'signer.pem'), '');
      assert.deepEqual(certificateSource({ mesh_home: home.path } as never), { from: `the mesh CA in ${ca}`, missing: ca });
      assert.equal(certificateSource({ mesh_home: home.path, mtls_cert_file: '/c.pem' } as never).from, '--mtls_cert_file /c.pem');
      assert.equal(certificateSource({ mesh_home: home.path, ca_server: 'ca.example:9943' } as never).from, 'mesh ca serve at ca.example:9943');
    } finally {
      home.cleanup();
    }
  });
});

describe('mesh check: a plain node among nodes that serve mutual TLS', () => {
  it('one warning per plain node, naming the service and the node; none in a mesh without mutual TLS', async () => {
    const census = await mtlsCensus(
      await registryOf([
        { name: 'go.mesh.srv.greeter', nodes: [node('g-1', 9090, true), node('g-2', 9092, true)] },
        { name: 'go.mesh.srv.python', nodes: [node('python-1', 38211, false)] },
      ]),
      1000,
    );
    assert.deepEqual(checkPlainNodes(census), [
      {
        level: 'warning',
        check: 'mtls',
        message:
          'go.mesh.srv.python node python-1 at 127.0.0.1:38211 does not serve mutual TLS, while 2 nodes of the mesh do: callers with --mtls=strict (as mesh dev\'s gateway) do not call it (502); start it with --mtls=strict (mesh run: --mtls=strict)',
      },
    ]);
    assert.deepEqual(checkPlainNodes({ mtls: [], plain: census.plain }), []);
    assert.deepEqual(checkPlainNodes({ mtls: census.mtls, plain: [] }), []);
  });

  it('a registry that does not answer in time rejects (mesh check reports the registry once, elsewhere)', async () => {
    const slow = { listServices: () => new Promise<never>(() => {}), getService: async () => [] };
    await assert.rejects(mtlsCensus(slow, 20), /no answer within 0\.02s/);
  });
});
