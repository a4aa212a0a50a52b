/**
 * The upstream Gateway API GRPCRoute conformance cases (kubernetes-sigs/gateway-api,
 * `conformance/tests/grpcroute-*.yaml` and the `.go` beside each), replayed as data against mesh
 * by grpc-runner.ts, adapted as the HTTPRoute cases are (cases.ts):
 *  - a backendRef names a mesh service (the runner registers the gRPC echo backends
 *    `grpc-infra-backend-v1`, `-v2`, `-v3` under those names); `namespace` and `port`, which mesh
 *    ignores, are left out, and so are the `parentRefs` of a case without a Gateway of its own
 *    (upstream's `same-namespace` Gateway is the front's own listener);
 *  - a case with Gateway documents runs on a `mesh api` of its own with them, its listener port 80
 *    mapped to a free one.
 * Upstream compares the status code and, for OK, the method, namespace and pod the echo reports
 * (conformance/utils/grpc compareResponse); so does the runner. `seen` and `absent` go further:
 * the metadata the backend must (not) have received. Upstream's request header modifier case
 * lists headers too but never compares them, and lists some that its own manifest cannot produce
 * (its three rules for `Echo` have one precedence, so the first, `set`, takes every `Echo` call;
 * the `EchoTwo` rule adds to a value the client sent): `seen` says what the Gateway API
 * precedence and filter semantics give.
 */
import type { EchoMethod } from './grpc-echo.js';
import { ECHO_SERVICE } from './grpc-echo.js';

export const G1 = 'grpc-infra-backend-v1';
export const G2 = 'grpc-infra-backend-v2';
export const G3 = 'grpc-infra-backend-v3';
export const GRPC_BACKENDS = [G1, G2, G3] as const;

export interface GrpcExchange {
  method: EchoMethod;
  /** The call's `:authority` (upstream RequestMetadata.Authority); default the front's address. */
  authority?: string;
  /** The call's metadata. */
  metadata?: Record<string, string>;
  /** The status the call must end with (a grpc-js status name); default OK. */
  code?: 'OK' | 'UNIMPLEMENTED';
  /** The backend whose pod must answer (an OK). */
  backend?: string;
  /** Metadata the backend must have received: name (lower case) → its values (several values of one name, or one value joined by commas, compare the same). */
  seen?: Record<string, string[]>;
  /** Metadata the backend must not have received. */
  absent?: string[];
}

export interface GrpcConformanceCase {
  /** The upstream ShortName. */
  name: string;
  /** The upstream manifest. */
  manifest: string;
  /** The Extended features the case needs (none: a Core case of the GRPCRoute profile). */
  features: string[];
  /** Why the case cannot run (off-cluster, or on this front). */
  skip?: string;
  /** The GRPCRoute documents (YAML). */
  routes: string;
  /** The Gateway documents the routes attach to: the case runs on its own `mesh api` (grpc-runner.ts). */
  gateways?: string;
  exchanges?: GrpcExchange[];
  /** A weighted-distribution case: the share each backend must get. */
  weights?: Record<string, number>;
}

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\n';
const route = (name: string, spec: string) => `${HEAD}metadata: {name: ${name}}\nspec:\n${spec}`;
const docs = (...d: string[]) => d.join('---\n');
const echoMethod = (method: EchoMethod) => `{service: ${ECHO_SERVICE}, method: ${method}}`;
const to = (service: string) => `      backendRefs: [{name: ${service}}]\n`;
const rule = (method: EchoMethod, service: string, extra = '') => `    - matches: [{method: ${echoMethod(method)}}]\n${extra}${to(service)}`;
const headerRule = (alternatives: Array<Record<string, string>>, service: string) =>
  `    - matches:\n${alternatives.map((h) => `        - headers: [${Object.entries(h).map(([name, value]) => `{name: ${name}, value: ${value}}`).join(', ')}]\n`).join('')}${to(service)}`;
const modifier = (spec: string) => `      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {${spec}}}]\n`;

const call = (method: EchoMethod, backend: string | undefined, metadata?: Record<string, string>, authority?: string): GrpcExchange => ({
  method,
  ...(backend ? { backend } : { code: 'UNIMPLEMENTED' as const }),
  ...(metadata ? { metadata } : {}),
  ...(authority ? { authority } : {}),
});

/** The authority upstream's request header modifier case sends. */
const ECHO_AUTHORITY = ECHO_SERVICE;

