/**
 * The upstream Gateway API HTTPRoute conformance cases (kubernetes-sigs/gateway-api,
 * `conformance/tests/httproute-*.yaml` and the `.go` beside each), replayed as data against mesh.
 *
 * Each case keeps its upstream ShortName, its features, its HTTPRoute documents and its requests
 * with the answers the upstream suite expects. Adapted to run off-cluster:
 *  - a backendRef names a mesh service (the runner registers the echo backends
 *    `infra-backend-v1`, `-v2`, `-v3` under those names); `parentRefs`, `namespace` and `port`,
 *    which mesh ignores, are left out;
 *  - a request without a Host is sent with the front's own address, as upstream sends the Gateway's;
 *  - the upstream suite retries a request until the answer is stable (a controller converges);
 *    here the runner waits for the front to report the new file loaded, then asks once.
 * Cases that need a cluster (namespaces, ReferenceGrant, status conditions, Gateway listeners and
 * ports, Service types) carry `skip` with the reason.
 */

export const V1 = 'infra-backend-v1';
export const V2 = 'infra-backend-v2';
export const V3 = 'infra-backend-v3';
/** The backends the runner starts and registers (`nonexistent` is named by a route, never registered). */
export const BACKENDS = [V1, V2, V3] as const;

export interface ConformanceRequest {
  /** A Gateway case: the listener port as the Gateway writes it (default 80). */
  port?: number;
  /** Over TLS (an HTTPS port): the SNI name; default the Host. */
  serverName?: string;
  method?: string;
  /** The request target, query included. */
  path: string;
  host?: string;
  headers?: Record<string, string>;
}

export interface Exchange {
  request: ConformanceRequest;
  /** What the backend must have seen; default: the request itself (path, method, host when given). */
  expectedRequest?: { path?: string; host?: string; method?: string; headers?: Record<string, string>; absentHeaders?: string[] };
  /** Headers the echo backend sets on its answer (upstream `BackendSetResponseHeaders`). */
  backendSetResponseHeaders?: Record<string, string>;
  /** Expected answer; status default 200 (a list: any of them). A 504 and a 408 count as the same (a timeout), as upstream. */
  response?: { status?: number | number[]; headers?: Record<string, string>; absentHeaders?: string[]; validHeaderValues?: Record<string, string[]> };
  /** The front answers itself (a CORS preflight): only the status and headers are compared. */
  answeredByFront?: boolean;
  /** The upstream retry simulation (echo.ts): added to the query with a fresh `uuid`. */
  retrySimulation?: Record<string, string>;
  /** The backend whose pod must answer (a 200). */
  backend?: string;
  /** For a redirect status: the `Location` parts (unset parts default to the request's own, as upstream). */
  redirect?: { scheme?: string; host?: string; port?: string; path?: string };
  /** Backends that must receive a copy of the request. */
  mirroredTo?: string[];
}

export interface ConformanceCase {
  /** The upstream ShortName. */
  name: string;
  /** The upstream manifest. */
  manifest: string;
  /** The Extended features the case needs, the one it tests first (none: a Core case). */
  features: string[];
  /** Why the case cannot run off-cluster. */
  skip?: string;
  /** The HTTPRoute documents (YAML). */
  routes?: string;
  /**
   * The Gateway documents the routes attach to (YAML; `CERT_FILE` and `KEY_FILE` stand for a
   * certificate of every name the case asks for): the case runs on its own `mesh api` started with
   * them (a Gateway's ports are read at start), its listeners' ports mapped to free ones.
   */
  gateways?: string;
  /** What the route status (admin /routes) must say: each route's Accepted condition. */
  accepted?: Record<string, { status: 'True' | 'False'; reason: string }>;
  exchanges?: Exchange[];
  /** A weighted-distribution case: the share each backend must get. */
  weights?: Record<string, number>;
  /** A WebSocket case: a text and a binary message to this path must come back from the backend. */
  websocket?: { path: string };
  /**
   * A mirror-share case: `requests` requests to each path must all be answered by `backend`, and
   * the share of them copied to `mirror` must be within `tolerance` points of `percent`.
   */
  mirrorShares?: { requests: number; tolerance: number; backend: string; paths: Array<{ path: string; mirror: string; percent: number }> };
}

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
/** One HTTPRoute document: metadata.name and the spec (YAML, indented under `spec:`). */
const route = (name: string, spec: string) => `${HEAD}metadata: {name: ${name}}\nspec:\n${spec}`;
const docs = (...d: string[]) => d.join('---\n');

const redirectTo = (path: string, redirect: Exchange['redirect'], status = 302, method?: string): Exchange => ({
  request: { path, ...(method ? { method } : {}) },
  response: { status },
  redirect,
});

const REQ_MODS = `        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set, value: set-overwrites-values}]
            add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
            remove: [X-Header-Remove]
`;
const REQ_MODS_SENT = { 'X-Header-Remove': 'remove-val', 'X-Header-Add-Append': 'append-val-1' };
const REQ_MODS_SEEN = { 'X-Header-Add': 'header-val-1', 'X-Header-Add-Append': 'append-val-1,header-val-2', 'X-Header-Set': 'set-overwrites-values' };

const cluster = (why: string) => `needs a cluster: ${why}`;

