/**
 * An Envoy bootstrap of `mesh envoy bootstrap` followed as Envoy follows it, against the real ADS
 * server of mesh xds (in process, port 0, a memory registry): the client connects to the address
 * of the bootstrap's `xds_cluster` with the bootstrap's node id, subscribes to what its
 * `dynamic_resources` name (clusters, and listeners unless the bootstrap has its own), then to the
 * endpoints of each cluster (EDS, by the cluster's `service_name`). Every resource it gets passes
 * the Envoy protos' validate.rules, and every cluster the bootstrap's routes name is served.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EnvoyProtos } from '../fixtures/envoy-validate.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { XdsControlPlane } from '../../src/xds/control-plane.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import { envoyBootstrap } from '../../src/xds/bootstrap.js';
import { envoyRoutes } from '../../src/xds/envoy-routes.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';

type Json = Record<string, any>;

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop}
spec:
  rules:
    - matches: [{path: {value: /cart}}]
      backendRefs: [{name: go.mesh.srv.cart, weight: 90}, {name: go.mesh.srv.cart-canary, weight: 10}]
    - matches: [{path: {value: /}}]
      backendRefs: [{name: go.mesh.srv.web}]
`;

describe('an Envoy bootstrap followed against mesh xds', () => {
  const registry = new MemoryRegistry();
  const logging = new Logging('off');
  const plane = new XdsControlPlane({ registry, settings: resolveSettings({ healthCheck: { path: '/health' } }, undefined, 'least_request', true), stats: new StatsStore(), log: logging.get('server') });
  let port = 0;
  let envoy: EnvoyProtos;

  before(async () => {
    envoy = await EnvoyProtos.load();
    let p = 7000;
    for (const [name, zones] of [['go.mesh.srv.cart', ['a', 'b']], ['go.mesh.srv.cart-canary', ['a']], ['go.mesh.srv.web', ['a', 'b', 'c']]] as const) {
      await registry.register({
        name,
        version: '1',
        metadata: {},
        endpoints: [],
        nodes: zones.map((zone, i) => ({ id: `${name}-${i}`, address: '127.0.0.1', port: p++, metadata: { region: 'eu', zone: `eu-${zone}`, weight: String(10 * (i + 1)) } })),
      });
    }
    port = await plane.start('127.0.0.1', 0);
  });
  after(async () => {
    await plane.close();
    await registry.close();
  });

  /** What an Envoy with this bootstrap gets: every resource of every type it asks for, checked. */
  async function follow(bootstrap: Json): Promise<{ clusters: string[]; listeners: number }> {
    assert.deepEqual(envoy.check('envoy.config.bootstrap.v3.Bootstrap', bootstrap, 'json'), []);
    const xds = bootstrap.static_resources.clusters.find((c: Json) => c.name === bootstrap.dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name);
    const at = xds.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    const probe = new AdsProbe(`${at.address}:${at.port_value}`, bootstrap.node.id);
    try {
      const check = (resources: Array<{ type_url: string; value: Uint8Array }>, typeUrl: string) => {
        for (const r of resources) {
          assert.equal(r.type_url, typeUrl);
          assert.deepEqual(envoy.validate('google.protobuf.Any', r), [], typeUrl);
        }
      };
      const cds = await probe.request(TYPE_URLS.cluster);
      check(cds.resources, TYPE_URLS.cluster);
      const clusters = cds.resources.map((r) => envoy.type('envoy.config.cluster.v3.Cluster').decode(r.value) as unknown as Json);
      const edsNames = clusters.map((c) => c.eds_cluster_config.service_name || c.name);
      const eds = await probe.request(TYPE_URLS.endpoint, edsNames);
      check(eds.resources, TYPE_URLS.endpoint);
      assert.equal(eds.resources.length, edsNames.length, 'every cluster has its endpoints');
      let listeners = 0;
      if (bootstrap.dynamic_resources.lds_config) {
        const lds = await probe.request(TYPE_URLS.listener);
        check(lds.resources, TYPE_URLS.listener);
        listeners = lds.resources.length;
      }
      return { clusters: clusters.map((c) => c.name as string).sort(), listeners };
    } finally {
      probe.close();
    }
  }

  it('the plain bootstrap: clusters, their endpoints and the listeners over ADS, each valid for Envoy', async () => {
    const got = await follow(envoyBootstrap({ xds: { host: '127.0.0.1', port }, nodeId: 'edge-1', nodeCluster: 'edge', admin: { host: '127.0.0.1', port: 9905 } }));
    assert.deepEqual(got, { clusters: ['go.mesh.srv.cart', 'go.mesh.srv.cart-canary', 'go.mesh.srv.web'], listeners: 3 });
  });

  it('with routes: the listener is the bootstrap\'s, and every cluster its routes name is served', async () => {
    const routes = envoyRoutes(parseRouteFile(ROUTES, 'routes.yaml'), { address: { host: '127.0.0.1', port: 10000 }, form: 'json' });
    const bootstrap = envoyBootstrap({ xds: { host: '127.0.0.1', port }, nodeId: 'edge-2', nodeCluster: 'edge', listeners: [routes.listener] });
    const got = await follow(bootstrap);
    assert.equal(got.listeners, 0, 'no listeners asked for');
    const named = new Set<string>();
    for (const vh of (routes.routeConfiguration as Json).virtual_hosts) {
      for (const r of vh.routes) {
        if (r.route.cluster) named.add(r.route.cluster);
        for (const c of r.route.weighted_clusters?.clusters ?? []) named.add(c.name);
      }
    }
    assert.deepEqual([...named].sort(), ['go.mesh.srv.cart', 'go.mesh.srv.cart-canary', 'go.mesh.srv.web']);
    for (const name of named) assert.ok(got.clusters.includes(name), `${name} is served`);
  });
});
