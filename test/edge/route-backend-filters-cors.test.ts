/**
 * A route file's backendRef filters and the CORS filter (docs/routing.md "filters"): what the
 * file accepts and refuses (exact messages), and what a matched rule makes of a request
 * (routeAction, the RuleEffects a request is sent with, routeCorsAnswer).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { corsOriginAllowed, routeCorsAnswer, type RouteCorsSpec } from '../../src/base/http/cors.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { checkHandlers, parseRouteFile } from '../../src/edge/routes/file.js';
import { RouteEffectsCache, routeAction, type RouteAction } from '../../src/edge/routes/effects.js';
import { CompiledRoutes } from '../../src/edge/routes/table.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { http } from '../helpers.js';
import { startEdgeGateway } from '../fixtures/edge-gateway.js';
import { routeFileError } from '../fixtures/route-file-error.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const route = (rules: string, handler = 'proxy') => `${HEAD}metadata: {name: r}\nspec:\n  handler: ${handler}\n  rules:\n${rules}`;

const error = routeFileError;

/** The rule's action for one request, `random` drawing the backend. */
function act(text: string, request: { path?: string; method?: string; headers?: Record<string, string> } = {}, random = () => 0): RouteAction {
  const table = new CompiledRoutes(parseRouteFile(text, 'routes.yaml'), random);
  const path = request.path ?? '/';
  const headers = { host: 'shop.example', ...(request.headers ?? {}) };
  const choice = table.match({ method: request.method ?? 'GET', host: headers.host, path, query: undefined, headers });
  assert.ok(choice, 'no route matched');
  const effects = new RouteEffectsCache(new StatsStore()).of(choice);
  return routeAction(choice, effects, { secure: false, host: headers.host, path, query: undefined, errorId: 'test', method: request.method ?? 'GET', headers });
}

const cors = (fields: string) => route(`    - backendRefs: [{name: a}]\n      filters: [{type: CORS, cors: {${fields}}}]\n`);

