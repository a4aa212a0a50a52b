/**
 * The one route model (src/edge/routes/match.ts): registry routes, HTTPRoute tables and `mesh
 * proxy` routes compile to CompiledRoute and match through RouteMatcher, each source with its own
 * precedence; the index (exact path, first segment, a regex's literal prefix) answers what a scan
 * in order answers, in a small table (scanned) as in a large one (indexed).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { exactPath, prefixPath, regexPath, RouteMatcher, SCAN_AT_MOST, templatePath, type CompiledRoute } from '../../src/edge/routes/match.js';
import { buildRoutes, compilePath, RouteTable } from '../../src/fronts/gateway/routes.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { CompiledRoutes } from '../../src/edge/routes/table.js';
import { parseProxyConfig } from '../../src/fronts/proxy/config.js';
import type { Service } from '../../src/engines/registry/registry.js';

function svc(name: string, endpoints: Array<[string, Record<string, string>]>): Service {
  return { name, version: '1', metadata: {}, nodes: [], endpoints: endpoints.map(([n, metadata]) => ({ name: n, metadata })) } as unknown as Service;
}

/** A scan in order: the oracle of every table. */
function scan<T>(routes: ReadonlyArray<CompiledRoute<T>>, path: string): T | undefined {
  return routes.find((r) => (r.path.capture ? r.path.capture(path) !== undefined : r.path.test(path)))?.target;
}

/** `n` filler routes that never match the probes, so a table is large enough to be indexed. */
function filler<C = undefined>(n: number): Array<CompiledRoute<string, C>> {
  return Array.from({ length: n }, (_, i) => ({ path: prefixPath(`/zz${i}/`, true), target: `filler${i}` }));
}

