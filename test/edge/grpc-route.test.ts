/**
 * GRPCRoute documents in a route file (src/edge/routes/file.ts) and their matcher
 * (src/edge/routes/grpc-route.ts): the shape mesh reads, every kind of refusal (file, line, route
 * and rule, exact message), the Gateway API's precedence, and what a match gives the call (its
 * backend and version, the header modifiers, the mirrors, UNAVAILABLE answers).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { CompiledGrpcRoutes, modifyHeaderObject, type GrpcRouteAnswer } from '../../src/edge/routes/grpc-route.js';
import { routeStatus } from '../../src/edge/routes/status.js';
import { routeFileError } from '../fixtures/route-file-error.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g}\n';

const error = routeFileError;

/** A GRPCRoute of one rule. */
function rule(body: string): string {
  return `${HEAD}spec:\n  rules:\n    - ${body.trim().split('\n').join('\n      ')}\n`;
}

function table(text: string, random?: () => number): CompiledGrpcRoutes {
  return new CompiledGrpcRoutes(parseRouteFile(text, 'routes.yaml').grpcRoutes, random);
}

function call(t: CompiledGrpcRoutes, path: string, headers: Record<string, string> = {}, authority = 'example.com'): GrpcRouteAnswer | undefined {
  return t.match({ path, authority, headers: { ':path': path, ':authority': authority, ...headers } });
}

/** The rule a call takes, or `-` for none. */
function ruleOf(t: CompiledGrpcRoutes, path: string, headers: Record<string, string> = {}, authority?: string): string {
  return call(t, path, headers, authority)?.rule ?? '-';
}