export const GRPC_CASES: GrpcConformanceCase[] = [
  // ---- Core ----
  {
    name: 'GRPCExactMethodMatching',
    manifest: 'grpcroute-exact-method-matching.yaml',
    features: [],
    routes: route('exact-matching', `  rules:\n${rule('Echo', G1)}${rule('EchoTwo', G2)}`),
    exchanges: [call('Echo', G1), call('EchoTwo', G2), call('EchoThree', undefined)],
  },
  {
    name: 'GRPCRouteHeaderMatching',
    manifest: 'grpcroute-header-matching.yaml',
    features: [],
    routes: route(
      'grpc-header-matching',
      `  rules:\n${headerRule([{ version: 'one' }], G1)}${headerRule([{ version: 'two' }], G2)}${headerRule([{ version: 'two', color: 'orange' }], G1)}${headerRule([{ color: 'blue' }, { color: 'green' }], G1)}${headerRule([{ color: 'red' }, { color: 'yellow' }], G2)}`,
    ),
    exchanges: [
      call('Echo', G1, { Version: 'one' }),
      call('Echo', G2, { Version: 'two' }),
      call('Echo', G1, { Version: 'two', Color: 'orange' }),
      // Two rules match (version two; color blue), one header match each: the first in the file.
      call('Echo', G2, { Version: 'two', Color: 'blue' }),
      call('Echo', undefined, { Color: 'orange' }),
      call('Echo', undefined, { 'Some-Other-Header': 'one' }),
      call('Echo', G1, { Color: 'blue' }),
      call('Echo', G1, { Color: 'green' }),
      call('Echo', G2, { Color: 'red' }),
      call('Echo', G2, { Color: 'yellow' }),
      call('Echo', undefined, { Color: 'purple' }),
    ],
  },
  {
    name: 'GRPCRouteListenerHostnameMatching',
    manifest: 'grpcroute-listener-hostname-matching.yaml',
    features: [],
    gateways: `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: grpcroute-listener-hostname-matching}
spec:
  gatewayClassName: mesh
  listeners:
    - {name: listener-1, port: 80, protocol: HTTP, hostname: bar.com}
    - {name: listener-2, port: 80, protocol: HTTP, hostname: foo.bar.com}
    - {name: listener-3, port: 80, protocol: HTTP, hostname: "*.bar.com"}
    - {name: listener-4, port: 80, protocol: HTTP, hostname: "*.foo.com"}
`,
    routes: docs(
      route('backend-v1', `  parentRefs: [{name: grpcroute-listener-hostname-matching, sectionName: listener-1}]\n  rules:\n    - backendRefs: [{name: ${G1}}]\n`),
      route('backend-v2', `  parentRefs: [{name: grpcroute-listener-hostname-matching, sectionName: listener-2}]\n  rules:\n    - backendRefs: [{name: ${G2}}]\n`),
      route(
        'backend-v3',
        `  parentRefs:\n    - {name: grpcroute-listener-hostname-matching, sectionName: listener-3}\n    - {name: grpcroute-listener-hostname-matching, sectionName: listener-4}\n  rules:\n    - backendRefs: [{name: ${G3}}]\n`,
      ),
    ),
    exchanges: [
      call('Echo', G1, undefined, 'bar.com'),
      call('Echo', G2, undefined, 'foo.bar.com'),
      call('Echo', G3, undefined, 'baz.bar.com'),
      call('Echo', G3, undefined, 'boo.bar.com'),
      call('Echo', G3, undefined, 'multiple.prefixes.bar.com'),
      call('Echo', G3, undefined, 'multiple.prefixes.foo.com'),
      call('Echo', undefined, undefined, 'foo.com'),
      call('Echo', undefined, undefined, 'no.matching.host'),
    ],
  },
  {
    name: 'GRPCRouteWeight',
    manifest: 'grpcroute-weight.yaml',
    features: [],
    routes: route('weighted-backends', `  rules:\n    - backendRefs:\n        - {name: ${G1}, weight: 70}\n        - {name: ${G2}, weight: 30}\n        - {name: ${G3}, weight: 0}\n`),
    weights: { [G1]: 0.7, [G2]: 0.3, [G3]: 0 },
  },
  // ---- Extended ----
  {
    name: 'GRPCRouteNamedRule',
    manifest: 'grpcroute-named-rule.yaml',
    features: ['GRPCRouteNamedRouteRule'],
    routes: route('grpc-named-rules', `  rules:\n    - name: named-rule\n      matches: [{method: ${echoMethod('Echo')}}]\n${to(G1)}${rule('EchoTwo', G2)}`),
    exchanges: [call('Echo', G1), call('EchoTwo', G2)],
  },
  {
    name: 'GRPCRouteRequestHeaderModifier',
    manifest: 'grpcroute-request-header-modifier.yaml',
    features: ['GRPCRouteRequestHeaderModifier'],
    routes: route(
      'grpc-request-header-modifier',
      `  rules:\n${rule('Echo', G1, modifier('set: [{name: X-Header-Set, value: set-overwrites-values}]'))}${rule('Echo', G1, modifier('add: [{name: X-Header-Add, value: add-appends-values}]'))}${rule(
        'Echo',
        G1,
        modifier('remove: [X-Header-Remove]'),
      )}${rule(
        'EchoTwo',
        G2,
        modifier(
          'set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}], add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}], remove: [X-Header-Remove-1, X-Header-Remove-2]',
        ),
      )}`,
    ),
    exchanges: [
      {
        ...call('Echo', G1, { 'Some-Other-Header': 'this-header-should-be-set' }, ECHO_AUTHORITY),
        seen: { 'some-other-header': ['this-header-should-be-set'], 'x-header-set': ['set-overwrites-values'] },
      },
      {
        ...call('Echo', G1, { 'Some-Other-Header': 'this-header-should-be-set', 'X-Header-Set': 'this-value-should-be-overwritten' }, ECHO_AUTHORITY),
        seen: { 'some-other-header': ['this-header-should-be-set'], 'x-header-set': ['set-overwrites-values'] },
      },
      // The first rule for Echo (set) takes the call: the add and remove rules never do.
      { ...call('Echo', G1, { 'Some-Other-Header': 'this-header-should-be-set' }, ECHO_AUTHORITY), seen: { 'x-header-set': ['set-overwrites-values'] }, absent: ['x-header-add'] },
      { ...call('Echo', G1, { 'Some-Other-Header': 'this-header-should-be-set', 'X-Header-Add': 'this-value-should-be-appended' }, ECHO_AUTHORITY), seen: { 'x-header-add': ['this-value-should-be-appended'] } },
      { ...call('Echo', G1, { 'X-Header-Remove': 'this-should-be-removed' }, ECHO_AUTHORITY), seen: { 'x-header-remove': ['this-should-be-removed'], 'x-header-set': ['set-overwrites-values'] } },
      {
        ...call('EchoTwo', G2, { 'X-Header-Set-2': 'set-header-2', 'X-Header-Add-2': 'add-header-2', 'X-Header-Remove-2': 'should-be-removed-2', 'Some-Other-Header': 'another-header-val' }, ECHO_AUTHORITY),
        seen: {
          'x-header-set-1': ['header-set-1'],
          'x-header-set-2': ['header-set-2'],
          'x-header-add-1': ['header-add-1'],
          'x-header-add-2': ['add-header-2', 'header-add-2'],
          'some-other-header': ['another-header-val'],
        },
        absent: ['x-header-remove-2'],
      },
      {
        // The filter names are canonical, the call's lower case: they are the same names.
        ...call('EchoTwo', G2, { 'x-header-set-1': 'original-set-1', 'x-header-add-1': 'existing-add-1', 'x-header-remove-1': 'should-be-removed-1' }, ECHO_AUTHORITY),
        seen: { 'x-header-set-1': ['header-set-1'], 'x-header-set-2': ['header-set-2'], 'x-header-add-1': ['existing-add-1', 'header-add-1'], 'x-header-add-2': ['header-add-2'] },
        absent: ['x-header-remove-1'],
      },
    ],
  },
];

export type GrpcFrontName = 'mesh api' | 'mesh sidecar' | 'mesh proxy';

/** The cases that fail today on each front, with why in one line. */
export const GRPC_KNOWN_FAILING: Record<GrpcFrontName, Record<string, string>> = {
  'mesh api': {},
  'mesh sidecar': {
    GRPCRouteRequestHeaderModifier:
      "the sidecar's Host check answers 403 (PERMISSION_DENIED) to an :authority other than this machine's names; the case's calls carry :authority gateway_api_conformance.echo_basic.grpcecho.GrpcEcho",
  },
  'mesh proxy': {},
};
