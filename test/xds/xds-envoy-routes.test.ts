/**
 * src/xds/envoy-routes.ts: a route file as an Envoy HTTP Listener and RouteConfiguration. Both
 * decode with the full Envoy protos and pass their validate.rules; each Gateway API field lands
 * on the Envoy field that does the same; virtual hosts and route order give Envoy's
 * first-match-wins the precedence of mesh's own table.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EnvoyProtos, type Violation } from '../fixtures/envoy-validate.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { envoyRoutes } from '../../src/xds/envoy-routes.js';
import { buildCluster, endpointVersionMetadata, VERSION_SUBSETS } from '../../src/xds/resources.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { SHOP_ROUTE_FILE } from '../fixtures/xds-route-file.js';

const FILE = SHOP_ROUTE_FILE;

const brief = (vs: Violation[]) => vs.map((v) => `${v.path} ${v.rule}: ${v.message}`);
type Json = Record<string, any>;

describe('route file → Envoy Listener and RouteConfiguration', () => {
  let envoy: EnvoyProtos;
  before(async () => {
    envoy = await EnvoyProtos.load();
  });
  const built = (rds = true) => envoyRoutes(parseRouteFile(FILE, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 }, rds });

  it('both decode with the full Envoy protos and pass validate.rules, the routes over RDS or inline; what Envoy does differently is said', () => {
    const { listener, routeConfiguration, warnings } = built();
    assert.deepEqual(brief(envoy.check('envoy.config.listener.v3.Listener', listener)), []);
    assert.deepEqual(brief(envoy.check('envoy.config.route.v3.RouteConfiguration', routeConfiguration)), []);
    const inline = built(false);
    assert.deepEqual(brief(envoy.check('envoy.config.listener.v3.Listener', inline.listener)), []);
    const hcm = (inline.listener as Json).filter_chains[0].filters[0].typed_config;
    assert.equal(hcm.rds, undefined);
    assert.deepEqual(hcm.route_config, inline.routeConfiguration);
    assert.deepEqual(warnings, [
      "HTTPRoute shop rule checkout: retry.budget is not per route in Envoy (its retry budget is the cluster's, from mesh's cluster settings)",
      'HTTPRoute shop rule checkout: backendRefs name versions (go.mesh.srv.checkout v1, go.mesh.srv.checkout v2), but the clusters have no version subsets: Envoy sends to any node of the service',
    ]);
    const withSubsets = envoyRoutes(parseRouteFile(FILE, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 }, versionSubsets: true });
    assert.equal(withSubsets.warnings.length, 1);
  });

  it('form json (a bootstrap\'s): durations as "2.5s", wrappers as plain numbers; Envoy refuses the object form there', () => {
    const json = envoyRoutes(parseRouteFile(FILE, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 }, form: 'json' });
    assert.deepEqual(brief(envoy.check('envoy.config.listener.v3.Listener', json.listener, 'json')), []);
    const checkout = (json.routeConfiguration as Json).virtual_hosts[0].routes[0];
    assert.equal(checkout.route.timeout, '10s');
    assert.deepEqual(checkout.route.retry_policy.per_try_timeout, '2.5s');
    assert.deepEqual(checkout.route.retry_policy.retry_back_off, { base_interval: '0.1s' });
    assert.equal(checkout.route.retry_policy.num_retries, 2);
    assert.deepEqual(checkout.route.weighted_clusters.clusters.map((c: Json) => c.weight), [90, 10]);
    assert.equal(checkout.route.weighted_clusters.total_weight, 100);
    assert.equal(checkout.typed_per_filter_config['envoy.filters.http.fault'].delay.fixed_delay, '2s');
    assert.match(envoy.check('envoy.config.listener.v3.Listener', built(false).listener, 'json')[0]!.message, /must be a string of seconds|must be a plain (uint32|bool)/);
  });

  it("a backend's header modifiers go on its weighted cluster (after the route's); CORS and a backend's rewrite or redirect refuse the file", () => {
    const head = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: b}\nspec:\n  rules:\n';
    const text = `${head}    - backendRefs:
        - name: go.mesh.srv.a
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Backend, value: a}], remove: [X-Rule]}}, {type: ResponseHeaderModifier, responseHeaderModifier: {add: [{name: X-By, value: a}]}}]
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Rule, value: r}]}}]
`;
    const { routeConfiguration } = envoyRoutes(parseRouteFile(text, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 } });
    assert.deepEqual(brief(envoy.check('envoy.config.route.v3.RouteConfiguration', routeConfiguration)), []);
    const rc = routeConfiguration as Json;
    assert.equal(rc.most_specific_header_mutations_wins, true);
    const r = rc.virtual_hosts[0].routes[0];
    assert.deepEqual(r.request_headers_to_add, [{ header: { key: 'x-rule', value: 'r' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }]);
    assert.deepEqual(r.route.weighted_clusters.clusters[0], {
      name: 'go.mesh.srv.a',
      weight: { value: 1 },
      request_headers_to_add: [{ header: { key: 'x-backend', value: 'a' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
      request_headers_to_remove: ['x-rule'],
      response_headers_to_add: [{ header: { key: 'x-by', value: 'a' }, append_action: 'APPEND_IF_EXISTS_OR_ADD' }],
    });
    const refused = (rule: string) => assert.throws(() => envoyRoutes(parseRouteFile(`${head}${rule}`, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 } }), { name: 'RouteFileError' });
    refused('    - backendRefs: [{name: go.mesh.srv.a}]\n      filters: [{type: CORS, cors: {allowOrigins: ["https://a.example"]}}]\n');
    assert.throws(() => envoyRoutes(parseRouteFile(`${head}    - backendRefs: [{name: go.mesh.srv.a, filters: [{type: URLRewrite, urlRewrite: {hostname: x.example}}]}]\n`, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 } }), {
      message: "routes.yaml line 6: HTTPRoute b spec.rules[0].backendRefs[0].filters: a backend's URLRewrite is not translated for Envoy (mesh api, mesh sidecar and mesh proxy serve it)",
    });
  });

  it('a route of the rpc or api handler refuses the file, as mesh proxy does', () => {
    const rpc = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: greeter-rpc}\nspec:\n  handler: rpc\n  rules:\n    - backendRefs: [{name: go.mesh.srv.greeter}]\n';
    assert.throws(() => envoyRoutes(parseRouteFile(rpc, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 } }), {
      name: 'RouteFileError',
      message: 'routes.yaml line 1: HTTPRoute greeter-rpc spec.handler: Envoy forwards HTTP only: use proxy (or leave it out), not rpc',
    });
  });

  it('a GRPCRoute refuses the file: it is not translated', () => {
    const grpc = 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: greeter}\nspec:\n  rules:\n    - backendRefs: [{name: go.mesh.srv.greeter}]\n';
    assert.throws(() => envoyRoutes(parseRouteFile(grpc, 'routes.yaml'), { address: { host: '0.0.0.0', port: 10000 } }), {
      name: 'RouteFileError',
      message: 'routes.yaml line 1: GRPCRoute greeter: is not translated for Envoy (mesh api, mesh sidecar and mesh proxy serve GRPCRoute documents)',
    });
  });

  it('the listener: RDS over ADS, the fault filter before the router, the Host port ignored', () => {
    const l = built().listener as Json;
    assert.equal(l.name, 'mesh_http');
    assert.deepEqual(l.address, { socket_address: { address: '0.0.0.0', port_value: 10000 } });
    const hcm = l.filter_chains[0].filters[0].typed_config;
    assert.deepEqual(hcm.rds, { config_source: { ads: {}, resource_api_version: 'V3' }, route_config_name: 'mesh_routes' });
    assert.equal(hcm.strip_any_host_port, true);
    assert.deepEqual([hcm.normalize_path, hcm.merge_slashes, hcm.path_with_escaped_slashes_action], [{ value: true }, true, 'REJECT_REQUEST'], 'paths in their normal form, as mesh');
    assert.deepEqual(hcm.http_filters.map((f: Json) => f.name), ['envoy.filters.http.fault', 'envoy.filters.http.router']);
  });

  it('virtual hosts: one per hostname with the rules that may match it, in mesh\'s precedence; * for the rest', () => {
    const rc = built().routeConfiguration as Json;
    const hosts = rc.virtual_hosts.map((v: Json) => [v.domains.join(','), v.routes.map((r: Json) => r.name).join(' ')]);
    // Exact, then regular expressions, then prefixes, the longer first (/gone before /api).
    const anyHost = 'any-host/any-host-0 any-host/any-host-1 any-host/any-host-3 any-host/any-host-2';
    assert.deepEqual(hosts, [
      ['shop.example.com', `shop/checkout shop/old ${anyHost}`],
      ['*.example.com', `shop/checkout shop/old ${anyHost}`],
      ['*', anyHost],
    ]);
  });

  it('each Gateway API field on the Envoy field that does the same', () => {
    const routes = (built().routeConfiguration as Json).virtual_hosts[0].routes as Json[];
    const [checkout, old] = routes;
    assert.deepEqual(checkout!.match, {
      path_separated_prefix: '/checkout',
      headers: [{ name: ':method', string_match: { exact: 'POST' } }, { name: 'x-tester', string_match: { exact: 'ann' } }],
      query_parameters: [{ name: 'v', string_match: { safe_regex: { regex: '[0-9]+' } } }],
    });
    assert.deepEqual(checkout!.route, {
      weighted_clusters: {
        clusters: [
          { name: 'go.mesh.srv.checkout', weight: { value: 90 }, metadata_match: endpointVersionMetadata('v1') },
          { name: 'go.mesh.srv.checkout', weight: { value: 10 }, metadata_match: endpointVersionMetadata('v2') },
        ],
        total_weight: { value: 100 },
      },
      timeout: { seconds: 10, nanos: 0 },
      retry_policy: {
        retry_on: 'connect-failure,refused-stream,reset,retriable-status-codes',
        num_retries: { value: 2 },
        retriable_status_codes: [502, 503],
        retry_back_off: { base_interval: { seconds: 0, nanos: 100_000_000 } },
        per_try_timeout: { seconds: 2, nanos: 500_000_000 },
      },
    });
    assert.deepEqual(checkout!.request_headers_to_add, [
      { header: { key: 'x-env', value: 'canary' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' },
      { header: { key: 'x-seen', value: '1' }, append_action: 'APPEND_IF_EXISTS_OR_ADD' },
    ]);
    assert.deepEqual(checkout!.request_headers_to_remove, ['x-debug']);
    assert.deepEqual(checkout!.response_headers_to_add, [{ header: { key: 'cache-control', value: 'no-store' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }]);
    assert.deepEqual(checkout!.typed_per_filter_config, {
      'envoy.filters.http.fault': {
        '@type': 'type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault',
        delay: { fixed_delay: { seconds: 2, nanos: 0 }, percentage: { numerator: 100_000, denominator: 'MILLION' } },
        abort: { http_status: 503, percentage: { numerator: 5000, denominator: 'MILLION' } },
      },
    });
    assert.deepEqual(old, { name: 'shop/old', match: { path_separated_prefix: '/old' }, redirect: { response_code: 'MOVED_PERMANENTLY', scheme_redirect: 'https', host_redirect: 'shop.example.com', prefix_rewrite: '/new' } });
    const [health, items, gone, api] = routes.slice(2);
    assert.deepEqual(health, { name: 'any-host/any-host-0', match: { path: '/health' }, route: { cluster: 'go.mesh.srv.health' } });
    assert.deepEqual(items, {
      name: 'any-host/any-host-1',
      match: { safe_regex: { regex: '/items/[0-9]+' } },
      route: { cluster: 'go.mesh.srv.items', request_mirror_policies: [{ cluster: 'go.mesh.srv.items-shadow' }], host_rewrite_literal: 'items.internal', regex_rewrite: { pattern: { regex: '^.*$' }, substitution: '/item' } },
    });
    assert.deepEqual(api!.route.regex_rewrite, { pattern: { regex: '^/api/*' }, substitution: '/' }, '/api/x → /x, not //x');
    assert.deepEqual(gone, { name: 'any-host/any-host-3', match: { path_separated_prefix: '/gone' }, direct_response: { status: 500 } }, 'every weight 0: 500, as mesh');
  });

  it("every redirect status on Envoy's response_code; a mirror's percent or fraction as its runtime_fraction", () => {
    const file = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  handler: proxy
  rules:
${[301, 302, 303, 307, 308].map((code) => `    - matches: [{path: {type: Exact, value: /r${code}}}]\n      filters: [{type: RequestRedirect, requestRedirect: {statusCode: ${code}}}]\n`).join('')}    - matches: [{path: {type: Exact, value: /m}}]
      backendRefs: [{name: a}]
      filters:
        - {type: RequestMirror, requestMirror: {backendRef: {name: b}, percent: 20}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: c}, fraction: {numerator: 1, denominator: 3}}}
`;
    const { routeConfiguration } = envoyRoutes(parseRouteFile(file, 'routes.yaml'), { address: { host: '127.0.0.1', port: 10000 } });
    assert.deepEqual(brief(envoy.check('envoy.config.route.v3.RouteConfiguration', routeConfiguration)), []);
    const routes = (routeConfiguration as Json).virtual_hosts[0].routes as Json[];
    const byPath = (path: string) => routes.find((r) => r.match.path === path)!;
    assert.deepEqual(
      [301, 302, 303, 307, 308].map((code) => byPath(`/r${code}`).redirect.response_code),
      ['MOVED_PERMANENTLY', 'FOUND', 'SEE_OTHER', 'TEMPORARY_REDIRECT', 'PERMANENT_REDIRECT'],
    );
    assert.deepEqual(byPath('/m').route.request_mirror_policies, [
      { cluster: 'b', runtime_fraction: { default_value: { numerator: 200_000, denominator: 'MILLION' } } },
      { cluster: 'c', runtime_fraction: { default_value: { numerator: 333_333, denominator: 'MILLION' } } },
    ]);
  });

  it('a versioned backend needs subsets by version on its cluster: the pieces for it pass the check too', () => {
    const cluster = buildCluster('go.mesh.srv.checkout', [], resolveSettings(undefined, undefined, 'round_robin', true));
    assert.deepEqual(brief(envoy.check('envoy.config.cluster.v3.Cluster', { ...cluster, lb_subset_config: VERSION_SUBSETS })), []);
    const cla = { cluster_name: 'go.mesh.srv.checkout', endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '10.0.0.1', port_value: 1 } } }, metadata: endpointVersionMetadata('v2') }] }] };
    assert.deepEqual(brief(envoy.check('envoy.config.endpoint.v3.ClusterLoadAssignment', cla)), []);
  });

  it('a file without routes for Envoy still gives a valid RouteConfiguration (the * host, no routes)', () => {
    const { routeConfiguration } = envoyRoutes(parseRouteFile('', 'empty.yaml'), { address: { host: '127.0.0.1', port: 10000 } });
    assert.deepEqual(routeConfiguration, { name: 'mesh_routes', virtual_hosts: [{ name: 'any', domains: ['*'], routes: [] }] });
    assert.deepEqual(brief(envoy.check('envoy.config.route.v3.RouteConfiguration', routeConfiguration)), []);
  });
});