export const CASES: ConformanceCase[] = [
  // ---- Core ----
  {
    name: 'HTTPRouteSimpleSameNamespace',
    manifest: 'httproute-simple-same-namespace.yaml',
    features: [],
    routes: route('gateway-conformance-infra-test', `  rules:\n    - backendRefs: [{name: ${V1}}]\n`),
    exchanges: [{ request: { path: '/' }, backend: V1 }],
  },
  {
    name: 'HTTPRouteExactPathMatching',
    manifest: 'httproute-exact-path-matching.yaml',
    features: [],
    routes: route(
      'exact-matching',
      `  rules:
    - matches: [{path: {type: Exact, value: /one}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: Exact, value: /two}}]
      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [
      { request: { path: '/one' }, backend: V1 },
      { request: { path: '/two' }, backend: V2 },
      { request: { path: '/' }, response: { status: 404 } },
      { request: { path: '/one/example' }, response: { status: 404 } },
      { request: { path: '/two/' }, response: { status: 404 } },
      { request: { path: '/Two' }, response: { status: 404 } },
    ],
  },
  {
    name: 'HTTPRouteHeaderMatching',
    manifest: 'httproute-header-matching.yaml',
    features: [],
    routes: route(
      'header-matching',
      `  rules:
    - matches: [{headers: [{name: version, value: one}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{headers: [{name: version, value: two}]}]
      backendRefs: [{name: ${V2}}]
    - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{headers: [{name: color, value: red}]}, {headers: [{name: color, value: yellow}]}]
      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [
      { request: { path: '/', headers: { Version: 'one' } }, backend: V1 },
      { request: { path: '/', headers: { Version: 'two' } }, backend: V2 },
      { request: { path: '/', headers: { Version: 'two', Color: 'orange' } }, backend: V1 },
      { request: { path: '/', headers: { Version: 'two', Color: 'blue' } }, backend: V2 },
      { request: { path: '/', headers: { Color: 'orange' } }, response: { status: 404 } },
      { request: { path: '/', headers: { 'Some-Other-Header': 'one' } }, response: { status: 404 } },
      { request: { path: '/', headers: { Color: 'blue' } }, backend: V1 },
      { request: { path: '/', headers: { Color: 'green' } }, backend: V1 },
      { request: { path: '/', headers: { Color: 'red' } }, backend: V2 },
      { request: { path: '/', headers: { Color: 'yellow' } }, backend: V2 },
      { request: { path: '/', headers: { Color: 'purple' } }, response: { status: 404 } },
    ],
  },
  {
    name: 'HTTPRouteMatching',
    manifest: 'httproute-matching.yaml',
    features: [],
    routes: route(
      'matching',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [
      { request: { path: '/' }, backend: V1 },
      { request: { path: '/example' }, backend: V1 },
      { request: { path: '/', headers: { Version: 'one' } }, backend: V1 },
      { request: { path: '/v2' }, backend: V2 },
      { request: { path: '/v2/example' }, backend: V2 },
      { request: { path: '/', headers: { Version: 'two' } }, backend: V2 },
      { request: { path: '/v2/' }, backend: V2 },
      { request: { path: '/v2example' }, backend: V1 },
      { request: { path: '/foo/v2/example' }, backend: V1 },
    ],
  },
  {
    name: 'HTTPRouteMatchingAcrossRoutes',
    manifest: 'httproute-matching-across-routes.yaml',
    features: [],
    routes: docs(
      route(
        'matching-part1',
        `  hostnames: [example.com, example.net]
  rules:
    - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
      backendRefs: [{name: ${V1}}]
`,
      ),
      route(
        'matching-part2',
        `  hostnames: [example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
      backendRefs: [{name: ${V2}}]
`,
      ),
    ),
    exchanges: [
      { request: { host: 'example.com', path: '/' }, backend: V1 },
      { request: { host: 'example.com', path: '/example' }, backend: V1 },
      { request: { host: 'example.net', path: '/example' }, backend: V1 },
      { request: { host: 'example.com', path: '/example', headers: { Version: 'one' } }, backend: V1 },
      { request: { host: 'example.com', path: '/v2' }, backend: V2 },
      { request: { host: 'example.net', path: '/v2' }, backend: V1 },
      { request: { host: 'example.com', path: '/v2/example' }, backend: V2 },
      { request: { host: 'example.com', path: '/', headers: { Version: 'two' } }, backend: V2 },
    ],
  },
  {
    name: 'HTTPRoutePathMatchOrder',
    manifest: 'httproute-path-match-order.yaml',
    features: [],
    routes: route(
      'path-matching-order',
      `  rules:
    - matches: [{path: {type: Exact, value: /match}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: Exact, value: /match/exact}}]
      backendRefs: [{name: ${V2}}]
    - matches: [{path: {type: Exact, value: /match/exact/one}}]
      backendRefs: [{name: ${V3}}]
    - matches: [{path: {type: PathPrefix, value: /match/}}]
      backendRefs: [{name: ${V3}}]
    - matches: [{path: {type: PathPrefix, value: /match/prefix/}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [
      { request: { path: '/match/exact/one' }, backend: V3 },
      { request: { path: '/match/exact' }, backend: V2 },
      { request: { path: '/match' }, backend: V1 },
      { request: { path: '/match/prefix/one/any' }, backend: V2 },
      { request: { path: '/match/prefix/any' }, backend: V1 },
      { request: { path: '/match/any' }, backend: V3 },
    ],
  },
  {
    name: 'HTTPRouteRequestHeaderModifier',
    manifest: 'httproute-request-header-modifier.yaml',
    features: [],
    routes: route(
      'request-header-modifier',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /set}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /add}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /remove}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {remove: [X-Header-Remove]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /multiple}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
            add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: header-add-3}]
            remove: [X-Header-Remove-1, X-Header-Remove-2]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Header-Set, value: header-set}]
            add: [{name: X-Header-Add, value: header-add}]
            remove: [X-Header-Remove]
      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      {
        request: { path: '/set', headers: { 'Some-Other-Header': 'val' } },
        expectedRequest: { path: '/set', headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'set-overwrites-values' } },
        backend: V1,
      },
      {
        request: { path: '/set', headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'some-other-value' } },
        expectedRequest: { path: '/set', headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'set-overwrites-values' } },
        backend: V1,
      },
      {
        request: { path: '/add', headers: { 'Some-Other-Header': 'val' } },
        expectedRequest: { path: '/add', headers: { 'Some-Other-Header': 'val', 'X-Header-Add': 'add-appends-values' } },
        backend: V1,
      },
      {
        request: { path: '/add', headers: { 'Some-Other-Header': 'val', 'X-Header-Add': 'some-other-value' } },
        expectedRequest: { path: '/add', headers: { 'Some-Other-Header': 'val', 'X-Header-Add': 'some-other-value,add-appends-values' } },
        backend: V1,
      },
      { request: { path: '/remove', headers: { 'X-Header-Remove': 'val' } }, expectedRequest: { path: '/remove', absentHeaders: ['X-Header-Remove'] }, backend: V1 },
      {
        request: {
          path: '/multiple',
          headers: { 'X-Header-Set-2': 'set-val-2', 'X-Header-Add-2': 'add-val-2', 'X-Header-Remove-2': 'remove-val-2', 'Another-Header': 'another-header-val' },
        },
        expectedRequest: {
          path: '/multiple',
          headers: {
            'X-Header-Set-1': 'header-set-1',
            'X-Header-Set-2': 'header-set-2',
            'X-Header-Add-1': 'header-add-1',
            'X-Header-Add-2': 'add-val-2,header-add-2',
            'X-Header-Add-3': 'header-add-3',
            'Another-Header': 'another-header-val',
          },
          absentHeaders: ['X-Header-Remove-1', 'X-Header-Remove-2'],
        },
        backend: V1,
      },
      {
        request: {
          path: '/case-insensitivity',
          headers: { 'x-header-set': 'original-val-set', 'x-header-add': 'original-val-add', 'x-header-remove': 'original-val-remove', 'Another-Header': 'another-header-val' },
        },
        expectedRequest: {
          path: '/case-insensitivity',
          headers: { 'X-Header-Set': 'header-set', 'X-Header-Add': 'original-val-add,header-add', 'Another-Header': 'another-header-val' },
          absentHeaders: ['x-header-remove', 'X-Header-Remove'],
        },
        backend: V1,
      },
    ],
  },
  {
    name: 'HTTPRouteRedirectHostAndStatus',
    manifest: 'httproute-redirect-host-and-status.yaml',
    features: [],
    routes: route(
      'redirect-host-and-status',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /hostname-redirect}}]
      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org}}]
    - matches: [{path: {type: PathPrefix, value: /host-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, hostname: example.org}}]
`,
    ),
    exchanges: [redirectTo('/hostname-redirect', { host: 'example.org' }), redirectTo('/host-and-status', { host: 'example.org' }, 301)],
  },
  {
    name: 'HTTPRouteInvalidBackendRefUnknownKind',
    manifest: 'httproute-invalid-backendref-unknown-kind.yaml',
    features: [],
    routes: route('invalid-backend-ref-unknown-kind', `  rules:\n    - backendRefs: [{group: unknownkind.example.com, kind: NonExistent, name: ${V1}}]\n`),
    exchanges: [{ request: { path: '/v2' }, response: { status: 500 } }],
  },
  {
    name: 'HTTPRouteInvalidNonExistentBackendRef',
    manifest: 'httproute-invalid-nonexistent-backendref.yaml',
    features: [],
    routes: route('invalid-nonexistent-backend-ref', `  rules:\n    - backendRefs: [{name: nonexistent}]\n`),
    exchanges: [{ request: { path: '/' }, response: { status: 500 } }],
  },
  {
    name: 'HTTPRouteNoBackendRefs',
    manifest: 'httproute-omitted-backendrefs.yaml',
    features: [],
    routes: route(
      'omitted-backendrefs',
      `  rules:
    - matches: [{path: {type: Exact, value: /omitted-no-forward}}]
    - matches: [{path: {type: Exact, value: /empty-no-forward}}]
      backendRefs: []
    - matches: [{path: {type: PathPrefix, value: /}}]
      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      { request: { path: '/forward' }, backend: V1 },
      { request: { path: '/omitted-no-forward' }, response: { status: 500 } },
      { request: { path: '/empty-no-forward' }, response: { status: 500 } },
    ],
  },
  {
    name: 'HTTPRouteWeight',
    manifest: 'httproute-weight.yaml',
    features: [],
    routes: route('weighted-backends', `  rules:\n    - backendRefs: [{name: ${V1}, weight: 70}, {name: ${V2}, weight: 30}, {name: ${V3}, weight: 0}]\n`),
    weights: { [V1]: 0.7, [V2]: 0.3, [V3]: 0 },
  },
  { name: 'HTTPRouteCrossNamespace', manifest: 'httproute-cross-namespace.yaml', features: [], skip: cluster('a route in another namespace than its Gateway') },
  { name: 'HTTPRouteInvalidCrossNamespaceParentRef', manifest: 'httproute-invalid-cross-namespace-parent-ref.yaml', features: [], skip: cluster('namespaces and status conditions') },
  { name: 'HTTPRouteObservedGenerationBump', manifest: 'httproute-observed-generation-bump.yaml', features: [], skip: cluster('status observedGeneration') },
  { name: 'HTTPRouteServiceTypes', manifest: 'httproute-service-types.yaml', features: [], skip: cluster('Kubernetes Service types (headless, manual EndpointSlices)') },

  // ---- Extended ----
  {
    name: 'HTTPRouteMethodMatching',
    manifest: 'httproute-method-matching.yaml',
    features: ['HTTPRouteMethodMatching'],
    routes: route(
      'method-matching',
      `  rules:
    - matches: [{method: POST}]
      backendRefs: [{name: ${V1}}]
    - matches: [{method: GET}]
      backendRefs: [{name: ${V2}}]
    - matches: [{path: {type: PathPrefix, value: /path1}, method: GET}]
      backendRefs: [{name: ${V1}}]
    - matches: [{headers: [{name: version, value: one}], method: PUT}]
      backendRefs: [{name: ${V2}}]
    - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], method: POST}]
      backendRefs: [{name: ${V3}}]
    - matches:
        - {path: {type: PathPrefix, value: /path3}, method: PATCH}
        - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], method: DELETE}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /path5}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{method: PATCH}]
      backendRefs: [{name: ${V2}}]
    - matches: [{headers: [{name: version, value: four}]}]
      backendRefs: [{name: ${V3}}]