describe('GRPCRoute: parsing', () => {
  it('reads a full GRPCRoute next to an HTTPRoute, with defaults and ignored fields', () => {
    const file = parseRouteFile(
      `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: greeter, namespace: default, labels: {team: a}}
spec:
  parentRefs: [{name: gw, sectionName: grpc}]
  hostnames: [grpc.example.com, "*.example.org"]
  rules:
    - name: canary
      matches:
        - method: {service: helloworld.Greeter, method: SayHello}
          headers: [{name: X-Tester, value: ann}, {type: RegularExpression, name: x-v, value: "[0-9]+"}]
        - method: {type: RegularExpression, service: "helloworld\\\\..*"}
      backendRefs:
        - {name: go.mesh.srv.greeter, version: v1, weight: 90, port: 50051, kind: Service, group: ""}
        - name: go.mesh.srv.greeter
          version: v2
          weight: 10
          filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {add: [{name: x-canary, value: "1"}]}}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {set: [{name: X-Env, value: canary}], remove: [x-debug]}
        - type: RequestMirror
          requestMirror: {backendRef: {name: go.mesh.srv.shadow}, percent: 10}
    - backendRefs: [{name: go.mesh.srv.other}]
status: {parents: []}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: greeter}
spec:
  rules: [{backendRefs: [{name: go.mesh.srv.web}]}]
`,
      'routes.yaml',
    );
    assert.equal(file.routes.length, 1);
    assert.deepEqual(file.grpcRoutes, [
      {
        name: 'greeter',
        namespace: 'default',
        line: 1,
        hostnames: ['grpc.example.com', '*.example.org'],
        parentRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'gw', sectionName: 'grpc' }],
        rules: [
          {
            name: 'canary',
            index: 0,
            line: 8,
            matches: [
              {
                method: { type: 'Exact', service: 'helloworld.Greeter', method: 'SayHello' },
                headers: [
                  { type: 'Exact', name: 'x-tester', value: 'ann' },
                  { type: 'RegularExpression', name: 'x-v', value: '[0-9]+' },
                ],
              },
              { method: { type: 'RegularExpression', service: 'helloworld\\..*' }, headers: [] },
            ],
            backendRefs: [
              { name: 'go.mesh.srv.greeter', version: 'v1', weight: 90 },
              { name: 'go.mesh.srv.greeter', version: 'v2', weight: 10, filters: { mirrors: [], responseHeaders: { set: [], add: [['x-canary', '1']], remove: [] } } },
            ],
            filters: { mirrors: [{ service: 'go.mesh.srv.shadow', fraction: { numerator: 10, denominator: 100 } }], requestHeaders: { set: [['x-env', 'canary']], add: [], remove: ['x-debug'] } },
          },
          { name: 'greeter-1', index: 1, line: 24, matches: [{ headers: [] }], backendRefs: [{ name: 'go.mesh.srv.other', weight: 1 }], filters: { mirrors: [] } },
        ],
      },
    ]);
  });

  it('refuses what a GRPCRoute does not have, naming the file, line, route and rule', () => {
    const cases: Array<[string, string]> = [
      [rule('matches: [{path: {value: /x}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].path: unknown field "path" (a GRPCRouteMatch has no such field)'],
      [rule('matches: [{method: {type: Prefix, service: a.B}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].method.type: must be Exact or RegularExpression, not "Prefix"'],
      [rule('matches: [{method: {type: Exact}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].method: service or method is required (one or both)'],
      [rule('matches: [{method: {service: a/B}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].method.service: "a/B" is not a gRPC service name (package.Service: letters, digits and _, parts joined by .)'],
      [rule('matches: [{method: {method: 1Say}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].method.method: "1Say" is not a gRPC method name (letters, digits and _, not a digit first)'],
      [rule('matches: [{method: {type: RegularExpression, method: "(a"}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].method.method: invalid regex "(a": missing closing ): `(a`'],
      [rule('matches: [{headers: [{name: x, value: a}, {name: X, value: b}]}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].matches[0].headers[1].name: "x" is matched twice'],
      [rule('filters: [{type: URLRewrite, urlRewrite: {hostname: a.b}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].filters[0].urlRewrite: unknown field "urlRewrite" (a GRPCRouteFilter has no such field)'],
      [rule('filters: [{type: RequestRedirect}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].filters[0].type: must be one of RequestHeaderModifier, ResponseHeaderModifier, RequestMirror, not "RequestRedirect"'],
      [rule('filters: [{type: ExtensionRef, extensionRef: {group: a, kind: B, name: c}}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].filters[0].type: ExtensionRef is not supported'],
      [rule('backendRefs: [{name: a, filters: [{type: RequestMirror, requestMirror: {backendRef: {name: b}}}]}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].backendRefs[0].filters[0].type: RequestMirror is not supported on a backendRef (put it on the rule)'],
      [rule('backendRefs: [{name: a, version: "v 1"}]'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].backendRefs[0].version: not a registry version: "v 1" is not a valid version (letters, digits, ".", "-", "_", ":", "/", "+", starting with a letter or a digit)'],
      [rule('timeouts: {request: 1s}'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].timeouts: unknown field "timeouts" (a GRPCRouteRule has no such field)'],
      [rule('sessionPersistence: {sessionName: s}'), 'routes.yaml line 6: GRPCRoute g spec.rules[0].sessionPersistence: is not supported on a GRPCRoute (each call is balanced on its own)'],
      [`${HEAD}spec:\n  handler: proxy\n  rules: [{}]\n`, 'routes.yaml line 5: GRPCRoute g spec.handler: unknown field "handler" (a GRPCRouteSpec has no such field)'],
      [`${HEAD}spec:\n  rules: []\n`, 'routes.yaml line 5: GRPCRoute g spec.rules: rules: at least one rule is needed'],
      ['apiVersion: gateway.networking.k8s.io/v1beta1\nkind: GRPCRoute\nmetadata: {name: g}\nspec: {rules: [{}]}\n', 'routes.yaml line 1: GRPCRoute g apiVersion: must be gateway.networking.k8s.io/v1, not "gateway.networking.k8s.io/v1beta1"'],
      [`${HEAD}spec: {rules: [{}]}\n---\n${HEAD}spec: {rules: [{}]}\n`, 'routes.yaml line 6: GRPCRoute g: the name is used twice (first at line 1)'],
      ['apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\n', 'routes.yaml line 2: kind: must be HTTPRoute, GRPCRoute or Gateway, not "TCPRoute"'],
    ];
    for (const [text, want] of cases) assert.equal(error(text), want, text);
  });
});

describe('GRPCRoute: matching', () => {
  it('orders by hostname, then Exact over RegularExpression, then service and method characters, then header matches, then the file', () => {
    const t = table(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: any}
spec:
  rules:
    - {name: all, backendRefs: [{name: s}]}
    - {name: tester, matches: [{headers: [{name: x-tester, value: ann}]}], backendRefs: [{name: s}]}
    - {name: regex, matches: [{method: {type: RegularExpression, service: "helloworld\\\\..*", method: "Say.*"}}], backendRefs: [{name: s}]}
    - {name: service, matches: [{method: {service: helloworld.Greeter}}], backendRefs: [{name: s}]}
    - {name: method, matches: [{method: {method: SayHello}}], backendRefs: [{name: s}]}
    - {name: both, matches: [{method: {service: helloworld.Greeter, method: SayHello}}], backendRefs: [{name: s}]}
    - {name: both-tester, matches: [{method: {service: helloworld.Greeter, method: SayHello}, headers: [{name: x-tester, value: ann}]}], backendRefs: [{name: s}]}
    - {name: both-again, matches: [{method: {service: helloworld.Greeter, method: SayHello}}], backendRefs: [{name: s}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: host}
spec:
  hostnames: [grpc.example.com]
  rules:
    - {name: host-any, backendRefs: [{name: s}]}
`);
    assert.equal(ruleOf(t, '/helloworld.Greeter/SayHello', { 'x-tester': 'ann' }), 'both-tester');
    assert.equal(ruleOf(t, '/helloworld.Greeter/SayHello'), 'both');
    assert.equal(ruleOf(t, '/helloworld.Greeter/Chat'), 'service');
    assert.equal(ruleOf(t, '/other.Svc/SayHello'), 'method');
    assert.equal(ruleOf(t, '/helloworld.Other/SayLater'), 'regex');
    assert.equal(ruleOf(t, '/other.Svc/Chat', { 'x-tester': 'ann' }), 'tester');
    assert.equal(ruleOf(t, '/other.Svc/Chat'), 'all');
    assert.equal(ruleOf(t, '/helloworld.Greeter/SayHello', {}, 'grpc.example.com:443'), 'host-any');
    // A service match is whole: helloworld.Greeter is not helloworld.GreeterV2.
    assert.equal(ruleOf(t, '/helloworld.GreeterV2/Chat'), 'all');
  });

  it('a call no route matches is not taken', () => {
    const t = table(rule('matches: [{method: {service: a.B, method: C}}]\nbackendRefs: [{name: s}]'));
    assert.equal(call(t, '/a.B/D'), undefined);
    assert.equal(ruleOf(t, '/a.B/C'), 'g-0');
  });

  it('draws the backend by weight, with its version; modifies the request and answer headers; names the mirrors', () => {
    const text = rule(`
backendRefs:
  - {name: go.mesh.srv.greeter, version: v1, weight: 0}
  - name: go.mesh.srv.greeter
    version: v2
    weight: 1
    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: x-tag, value: two}]}}]
filters:
  - type: RequestHeaderModifier
    requestHeaderModifier: {set: [{name: x-env, value: canary}], add: [{name: x-tag, value: one}], remove: [x-debug]}
  - type: ResponseHeaderModifier
    responseHeaderModifier: {set: [{name: x-route, value: g}], remove: [x-internal]}
  - type: RequestMirror
    requestMirror: {backendRef: {name: go.mesh.srv.shadow}}`);
    for (const r of [0, 0.5, 0.999]) {
      const a = call(table(text, () => r), '/a.B/C', { 'x-debug': '1', 'x-env': 'prod', 'x-keep': 'k' });
      assert.ok(a?.kind === 'backend');
      assert.equal(a.service, 'go.mesh.srv.greeter');
      assert.equal(a.version, 'v2');
      assert.deepEqual(a.requestHeaders, { ':path': '/a.B/C', ':authority': 'example.com', 'x-keep': 'k', 'x-env': 'canary', 'x-tag': 'one, two' });
      assert.deepEqual(a.mirrors, [{ service: 'go.mesh.srv.shadow' }]);
      const answer = { ':status': 200, 'content-type': 'application/grpc', 'x-internal': 'secret' };
      a.responseHeaders!(answer);
      assert.deepEqual(answer, { ':status': 200, 'content-type': 'application/grpc', 'x-route': 'g' });
    }
  });

  it('a rule it cannot send to answers UNAVAILABLE with why', () => {
    const unavailable = (body: string) => {
      const a = call(table(rule(body)), '/a.B/C');
      assert.ok(a?.kind === 'unavailable');
      return a.message;
    };
    assert.equal(unavailable('name: none'), 'route g: the rule has no backendRefs');
    assert.equal(unavailable('backendRefs: [{name: a, weight: 0}, {name: b, weight: 0}]'), 'route g: every backendRef of the rule weighs 0');
    assert.equal(unavailable('backendRefs: [{name: bucket, kind: Bucket, group: storage.example}]'), 'route g: backend "bucket" is a "Bucket" of group "storage.example", not a mesh service');
  });

  it('modifyHeaderObject keeps pseudo-headers and every value', () => {
    assert.deepEqual(modifyHeaderObject({ ':path': '/a.B/C', 'x-a': ['1', '2'], 'set-cookie': ['a=1'] }, [{ set: [], add: [['set-cookie', 'b=2'], ['x-a', '3']], remove: [] }]), {
      ':path': '/a.B/C',
      'x-a': '1, 2, 3',
      'set-cookie': ['a=1', 'b=2'],
    });
  });
});

describe('GRPCRoute: status', () => {
  it('reports Accepted and ResolvedRefs, and the rules whose calls answer UNAVAILABLE', () => {
    const file = parseRouteFile(rule('backendRefs: [{name: go.mesh.srv.greeter}, {name: go.mesh.srv.gone}]\nfilters: [{type: RequestMirror, requestMirror: {backendRef: {name: go.mesh.srv.shadow}}}]') + '    - backendRefs: [{name: go.mesh.srv.greeter, weight: 0}]\n', 'routes.yaml');
    assert.deepEqual(routeStatus(file, (s) => s === 'go.mesh.srv.greeter'), [
      {
        kind: 'GRPCRoute',
        route: 'g',
        line: 1,
        conditions: [
          { type: 'Accepted', status: 'True', reason: 'Accepted', message: "the route is in use for gRPC calls on the front end's own listener" },
          {
            type: 'ResolvedRefs',
            status: 'False',
            reason: 'BackendNotFound',
            message: 'rules[0] (g-0) backendRefs[1]: service go.mesh.srv.gone is not in the registry; rules[0] (g-0) RequestMirror: service go.mesh.srv.shadow is not in the registry',
          },
        ],
        rules: [{ rule: 'g-1', index: 1, line: 8, note: 'every backend has weight 0: its calls answer UNAVAILABLE' }],
      },
    ]);
  });
});

/** Two upstream conformance cases (conformance/tests/grpcroute-*.yaml of kubernetes-sigs/gateway-api), their manifests as written: which backend each call reaches; `-` where upstream expects UNIMPLEMENTED (no route). */
describe('GRPCRoute: upstream conformance cases, matched', () => {
  const ECHO = '/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho';
  const backendOf = (t: CompiledGrpcRoutes, path: string, headers: Record<string, string> = {}) => {
    const a = call(t, path, headers);
    return a?.kind === 'backend' ? a.service : '-';
  };

  it('GRPCExactMethodMatching', () => {
    const t = table(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: exact-matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - method:
        service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho
        method: Echo
    backendRefs:
    - name: grpc-infra-backend-v1
      port: 8080
  - matches:
    - method:
        service: gateway_api_conformance.echo_basic.grpcecho.GrpcEcho
        method: EchoTwo
    backendRefs:
    - name: grpc-infra-backend-v2
      port: 8080`);
    assert.equal(backendOf(t, `${ECHO}/Echo`), 'grpc-infra-backend-v1');
    assert.equal(backendOf(t, `${ECHO}/EchoTwo`), 'grpc-infra-backend-v2');
    assert.equal(backendOf(t, `${ECHO}/EchoThree`), '-');
  });

  it('GRPCRouteHeaderMatching', () => {
    const t = table(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: grpc-header-matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  # Matches "version: one"
  - matches:
    - headers:
      - name: version
        value: one
    backendRefs:
    - name: grpc-infra-backend-v1
      port: 8080
  # Matches "version: two"
  - matches:
    - headers:
      - name: version
        value: two
    backendRefs:
    - name: grpc-infra-backend-v2
      port: 8080
  # Matches "version: two" AND "color: orange"
  - matches:
    - headers:
      - name: version
        value: two
      - name: color
        value: orange
    backendRefs:
    - name: grpc-infra-backend-v1
      port: 8080
  # Matches "color: blue" OR "color: green"
  - matches:
    - headers:
      - name: color
        value: blue
    - headers:
      - name: color
        value: green
    backendRefs:
    - name: grpc-infra-backend-v1
      port: 8080
  # Matches "color: red" OR "color: yellow"
  - matches:
    - headers:
      - name: color
        value: red
    - headers:
      - name: color
        value: yellow
    backendRefs:
    - name: grpc-infra-backend-v2
      port: 8080`);
    const cases: Array<[Record<string, string>, string]> = [
      [{ version: 'one' }, 'grpc-infra-backend-v1'],
      [{ version: 'two' }, 'grpc-infra-backend-v2'],
      [{ version: 'two', color: 'orange' }, 'grpc-infra-backend-v1'],
      [{ version: 'two', color: 'blue' }, 'grpc-infra-backend-v2'],
      [{ color: 'orange' }, '-'],
      [{ 'some-other-header': 'one' }, '-'],
      [{ color: 'blue' }, 'grpc-infra-backend-v1'],
      [{ color: 'green' }, 'grpc-infra-backend-v1'],
      [{ color: 'red' }, 'grpc-infra-backend-v2'],
      [{ color: 'yellow' }, 'grpc-infra-backend-v2'],
      [{ color: 'purple' }, '-'],
    ];
    for (const [headers, want] of cases) assert.equal(backendOf(t, `${ECHO}/Echo`, headers), want, JSON.stringify(headers));
  });
});
