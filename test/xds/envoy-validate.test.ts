/**
 * The Envoy proto check of test/fixtures/envoy-validate.ts: hand-made configurations that Envoy
 * refuses (a broken `validate.rules` annotation, an unknown field, a bad duration) produce the
 * violation with its field path; valid ones produce none.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import protobuf from 'protobufjs';
import { EnvoyDecodeError, EnvoyProtos, type Violation } from '../fixtures/envoy-validate.js';

const CLUSTER = 'envoy.config.cluster.v3.Cluster';
const CLA = 'envoy.config.endpoint.v3.ClusterLoadAssignment';
const LISTENER = 'envoy.config.listener.v3.Listener';
const ROUTES = 'envoy.config.route.v3.RouteConfiguration';
const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const HCM = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const ROUTER = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';

const ads = { ads: {}, resource_api_version: 'V3' };
const edsCluster = () => ({ name: 'go.mesh.srv.greeter', type: 'EDS', eds_cluster_config: { eds_config: ads }, connect_timeout: '1s', lb_policy: 'ROUND_ROBIN' });
const assignment = () => ({
  cluster_name: 'go.mesh.srv.greeter',
  endpoints: [{ locality: { region: 'eu', zone: 'eu-1' }, lb_endpoints: [{ endpoint: { address: { socket_address: { address: '10.0.0.1', port_value: 9090 } } }, health_status: 'HEALTHY', load_balancing_weight: 10 }] }],
});
const httpListener = () => ({
  name: 'http',
  address: { socket_address: { address: '0.0.0.0', port_value: 8080 } },
  filter_chains: [
    {
      filters: [
        {
          name: 'envoy.filters.network.http_connection_manager',
          typed_config: { '@type': HCM, stat_prefix: 'http', rds: { route_config_name: 'mesh', config_source: ads }, http_filters: [{ name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER } }] },
        },
      ],
    },
  ],
});
const routeConfig = () => ({
  name: 'mesh',
  virtual_hosts: [
    {
      name: 'all',
      domains: ['*'],
      routes: [
        { match: { prefix: '/greeter' }, route: { weighted_clusters: { clusters: [{ name: 'a', weight: 90 }, { name: 'b', weight: 10 }] }, timeout: '2.5s', retry_policy: { retry_on: '5xx', num_retries: 2, per_try_timeout: '0.5s' } } },
        { match: { prefix: '/' }, route: { cluster: 'go.mesh.srv.greeter' } },
      ],
    },
  ],
});
const bootstrap = () => ({
  node: { id: 'edge-1', cluster: 'edge' },
  admin: { address: { socket_address: { address: '127.0.0.1', port_value: 9901 } } },
  dynamic_resources: { ads_config: { api_type: 'GRPC', transport_api_version: 'V3', grpc_services: [{ envoy_grpc: { cluster_name: 'xds_cluster' } }] }, cds_config: ads, lds_config: ads },
  static_resources: {
    clusters: [
      {
        name: 'xds_cluster',
        type: 'STRICT_DNS',
        connect_timeout: '1s',
        typed_extension_protocol_options: { 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': { '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions', explicit_http_config: { http2_protocol_options: {} } } },
        load_assignment: { cluster_name: 'xds_cluster', endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 'xds.example', port_value: 18000 } } } }] }] },
      },
    ],
  },
});

/** The violations as "path rule" lines, sorted: what the assertions compare. */
const brief = (vs: Violation[]) => vs.map((v) => `${v.path} ${v.rule}`).sort();