`,
    ),
    exchanges: [
      { request: { method: 'POST', path: '/' }, backend: V1 },
      { request: { method: 'GET', path: '/' }, backend: V2 },
      { request: { method: 'HEAD', path: '/' }, response: { status: 404 } },
      { request: { method: 'GET', path: '/path1' }, backend: V1 },
      { request: { method: 'PUT', path: '/', headers: { version: 'one' } }, backend: V2 },
      { request: { method: 'POST', path: '/path2', headers: { version: 'two' } }, backend: V3 },
      { request: { method: 'PATCH', path: '/path3' }, backend: V1 },
      { request: { method: 'DELETE', path: '/path4', headers: { version: 'three' } }, backend: V1 },
      { request: { method: 'PUT', path: '/' }, response: { status: 404 } },
      { request: { method: 'DELETE', path: '/path4' }, response: { status: 404 } },
      { request: { method: 'PATCH', path: '/path5' }, backend: V1 },
      { request: { method: 'PATCH', path: '/', headers: { version: 'four' } }, backend: V2 },
    ],
  },
  {
    name: 'HTTPRouteQueryParamMatching',
    manifest: 'httproute-query-param-matching.yaml',
    features: ['HTTPRouteQueryParamMatching'],
    routes: route(
      'query-param-matching',
      `  rules:
    - matches: [{queryParams: [{name: animal, value: whale}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{queryParams: [{name: animal, value: dolphin}]}]
      backendRefs: [{name: ${V2}}]
    - matches:
        - queryParams: [{name: animal, value: dolphin}, {name: color, value: blue}]
        - queryParams: [{name: ANIMAL, value: Whale}]
      backendRefs: [{name: ${V3}}]
    - matches: [{path: {type: PathPrefix, value: /path1}, queryParams: [{name: animal, value: whale}]}]
      backendRefs: [{name: ${V1}}]
    - matches: [{headers: [{name: version, value: one}], queryParams: [{name: animal, value: whale}]}]
      backendRefs: [{name: ${V2}}]
    - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], queryParams: [{name: animal, value: whale}]}]
      backendRefs: [{name: ${V3}}]
    - matches:
        - {path: {type: PathPrefix, value: /path3}, queryParams: [{name: animal, value: shark}]}
        - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], queryParams: [{name: animal, value: kraken}]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /path5}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{queryParams: [{name: animal, value: hydra}]}]
      backendRefs: [{name: ${V2}}]
    - matches: [{headers: [{name: version, value: four}]}]
      backendRefs: [{name: ${V3}}]
