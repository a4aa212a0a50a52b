/**
 * `mesh xds` as a real process, with a real proxyless gRPC client: @grpc/grpc-js-xds in this
 * process, bootstrapped at the control plane, calls `xds:///go.mesh.srv.greeter`, a framework
 * service that serves gRPC (`--server_protocol=grpc`). The client follows nodes added and
 * removed and shifts traffic by locality weight; a node registered by host name is left out, not
 * sent (gRPC rejects a whole endpoint set for it); a resource it rejects (a cluster balancing at
 * random: gRPC balances round robin) is counted and logged with its node id; the versions
 * are the same across two restarts of the server for the same registry content; admin /clusters
 * and /stats say what is served.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { freePort, http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { writeFileSync } from 'node:fs';
import { AdsProbe, greeterServer, xdsBootstrap, xdsClientProcess, type GreeterChannel } from '../fixtures/xds-clients.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import type { Service } from '../../src/engines/registry/registry.js';

const SERVICE = join(ROOT, 'test/fixtures/xds-framework-service.ts');
const PROTOS = join(ROOT, 'test/fixtures/grpc');
const CLIENT_NODE = 'xds-test-client';

async function statValue(admin: string, name: string): Promise<number | undefined> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value;
}

/** Who answered `n` calls, counted by server name. */
async function spread(client: GreeterChannel, n: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const r = await client.sayHello(`c${i}`);
    out.set(r.server, (out.get(r.server) ?? 0) + 1);
  }
  return out;
}