describe('route model: one type, one matcher', () => {
  it('every kind of path compiles to a PathMatch the matcher indexes', () => {
    assert.deepEqual(
      [exactPath('/a/b'), prefixPath('/a/', true), prefixPath('/a/', false), prefixPath('/a', false), prefixPath('/', true), regexPath('/a/[0-9]+'), templatePath('/a/{x}', compilePath('/a/{x}').matchPath), templatePath('/{x}/a', compilePath('/{x}/a').matchPath)].map(
        (p) => [p.exact, p.first, p.regexPrefix],
      ),
      [
        ['/a/b', 'a', undefined],
        [undefined, 'a', undefined],
        [undefined, 'a', undefined],
        // A string prefix without a second `/` does not name its first segment (`/a` matches /ab).
        [undefined, undefined, undefined],
        [undefined, undefined, undefined],
        [undefined, undefined, '/a/'],
        [undefined, 'a', undefined],
        [undefined, undefined, undefined],
      ],
    );
  });

  it('small (scanned) and large (indexed) tables answer as a scan in order; conditions before and after the path', () => {
    const base: Array<CompiledRoute<string, { method: string }>> = [
      { path: exactPath('/a/b'), accepts: (q) => q.method === 'POST', target: 'post /a/b' },
      { path: regexPath('/a/[0-9]+'), target: 'regex /a/n' },
      { path: prefixPath('/a', false), target: 'string prefix /a' },
      { path: templatePath('/{x}/t', compilePath('/{x}/t').matchPath), refine: (q) => q.method === 'GET', target: 'template' },
      { path: prefixPath('/', true), target: 'all' },
    ];
    const large = [...filler<{ method: string }>(40), ...base];
    for (const routes of [base, large]) {
      const table = new RouteMatcher(routes);
      for (const [path, method, want] of [
        ['/a/b', 'POST', 'post /a/b'],
        ['/a/b', 'GET', 'string prefix /a'],
        ['/a/12', 'GET', 'regex /a/n'],
        ['/ab', 'GET', 'string prefix /a'],
        ['/q/t', 'GET', 'template'],
        ['/q/t', 'PUT', 'all'],
        ['/zz3/x', 'GET', routes === large ? 'filler3' : 'all'],
      ] as const) {
        assert.equal(table.match(path, { method })?.target, want, `${routes.length} routes: ${method} ${path}`);
      }
    }
    const captured = new RouteMatcher([...filler(SCAN_AT_MOST), { path: templatePath('/u/{id}', compilePath('/u/{id}').matchPath), target: 'u' }]);
    assert.deepEqual(captured.match('/u/7', undefined), { target: 'u', params: { id: '7' } });
    assert.equal(captured.match('/zz1', undefined)?.params, undefined);
  });

  it('registry routes: exact, then templates, then regexes, the longer first (buildRoutes), whatever the declaration order', () => {
    const routes = buildRoutes([
      svc('go.mesh.api.a', [
        ['A.Re', { path: '^/things/[0-9]+' }],
        ['A.Tpl', { path: '/things/{id}' }],
        ['A.Exact', { path: '/things/7' }],
        ['A.Rest', { path: '/*', method: 'GET' }],
      ]),
    ]).routes;
    const table = new RouteTable(routes);
    assert.deepEqual(
      ['/things/7', '/things/8', '/other'].map((p) => table.match('GET', 'h', p)?.route.endpoint),
      ['A.Exact', 'A.Tpl', 'A.Rest'],
    );
    assert.equal(table.match('POST', 'h', '/other'), undefined);
    assert.deepEqual(table.match('GET', 'h', '/things/8')!.params, { id: '8' });
    assert.deepEqual(table.match('GET', 'h', '/things/7')!.params, {});
  });

  it('HTTPRoute rules: the Gateway API precedence (host, then Exact, RegularExpression, the longest PathPrefix), not the file order', () => {
    const doc = (name: string, hostnames: string, path: string, value: string) =>
      `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: ${name}}\nspec:\n${hostnames}  rules:\n    - matches: [{path: {type: ${path}, value: "${value}"}}]\n      backendRefs: [{name: go.mesh.srv.${name}}]\n`;
    const text = [
      doc('prefix', '', 'PathPrefix', '/shop'),
      doc('longer', '', 'PathPrefix', '/shop/cart'),
      doc('regex', '', 'RegularExpression', '/shop/[a-z]+'),
      doc('exact', '', 'Exact', '/shop/cart'),
      doc('host', '  hostnames: [a.example]\n', 'PathPrefix', '/'),
    ].join('---\n');
    const table = new CompiledRoutes(parseRouteFile(text, 'routes.yaml'));
    const name = (path: string, host = 'b.example') => table.match({ method: 'GET', host, path, query: undefined, headers: {} })?.route.name;
    assert.deepEqual(
      ['/shop/cart', '/shop/cart/x', '/shop/hats', '/shop/9', '/shopx'].map((p) => name(p)),
      ['exact', 'longer', 'regex', 'prefix', undefined],
    );
    assert.equal(name('/shop/cart', 'a.example'), 'host');
    assert.deepEqual(
      table.inOrder().map((e) => e.route.name),
      ['host', 'exact', 'regex', 'longer', 'prefix'],
    );
  });

  it('mesh proxy routes: the file order, prefixes as strings, whatever the table size', () => {
    const routes = (extra: number) =>
      [
        ...Array.from({ length: extra }, (_, i) => `      - { match: { prefix: /zz${i}/ }, cluster: b }`),
        `      - { match: { prefix: /api }, cluster: b }`,
        `      - { match: { path: /api/exact }, cluster: b }`,
        `      - { match: { regex: '^/v[0-9]+/.*' }, cluster: b }`,
        `      - { match: { prefix: / }, cluster: b }`,
      ].join('\n');
    for (const extra of [0, 40]) {
      const config = parseProxyConfig(`listeners:\n  - name: l\n    address: 127.0.0.1:0\n    routes:\n${routes(extra)}\nclusters:\n  - { name: b, hosts: ['127.0.0.1:1'] }\n`, 'proxy.yaml');
      const compiled = config.listeners[0]!.routes.map((r) => ({ path: r.path, target: r }));
      const table = new RouteMatcher(compiled);
      for (const path of ['/api/exact', '/apix', '/v1/x', '/v/x', '/', '/zz3/a']) {
        const got = table.match(path, undefined)?.target;
        assert.equal(got, scan(compiled, path), `${extra}: ${path}`);
      }
      // The earlier prefix wins over the later exact path: file order, not specificity.
      assert.deepEqual(table.match('/api/exact', undefined)?.target.dump, { match: { prefix: '/api' }, cluster: 'b' });
      assert.deepEqual(table.match('/v1/x', undefined)?.target.dump, { match: { regex: '^/v[0-9]+/.*' }, cluster: 'b' });
    }
  });

  it('any mix of path kinds, in any order, small or large: the first match is the one a scan finds', () => {
    const segment = fc.constantFrom('a', 'b', 'ab', '1', 'zz');
    const path = fc.array(segment, { maxLength: 3 }).chain((segs) => fc.boolean().map((slash) => `/${segs.join('/')}${slash && segs.length > 0 ? '/' : ''}`));
    const route = fc.oneof(
      path.map((p) => ({ path: exactPath(p), target: `exact ${p}` })),
      fc.tuple(path, fc.boolean()).map(([p, seg]) => ({ path: prefixPath(p, seg), target: `prefix ${seg} ${p}` })),
      fc.tuple(path, fc.constantFrom('[0-9]+', '.*', '(/a)?', 'b?')).map(([p, tail]) => ({ path: regexPath(p + tail), target: `regex ${p}${tail}` })),
      fc.constantFrom('/a/{x}', '/{x}/b', '/ab/*', '/*', '/zz/{x}/a').map((t) => ({ path: templatePath(t, compilePath(t).matchPath), target: `template ${t}` })),
    );
    fc.assert(
      fc.property(fc.array(route, { minLength: 1, maxLength: 30 }), fc.array(path, { minLength: 1, maxLength: 10 }), (routes, paths) => {
        const table = new RouteMatcher(routes);
        for (const p of paths) assert.equal(table.match(p, undefined)?.target, scan(routes, p), p);
      }),
      { numRuns: 1500 },
    );
  });
});