`,
    ),
    exchanges: [
      { request: { path: '/?animal=whale' }, backend: V1 },
      { request: { path: '/?animal=dolphin' }, backend: V2 },
      { request: { path: '/?animal=dolphin&color=blue' }, backend: V3 },
      { request: { path: '/?ANIMAL=Whale' }, backend: V3 },
      { request: { path: '/?animal=whale&otherparam=irrelevant' }, backend: V1 },
      { request: { path: '/?animal=dolphin&color=yellow' }, backend: V2 },
      { request: { path: '/?color=blue' }, response: { status: 404 } },
      { request: { path: '/?animal=dog' }, response: { status: 404 } },
      { request: { path: '/?animal=whaledolphin' }, response: { status: 404 } },
      { request: { path: '/' }, response: { status: 404 } },
      { request: { path: '/path1?animal=whale' }, backend: V1 },
      { request: { path: '/?animal=whale', headers: { version: 'one' } }, backend: V2 },
      { request: { path: '/path2?animal=whale', headers: { version: 'two' } }, backend: V3 },
      { request: { path: '/path3?animal=shark' }, backend: V1 },
      { request: { path: '/path4?animal=kraken', headers: { version: 'three' } }, backend: V1 },
      { request: { path: '/?animal=shark' }, response: { status: 404 } },
      { request: { path: '/path4?animal=kraken' }, response: { status: 404 } },
      { request: { path: '/path5?animal=hydra' }, backend: V1 },
      { request: { path: '/?animal=hydra', headers: { version: 'four' } }, backend: V3 },
    ],
  },
  {
    name: 'HTTPRouteResponseHeaderModifier',
    manifest: 'httproute-response-header-modifier.yaml',
    features: ['HTTPRouteResponseHeaderModification'],
    routes: route(
      'response-header-modifier',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /set}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /add}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /remove}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier: {remove: [X-Header-Remove]}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /multiple}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
            add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: header-add-3}]
            remove: [X-Header-Remove-1, X-Header-Remove-2]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{name: X-Header-Set, value: header-set}]
            add:
              - {name: X-Header-Add, value: header-add}
              - {name: x-lowercase-add, value: lowercase-add}
              - {name: x-Mixedcase-ADD-1, value: mixedcase-add-1}
              - {name: X-mixeDcase-add-2, value: mixedcase-add-2}
              - {name: X-UPPERCASE-ADD, value: uppercase-add}
            remove: [X-Header-Remove]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /response-and-request-header-modifiers}}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
            add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}]
            remove: [X-Header-Remove-1, X-Header-Remove-2]
${REQ_MODS}      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      { request: { path: '/set' }, backendSetResponseHeaders: { 'Some-Other-Header': 'val' }, response: { headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'set-overwrites-values' } }, backend: V1 },
      {
        request: { path: '/set' },
        backendSetResponseHeaders: { 'Some-Other-Header': 'val', 'X-Header-Set': 'some-other-value' },
        response: { headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'set-overwrites-values' } },
        backend: V1,
      },
      { request: { path: '/add' }, backendSetResponseHeaders: { 'Some-Other-Header': 'val' }, response: { headers: { 'Some-Other-Header': 'val', 'X-Header-Add': 'add-appends-values' } }, backend: V1 },
      {
        request: { path: '/add' },
        backendSetResponseHeaders: { 'Some-Other-Header': 'val', 'X-Header-Add': 'some-other-value' },
        response: { headers: { 'Some-Other-Header': 'val', 'X-Header-Add': 'some-other-value,add-appends-values' } },
        backend: V1,
      },
      { request: { path: '/remove' }, backendSetResponseHeaders: { 'X-Header-Remove': 'val' }, response: { absentHeaders: ['X-Header-Remove'] }, backend: V1 },
      {
        request: { path: '/multiple' },
        backendSetResponseHeaders: { 'X-Header-Set-2': 'set-val-2', 'X-Header-Add-2': 'add-val-2', 'X-Header-Remove-2': 'remove-val-2', 'Another-Header': 'another-header-val', 'X-Header-Remove-1': 'val' },
        response: {
          headers: {
            'X-Header-Set-1': 'header-set-1',
            'X-Header-Set-2': 'header-set-2',
            'X-Header-Add-1': 'header-add-1',
            'X-Header-Add-2': 'add-val-2,header-add-2',
            'X-Header-Add-3': 'header-add-3',
            'Another-Header': 'another-header-val',
          },
          absentHeaders: ['X-Header-Remove-1', 'X-Header-Remove-2'],
        },
        backend: V1,
      },
      {
        request: { path: '/case-insensitivity' },
        backendSetResponseHeaders: { 'x-header-set': 'original-val-set', 'x-header-add': 'original-val-add', 'x-header-remove': 'original-val-remove', 'Another-Header': 'another-header-val' },
        response: {
          headers: {
            'X-Header-Set': 'header-set',
            'X-Header-Add': 'original-val-add,header-add',
            'X-Lowercase-Add': 'lowercase-add',
            'X-Mixedcase-Add-1': 'mixedcase-add-1',
            'X-Mixedcase-Add-2': 'mixedcase-add-2',
            'X-Uppercase-Add': 'uppercase-add',
            'Another-Header': 'another-header-val',
          },
          absentHeaders: ['x-header-remove', 'X-Header-Remove'],
        },
        backend: V1,
      },
      {
        request: { path: '/response-and-request-header-modifiers', headers: { 'X-Header-Remove': 'remove-val', 'X-Header-Add-Append': 'append-val-1', 'X-Header-Echo': 'echo' } },
        backendSetResponseHeaders: {
          'X-Header-Set-2': 'set-val-2',
          'X-Header-Add-2': 'add-val-2',
          'X-Header-Remove-2': 'remove-val-2',
          'Another-Header': 'another-header-val',
          'X-Header-Remove-1': 'remove-val-1',
          'X-Header-Echo': 'echo',
        },
        expectedRequest: {
          path: '/response-and-request-header-modifiers',
          headers: { 'X-Header-Add': 'header-val-1', 'X-Header-Set': 'set-overwrites-values', 'X-Header-Add-Append': 'append-val-1,header-val-2', 'X-Header-Echo': 'echo' },
          absentHeaders: ['X-Header-Remove'],
        },
        response: {
          headers: {
            'X-Header-Set-1': 'header-set-1',
            'X-Header-Set-2': 'header-set-2',
            'X-Header-Add-1': 'header-add-1',
            'X-Header-Add-2': 'add-val-2,header-add-2',
            'Another-Header': 'another-header-val',
            'X-Header-Echo': 'echo',
          },
          absentHeaders: ['X-Header-Remove-1', 'X-Header-Remove-2'],
        },
        backend: V1,
      },
    ],
  },
  {
    name: 'HTTPRouteRewritePath',
    manifest: 'httproute-rewrite-path.yaml',
    features: ['HTTPRoutePathRewrite'],
    routes: route(
      'rewrite-path',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /full/one}}]
      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /one}}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /full/rewrite-path-and-modify-headers}}]
      filters:
        - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /test}}}
${REQ_MODS}      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /prefix/rewrite-path-and-modify-headers}}]
      filters:
        - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /prefix}}}
${REQ_MODS}      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      { request: { path: '/prefix/one/two' }, expectedRequest: { path: '/one/two' }, backend: V1 },
      { request: { path: '/strip-prefix/three' }, expectedRequest: { path: '/three' }, backend: V1 },
      { request: { path: '/strip-prefix' }, expectedRequest: { path: '/' }, backend: V1 },
      { request: { path: '/full/one/two' }, expectedRequest: { path: '/one' }, backend: V1 },
      {
        request: { path: '/full/rewrite-path-and-modify-headers/test', headers: { ...REQ_MODS_SENT, 'X-Header-Set': 'set-val' } },
        expectedRequest: { path: '/test', headers: REQ_MODS_SEEN, absentHeaders: ['X-Header-Remove'] },
        backend: V1,
      },
      {
        request: { path: '/prefix/rewrite-path-and-modify-headers/one', headers: { ...REQ_MODS_SENT, 'X-Header-Set': 'set-val' } },
        expectedRequest: { path: '/prefix/one', headers: REQ_MODS_SEEN, absentHeaders: ['X-Header-Remove'] },
        backend: V1,
      },
    ],
  },
  {
    name: 'HTTPRouteRewriteHost',
    manifest: 'httproute-rewrite-host.yaml',
    features: ['HTTPRouteHostRewrite'],
    routes: route(
      'rewrite-host',
      `  hostnames: [rewrite.example]
  rules:
    - matches: [{path: {type: PathPrefix, value: /one}}]
      filters: [{type: URLRewrite, urlRewrite: {hostname: one.example.org}}]
      backendRefs: [{name: ${V1}}]
    - filters: [{type: URLRewrite, urlRewrite: {hostname: example.org}}]
      backendRefs: [{name: ${V2}}]
    - matches: [{path: {type: PathPrefix, value: /rewrite-host-and-modify-headers}}]
      filters:
        - {type: URLRewrite, urlRewrite: {hostname: test.example.org}}