describe('Envoy validate.rules check', () => {
  let protos: EnvoyProtos;
  before(async () => {
    protos = await EnvoyProtos.load();
  });

  it('valid Cluster, ClusterLoadAssignment, Listener, RouteConfiguration and Bootstrap pass', () => {
    for (const [type, value] of [[CLUSTER, edsCluster()], [CLA, assignment()], [LISTENER, httpListener()], [ROUTES, routeConfig()], [BOOTSTRAP, bootstrap()]] as const) {
      assert.deepEqual(protos.check(type, value), [], type);
    }
  });

  it('a Cluster: empty name, zero connect timeout, undefined enum, circuit breaker priority', () => {
    const c = { ...edsCluster(), name: '', connect_timeout: '0s', lb_policy: 99, circuit_breakers: { thresholds: [{ priority: 7 }] } };
    assert.deepEqual(brief(protos.check(CLUSTER, c)), ['circuit_breakers.thresholds[0].priority enum.defined_only', 'connect_timeout duration.gt', 'lb_policy enum.defined_only', 'name string.min_len']);
  });

  it('a Cluster: outlier detection percentages over 100 and a health check without its interval', () => {
    const c = { ...edsCluster(), outlier_detection: { consecutive_5xx: 5, max_ejection_percent: 101, enforcing_success_rate: 250 }, health_checks: [{ timeout: '1s', unhealthy_threshold: 2, healthy_threshold: 1, http_health_check: { path: '/health' } }] };
    assert.deepEqual(brief(protos.check(CLUSTER, c)), ['health_checks[0].interval duration.required', 'outlier_detection.enforcing_success_rate uint32.lte', 'outlier_detection.max_ejection_percent uint32.lte']);
  });

  it('a ClusterLoadAssignment: empty cluster name, port out of range, zero weight, priority over 128, address without a kind', () => {
    const a = assignment();
    a.cluster_name = '';
    const e = a.endpoints[0]! as Record<string, unknown>;
    e.priority = 500;
    e.lb_endpoints = [
      { endpoint: { address: { socket_address: { address: '10.0.0.1', port_value: 70000 } } }, load_balancing_weight: 0 },
      { endpoint: { address: {} } },
    ];
    assert.deepEqual(brief(protos.check(CLA, a)), [
      'cluster_name string.min_len',
      'endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value uint32.lte',
      'endpoints[0].lb_endpoints[0].load_balancing_weight uint32.gte',
      'endpoints[0].lb_endpoints[1].endpoint.address.address oneof.required',
      'endpoints[0].priority uint32.lte',
    ]);
  });

  it('a Listener: into the HttpConnectionManager Any and the router filter', () => {
    const l = httpListener();
    const filter = l.filter_chains[0]!.filters[0]!;
    filter.name = '';
    const hcm = filter.typed_config as Record<string, unknown>;
    hcm.stat_prefix = '';
    hcm.http_filters = [{ name: '', typed_config: { '@type': ROUTER, strict_check_headers: ['x-not-envoy'] } }];
    assert.deepEqual(brief(protos.check(LISTENER, l)), [
      'filter_chains[0].filters[0].name string.min_len',
      'filter_chains[0].filters[0].typed_config.http_filters[0].name string.min_len',
      'filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.strict_check_headers[0] string.in',
      'filter_chains[0].filters[0].typed_config.stat_prefix string.min_len',
    ]);
  });

  it('a RouteConfiguration: no domain, no action, no match, no weighted cluster, a bad header name', () => {
    const r = routeConfig();
    const vh = r.virtual_hosts[0]! as Record<string, unknown>;
    vh.domains = [];
    vh.request_headers_to_remove = ['bad\nheader'];
    vh.routes = [{ match: { prefix: '/' } }, { route: { cluster: 'c' } }, { match: { prefix: '/' }, route: { weighted_clusters: { clusters: [] } } }, { match: { prefix: '/' }, route: { cluster: '' } }];
    assert.deepEqual(brief(protos.check(ROUTES, r)), [
      'virtual_hosts[0].domains repeated.min_items',
      'virtual_hosts[0].request_headers_to_remove[0] string.well_known_regex',
      'virtual_hosts[0].routes[0].action oneof.required',
      'virtual_hosts[0].routes[1].match message.required',
      'virtual_hosts[0].routes[2].route.weighted_clusters.clusters repeated.min_items',
      'virtual_hosts[0].routes[3].route.cluster string.min_len',
    ]);
  });

  it('a Bootstrap: into the static cluster and its typed protocol options', () => {
    const b = bootstrap() as Record<string, any>;
    const cluster = b.static_resources.clusters[0];
    cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address = '';
    cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] = { '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions' };
    b.dynamic_resources.ads_config.api_type = 99;
    assert.deepEqual(brief(protos.check(BOOTSTRAP, b)), [
      'dynamic_resources.ads_config.api_type enum.defined_only',
      'static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address string.min_len',
      'static_resources.clusters[0].typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].upstream_protocol_options oneof.required',
    ]);
  });

  it('decoding is strict as Envoy is: unknown fields, bad durations, an unknown Any type, two members of a oneof', () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ ...edsCluster(), conect_timeout: '1s' }, /conect_timeout: no such field/],
      [{ ...edsCluster(), connect_timeout: '1000ms' }, /connect_timeout: "1000ms" is not a duration/],
      [{ ...edsCluster(), connect_timeout: 1 }, /connect_timeout: must be a JSON object/],
      [{ ...edsCluster(), transport_socket: { name: 't', typed_config: { '@type': 'type.googleapis.com/no.such.Type' } } }, /unknown type "no.such.Type"/],
      [{ ...edsCluster(), load_assignment: { cluster_name: 'x', endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 'a', port_value: 1, named_port: 'p' } } } }] }] } }, /port_value and named_port are one of port_specifier/],
      [{ ...edsCluster(), per_connection_buffer_limit_bytes: 'lots' }, /per_connection_buffer_limit_bytes.value: must be an integer/],
    ];
    for (const [value, re] of cases) {
      assert.throws(() => protos.decode(CLUSTER, value), (err: unknown) => err instanceof EnvoyDecodeError && re.test(err.message), String(re));
      assert.equal(protos.check(CLUSTER, value)[0]?.rule, 'decode');
    }
  });

  it('form json is proto3 JSON only, as Envoy reads a bootstrap: the object forms of durations, wrappers and Anys are refused', () => {
    assert.deepEqual(protos.check(CLUSTER, edsCluster(), 'json'), []);
    const cases: Array<[unknown, RegExp]> = [
      [{ ...edsCluster(), connect_timeout: { seconds: 1 } }, /connect_timeout: must be a string of seconds/],
      [{ ...edsCluster(), per_connection_buffer_limit_bytes: { value: 1024 } }, /per_connection_buffer_limit_bytes: must be a plain uint32/],
      [{ ...edsCluster(), transport_socket: { name: 't', typed_config: { type_url: ROUTER, value: '' } } }, /transport_socket\.typed_config: must be an object with "@type"/],
    ];
    for (const [value, re] of cases) {
      assert.match(protos.check(CLUSTER, value, 'json')[0]?.message ?? '', re);
      assert.equal(protos.check(CLUSTER, value).length, 0, 'the object form is fine for a control plane\'s messages');
    }
  });

  it('reads the object form a control plane builds: {seconds, nanos}, wrappers as objects, Any as {type_url, value}', () => {
    const router = protos.type('envoy.extensions.filters.http.router.v3.Router');
    const value = router.encode(router.fromObject({ suppress_envoy_headers: true })).finish();
    const c = { ...edsCluster(), connect_timeout: { seconds: 0, nanos: 250_000_000 }, circuit_breakers: { thresholds: [{ max_connections: { value: 5 } }] } };
    assert.deepEqual(protos.check(CLUSTER, c), []);
    const l = httpListener();
    (l.filter_chains[0]!.filters[0]!.typed_config as Record<string, unknown>).http_filters = [{ name: 'envoy.filters.http.router', typed_config: { type_url: ROUTER, value: Buffer.from(value) } }];
    assert.deepEqual(protos.check(LISTENER, l), []);
    assert.deepEqual(brief(protos.check(CLUSTER, { ...c, connect_timeout: { seconds: 0, nanos: 0 } })), ['connect_timeout duration.gt']);
  });

  it('runs on every Envoy message type (an empty one) without throwing, and finds what an empty one lacks', () => {
    let types = 0;
    let violations = 0;
    const walk = (ns: protobuf.NamespaceBase) => {
      for (const o of ns.nestedArray) {
        if (o instanceof protobuf.Type && o.fullName.startsWith('.envoy.')) {
          violations += protos.check(o.fullName.slice(1), {}, 'json').length;
          types++;
        }
        if (o instanceof protobuf.Namespace) walk(o);
      }
    };
    walk(protos.root);
    assert.ok(types > 1000, `${types} types`);
    assert.ok(violations > 500, `${violations} violations in empty messages`);
    assert.deepEqual(brief(protos.check(CLUSTER, {})), ['name string.min_len']);
  });
});
