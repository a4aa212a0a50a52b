/**
 * `mesh xds` with a route file (the control plane in process, port 0, a memory registry): an
 * Envoy following the plain bootstrap of `mesh envoy bootstrap` (listeners over ADS) gets the
 * HTTP listener of the route file and, over RDS, its routes; every resource passes the Envoy
 * protos' validate.rules and every cluster the routes name is served, with its endpoints. A
 * change of the file pushes a new RDS version; a file that cannot be served keeps the last good
 * routes, logged and counted.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { EnvoyProtos } from '../fixtures/envoy-validate.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { tempDir, waitFor } from '../helpers.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { XdsControlPlane } from '../../src/xds/control-plane.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import { envoyBootstrap } from '../../src/xds/bootstrap.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { StatsStore } from '../../src/base/stats/store.js';

type Json = Record<string, any>;

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop}
spec:
  hostnames: [shop.example.com]
  rules:
    - name: cart
      matches: [{path: {value: /cart}}]
      backendRefs: [{name: go.mesh.srv.cart, weight: 90}, {name: go.mesh.srv.cart-canary, weight: 10}]
      timeouts: {request: 5s}
      retry: {attempts: 2, codes: [503]}
    - name: web-next
      matches: [{path: {value: /next}}]
      backendRefs: [{name: go.mesh.srv.web, version: 2.0.0}]
    - name: web
      matches: [{path: {value: /}}]
      backendRefs: [{name: go.mesh.srv.web}]
`;

/** The clusters a RouteConfiguration (decoded with the full protos) sends to. */
function clustersOf(rc: Json): string[] {
  const named = new Set<string>();
  for (const vh of rc.virtual_hosts) {
    for (const r of vh.routes ?? []) {
      if (r.route?.cluster) named.add(r.route.cluster);
      for (const c of r.route?.weighted_clusters?.clusters ?? []) named.add(c.name);
    }
  }
  return [...named].sort();
}