${REQ_MODS}      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [
      { request: { path: '/one', host: 'rewrite.example' }, expectedRequest: { path: '/one', host: 'one.example.org' }, backend: V1 },
      { request: { path: '/two', host: 'rewrite.example' }, expectedRequest: { path: '/two', host: 'example.org' }, backend: V2 },
      {
        request: { path: '/rewrite-host-and-modify-headers', host: 'rewrite.example', headers: REQ_MODS_SENT },
        expectedRequest: { path: '/rewrite-host-and-modify-headers', host: 'test.example.org', headers: REQ_MODS_SEEN, absentHeaders: ['X-Header-Remove'] },
        backend: V2,
      },
    ],
  },
  {
    name: 'HTTPRouteRedirectPath',
    manifest: 'httproute-redirect-path.yaml',
    features: ['HTTPRoutePathRedirect'],
    routes: route(
      'redirect-path',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
    - matches: [{path: {type: PathPrefix, value: /full}}]
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}}]
    - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
    - matches: [{path: {type: PathPrefix, value: /path-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}, statusCode: 301}}]
    - matches: [{path: {type: PathPrefix, value: /full-path-and-host}}]
      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}}]
    - matches: [{path: {type: PathPrefix, value: /full-path-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301}}]
`,
    ),
    exchanges: [
      redirectTo('/original-prefix/lemon', { path: '/replacement-prefix/lemon' }),
      redirectTo('/full/path/original', { path: '/full-path-replacement' }),
      redirectTo('/path-and-host', { host: 'example.org', path: '/replacement-prefix' }),
      redirectTo('/path-and-status', { path: '/replacement-prefix' }, 301),
      redirectTo('/full-path-and-host', { host: 'example.org', path: '/replacement-full' }),
      redirectTo('/full-path-and-status', { path: '/replacement-full' }, 301),
    ],
  },
  {
    name: 'HTTPRouteRedirectPort',
    manifest: 'httproute-redirect-port.yaml',
    features: ['HTTPRoutePortRedirect'],
    routes: route(
      'redirect-port',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /port}}]
      filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]
    - matches: [{path: {type: PathPrefix, value: /port-and-host}}]
      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, port: 8083}}]
    - matches: [{path: {type: PathPrefix, value: /port-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {port: 8083, statusCode: 301}}]
    - matches: [{path: {type: PathPrefix, value: /port-and-host-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {port: 8083, hostname: example.org, statusCode: 302}}]
`,
    ),
    exchanges: [
      redirectTo('/port', { port: '8083' }),
      redirectTo('/port-and-host', { host: 'example.org', port: '8083' }),
      redirectTo('/port-and-status', { port: '8083' }, 301),
      redirectTo('/port-and-host-and-status', { host: 'example.org', port: '8083' }),
    ],
  },
  {
    name: 'HTTPRouteRedirectScheme',
    manifest: 'httproute-redirect-scheme.yaml',
    features: ['HTTPRouteSchemeRedirect'],
    routes: route(
      'redirect-scheme',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /scheme}}]
      filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
    - matches: [{path: {type: PathPrefix, value: /scheme-and-host}}]
      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, scheme: https}}]
    - matches: [{path: {type: PathPrefix, value: /scheme-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]
    - matches: [{path: {type: PathPrefix, value: /scheme-and-host-and-status}}]
      filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 302, hostname: example.org}}]
