/**
 * The route file (src/edge/routes/file.ts) and its matcher (src/edge/routes/table.ts): the
 * HTTPRoute shape, every kind of error (naming the file, the line, the route and the rule, exact
 * message), precedence, path/method/header/query matches and the weighted choice.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { normalizePath } from '../../src/base/http/path.js';
import { checkHandlers, parseGatewayDuration, parseRouteFile } from '../../src/edge/routes/file.js';
import { modifyHeaders, redirectLocation, rewritePath } from '../../src/edge/routes/effects.js';
import { CompiledRoutes, hostOf, type RouteRequest } from '../../src/edge/routes/table.js';
import { routeFileError } from '../fixtures/route-file-error.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

const error = routeFileError;

function table(text: string, random?: () => number): CompiledRoutes {
  return new CompiledRoutes(parseRouteFile(text, 'routes.yaml'), random);
}

function req(path: string, more: Partial<RouteRequest> = {}): RouteRequest {
  const q = path.indexOf('?');
  return { method: 'GET', host: 'example.com', path: q < 0 ? path : path.slice(0, q), query: q < 0 ? undefined : path.slice(q + 1), headers: {}, ...more };
}

describe('route file: parsing', () => {
  it('reads a full HTTPRoute, with defaults, several documents, and ignored fields', () => {
    const file = parseRouteFile(
      `${HEAD}metadata:
  name: greeter
  namespace: default
  labels: {team: a}
spec:
  parentRefs:
    - name: gw
  hostnames: [api.example.com, "*.example.org"]
  handler: rpc
  rules:
    - name: canary
      matches:
        - path: {type: PathPrefix, value: /greeter}
          method: POST
          headers: [{name: X-Tester, value: yes}]
          queryParams: [{type: RegularExpression, name: debug, value: "[01]"}]
      backendRefs:
        - {name: go.mesh.srv.greeter, version: v1, weight: 90, port: 8080, kind: Service, group: ""}
        - {name: go.mesh.srv.greeter, version: v2, weight: 10}
      timeouts: {request: 1m30s, backendRequest: 1m0s0ms}
---
{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "json"}, "spec": {"rules": [{"backendRefs": [{"name": "x"}]}]}}
---
`,
      'routes.yaml',
    );
    assert.equal(file.routes.length, 2);
    assert.match(file.version, /^[0-9a-f]{16}$/);
    const [a, b] = file.routes;
    assert.deepEqual(a, {
      name: 'greeter',
      namespace: 'default',
      parentRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'gw' }],
      line: 1,
      hostnames: ['api.example.com', '*.example.org'],
      handler: 'rpc',
      rules: [
        {
          name: 'canary',
          index: 0,
          line: 13,
          matches: [{ path: { type: 'PathPrefix', value: '/greeter' }, method: 'POST', headers: [{ type: 'Exact', name: 'x-tester', value: 'yes' }], queryParams: [{ type: 'RegularExpression', name: 'debug', value: '[01]' }] }],
          backendRefs: [
            { name: 'go.mesh.srv.greeter', version: 'v1', weight: 90 },
            { name: 'go.mesh.srv.greeter', version: 'v2', weight: 10 },
          ],
          requestTimeoutMs: 90_000,
          backendRequestTimeoutMs: 60_000,
          filters: { mirrors: [] },
        },
      ],
    });
    assert.deepEqual(b!.rules[0], { name: 'json-0', index: 0, line: 24, matches: [{ path: { type: 'PathPrefix', value: '/' }, headers: [], queryParams: [] }], backendRefs: [{ name: 'x', weight: 1 }], filters: { mirrors: [] } });
    assert.equal(b!.line, 24);
  });

  it('Gateway API durations', () => {
    assert.equal(parseGatewayDuration('1h30m'), 5_400_000);
    assert.equal(parseGatewayDuration('500ms'), 500);
    assert.equal(parseGatewayDuration('0s'), 0);
    assert.equal(parseGatewayDuration('1.5s'), undefined);
    assert.equal(parseGatewayDuration('10'), undefined);
  });

  it('every kind of error names the file, the line, the route and the rule', () => {
    const route = (rules: string) => `${HEAD}metadata: {name: r}\nspec:\n  rules:\n${rules}`;
    assert.equal(error('a: [\n'), 'routes.yaml line 2: Flow sequence in block collection must be sufficiently indented and end with a ]');
    assert.equal(error(`${HEAD}metadata: {name: r}\nspec: {}\nextra: 1\n`), 'routes.yaml line 5: HTTPRoute r extra: unknown field "extra" (an HTTPRoute has no such field)');
    assert.equal(error('apiVersion: v1\nkind: HTTPRoute\n'), 'routes.yaml line 1: apiVersion: must be gateway.networking.k8s.io/v1, not "v1"');
    assert.equal(error('apiVersion: gateway.networking.k8s.io/v1\nkind: TCPRoute\n'), 'routes.yaml line 2: kind: must be HTTPRoute, GRPCRoute or Gateway, not "TCPRoute"');
    assert.equal(error(`${HEAD}metadata: {name: Bad_Name}\n`), 'routes.yaml line 3: metadata.name: "Bad_Name" is not a valid name (lower case letters, digits, - and .)');
    assert.equal(error(`${HEAD}metadata: {name: r}\n`), 'routes.yaml line 1: HTTPRoute r: spec is required');
    assert.equal(error(route('    - backendRefs: [{name: a}]\n      bogus: 1\n')), 'routes.yaml line 7: HTTPRoute r spec.rules[0].bogus: unknown field "bogus" (an HTTPRouteRule has no such field)');
    assert.equal(error(route('    - backendRefs: [{name: a, weight: -1}]\n')), 'routes.yaml line 6: HTTPRoute r spec.rules[0].backendRefs[0].weight: must be an integer from 0 to 1000000');
    assert.equal(error(route('    - matches: [{path: {type: Exact, value: /a}}]\n      backendRefs: [{weight: 1}]\n')), 'routes.yaml line 7: HTTPRoute r spec.rules[0].backendRefs[0]: name is required (a mesh service)');
    assert.equal(error(route('    - matches: [{path: {type: Glob, value: /a}}]\n      backendRefs: [{name: a}]\n')), 'routes.yaml line 6: HTTPRoute r spec.rules[0].matches[0].path.type: must be Exact, PathPrefix or RegularExpression, not "Glob"');
    assert.equal(error(route('    - matches: [{path: {type: Exact, value: a}}]\n      backendRefs: [{name: a}]\n')), 'routes.yaml line 6: HTTPRoute r spec.rules[0].matches[0].path.value: must start with /');
    assert.equal(
      error(route('    - matches: [{path: {type: RegularExpression, value: "/(a)\\\\1"}}]\n      backendRefs: [{name: a}]\n')),
      'routes.yaml line 6: HTTPRoute r spec.rules[0].matches[0].path.value: invalid regex "/(a)\\\\1": invalid escape sequence: `\\1` (RE2 syntax: no backreferences, lookahead or lookbehind)',
    );
    assert.equal(error(route('    - matches: [{method: FETCH}]\n      backendRefs: [{name: a}]\n')), 'routes.yaml line 6: HTTPRoute r spec.rules[0].matches[0].method: must be one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH, not "FETCH"');
    assert.equal(error(route('    - matches: [{headers: [{name: "a b", value: x}]}]\n      backendRefs: [{name: a}]\n')), 'routes.yaml line 6: HTTPRoute r spec.rules[0].matches[0].headers[0].name: "a b" is not a valid header name');
    assert.equal(error(route('    - backendRefs: [{name: a}]\n      timeouts: {request: 1.5s}\n')), 'routes.yaml line 7: HTTPRoute r spec.rules[0].timeouts.request: must be a Gateway API duration such as 500ms, 10s or 1m30s');
    assert.equal(error(route('    - backendRefs: [{name: a}]\n      timeouts: {request: 1s, backendRequest: 2s}\n')), 'routes.yaml line 7: HTTPRoute r spec.rules[0].timeouts.backendRequest: must not be longer than timeouts.request');
    assert.equal(error(`${HEAD}metadata: {name: r}\nspec:\n  handler: event\n  rules: [{backendRefs: [{name: a}]}]\n`), 'routes.yaml line 5: HTTPRoute r spec.handler: must be api, rpc, proxy, not "event"');
    assert.equal(error(`${HEAD}metadata: {name: r}\nspec:\n  hostnames: ["a.com:80"]\n  rules: [{backendRefs: [{name: a}]}]\n`), 'routes.yaml line 5: HTTPRoute r spec.hostnames[0]: "a.com:80" is not a hostname (lower case, optionally *. first; no port, no IP address)');
    const one = `${HEAD}metadata: {name: r}\nspec: {rules: [{backendRefs: [{name: a}]}]}\n`;
    assert.equal(error(`${one}---\n${one}`), 'routes.yaml line 6: HTTPRoute r: the name is used twice (first at line 1)');
    assert.equal(error('{"apiVersion": "gateway.networking.k8s.io/v1",\n "kind": "HTTPRoute",\n "metadata": {"name": "r"},\n "spec": {"rules": [{"backendRefs": [{"name": "a", "wieght": 1}]}]}}\n'), 'routes.yaml line 4: HTTPRoute r spec.rules[0].backendRefs[0].wieght: unknown field "wieght" (an HTTPBackendRef has no such field)');
  });
});

describe('route file: retry, fault and filters', () => {
  const route = (rules: string, handler = 'proxy') => `${HEAD}metadata: {name: r}\nspec:\n  handler: ${handler}\n  rules:\n${rules}`;

  it('reads retry (with the budget), fault and every filter', () => {
    const file = parseRouteFile(
      route(`    - matches: [{path: {value: /a}}]
      backendRefs: [{name: a}]
      retry: {attempts: 2, codes: [503, 502, 503], backoff: 100ms, budget: {percent: 25, min: 1}}
      fault: {delay: {fixedDelay: 1s, percentage: 10}, abort: {httpStatus: 503, percentage: 0.5}}
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: "1"}], add: [{name: X-B, value: ""}], remove: [X-C]}}
        - {type: ResponseHeaderModifier, responseHeaderModifier: {remove: [Server]}}
        - {type: URLRewrite, urlRewrite: {hostname: b.example, path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: shadow, port: 80}}}
    - matches: [{path: {type: Exact, value: /old}}]
      filters: [{type: RequestRedirect, requestRedirect: {port: 8443, path: {type: ReplaceFullPath, replaceFullPath: /new}}}]
`),
      'routes.yaml',
    );
    const [a, b] = file.routes[0]!.rules;
    assert.deepEqual(a!.retry, { attempts: 2, codes: [503, 502], backoffMs: 100, budget: { percent: 25, minConcurrency: 1 } });
    assert.deepEqual(a!.fault, { delay: { ms: 1000, percentage: 10 }, abort: { status: 503, percentage: 0.5 } });
    assert.deepEqual(a!.filters, {
      requestHeaders: { set: [['x-a', '1']], add: [['x-b', '']], remove: ['x-c'] },
      responseHeaders: { set: [], add: [], remove: ['server'] },
      rewrite: { hostname: 'b.example', path: { type: 'ReplacePrefixMatch', value: '/b' } },
      mirrors: [{ service: 'shadow' }],
    });
    assert.deepEqual(b!.backendRefs, []);
    assert.deepEqual(b!.filters, { redirect: { statusCode: 302, port: 8443, path: { type: 'ReplaceFullPath', value: '/new' } }, mirrors: [] });
  });

  it('errors name the line and the field', () => {
    const r = (rule: string) => error(route(`    - backendRefs: [{name: a}]\n${rule}`));
    assert.equal(r('      filters: [{type: RequestHeaderModifier}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0]: requestHeaderModifier is required with type RequestHeaderModifier');
    assert.equal(r('      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Connection, value: close}]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestHeaderModifier.set[0].name: Connection cannot be modified (a hop-by-hop header, or the request\'s framing; URLRewrite sets the host)');
    assert.equal(r('      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {remove: [Mesh-Auth-Subject]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestHeaderModifier.remove[0]: Mesh-Auth-Subject cannot be modified (only the mesh edge sets it)');
    assert.equal(r('      filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: Mesh-Peer-Identity, value: x}]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].responseHeaderModifier.set[0].name: Mesh-Peer-Identity cannot be modified (only the mesh edge sets it)');
    // Compared as CGI-style backends read names: _ is -, case is one.
    assert.equal(r('      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Mesh_Auth_Subject, value: admin}]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestHeaderModifier.set[0].name: Mesh_Auth_Subject cannot be modified (only the mesh edge sets it)');
    assert.equal(r('      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: MESH_PEER-identity, value: x}]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestHeaderModifier.add[0].name: MESH_PEER-identity cannot be modified (only the mesh edge sets it)');
    assert.equal(r('      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Mesh_Endpoint, value: Admin.Reset}]}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestHeaderModifier.set[0].name: Mesh_Endpoint cannot be modified (backends read it as mesh-endpoint, a header the mesh sets or reads)');
    assert.equal(r('      filters: [{type: ExtensionRef, extensionRef: {name: x}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].type: ExtensionRef is not supported');
    assert.equal(r('      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 304}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestRedirect.statusCode: must be 301, 302, 303, 307, 308');
    assert.equal(r('      filters: [{type: RequestRedirect, requestRedirect: {statusCode: 200}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestRedirect.statusCode: must be an integer from 300 to 399');
    assert.equal(r('      filters: [{type: RequestRedirect, requestRedirect: {statusCode: "307"}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestRedirect.statusCode: must be an integer from 300 to 399');
    const m = (more: string) => r(`      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: b}, ${more}}}]\n`);
    const at = 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].requestMirror';
    assert.equal(m('percent: 101'), `${at}.percent: must be an integer from 0 to 100`);
    assert.equal(m('percent: -1'), `${at}.percent: must be an integer from 0 to 100`);
    assert.equal(m('percent: 12.5'), `${at}.percent: must be an integer from 0 to 100`);
    assert.equal(m('percent: "10"'), `${at}.percent: must be an integer from 0 to 100`);
    assert.equal(m('percent: 10, fraction: {numerator: 1}'), `${at}.fraction: percent and fraction cannot both be given (one share of the requests)`);
    assert.equal(m('fraction: {denominator: 10}'), `${at}.fraction: numerator is required`);
    assert.equal(m('fraction: {numerator: 11, denominator: 10}'), `${at}.fraction.numerator: must not be more than the denominator (10)`);
    assert.equal(m('fraction: {numerator: 101}'), `${at}.fraction.numerator: must not be more than the denominator (100)`);
    assert.equal(m('fraction: {numerator: 0, denominator: 0}'), `${at}.fraction.denominator: must be an integer from 1 to 1000000`);
    assert.equal(m('fraction: {numerator: 1, denominator: 2000000}'), `${at}.fraction.denominator: must be an integer from 1 to 1000000`);
    assert.equal(m('fraction: {numerator: -1}'), `${at}.fraction.numerator: must be an integer from 0 to 1000000`);
    assert.equal(m('fraction: {numerator: 1, percent: 2}'), `${at}.fraction.percent: unknown field "percent" (a Fraction has no such field)`);
    assert.equal(m('fraction: 0.5'), `${at}.fraction: must be a mapping (a Fraction)`);
    assert.equal(r('      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replacePrefixMatch: /x}}}]\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch: replacePrefixMatch does not go with type ReplaceFullPath');
    assert.equal(error(route('    - matches: [{path: {type: Exact, value: /a}}]\n      backendRefs: [{name: a}]\n      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}}]\n')), 'routes.yaml line 9: HTTPRoute r spec.rules[0].filters: ReplacePrefixMatch needs every match of the rule to be a PathPrefix');
    const target = (where: string, value: string) =>
      r(
        where === 'redirect'
          ? `      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: "${value}"}}}]\n`
          : `      filters: [{type: URLRewrite, urlRewrite: {path: {type: ${where === 'full' ? 'ReplaceFullPath, replaceFullPath' : 'ReplacePrefixMatch, replacePrefixMatch'}: "${value}"}}}]\n`,
      );
    const field = { full: 'urlRewrite.path.replaceFullPath', prefix: 'urlRewrite.path.replacePrefixMatch', redirect: 'requestRedirect.path.replaceFullPath' };
    for (const where of ['full', 'prefix', 'redirect'] as const) {
      const at = `routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].${field[where]}: must be a path in normal form: `;
      assert.equal(target(where, '/a/../internal'), `${at}write "/internal"`);
      assert.equal(target(where, '//evil.example/x'), `${at}an empty segment ("//") is refused`);
      assert.equal(target(where, '/a%2Fb'), `${at}an encoded "/" (%2F) is refused`);
      assert.equal(target(where, '/%2e%2e/internal'), `${at}".." climbs above the root`);
      assert.equal(target(where, '/a/./b'), `${at}write "/a/b"`);
      assert.equal(target(where, '/%7euser/%c3%a9'), `${at}write "/~user/%C3%A9"`);
      assert.equal(target(where, '/a;b'), `${at}";" (path parameters) is refused`);
      assert.equal(target(where, '/a%5Cb'), `${at}an encoded backslash (%5C) is refused`);
      assert.equal(target(where, '/a%00'), `${at}an encoded NUL (%00) is refused`);
    }
    assert.equal(r('      retry: {attempts: 11}\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].retry.attempts: must be an integer from 0 to 10');
    assert.equal(r('      retry: {codes: [200]}\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].retry.codes[0]: must be an integer from 400 to 599');
    assert.equal(r('      retry: {budget: {percent: 120}}\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].retry.budget.percent: must be a number from 0 to 100');
    assert.equal(r('      fault: {abort: {httpStatus: 503}}\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].fault.abort: percentage is required');
    assert.equal(r('      fault: {delay: {fixedDelay: 2m, percentage: 5}}\n'), 'routes.yaml line 8: HTTPRoute r spec.rules[0].fault.delay.fixedDelay: must be at most 60s');
    assert.equal(error(route('    - backendRefs: [{name: a, filters: [{type: RequestMirror}]}]\n')), 'routes.yaml line 7: HTTPRoute r spec.rules[0].backendRefs[0].filters[0].type: RequestMirror is not supported on a backendRef (put it on the rule)');
  });

  it('reads every redirect status, and a mirror\'s percent or fraction', () => {
    for (const code of [301, 302, 303, 307, 308]) {
      const file = parseRouteFile(route(`    - filters: [{type: RequestRedirect, requestRedirect: {statusCode: ${code}}}]\n`), 'routes.yaml');
      assert.equal(file.routes[0]!.rules[0]!.filters.redirect?.statusCode, code);
    }
    const file = parseRouteFile(
      route(`    - backendRefs: [{name: a}]
      filters:
        - {type: RequestMirror, requestMirror: {backendRef: {name: b}, percent: 20}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: c}, fraction: {numerator: 25, denominator: 50}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: d}, fraction: {numerator: 3}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: e}, percent: 0}}
`),
      'routes.yaml',
    );
    assert.deepEqual(file.routes[0]!.rules[0]!.filters.mirrors, [
      { service: 'b', fraction: { numerator: 20, denominator: 100 } },
      { service: 'c', fraction: { numerator: 25, denominator: 50 } },
      { service: 'd', fraction: { numerator: 3, denominator: 100 } },
      { service: 'e', fraction: { numerator: 0, denominator: 100 } },
    ]);
  });

  it('what only a proxy route does is refused on an rpc or api route', () => {
    const text = route('    - backendRefs: [{name: a}]\n      filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {remove: [Server]}}]\n', 'rpc');
    assert.throws(() => checkHandlers(parseRouteFile(text, 'routes.yaml'), 'proxy'), { message: "routes.yaml line 7: HTTPRoute r spec.rules[0].filters: a ResponseHeaderModifier needs a proxy route (handler: proxy); this route's handler is rpc" });
    checkHandlers(parseRouteFile(route('    - backendRefs: [{name: a}]\n      retry: {attempts: 1}\n', 'rpc'), 'routes.yaml'), 'api');
    const mirror = `${HEAD}metadata: {name: m}\nspec:\n  rules:\n    - backendRefs: [{name: a}]\n      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: b}}}]\n`;
    assert.throws(() => checkHandlers(parseRouteFile(mirror, 'routes.yaml'), 'api'), { message: "routes.yaml line 6: HTTPRoute m spec.rules[0].filters: a RequestMirror needs a proxy route (handler: proxy); this route's handler is api" });
    checkHandlers(parseRouteFile(mirror, 'routes.yaml'), 'proxy');
  });

  it('rewrites, redirects and header changes', () => {
    const prefix = (value: string) => ({ path: { type: 'PathPrefix' as const, value }, headers: [], queryParams: [] });
    const swap = (value: string) => ({ type: 'ReplacePrefixMatch' as const, value });
    assert.equal(rewritePath('/old/a', swap('/new'), prefix('/old')), '/new/a');
    assert.equal(rewritePath('/old', swap('/new'), prefix('/old/')), '/new');
    assert.equal(rewritePath('/old/a', swap('/'), prefix('/old')), '/a');
    assert.equal(rewritePath('/old', swap('/'), prefix('/old')), '/');
    assert.equal(rewritePath('/a/b', swap('/x'), prefix('/')), '/x/a/b');
    assert.equal(rewritePath('/a/b', { type: 'ReplaceFullPath', value: '/f' }, prefix('/a')), '/f');
    const req = { secure: false, host: 'shop.example:8080', path: '/old/a', query: 'q=1' };
    assert.equal(redirectLocation({ statusCode: 302 }, prefix('/old'), req), 'http://shop.example:8080/old/a?q=1');
    assert.equal(redirectLocation({ statusCode: 301, scheme: 'https' }, prefix('/old'), req), 'https://shop.example/old/a?q=1');
    assert.equal(redirectLocation({ statusCode: 301, scheme: 'https', port: 443, hostname: 'b.example', path: swap('/n') }, prefix('/old'), req), 'https://b.example/n/a?q=1');
    assert.equal(redirectLocation({ statusCode: 302, port: 9000 }, prefix('/old'), { ...req, host: '[::1]:8080', query: undefined }), 'http://[::1]:9000/old/a');
    for (const host of ['evil.example/x?', 'a@evil.example', '', undefined, 'a b', 'x:8o', 'x:65536', '[::1', '[evil]', '::1', '-a.example', `${'a'.repeat(64)}.example`]) {
      assert.equal(redirectLocation({ statusCode: 302 }, prefix('/old'), { ...req, host }), undefined, String(host));
      assert.equal(redirectLocation({ statusCode: 302, hostname: 'b.example', port: 1 }, prefix('/old'), { ...req, host }), undefined, String(host));
    }
    assert.equal(redirectLocation({ statusCode: 302 }, prefix('/old'), { ...req, host: 'x:' }), 'http://x/old/a?q=1');
    assert.deepEqual(modifyHeaders(['Host', 'h', 'X-A', '1', 'x-a', '2', 'X-B', 'b', 'X-C', 'c'], { set: [['x-a', 'new']], add: [['x-b', 'more']], remove: ['x-c'] }), ['Host', 'h', 'X-B', 'b', 'x-a', 'new', 'x-b', 'more']);
  });
});

describe('route file: rewritten paths stay in normal form', () => {
  it('ReplacePrefixMatch of a normal replacement on a normal path matched by its prefix never makes // or a dot segment', () => {
    // Segments made of what could turn into dot segments or empty ones when joined carelessly.
    const segment = fc.array(fc.constantFrom('.', '..', 'a', 'b.', '.c', '%2E', '%41', '~', '-'), { minLength: 0, maxLength: 3 }).map((parts) => parts.join(''));
    const normal = fc
      .tuple(fc.array(segment, { minLength: 0, maxLength: 4 }), fc.boolean())
      .map(([segments, slash]) => normalizePath(`/${segments.join('/')}${slash && segments.length > 0 ? '/' : ''}`))
      .filter((n): n is { path: string } => 'path' in n)
      .map((n) => n.path);
    fc.assert(
      fc.property(normal, normal, normal, (prefixValue, replacement, tail) => {
        const prefix = prefixValue.length > 1 && prefixValue.endsWith('/') ? prefixValue.slice(0, -1) : prefixValue;
        const path = prefix === '/' ? tail : tail === '/' ? prefix : `${prefix}${tail}`;
        const request = normalizePath(path);
        fc.pre('path' in request && request.path === path);
        const match = { path: { type: 'PathPrefix' as const, value: prefixValue }, headers: [], queryParams: [] };
        const out = rewritePath(path, { type: 'ReplacePrefixMatch', value: replacement }, match);
        const again = normalizePath(out);
        assert.ok('path' in again && again.path === out, `${path} with ${prefixValue} → ${replacement}: ${out} is not in normal form`);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('route file: matching', () => {
  const file = `${HEAD}metadata: {name: paths}
spec:
  rules:
    - name: exact
      matches: [{path: {type: Exact, value: /a/b}}]
      backendRefs: [{name: exact}]
    - name: prefix
      matches: [{path: {type: PathPrefix, value: /a/}}]
      backendRefs: [{name: prefix}]
    - name: regex
      matches: [{path: {type: RegularExpression, value: "/a/[0-9]+"}}]
      backendRefs: [{name: regex}]
    - name: method
      matches: [{path: {value: /m}, method: POST}]
      backendRefs: [{name: post}]
    - name: header
      matches: [{path: {value: /m}, headers: [{name: X-Tester, value: ann}]}, {path: {value: /m}, headers: [{type: RegularExpression, name: x-user, value: "b.*"}]}]
      backendRefs: [{name: header}]
    - name: query
      matches: [{path: {value: /m}, queryParams: [{name: v, value: "2"}]}]
      backendRefs: [{name: query}]
---
${HEAD}metadata: {name: hosts}
spec:
  hostnames: ["*.example.org", "exact.example.org"]
  rules:
    - matches: [{path: {value: /h}}]
      backendRefs: [{name: hosted}]
`;
  const t = table(file);
  const service = (r: RouteRequest) => t.match(r)?.backend?.name;

  it('paths: exact, then regex, then the longest prefix element by element', () => {
    assert.equal(service(req('/a/b')), 'exact');
    assert.equal(service(req('/a/12')), 'regex');
    assert.equal(service(req('/a/12/x')), 'prefix');
    assert.equal(service(req('/a')), 'prefix');
    assert.equal(service(req('/ab')), undefined);
    assert.equal(service(req('/')), undefined);
  });

  it('method, header (exact and regex, names in any case) and query parameter', () => {
    assert.equal(service(req('/m', { method: 'POST' })), 'post');
    assert.equal(service(req('/m', { headers: { 'x-tester': 'ann' } })), 'header');
    assert.equal(service(req('/m', { headers: { 'x-tester': 'Ann' } })), undefined);
    assert.equal(service(req('/m', { headers: { 'x-user': 'bob' } })), 'header');
    assert.equal(service(req('/m', { headers: { 'x-user': 'abob' } })), undefined);
    assert.equal(service(req('/m?v=2')), 'query');
    assert.equal(service(req('/m?v=3')), undefined);
    assert.equal(service(req('/m', { method: 'POST', headers: { 'x-tester': 'ann' } })), 'post');
  });

  it('hostnames: exact, wildcards (never the bare domain), ports ignored', () => {
    assert.equal(service(req('/h', { host: 'exact.example.org:8080' })), 'hosted');
    assert.equal(service(req('/h', { host: 'A.B.Example.org' })), 'hosted');
    assert.equal(service(req('/h', { host: 'example.org' })), undefined);
    assert.equal(service(req('/h', { host: undefined })), undefined);
    assert.equal(hostOf('[::1]:80'), '[::1]');
    // A Host that is not host[:port] matches no route with hostnames.
    for (const host of ['a@exact.example.org', 'x.example.org/y?', 'x.example.org:80/', '']) {
      assert.equal(hostOf(host), undefined, host);
      assert.equal(service(req('/h', { host })), undefined, host);
    }
  });

  it('every kind of path is found whatever its first segment: exact /, prefixes, regexes, the / prefix', () => {
    const t2 = table(`${HEAD}metadata: {name: f}
spec:
  rules:
    - {name: root, matches: [{path: {type: Exact, value: /}}], backendRefs: [{name: root}]}
    - {name: shop, matches: [{path: {value: /shop/cart}}], backendRefs: [{name: shop}]}
    - {name: re, matches: [{path: {type: RegularExpression, value: "/(shop|x)/re"}}], backendRefs: [{name: re}]}
    - {name: all, matches: [{path: {value: /}}], backendRefs: [{name: all}]}
`);
    const name = (path: string) => t2.match(req(path))?.rule.name;
    assert.equal(name('/'), 'root');
    assert.equal(name('/shop/cart/1'), 'shop');
    assert.equal(name('/shop/re'), 're');
    assert.equal(name('/x/re'), 're');
    assert.equal(name('/shop'), 'all');
    assert.equal(name('/other'), 'all');
  });

  it('a rule names itself for stats; the choice follows the weights', () => {
    assert.equal(t.match(req('/a/b'))?.rule.name, 'exact');
    assert.equal(t.match(req('/h', { host: 'x.example.org' }))?.rule.name, 'hosts-0');
    const split = `${HEAD}metadata: {name: s}\nspec: {rules: [{backendRefs: [{name: g, version: v1, weight: 90}, {name: g, version: v2, weight: 10}, {name: g, version: v3, weight: 0}]}]}\n`;
    let r = 0;
    const seq = table(split, () => r);
    const at = (x: number) => ((r = x), seq.match(req('/'))?.backend?.version);
    assert.equal(at(0), 'v1');
    assert.equal(at(0.899), 'v1');
    assert.equal(at(0.9), 'v2');
    assert.equal(at(0.9999), 'v2');
    const zero = table(`${HEAD}metadata: {name: z}\nspec: {rules: [{backendRefs: [{name: g, weight: 0}]}]}\n`);
    const choice = zero.match(req('/'));
    assert.equal(choice?.rule.name, 'z-0');
    assert.equal(choice?.backend, undefined);
  });
});
