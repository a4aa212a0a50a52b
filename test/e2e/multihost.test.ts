/**
 * Three "hosts" as three network namespaces made by this test, joined by veth pairs on a bridge
 * that lives in the first one (nothing is added to the root namespace):
 *
 *            ns a  10.77.0.1  (br0)  etcd :2379, nats-server :4222
 *           /    \
 *   ns b 10.77.0.2            ns c 10.77.0.3
 *   greeter-srv, greeter-api  mesh api :8080 (router), mesh api :8082 (--handler=event),
 *   mesh sidecar :8081        curl, mesh get service, a WebSocket subscriber
 *
 * Every process is a real one started with `ip netns exec`; the services listen on and advertise
 * their ns b address. From ns c: POST /rpc and GET /greeter/say/hello through the gateway reach the
 * services in ns b (found in etcd in ns a); an event posted to the event gateway in ns c goes through
 * NATS in ns a to the sidecar in ns b and out to a WebSocket subscriber back in ns c.
 *
 * The namespaces come from test/fixtures/netns.ts: needs root (CAP_NET_ADMIN), `ip` (iproute2),
 * curl, etcd and nats-server, skips loudly otherwise (with MESH_TEST_REQUIRE_ENGINES=1 as root, CI,
 * a skip is a failure), and cleans up its namespaces in `after` and on exit.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { CLI, ROOT, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { GATEWAY_LISTENING, OwnEtcd, OwnNats, SIDECAR_LISTENING, printed, serviceListening } from '../fixtures/engines-common.js';
import { Hosts, IP, bins, netnsSkipReason } from '../fixtures/netns.js';

const reason = netnsSkipReason('multi-host test');

describe('multi-host: etcd + NATS, services, sidecar and gateways in three network namespaces', { skip: reason ?? false }, () => {
  const tmp = tempDir('mesh-multihost-');
  const procs: RunningProcess[] = [];
  const hosts = new Hosts();
  const nodeIn = hosts.nodeIn.bind(hosts);
  const curlIn = hosts.curlIn.bind(hosts);
  let etcd: OwnEtcd;
  let nats: OwnNats;

  before(async () => {
    await hosts.build();
    etcd = new OwnEtcd(bins.etcd!, IP.a, 2379, 2380, hosts.inNs('a'));
    nats = new OwnNats(bins['nats-server']!, IP.a, 4222, hosts.inNs('a'));
    await Promise.all([etcd.start(join(tmp.path, 'etcd')), nats.start()]);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    await etcd?.kill().catch(() => undefined);
    await nats?.kill().catch(() => undefined);
    hosts.dispose();
    tmp.cleanup();
  });

  it('calls and events cross the namespaces', async () => {
    const engines = ['--registry=etcd', `--registry_address=${etcd.address}`, '--broker=nats', `--broker_address=${nats.address}`, '--log_level=warning'];
    // Services in ns b listen on (and so advertise) their routable address; admin stays on loopback.
    // greeter-srv binds its ns b address; greeter-api binds every interface and names the
    // routable one with --advertise (host only: the bound port is kept).
    const svcFlags = [...engines, '--admin_address=127.0.0.1:0', '--register_ttl=15s', '--register_interval=5s'];
    const srv = nodeIn('b', [...svcFlags, `--address=${IP.b}:0`], join(ROOT, 'dist/examples/greeter-srv.js'));
    const api = nodeIn('b', [...svcFlags, '--address=0.0.0.0:0', `--advertise=${IP.b}`], join(ROOT, 'dist/examples/greeter-api.js'));
    const sidecar = nodeIn('b', ['sidecar', ...engines, `--address=${IP.b}:8081`, '--admin_address=127.0.0.1:0']);
    const gateway = nodeIn('c', ['api', ...engines, `--address=${IP.c}:8080`, '--admin_address=127.0.0.1:9901']);
    const events = nodeIn('c', ['api', ...engines, `--address=${IP.c}:8082`, '--handler=event', '--admin_address=off']);
    procs.push(srv, api, sidecar, gateway, events);
    const [srvAddress, apiAddress] = await Promise.all([
      printed(srv, serviceListening('go.mesh.srv.greeter')),
      printed(api, serviceListening('go.mesh.api.greeter')),
      printed(sidecar, SIDECAR_LISTENING),
      printed(gateway, GATEWAY_LISTENING),
      printed(events, GATEWAY_LISTENING),
    ]);
    assert.match(srvAddress, /^10\.77\.0\.2:\d+$/);
    assert.match(apiAddress, /^10\.77\.0\.2:\d+$/, 'the advertised address, not 0.0.0.0 nor the unreachable first address');

    // The registry, read from ns c with the CLI: the services' nodes are at their ns b address.
    const registered = async (name: string) => {
      const got = await hosts.outputIn('c', process.execPath, [CLI, 'get', 'service', name, '--output=json', ...engines.filter((f) => !f.startsWith('--broker'))]);
      return (JSON.parse(got) as { nodes: Array<{ address: string; port: number }> }).nodes.map((n) => `${n.address}:${n.port}`);
    };
    const [srvNodes, apiNodes] = await Promise.all([registered('go.mesh.srv.greeter'), registered('go.mesh.api.greeter')]);
    assert.deepEqual(srvNodes, [srvAddress]);
    assert.deepEqual(apiNodes, [apiAddress]);

    // ns c -> gateway (ns c) -> greeter-srv (ns b), found in etcd (ns a).
    const rpc = await waitFor(async () => {
      const r = await curlIn('c', 'POST', `http://${IP.c}:8080/rpc`, JSON.stringify({ service: 'go.mesh.srv.greeter', method: 'Say.Hello', request: { name: 'John' } }));
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.deepEqual(JSON.parse(rpc!.text), { msg: 'Hello John' });

    // ns c -> gateway (ns c) -> greeter-api (ns b) -> greeter-srv (ns b).
    const viaApi = await waitFor(async () => {
      const r = await curlIn('c', 'GET', `http://${IP.c}:8080/greeter/say/hello?name=John`);
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.deepEqual(JSON.parse(viaApi!.text), { message: 'Hello John' });

    // An event: event gateway (ns c) -> NATS (ns a) -> sidecar (ns b) -> WebSocket subscriber (ns c).
    const subscriber = nodeIn('c', ['--import', 'tsx', join(ROOT, 'test/fixtures/engines-ws-client.ts'), `ws://${IP.b}:8081/broker?topic=go.mesh.api.orders`], '');
    procs.push(subscriber);
    await subscriber.waitForOutput(/^subscribed$/m);
    const posted = await curlIn('c', 'POST', `http://${IP.c}:8082/orders/created`, JSON.stringify({ order: 7 }));
    assert.equal(posted.status, 200, posted.text);
    const line = await subscriber.waitForOutput(/^frame .*$/m, 15000);
    const frame = JSON.parse(line.slice('frame '.length)) as { Header: Record<string, string>; text: string };
    assert.equal(frame.Header['Mesh-Topic'], 'go.mesh.api.orders');
    const event = JSON.parse(frame.text) as { name: string; id: string; data: string };
    assert.equal(event.name, 'created');
    assert.equal(event.id, JSON.parse(posted.text).id);
    assert.deepEqual(JSON.parse(event.data), { order: 7 });
  });
});