`,
    ),
    exchanges: [
      redirectTo('/scheme', { scheme: 'https' }),
      redirectTo('/scheme-and-host', { host: 'example.org', scheme: 'https' }),
      redirectTo('/scheme-and-status', { scheme: 'https' }, 301),
      redirectTo('/scheme-and-host-and-status', { scheme: 'https', host: 'example.org' }),
    ],
  },
  {
    name: 'HTTPRoute303Redirect',
    manifest: 'httproute-303-redirect.yaml',
    features: ['HTTPRoute303RedirectStatusCode'],
    routes: route('303-redirect', `  rules:\n    - matches: [{path: {type: PathPrefix, value: /see-other}}]\n      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 303}}]\n`),
    exchanges: [redirectTo('/see-other', { path: '/see-other' }, 303, 'POST')],
  },
  {
    name: 'HTTPRoute307Redirect',
    manifest: 'httproute-307-redirect.yaml',
    features: ['HTTPRoute307RedirectStatusCode'],
    routes: route('307-redirect', `  rules:\n    - matches: [{path: {type: PathPrefix, value: /temporary}}]\n      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307}}]\n`),
    exchanges: [redirectTo('/temporary', { path: '/temporary' }, 307)],
  },
  {
    name: 'HTTPRoute308Redirect',
    manifest: 'httproute-308-redirect.yaml',
    features: ['HTTPRoute308RedirectStatusCode'],
    routes: route('308-redirect', `  rules:\n    - matches: [{path: {type: PathPrefix, value: /permanent}}]\n      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308}}]\n`),
    exchanges: [redirectTo('/permanent', { path: '/permanent' }, 308)],
  },
  {
    name: 'HTTPRouteRequestMirror',
    manifest: 'httproute-request-mirror.yaml',
    features: ['HTTPRouteRequestMirror'],
    routes: route(
      'request-mirror',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /mirror}}]
      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /mirror-and-modify-headers}}]
      filters:
${REQ_MODS}        - {type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}}}
      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      { request: { path: '/mirror' }, backend: V1, mirroredTo: [V2] },
      {
        request: { path: '/mirror-and-modify-headers', headers: REQ_MODS_SENT },
        expectedRequest: { path: '/mirror-and-modify-headers', headers: REQ_MODS_SEEN, absentHeaders: ['X-Header-Remove'] },
        backend: V1,
        mirroredTo: [V2],
      },
    ],
  },
  {
    name: 'HTTPRouteRequestMultipleMirrors',
    manifest: 'httproute-request-multiple-mirrors.yaml',
    features: ['HTTPRouteRequestMultipleMirrors', 'HTTPRouteRequestMirror'],
    routes: route(
      'request-multiple-mirrors',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /multi-mirror}}]
      filters:
        - {type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: ${V3}}}}
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /multi-mirror-and-modify-request-headers}}]
      filters:
${REQ_MODS}        - {type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: ${V3}}}}
      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [
      { request: { path: '/multi-mirror' }, backend: V1, mirroredTo: [V2, V3] },
      {
        request: { path: '/multi-mirror-and-modify-request-headers', headers: REQ_MODS_SENT },
        expectedRequest: { path: '/multi-mirror-and-modify-request-headers', headers: REQ_MODS_SEEN, absentHeaders: ['X-Header-Remove'] },
        backend: V1,
        mirroredTo: [V2, V3],
      },
    ],
  },
  {
    name: 'HTTPRouteRequestPercentageMirror',
    manifest: 'httproute-request-percentage-mirror.yaml',
    features: ['HTTPRouteRequestPercentageMirror'],
    // As upstream, the share of copies over many requests; here 300 requests per path, each share
    // within 15 points (4.5 standard deviations or more at 20 % and 50 %: about one failure in 10^5 runs).
    routes: route(
      'request-percentage-mirror',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /percent-mirror}}]
      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}, percent: 20}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /percent-mirror-fraction}}]
      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: ${V2}}, fraction: {numerator: 25, denominator: 50}}}]
      backendRefs: [{name: ${V1}}]
`,
    ),
    exchanges: [{ request: { path: '/percent-mirror' }, backend: V1 }],
    mirrorShares: {
      requests: 300,
      tolerance: 15,
      backend: V1,
      paths: [
        { path: '/percent-mirror', mirror: V2, percent: 20 },
        { path: '/percent-mirror-fraction', mirror: V2, percent: 50 },
      ],
    },
  },
  {
    name: 'HTTPRouteTimeoutRequest',
    manifest: 'httproute-timeout-request.yaml',
    features: ['HTTPRouteRequestTimeout'],
    routes: route(
      'request-timeout',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /request-timeout}}]
      backendRefs: [{name: ${V1}}]
      timeouts: {request: 500ms}
    - matches: [{path: {type: PathPrefix, value: /disable-request-timeout}}]
      backendRefs: [{name: ${V1}}]
      timeouts: {request: "0s"}
`,
    ),
    exchanges: [
      { request: { path: '/request-timeout' }, backend: V1 },
      { request: { path: '/request-timeout?delay=1s' }, response: { status: 504 } },
      { request: { path: '/disable-request-timeout?delay=1s' }, backend: V1 },
    ],
  },
  {
    name: 'HTTPRouteTimeoutBackendRequest',
    manifest: 'httproute-timeout-backend-request.yaml',
    features: ['HTTPRouteBackendTimeout'],
    routes: route(
      'backend-request-timeout',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /backend-timeout}}]
      backendRefs: [{name: ${V1}}]
      timeouts: {backendRequest: 500ms}
    - matches: [{path: {type: PathPrefix, value: /disable-backend-timeout}}]
      backendRefs: [{name: ${V1}}]
      timeouts: {backendRequest: "0s"}
`,
    ),
    exchanges: [
      { request: { path: '/backend-timeout' }, backend: V1 },
      { request: { path: '/backend-timeout?delay=1s' }, response: { status: 504 } },
      { request: { path: '/disable-backend-timeout?delay=1s' }, backend: V1 },
    ],
  },
  {
    name: 'HTTPRouteNamedRule',
    manifest: 'httproute-named-rule.yaml',
    features: ['HTTPRouteNamedRouteRule'],
    routes: route(
      'http-named-rules',
      `  rules:
    - name: named-rule
      matches: [{path: {type: PathPrefix, value: /named}}]
      backendRefs: [{name: ${V1}}]
    - matches: [{path: {type: PathPrefix, value: /unnamed}}]
      backendRefs: [{name: ${V2}}]
`,
    ),
    exchanges: [{ request: { path: '/named' } }, { request: { path: '/unnamed' } }],
  },
  {
    name: 'HTTPRouteBackendRequestHeaderModifier',
    manifest: 'httproute-request-header-modifier-backend.yaml',
    features: ['HTTPRouteBackendRequestHeaderModification'],
    routes: route(
      'request-header-modifier-backend',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /set}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}}]
    - matches: [{path: {type: PathPrefix, value: /remove}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {remove: [X-Header-Remove]}}]