describe('route file: a backendRef\'s filters', () => {
  const two = `    - backendRefs:
        - name: a
          filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Backend, value: a}]}}]
        - name: b
          filters:
            - {type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: X-Backend, value: b}], remove: [X-Rule]}}
            - {type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: X-Answered-By, value: b}]}}
            - {type: URLRewrite, urlRewrite: {hostname: b.example, path: {type: ReplaceFullPath, replaceFullPath: /b}}}
      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Rule, value: r}]}}]
`;

  it('are read, and applied after the rule\'s only when their backend is picked', () => {
    const file = parseRouteFile(route(two), 'routes.yaml');
    assert.deepEqual(file.routes[0]!.rules[0]!.backendRefs[0]!.filters, { mirrors: [], requestHeaders: { set: [['x-backend', 'a']], add: [], remove: [] } });
    const a = act(route(two), {}, () => 0.1);
    assert.equal(a.kind, 'send');
    assert.ok(a.kind === 'send');
    assert.equal(a.backend.name, 'a');
    assert.equal(a.path, '/');
    assert.equal(a.policy.path, undefined);
    assert.deepEqual(a.policy.effects!.requestHeaders(['host', 'shop.example', 'X-Backend', 'client']), ['host', 'shop.example', 'x-rule', 'r', 'x-backend', 'a']);
    assert.equal(a.policy.effects!.responseHeaders(), undefined);
    const b = act(route(two), {}, () => 0.9);
    assert.ok(b.kind === 'send');
    assert.equal(b.backend.name, 'b');
    assert.equal(b.path, '/b');
    assert.equal(b.policy.path, '/b');
    // The rule's header set, then the backend's removal of it; the backend's host rewrite.
    assert.deepEqual(b.policy.effects!.requestHeaders(['host', 'shop.example', 'X-Backend', 'client']), ['X-Backend', 'client', 'x-backend', 'b', 'host', 'b.example']);
    assert.deepEqual(b.policy.effects!.responseHeaders()!(['Content-Type', 'text/plain']), ['Content-Type', 'text/plain', 'x-answered-by', 'b']);
    assert.deepEqual(b.policy.effects!.metadata({ 'x-rule': 'client' }), { 'x-backend': 'b' });
    // A request's view keeps the rule's stats, budget and retries.
    const table = new CompiledRoutes(parseRouteFile(route(two), 'routes.yaml'), () => 0.9);
    const choice = table.match({ method: 'GET', host: 'shop.example', path: '/', query: undefined, headers: {} })!;
    const effects = new RouteEffectsCache(new StatsStore()).of(choice);
    const view = effects.withRequest(choice.backend!.filters, undefined);
    assert.notEqual(view, effects);
    assert.equal(view.stats, effects.stats);
    assert.equal(view.rule, effects.rule);
    assert.equal(effects.withRequest(undefined, undefined), effects);
  });

  it('a backend\'s RequestRedirect answers when that backend is picked', () => {
    const text = route(`    - matches: [{path: {type: PathPrefix, value: /old}}]
      backendRefs:
        - name: a
          filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}}]
        - name: b
`);
    const a = act(text, { path: '/old/x' }, () => 0.1);
    assert.ok(a.kind === 'redirect');
    assert.equal(a.status, 301);
    assert.equal(a.location, 'http://shop.example/new/x');
    assert.equal(act(text, { path: '/old/x' }, () => 0.9).kind, 'send');
  });

  it('bad filters are refused naming the file, the line and the field', () => {
    const one = (filters: string, more = '') => error(route(`    - backendRefs:\n        - name: a\n          filters: ${filters}\n${more}`));
    assert.equal(one('[{type: RequestMirror, requestMirror: {backendRef: {name: b}}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters[0].type: RequestMirror is not supported on a backendRef (put it on the rule)');
    assert.equal(one('[{type: CORS, cors: {allowOrigins: ["*"]}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters[0].type: CORS is not supported on a backendRef (put it on the rule)');
    assert.equal(one('[{type: ExtensionRef, extensionRef: {name: x}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters[0].type: ExtensionRef is not supported');
    assert.equal(one('[{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Mesh-Auth-Subject, value: x}]}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters[0].requestHeaderModifier.set[0].name: Mesh-Auth-Subject cannot be modified (only the mesh edge sets it)');
    assert.equal(one('[{type: RequestHeaderModifier, requestHeaderModifier: {}}, {type: RequestHeaderModifier, requestHeaderModifier: {}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters[1].type: RequestHeaderModifier is given twice');
    assert.equal(one('[{type: RequestRedirect, requestRedirect: {}}, {type: URLRewrite, urlRewrite: {}}]'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters: RequestRedirect answers the request itself: it cannot go with URLRewrite, RequestHeaderModifier or RequestMirror');
    assert.equal(one('{type: URLRewrite}'), 'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters: must be a list');
    assert.equal(
      one('[{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}}]', '      matches: [{path: {type: Exact, value: /a}}]\n'),
      'routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters: ReplacePrefixMatch needs every match of the rule to be a PathPrefix',
    );
    assert.equal(
      one('[{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /x}}}]', '      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /y}}}]\n'),
      "routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters: a URLRewrite's path is given on the rule too: give it on one of them",
    );
    assert.equal(
      one('[{type: RequestRedirect, requestRedirect: {}}]', '      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: m}}}]\n'),
      "routes.yaml line 9: HTTPRoute r spec.rules[0].backendRefs[0].filters: RequestRedirect answers the request itself: it cannot go with the rule's RequestMirror",
    );
    // An empty list is no filters.
    assert.equal(parseRouteFile(route('    - backendRefs: [{name: a, filters: []}]\n'), 'routes.yaml').routes[0]!.rules[0]!.backendRefs[0]!.filters, undefined);
  });

  it('what only a proxy route does is refused on a backend of an rpc or api route', () => {
    const text = route('    - backendRefs:\n        - name: a\n        - name: b\n          filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {remove: [Server]}}]\n', 'api');
    assert.throws(() => checkHandlers(parseRouteFile(text, 'routes.yaml'), 'proxy'), {
      message: "routes.yaml line 7: HTTPRoute r spec.rules[0].backendRefs[1].filters: a ResponseHeaderModifier needs a proxy route (handler: proxy); this route's handler is api",
    });
  });
});

describe('route file: the CORS filter', () => {
  it('is read with its defaults', () => {
    const file = parseRouteFile(cors('allowOrigins: ["https://app.example", "http://*.example.com:8080"], allowMethods: [GET, PUT], allowHeaders: [X-Token], exposeHeaders: ["*"], maxAge: 60'), 'routes.yaml');
    assert.deepEqual(file.routes[0]!.rules[0]!.filters.cors, {
      origins: [
        { scheme: 'https', host: 'app.example', port: 443 },
        { scheme: 'http', host: '*.example.com', port: 8080 },
      ],
      credentials: false,
      methods: ['GET', 'PUT'],
      headers: ['x-token'],
      expose: '*',
      maxAgeSec: 60,
    });
    assert.deepEqual(parseRouteFile(cors(''), 'routes.yaml').routes[0]!.rules[0]!.filters.cors, { origins: [], credentials: false, methods: [], headers: [], expose: [], maxAgeSec: 5 });
  });

  it('bad fields are refused naming the file, the line and the field', () => {
    const at = 'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[0].cors.';
    assert.equal(error(cors('allowOrigins: ["*"], allowCredentials: true')), `${at}allowOrigins: * with allowCredentials: true would let every site read answers made with its users' cookies: list the origins`);
    assert.equal(error(cors('allowOrigins: ["*", "https://a.example"]')), `${at}allowOrigins[0]: * allows every origin: give it alone, or list them`);
    for (const bad of ['https://a.example/', 'ftp://a.example', 'https://A.example', 'https://a.*.example', 'https://a.example:0', 'https://a.example:70000', 'null', 'https://user@a.example', 'a.example', 'https://*example.com']) {
      assert.equal(error(cors(`allowOrigins: [${JSON.stringify(bad)}]`)), `${at}allowOrigins[0]: ${JSON.stringify(bad)} is not an origin: use scheme://host[:port] (http or https, the host in lower case, optionally *. first), or * alone for any`, bad);
    }
    assert.equal(error(cors('allowOrigins: ["https://a.example", "https://a.example"]')), `${at}allowOrigins[1]: "https://a.example" is listed twice`);
    const many = Array.from({ length: 65 }, (_, i) => `"https://a${i}.example"`).join(', ');
    assert.equal(error(cors(`allowOrigins: [${many}]`)), `${at}allowOrigins: more than 64 entries`);
    assert.equal(error(cors('allowMethods: [get]')), `${at}allowMethods[0]: must be one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH or *, not "get"`);
    assert.equal(error(cors('allowMethods: [GET, "*"]')), `${at}allowMethods[1]: * allows every method: give it alone, or list them`);
    assert.equal(error(cors('allowHeaders: ["x header"]')), `${at}allowHeaders[0]: "x header" is not a valid header name`);
    assert.equal(error(cors('exposeHeaders: ["*"], allowCredentials: true')), `${at}exposeHeaders: * cannot go with allowCredentials: true (browsers then read it as a header named *): list the headers`);
    assert.equal(error(cors('allowCredentials: "yes"')), `${at}allowCredentials: must be true or false`);
    assert.equal(error(cors('maxAge: 0')), `${at}maxAge: must be an integer from 1 to 86400`);
    assert.equal(error(cors('allowOrigin: ["*"]')), `${at}allowOrigin: unknown field "allowOrigin" (an HTTPCORSFilter has no such field)`);
    assert.equal(
      error(route('    - backendRefs: [{name: a}]\n      filters: [{type: CORS, cors: {}}, {type: CORS, cors: {}}]\n')),
      'routes.yaml line 8: HTTPRoute r spec.rules[0].filters[1].type: CORS is given twice',
    );
  });

  const spec = (more: Partial<RouteCorsSpec> = {}): RouteCorsSpec => ({
    origins: [
      { scheme: 'https', host: 'www.foo.com', port: 443 },
      { scheme: 'https', host: '*.bar.com', port: 443 },
    ],
    credentials: true,
    methods: ['GET', 'OPTIONS'],
    headers: ['x-header-1'],
    expose: ['x-header-3'],
    maxAgeSec: 3600,
    ...more,
  });

  it('origins: exact, a wildcard host (any number of labels, never the bare domain), the default port', () => {
    const s = spec();
    for (const o of ['https://www.foo.com', 'https://www.foo.com:443', 'https://a.bar.com', 'https://x.y.bar.com']) assert.ok(corsOriginAllowed(s, o), o);
    for (const o of ['https://bar.com', 'https://foobar.com', 'http://www.foo.com', 'https://www.foo.com:8443', 'https://www.foo.com.evil.example', 'https://evil.example/.bar.com', 'https://evil.example?.bar.com', 'https://www.foo.com/', 'null', '', 'https://WWW.FOO.COM', 'https://a.bar.com.', 'https://x@a.bar.com']) {
      assert.ok(!corsOriginAllowed(s, o), o);
    }
    assert.ok(corsOriginAllowed(spec({ origins: [{ scheme: 'http', host: '*', port: 80 }] }), 'http://anything.example'));
    assert.ok(!corsOriginAllowed(spec({ origins: [{ scheme: 'http', host: '*', port: 80 }] }), 'https://anything.example'));
  });

  it('a preflight from an allowed origin: the rule answers 200 with its headers, never the backend', () => {
    const text = route(`    - backendRefs: [{name: a}]
      filters: [{type: CORS, cors: {allowOrigins: ["https://app.example"], allowMethods: [GET, PUT], allowHeaders: [x-token], exposeHeaders: [x-trace], allowCredentials: true, maxAge: 60}}]
`);
    const a = act(text, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'x-token' } });
    assert.deepEqual(a.kind === 'preflight' && a.headers, [
      ['vary', 'Origin'],
      ['access-control-allow-origin', 'https://app.example'],
      ['access-control-allow-credentials', 'true'],
      ['access-control-expose-headers', 'x-trace'],
      ['access-control-allow-methods', 'GET, PUT'],
      ['access-control-allow-headers', 'x-token'],
      ['access-control-max-age', '60'],
    ]);
    // An OPTIONS without Access-Control-Request-Method is no preflight: it goes to the backend.
    assert.equal(act(text, { method: 'OPTIONS', headers: { origin: 'https://app.example' } }).kind, 'send');
  });

  it('an origin not allowed gets no Access-Control-Allow-Origin (preflight or not), nor anything else it could use', () => {
    const text = cors('allowOrigins: ["https://app.example"], allowMethods: ["*"], allowHeaders: ["*"], allowCredentials: true');
    for (const origin of ['https://evil.example', 'https://app.example.evil.example', 'null', 'https://app.example/']) {
      const p = act(text, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'DELETE', 'access-control-request-headers': 'x-anything' } });
      assert.deepEqual(p.kind === 'preflight' && p.headers, [['vary', 'Origin']], origin);
      const s = act(text, { headers: { origin } });
      assert.ok(s.kind === 'send');
      assert.deepEqual(s.policy.effects!.responseHeaders()!(['Access-Control-Allow-Origin', origin, 'X-A', '1']), ['X-A', '1', 'vary', 'Origin'], origin);
    }
  });

  it('an allowed origin is reflected; `*` only without credentials; the backend\'s own CORS headers are replaced', () => {
    const reflect = act(cors('allowOrigins: ["https://*.app.example"], allowCredentials: true, exposeHeaders: [x-trace]'), { headers: { origin: 'https://a.app.example' } });
    assert.ok(reflect.kind === 'send');
    const answer = reflect.policy.effects!.responseHeaders()!(['Access-Control-Allow-Origin', '*', 'Access-Control-Allow-Credentials', 'false', 'Vary', 'Accept', 'X-A', '1']);
    assert.deepEqual(answer, ['Vary', 'Accept, Origin', 'X-A', '1', 'access-control-allow-origin', 'https://a.app.example', 'access-control-allow-credentials', 'true', 'access-control-expose-headers', 'x-trace']);
    const any = act(cors('allowOrigins: ["*"]'), { headers: { origin: 'https://whoever.example' } });
    assert.ok(any.kind === 'send');
    assert.deepEqual(any.policy.effects!.responseHeaders()!([]), ['access-control-allow-origin', '*']);
    // No Origin: not a CORS request, nothing added.
    const none = act(cors('allowOrigins: ["*"]'));
    assert.ok(none.kind === 'send');
    assert.equal(none.policy.effects!.responseHeaders(), undefined);
  });

  it('`*` methods and headers: `*` without credentials, the request\'s (tokens only) with them', () => {
    const ask = { origin: 'https://www.foo.com', 'access-control-request-method': 'PATCH', 'access-control-request-headers': 'x-a, x-b' };
    const h = (s: RouteCorsSpec, headers: Record<string, string> = ask) => Object.fromEntries(routeCorsAnswer(s, 'OPTIONS', headers).headers);
    const open = h(spec({ credentials: false, methods: '*', headers: '*' }));
    assert.equal(open['access-control-allow-methods'], '*');
    assert.equal(open['access-control-allow-headers'], '*');
    assert.equal(open['access-control-allow-credentials'], undefined);
    const withCreds = h(spec({ methods: '*', headers: '*' }));
    assert.equal(withCreds['access-control-allow-methods'], 'PATCH');
    assert.equal(withCreds['access-control-allow-headers'], 'x-a, x-b');
    const odd = h(spec({ methods: '*', headers: '*' }), { ...ask, 'access-control-request-method': 'PA TCH', 'access-control-request-headers': 'x-a, "x"' });
    assert.equal(odd['access-control-allow-methods'], undefined);
    assert.equal(odd['access-control-allow-headers'], undefined);
  });

  it('runs before the rule\'s redirect; the redirect carries the CORS headers', () => {
    const text = route(`    - backendRefs: [{name: a}]
      filters:
        - {type: CORS, cors: {allowOrigins: ["https://app.example"]}}
        - {type: RequestRedirect, requestRedirect: {hostname: other.example}}
`);
    assert.equal(act(text, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'GET' } }).kind, 'preflight');
    const r = act(text, { headers: { origin: 'https://app.example' } });
    assert.ok(r.kind === 'redirect');
    const set: Record<string, unknown> = {};
    const res = { setHeader: (n: string, v: unknown) => (set[n] = v), getHeader: (n: string) => set[n], once: () => undefined } as never;
    r.policy.effects!.begin({ headers: {} } as never, res, 'test');
    assert.deepEqual(set, { vary: 'Origin', 'access-control-allow-origin': 'https://app.example' });
  });
});

describe('a route\'s CORS on a real gateway with --auth=key', () => {
  it('the preflight is answered before the auth step; other requests still need their key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mesh-route-cors-'));
    const routes = join(dir, 'routes.yaml');
    writeFileSync(routes, route(`    - matches: [{path: {type: PathPrefix, value: /shop}}]
      backendRefs: [{name: go.mesh.srv.shop}]
      filters: [{type: CORS, cors: {allowOrigins: ["https://app.example"], allowMethods: [GET], allowCredentials: true, maxAge: 60}}]
`));
    writeFileSync(join(dir, 'keys.txt'), 'alice-key-0123456789abcdef alice read\n');
    const gw = await startEdgeGateway(['--auth=key', `--auth_keys=${join(dir, 'keys.txt')}`], { routesFile: routes });
    try {
      const preflight = await http('OPTIONS', `${gw.url}/shop/cart`, { headers: { origin: 'https://app.example', 'access-control-request-method': 'GET' } });
      assert.equal(preflight.status, 200);
      assert.equal(preflight.text, '');
      assert.equal(preflight.headers['access-control-allow-origin'], 'https://app.example');
      assert.equal(preflight.headers['access-control-allow-credentials'], 'true');
      assert.equal(preflight.headers['access-control-allow-methods'], 'GET');
      assert.equal(preflight.headers['access-control-max-age'], '60');
      const evil = await http('OPTIONS', `${gw.url}/shop/cart`, { headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' } });
      assert.equal(evil.status, 200);
      assert.equal(evil.headers['access-control-allow-origin'], undefined);
      assert.equal(evil.headers['access-control-allow-credentials'], undefined);
      const plain = await http('GET', `${gw.url}/shop/cart`, { headers: { origin: 'https://app.example' } });
      assert.equal(plain.status, 401, plain.text);
      const keyed = await http('GET', `${gw.url}/shop/cart`, { headers: { origin: 'https://app.example', authorization: 'Bearer alice-key-0123456789abcdef' } });
      assert.equal(keyed.status, 500, keyed.text); // past the auth step: the service is not registered
      assert.equal(keyed.headers['access-control-allow-origin'], 'https://app.example');
    } finally {
      await gw.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