describe('mesh xds with a proxyless gRPC client (@grpc/grpc-js-xds)', () => {
  const home = tempDir('mesh-xds-');
  let registry: LocalRegistry;
  let xds: RunningProcess;
  let xdsPort = 0;
  let admin = '';
  let clients: ReturnType<typeof xdsClientProcess>;
  const greeterClient = (target: string) => clients.greeter(target);
  const services: RunningProcess[] = [];
  const cleanup: Array<() => Promise<unknown> | void> = [];

  const startXds = async () => {
    xds = startProcess(['xds', `--registry_address=${home.path}`, `--address=127.0.0.1:${xdsPort}`, '--admin_address=127.0.0.1:0', '--log_format=text'], { MESH_HOME: home.path });
    await xds.waitForOutput(/mesh xds listening on grpc:\/\/127\.0\.0\.1:\d+/);
    admin = `http://127.0.0.1:${await xds.waitForPort(/mesh xds admin on http:\/\/\S+:(\d+)/)}`;
  };
  const startNode = async (name: string) => {
    const p = startProcess(
      ['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=grpc', `--proto_path=${PROTOS}`, '--log_level=warning'],
      { XDS_NODE: name, MESH_HOME: home.path },
      '',
    );
    services.push(p);
    await p.waitForOutput(/listening on 127\.0\.0\.1:\d+/, 20_000);
    return p;
  };

  before(async () => {
    registry = new LocalRegistry(home.path);
    xdsPort = await freePort();
    await startXds();
    const bootstrap = join(home.path, 'xds-bootstrap.json');
    writeFileSync(bootstrap, xdsBootstrap(`127.0.0.1:${xdsPort}`, CLIENT_NODE));
    clients = xdsClientProcess(bootstrap);
  });
  after(async () => {
    for (const fn of cleanup.reverse()) await fn();
    await clients?.stop();
    for (const p of services) await p.stop('SIGKILL');
    await xds?.stop();
    await registry?.close();
    home.cleanup();
  });

  it('a framework service serving gRPC: the client reaches a node, follows a node added and one removed', async () => {
    const a = await startNode('a');
    const client = greeterClient('xds:///go.mesh.srv.greeter');
    cleanup.push(() => client.close());
    assert.deepEqual(await waitFor(() => client.sayHello('first'), 15_000), { message: 'Hello first', server: 'a' });

    await startNode('b');
    await waitFor(async () => (await client.sayHello('x')).server === 'b', 15_000);
    const both = await spread(client, 20);
    assert.deepEqual([...both.keys()].sort(), ['a', 'b']);

    await a.stop('SIGTERM'); // deregisters on its way out
    await waitFor(async () => (await spread(client, 10)).get('b') === 10, 15_000);
    assert.deepEqual([...(await spread(client, 20)).entries()], [['b', 20]]);
  });

  it('traffic shifts by weight: localities weigh the sum of their nodes\' weights', async () => {
    const light = await greeterServer('light');
    const heavy = await greeterServer('heavy');
    cleanup.push(() => light.close(), () => heavy.close());
    const record = (lightWeight: number, heavyWeight: number): Service => ({
      name: 'go.mesh.srv.weighted',
      version: '1',
      metadata: {},
      endpoints: [],
      nodes: [
        { id: 'light', address: '127.0.0.1', port: light.port, metadata: { zone: 'z1', weight: String(lightWeight) } },
        { id: 'heavy', address: '127.0.0.1', port: heavy.port, metadata: { zone: 'z2', weight: String(heavyWeight) } },
      ],
    });
    await registry.register(record(1, 4));
    const client = greeterClient('xds:///go.mesh.srv.weighted');
    cleanup.push(() => client.close());
    await waitFor(() => client.sayHello('first'), 15_000);
    const before = await spread(client, 500);
    const heavyShare = (before.get('heavy') ?? 0) / 500;
    assert.ok(heavyShare > 0.7 && heavyShare < 0.9, `weights 1:4, heavy got ${heavyShare}`);

    // The weights change in the registry: the traffic follows.
    await registry.register(record(4, 1));
    await waitFor(async () => ((await spread(client, 50)).get('light') ?? 0) > 30, 15_000);
    const after = await spread(client, 500);
    const lightShare = (after.get('light') ?? 0) / 500;
    assert.ok(lightShare > 0.7 && lightShare < 0.9, `weights 4:1, light got ${lightShare}`);
  });

  it('a node registered by host name is left out (xds.skipped_nodes, warned once): the client reaches the other nodes of its service', async () => {
    const ip = await greeterServer('by-ip');
    cleanup.push(() => ip.close());
    const record: Service = {
      name: 'go.mesh.srv.byname',
      version: '1',
      metadata: {},
      endpoints: [],
      nodes: [
        { id: 'n1', address: 'backend.invalid', port: 9, metadata: {} },
        { id: 'n2', address: '127.0.0.1', port: ip.port, metadata: {} },
      ],
    };
    await registry.register(record);
    const client = greeterClient('xds:///go.mesh.srv.byname');
    cleanup.push(() => client.close());
    assert.equal((await waitFor(() => client.sayHello('x'), 15_000)).server, 'by-ip');
    assert.equal(await statValue(admin, 'xds.skipped_nodes'), 1);
    assert.equal((await statValue(admin, 'xds.nacks')) ?? 0, 0);
    await xds.waitForOutput(/node n1 of service go\.mesh\.srv\.byname left out: its address backend\.invalid is not an IP address/);
    assert.equal(xds.output().split('\n').filter((l) => l.includes('node n1 of service go.mesh.srv.byname left out')).length, 1);
    await registry.deregister(record);
    await waitFor(async () => (await statValue(admin, 'xds.skipped_nodes')) === 0, 15_000);
  });

  it('a resource the client rejects (a load-balancing policy gRPC does not implement) is counted in xds.nacks and logged once with its node id and error', async () => {
    // A second control plane over the same registry, balancing at random: gRPC balances round robin only.
    const port = await freePort();
    const random = startProcess(['xds', `--registry_address=${home.path}`, `--address=127.0.0.1:${port}`, '--admin_address=127.0.0.1:0', '--log_format=text', '--lb_policy=random'], { MESH_HOME: home.path });
    const bootstrap = join(home.path, 'xds-bootstrap-random.json');
    writeFileSync(bootstrap, xdsBootstrap(`127.0.0.1:${port}`, 'random-client'));
    const randomClients = xdsClientProcess(bootstrap);
    try {
      await random.waitForOutput(/mesh xds listening on grpc:\/\/127\.0\.0\.1:\d+/);
      const randomAdmin = `http://127.0.0.1:${await random.waitForPort(/mesh xds admin on http:\/\/\S+:(\d+)/)}`;
      const client = randomClients.greeter('xds:///go.mesh.srv.greeter');
      await assert.rejects(client.sayHello('x', 2_000));
      await waitFor(async () => ((await statValue(randomAdmin, 'xds.nacks')) ?? 0) > 0, 15_000);
      await random.waitForOutput(/xDS client random-client rejected cluster version [0-9a-f]{16}: .*unsupported lb_policy: RANDOM/);
      // The rejected version is not resent: the NACK is logged once.
      assert.equal(random.output().split('\n').filter((l) => l.includes('unsupported lb_policy')).length, 1);
      client.close();
    } finally {
      await randomClients.stop();
      await random.stop();
    }
    // The round-robin control plane's clients were never concerned.
    const greeter = greeterClient('xds:///go.mesh.srv.greeter');
    cleanup.push(() => greeter.close());
    assert.equal((await waitFor(() => greeter.sayHello('still'), 15_000)).server, 'b');
  });

  it('admin /stats and /clusters say what is served', async () => {
    await waitFor(async () => (await statValue(admin, 'xds.resources.clusters')) === 2, 15_000);
    for (const kind of ['endpoints', 'listeners', 'routes']) assert.equal(await statValue(admin, `xds.resources.${kind}`), 2, kind);
    assert.ok(((await statValue(admin, 'xds.clients_connected')) ?? 0) >= 1);
    assert.ok(((await statValue(admin, 'xds.pushes')) ?? 0) >= 4);
    const clusters = (await http('GET', `${admin}/clusters`)).text;
    assert.match(clusters, /^go\.mesh\.srv\.weighted::127\.0\.0\.1:\d+::zone::z1$/m);
    assert.match(clusters, /^go\.mesh\.srv\.weighted::127\.0\.0\.1:\d+::weight::4$/m);
    assert.match(clusters, /^go\.mesh\.srv\.greeter::127\.0\.0\.1:\d+::/m);
    assert.doesNotMatch(clusters, /byname/);
  });

  it('versions are the same across two restarts for the same registry content; the client carries on', async () => {
    const read = async () => {
      const probe = new AdsProbe(`127.0.0.1:${xdsPort}`);
      try {
        const cds = await probe.request(TYPE_URLS.cluster);
        const eds = await probe.request(TYPE_URLS.endpoint, ['go.mesh.srv.greeter', 'go.mesh.srv.weighted']);
        const lds = await probe.request(TYPE_URLS.listener);
        const rds = await probe.request(TYPE_URLS.route, ['go.mesh.srv.greeter']);
        assert.equal(cds.resources.length, 2);
        assert.equal(eds.resources.length, 2);
        return [cds.version_info, eds.version_info, lds.version_info, rds.version_info];
      } finally {
        probe.close();
      }
    };
    const first = await read();
    for (let i = 0; i < 2; i++) {
      assert.equal(await xds.stop('SIGTERM'), 0);
      await startXds();
      assert.deepEqual(await read(), first, `restart ${i + 1}`);
    }
    const client = greeterClient('xds:///go.mesh.srv.greeter');
    cleanup.push(() => client.close());
    assert.equal((await waitFor(() => client.sayHello('again'), 15_000)).server, 'b');
  });
});