`,
    ),
    exchanges: [
      {
        request: { path: '/set', headers: { 'Some-Other-Header': 'val' } },
        expectedRequest: { path: '/set', headers: { 'Some-Other-Header': 'val', 'X-Header-Set': 'set-overwrites-values' } },
        backend: V1,
      },
      { request: { path: '/remove', headers: { 'X-Header-Remove': 'val' } }, expectedRequest: { path: '/remove', absentHeaders: ['X-Header-Remove'] }, backend: V1 },
    ],
  },
  {
    name: 'HTTPRouteBackendURLRewrite',
    manifest: 'httproute-backend-url-rewrite.yaml',
    features: ['HTTPRouteBackendURLRewrite'],
    routes: route(
      'backend-url-rewrite',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /full}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /rewritten-full}}}]
    - matches: [{path: {type: PathPrefix, value: /prefix}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /rewritten-prefix}}}]
`,
    ),
    exchanges: [
      { request: { path: '/full/x' }, expectedRequest: { path: '/rewritten-full' }, backend: V1 },
      { request: { path: '/prefix/one' }, expectedRequest: { path: '/rewritten-prefix/one' }, backend: V1 },
      { request: { path: '/prefix' }, expectedRequest: { path: '/rewritten-prefix' }, backend: V1 },
    ],
  },
  {
    name: 'HTTPRouteCORS',
    manifest: 'httproute-cors.yaml',
    features: ['HTTPRouteCORS'],
    routes: docs(
      route(
        'cors-multiple-origins-methods-headers',
        `  rules:
    - matches: [{path: {type: PathPrefix, value: /cors-1}}]
      filters:
        - type: CORS
          cors:
            allowOrigins: ["https://www.foo.com", "https://*.bar.com"]
            allowMethods: [GET, OPTIONS]
            allowHeaders: [x-header-1, x-header-2]
            exposeHeaders: [x-header-3, x-header-4]
            allowCredentials: true
            maxAge: 3600
      backendRefs: [{name: ${V1}}]
`,
      ),
      route(
        'cors-wildcard-methods',
        `  rules:
    - matches: [{path: {type: PathPrefix, value: /cors-2}}]
      filters: [{type: CORS, cors: {allowOrigins: ["https://www.foo.com"], allowMethods: ["*"]}}]
      backendRefs: [{name: ${V1}}]
`,
      ),
      route(
        'cors-wildcard-origin',
        `  rules:
    - matches: [{path: {type: PathPrefix, value: /cors-wildcard-origin}}]
      filters: [{type: CORS, cors: {allowOrigins: ["*"], allowMethods: [PUT], allowCredentials: false}}]
      backendRefs: [{name: ${V1}}]
`,
      ),
      route(
        'cors-wildcard-methods-headers-auth',
        `  rules:
    - matches: [{path: {type: PathPrefix, value: /cors-wildcard-methods-headers}}]
      filters: [{type: CORS, cors: {allowOrigins: ["https://other.foo.com"], allowMethods: ["*"], allowHeaders: ["*"], allowCredentials: true}}]
      backendRefs: [{name: ${V1}}]
`,
      ),
    ),
    exchanges: [
      ...['https://www.foo.com', 'https://www.bar.com', 'https://xpto.www.bar.com'].map((origin): Exchange => ({
        request: { method: 'OPTIONS', path: '/cors-1', headers: { Origin: origin, 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'x-header-1, x-header-2' } },
        answeredByFront: true,
        response: {
          status: [200, 204],
          validHeaderValues: {
            'access-control-allow-origin': [origin],
            'access-control-allow-methods': ['GET, OPTIONS', 'OPTIONS, GET'],
            'access-control-allow-headers': ['x-header-1, x-header-2', 'x-header-2, x-header-1'],
            'access-control-expose-headers': ['x-header-3, x-header-4', 'x-header-4, x-header-3'],
            'access-control-max-age': ['3600'],
            'access-control-allow-credentials': ['true'],
          },
        },
      })),
      {
        request: { method: 'OPTIONS', path: '/cors-1', headers: { Origin: 'https://foobar.com', 'Access-Control-Request-Method': 'GET' } },
        answeredByFront: true,
        response: { status: [200, 204, 403], absentHeaders: ['access-control-allow-origin'] },
      },
      ...['https://www.foo.com', 'https://www.bar.com'].map((origin): Exchange => ({
        request: { path: '/cors-1', headers: { Origin: origin, 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'x-header-1, x-header-2' } },
        response: { status: [200, 204], headers: { 'Access-Control-Allow-Origin': origin } },
      })),
      {
        request: { path: '/cors-1', headers: { Origin: 'https://foobar.com', 'Access-Control-Request-Method': 'GET' } },
        response: { absentHeaders: ['access-control-allow-origin'] },
      },
      {
        request: { method: 'OPTIONS', path: '/cors-2', headers: { Origin: 'https://www.foo.com', 'Access-Control-Request-Method': 'POST' } },
        answeredByFront: true,
        response: {
          status: [200, 204],
          validHeaderValues: { 'access-control-allow-methods': ['POST', '*'] },
          headers: { 'Access-Control-Allow-Origin': 'https://www.foo.com' },
          absentHeaders: ['access-control-allow-credentials'],
        },
      },
      ...['https://foobar.com', 'https://foobar.com:12345'].map((origin): Exchange => ({
        request: { method: 'OPTIONS', path: '/cors-wildcard-origin', headers: { Origin: origin, 'Access-Control-Request-Method': 'PUT' } },
        answeredByFront: true,
        response: { status: [200, 204], validHeaderValues: { 'access-control-allow-origin': [origin, '*'], 'access-control-allow-methods': ['PUT'] }, absentHeaders: ['access-control-allow-credentials'] },
      })),
      ...['https://foobar.com:12345', 'https://foobar.com'].map((origin): Exchange => ({
        request: { method: 'PUT', path: '/cors-wildcard-origin', headers: { Origin: origin } },
        response: { status: [200, 204], validHeaderValues: { 'access-control-allow-origin': [origin, '*'] } },
      })),
      {
        request: { method: 'OPTIONS', path: '/cors-wildcard-methods-headers', headers: { Origin: 'https://other.foo.com', 'Access-Control-Request-Method': 'PUT', 'Access-Control-Request-Headers': 'x-header-1, x-header-2' } },
        answeredByFront: true,
        response: {
          status: 200,
          validHeaderValues: {
            'access-control-allow-origin': ['https://other.foo.com'],
            'access-control-allow-methods': ['PUT'],
            'access-control-allow-headers': ['x-header-1, x-header-2', 'x-header-2, x-header-1'],
            'access-control-allow-credentials': ['true'],
          },
        },
      },
      {
        request: { path: '/cors-wildcard-methods-headers', headers: { Origin: 'https://other.foo.com', Authorization: 'Bearer test' } },
        response: { validHeaderValues: { 'access-control-allow-origin': ['https://other.foo.com'], 'access-control-allow-credentials': ['true'] } },
      },
    ],
  },
  {
    name: 'HTTPRouteRetry',
    manifest: 'httproute-retry.yaml',
    features: ['HTTPRouteRetry'],
    routes: route(
      'retries',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]
      retry: {codes: [500], attempts: 3}
      backendRefs: [{name: ${V3}}]
    - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]
      retry: {codes: [500, 502, 503, 504], attempts: 2}
      backendRefs: [{name: ${V3}}]