describe('mesh xds --routes: Envoy\'s HTTP listener and routes over ADS', () => {
  const dir = tempDir('mesh-xds-routes-');
  const file = join(dir.path, 'routes.yaml');
  const registry = new MemoryRegistry();
  const lines: string[] = [];
  const log = pino({ level: 'info' }, new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }));
  const stats = new StatsStore();
  let plane: XdsControlPlane;
  let port = 0;
  let envoy: EnvoyProtos;
  let probe: AdsProbe;

  before(async () => {
    envoy = await EnvoyProtos.load();
    writeFileSync(file, ROUTES);
    let p = 7000;
    for (const name of ['go.mesh.srv.cart', 'go.mesh.srv.cart-canary', 'go.mesh.srv.web', 'go.mesh.srv.unrouted']) {
      await registry.register({ name, version: '1.0.0', metadata: {}, endpoints: [], nodes: [{ id: `${name}-0`, address: '127.0.0.1', port: p++, metadata: { zone: 'a' } }] });
    }
    await registry.register({ name: 'go.mesh.srv.web', version: '2.0.0', metadata: {}, endpoints: [], nodes: [{ id: 'go.mesh.srv.web-next', address: '127.0.0.1', port: p++, metadata: { zone: 'a' } }] });
    plane = new XdsControlPlane({
      registry,
      settings: resolveSettings(undefined, undefined, 'round_robin', true),
      stats,
      log,
      routes: { file, address: { host: '0.0.0.0', port: 10000 }, settleMs: 10 },
    });
    port = await plane.start('127.0.0.1', 0);
    const bootstrap = envoyBootstrap({ xds: { host: '127.0.0.1', port }, nodeId: 'edge-1', nodeCluster: 'edge' });
    assert.ok((bootstrap.dynamic_resources as Json).lds_config, 'the plain bootstrap takes its listeners over ADS');
    probe = new AdsProbe(`127.0.0.1:${port}`, 'edge-1', undefined, 'envoy');
  });
  after(async () => {
    probe.close();
    await plane.close();
    await registry.close();
    dir.cleanup();
  });

  const valid = (resources: Array<{ type_url: string; value: Uint8Array }>, typeUrl: string) => {
    for (const r of resources) {
      assert.equal(r.type_url, typeUrl);
      assert.deepEqual(envoy.validate('google.protobuf.Any', r), [], typeUrl);
    }
  };
  const decode = (typeName: string, value: Uint8Array): Json => {
    const type = envoy.type(typeName);
    return type.toObject(type.decode(value), { enums: String, longs: Number }) as Json;
  };

  it('Envoy gets the listener (not the API listeners), its routes over RDS, and every cluster they name with its endpoints', async () => {
    const lds = await probe.request(TYPE_URLS.listener);
    valid(lds.resources, TYPE_URLS.listener);
    const listeners = lds.resources.map((r) => decode('envoy.config.listener.v3.Listener', r.value));
    assert.deepEqual(listeners.map((l) => l.name), ['mesh_http']);
    assert.deepEqual(listeners[0]!.address, { socket_address: { address: '0.0.0.0', port_value: 10000 } });
    const hcm = decode('envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager', listeners[0]!.filter_chains[0].filters[0].typed_config.value);
    assert.equal(hcm.rds.route_config_name, 'mesh_routes');

    const rds = await probe.request(TYPE_URLS.route, [hcm.rds.route_config_name]);
    valid(rds.resources, TYPE_URLS.route);
    assert.equal(rds.resources.length, 1);
    const rc = decode('envoy.config.route.v3.RouteConfiguration', rds.resources[0]!.value);
    assert.equal(rc.name, 'mesh_routes');
    assert.deepEqual(rc.virtual_hosts.map((v: Json) => v.domains.join(',')), ['shop.example.com', '*']);

    const cds = await probe.request(TYPE_URLS.cluster);
    valid(cds.resources, TYPE_URLS.cluster);
    const clusters = cds.resources.map((r) => decode('envoy.config.cluster.v3.Cluster', r.value).name as string);
    const named = clustersOf(rc);
    assert.deepEqual(named, ['go.mesh.srv.cart', 'go.mesh.srv.cart-canary', 'go.mesh.srv.web']);
    for (const name of named) assert.ok(clusters.includes(name), `${name} is served`);
    const eds = await probe.request(TYPE_URLS.endpoint, named);
    valid(eds.resources, TYPE_URLS.endpoint);
    assert.equal(eds.resources.length, named.length, 'every routed cluster has its endpoints');
  });

  it('a versioned backend reaches its version: the route matches the version, the cluster has subsets by it, the endpoints carry it', async () => {
    const rds = probe.responses.filter((r) => r.type_url === TYPE_URLS.route).at(-1)!;
    const rc = decode('envoy.config.route.v3.RouteConfiguration', rds.resources[0]!.value);
    const next = rc.virtual_hosts[0].routes.find((r: Json) => r.name === 'shop/web-next');
    const [weighted] = next.route.weighted_clusters.clusters;
    assert.equal(weighted.name, 'go.mesh.srv.web');
    assert.deepEqual(weighted.metadata_match.filter_metadata['envoy.lb'].fields.version, { stringValue: '2.0.0' });

    const cds = probe.responses.filter((r) => r.type_url === TYPE_URLS.cluster).at(-1)!;
    const web = cds.resources.map((r) => decode('envoy.config.cluster.v3.Cluster', r.value)).find((c) => c.name === 'go.mesh.srv.web')!;
    assert.deepEqual(web.lb_subset_config, { fallback_policy: 'ANY_ENDPOINT', subset_selectors: [{ keys: ['version'], fallback_policy: 'NO_FALLBACK' }] });

    const eds = probe.responses.filter((r) => r.type_url === TYPE_URLS.endpoint).at(-1)!;
    const cla = eds.resources.map((r) => decode('envoy.config.endpoint.v3.ClusterLoadAssignment', r.value)).find((c) => c.cluster_name === 'go.mesh.srv.web')!;
    const versions = cla.endpoints.flatMap((l: Json) => l.lb_endpoints.map((e: Json) => [e.endpoint.address.socket_address.port_value, e.metadata.filter_metadata['envoy.lb'].fields.version.stringValue]));
    assert.deepEqual(versions.map(([, v]: [number, string]) => v).sort(), ['1.0.0', '2.0.0']);
  });

  it('a proxyless client subscribed to every listener gets the API listeners too', async () => {
    const other = new AdsProbe(`127.0.0.1:${port}`, 'grpc-1');
    try {
      const lds = await other.request(TYPE_URLS.listener);
      const names = lds.resources.map((r) => decode('envoy.config.listener.v3.Listener', r.value).name).sort();
      assert.deepEqual(names, ['go.mesh.srv.cart', 'go.mesh.srv.cart-canary', 'go.mesh.srv.unrouted', 'go.mesh.srv.web', 'mesh_http']);
    } finally {
      other.close();
    }
  });

  it('a change of the file pushes a new RDS version; a file that cannot be served keeps the last good one, logged', async () => {
    const before = probe.responses.filter((r) => r.type_url === TYPE_URLS.route);
    const first = before.at(-1)!;
    const pushed = probe.next(TYPE_URLS.route);
    writeFileSync(file, ROUTES.replace('path: {value: /cart}', 'path: {value: /basket}'));
    const second = await pushed;
    assert.notEqual(second.version_info, first.version_info);
    const rc = decode('envoy.config.route.v3.RouteConfiguration', second.resources[0]!.value);
    assert.equal(rc.virtual_hosts[0].routes[0].match.path_separated_prefix, '/basket');
    probe.send(TYPE_URLS.route, ['mesh_routes']); // the ACK
    const good = plane.snapshot!.versions.route;

    // A route of the rpc handler: Envoy cannot take it; the last good routes stay.
    writeFileSync(file, ROUTES.replace('  hostnames: [shop.example.com]', '  handler: rpc\n  hostnames: [shop.example.com]'));
    await waitFor(() => stats.counter('routes.update_failure').value === 1 || undefined);
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'route file reload failed: the previous routes stay');
    assert.match(logged.err, /HTTPRoute shop spec\.handler: Envoy forwards HTTP only/);
    assert.equal(plane.snapshot!.versions.route, good, 'the last good routes are served');
    const rdsCount = probe.responses.filter((r) => r.type_url === TYPE_URLS.route).length;

    // Fixed: the next push is the fixed file's, the first since the good one (the bad file pushed nothing).
    const third = probe.next(TYPE_URLS.route);
    writeFileSync(file, ROUTES.replace('path: {value: /cart}', 'path: {value: /trolley}'));
    const fixed = await third;
    assert.equal(probe.responses.filter((r) => r.type_url === TYPE_URLS.route).length, rdsCount + 1);
    assert.equal(decode('envoy.config.route.v3.RouteConfiguration', fixed.resources[0]!.value).virtual_hosts[0].routes[0].match.path_separated_prefix, '/trolley');
  });

  it('registry services named as the route file\'s listener and routes do not replace them (said once); their clusters are served', async () => {
    const routesBefore = plane.snapshot!.resources.route.get('mesh_routes');
    const listenerBefore = plane.snapshot!.resources.listener.get('mesh_http');
    for (const [i, name] of ['mesh_http', 'mesh_routes'].entries()) {
      await registry.register({ name, version: '1', metadata: {}, endpoints: [], nodes: [{ id: `${name}-0`, address: '127.0.0.1', port: 7100 + i, metadata: {} }] });
    }
    await waitFor(() => plane.snapshot!.resources.cluster.has('mesh_routes') || undefined);
    assert.ok(plane.snapshot!.resources.cluster.has('mesh_http'));
    assert.equal(plane.snapshot!.resources.route.get('mesh_routes'), routesBefore);
    assert.equal(plane.snapshot!.resources.listener.get('mesh_http'), listenerBefore);
    const edge2 = new AdsProbe(`127.0.0.1:${port}`, 'edge-2', undefined, 'envoy');
    const lds = await edge2.request(TYPE_URLS.listener).finally(() => edge2.close());
    assert.deepEqual(lds.resources.map((r) => decode('envoy.config.listener.v3.Listener', r.value).address), [{ socket_address: { address: '0.0.0.0', port_value: 10000 } }]);
    // A change of those services: still not said again.
    await registry.register({ name: 'mesh_http', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'mesh_http-0', address: '127.0.0.1', port: 7100, metadata: { zone: 'b' } }] });
    await waitFor(() => (plane.snapshot!.messages.endpoints.get('mesh_http') as Json)?.endpoints?.[0]?.locality?.zone === 'b' || undefined);
    const said = lines.map((l) => JSON.parse(l).msg as string).filter((m) => m.includes('is not served: the route file'));
    assert.deepEqual(said.sort(), [
      "xDS: the listener of registry service mesh_http is not served: the route file's listener of that name is",
      "xDS: the route of registry service mesh_routes is not served: the route file's route of that name is",
    ]);
  });
});