`,
    ),
    exchanges: [
      { request: { path: '/retry/code-500-attempts-3' }, retrySimulation: { responseCode: '500', succeedAfter: '2' }, backend: V3 },
      { request: { path: '/retry/code-500-attempts-3' }, retrySimulation: { responseCode: '500', succeedAfter: '4' }, response: { status: 500 } },
      { request: { path: '/retry/code-500-attempts-3' }, retrySimulation: { responseCode: '503', succeedAfter: '2' }, response: { status: 503 } },
      { request: { path: '/retry/code-all-attempts-2' }, retrySimulation: { responseCode: '500', succeedAfter: '1' }, backend: V3 },
      { request: { path: '/retry/code-all-attempts-2' }, retrySimulation: { responseCode: '500', succeedAfter: '3' }, response: { status: 500 } },
      { request: { path: '/retry/code-all-attempts-2' }, retrySimulation: { responseCode: '502', succeedAfter: '1' }, backend: V3 },
      { request: { path: '/retry/code-all-attempts-2' }, retrySimulation: { responseCode: '502', succeedAfter: '3' }, response: { status: 502 } },
      { request: { path: '/retry/code-all-attempts-2' }, retrySimulation: { responseCode: '503', succeedAfter: '1' }, backend: V3 },
    ],
  },
  {
    name: 'HTTPRouteRetryConnectionError',
    manifest: 'httproute-retry-connection-error.yaml',
    features: ['HTTPRouteRetryConnectionError', 'HTTPRouteRetry'],
    routes: route(
      'retries-connection-error',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /retry/no-status-code-attempts-3}}]
      retry: {attempts: 3}
      backendRefs: [{name: ${V3}}]
`,
    ),
    exchanges: [
      { request: { path: '/retry/no-status-code-attempts-3' }, retrySimulation: { succeedAfter: '2' }, backend: V3 },
      { request: { path: '/retry/no-status-code-attempts-3' }, retrySimulation: { succeedAfter: '4' }, response: { status: [500, 503] } },
    ],
  },
  {
    name: 'HTTPRouteRetryWithTimeouts',
    manifest: 'httproute-retry-with-timeouts.yaml',
    features: ['HTTPRouteRetryBackendTimeout', 'HTTPRouteRetry', 'HTTPRouteBackendTimeout', 'HTTPRouteRequestTimeout'],
    routes: route(
      'retries-with-timeouts',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /retry/backend-request-timeout-200ms}}]
      retry: {attempts: 2}
      timeouts: {backendRequest: 200ms}
      backendRefs: [{name: ${V3}}]
    - matches: [{path: {type: PathPrefix, value: /retry/request-timeout-200ms}}]
      retry: {codes: [500], attempts: 5}
      timeouts: {backendRequest: 200ms, request: 400ms}
      backendRefs: [{name: ${V3}}]
`,
    ),
    exchanges: [
      { request: { path: '/retry/backend-request-timeout-200ms' }, retrySimulation: { responseCode: '500', succeedAfter: '2', delayRetry: '300ms' }, backend: V3 },
      { request: { path: '/retry/backend-request-timeout-200ms' }, retrySimulation: { responseCode: '500', succeedAfter: '3', delayRetry: '300ms' }, response: { status: 504 } },
      { request: { path: '/retry/request-timeout-200ms' }, retrySimulation: { responseCode: '500', succeedAfter: '1' }, backend: V3 },
      { request: { path: '/retry/request-timeout-200ms' }, retrySimulation: { responseCode: '500', succeedAfter: '4', delayRetry: '100ms' }, response: { status: 504 } },
    ],
  },
  {
    name: 'HTTPRouteBackendRequestRedirect',
    manifest: 'httproute-backend-request-redirect.yaml',
    features: ['HTTPRouteBackendRequestRedirect'],
    routes: route(
      'backend-request-redirect',
      `  rules:
    - matches: [{path: {type: PathPrefix, value: /full}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /redirected-full}}}]
    - matches: [{path: {type: PathPrefix, value: /prefix}}]
      backendRefs:
        - name: ${V1}
          filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /redirected-prefix}}}]
`,
    ),
    exchanges: [redirectTo('/full/original', { path: '/redirected-full' }), redirectTo('/prefix/original', { path: '/redirected-prefix/original' })],
  },
  {
    name: 'HTTPRouteRequestHeaderModifierBackendWeights',
    manifest: 'httproute-request-header-modifier-backend-weights.yaml',
    features: ['HTTPRouteBackendRequestHeaderModification'],
    routes: route(
      'request-header-modifier-backend-weights',
      `  rules:
    - backendRefs:
        - name: ${V1}
          weight: 10
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: ${V1}}]}}]
        - name: ${V2}
          weight: 10
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Backend, value: ${V2}}]}}]
`,
    ),
    exchanges: [{ request: { path: '/' } }],
  },
  {
    name: 'HTTPRouteBackendProtocolWebSocket',
    manifest: 'httproute-backend-protocol-websocket.yaml',
    features: ['HTTPRouteBackendProtocolWebSocket'],
    routes: route('backend-protocol-ws', `  rules:\n    - backendRefs: [{name: ${V1}}]\n`),
    websocket: { path: '/ws' },
  },
  {
    name: 'HTTPRouteBackendProtocolH2C',
    manifest: 'httproute-backend-protocol-h2c.yaml',
    features: ['HTTPRouteBackendProtocolH2C'],
    skip: cluster("a Service port's appProtocol (kubernetes.io/h2c); a mesh service's node declares no protocol"),
  },
  { name: 'HTTPRouteReferenceGrant', manifest: 'httproute-reference-grant.yaml', features: ['ReferenceGrant'], skip: cluster('ReferenceGrant across namespaces') },
  { name: 'HTTPRouteInvalidReferenceGrant', manifest: 'httproute-invalid-reference-grant.yaml', features: ['ReferenceGrant'], skip: cluster('ReferenceGrant across namespaces') },
  { name: 'HTTPRouteInvalidCrossNamespaceBackendRef', manifest: 'httproute-invalid-cross-namespace-backend-ref.yaml', features: ['ReferenceGrant'], skip: cluster('namespaces and ReferenceGrant') },
  { name: 'HTTPRoutePartiallyInvalidViaInvalidReferenceGrant', manifest: 'httproute-partially-invalid-via-invalid-reference-grant.yaml', features: ['ReferenceGrant'], skip: cluster('ReferenceGrant across namespaces') },
];

export type FrontName = 'mesh api' | 'mesh sidecar' | 'mesh proxy';

// Why a case fails, in one line (shared by the fronts where the cause is the same).
const SIDECAR_HOST = "the sidecar's Host check answers 403 to a Host other than this machine's names (example.com, rewrite.example)";
/** The same on every front (most are files refused at load). */
const EVERY_FRONT: Record<string, string> = {
};

/** The cases that fail today on each front, with why in one line. */
export const KNOWN_FAILING: Record<FrontName, Record<string, string>> = {
  'mesh api': {
    ...EVERY_FRONT,
  },
  'mesh sidecar': {
    ...EVERY_FRONT,
    HTTPRouteMatchingAcrossRoutes: SIDECAR_HOST,
    HTTPRouteRewriteHost: SIDECAR_HOST,
  },
  'mesh proxy': {
    ...EVERY_FRONT,
  },
};
