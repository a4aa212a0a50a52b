/**
 * The gateway's registry router: path kinds, safe regexes, deterministic order, method and host
 * filters, rebuilds on registry changes (in process), and the same answers after a restart of a
 * real gateway process when two services declare overlapping paths.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { RegistryRouter } from '../../src/fronts/gateway/router.js';
import { RouteTable, buildRoutes, compilePath, splitList } from '../../src/fronts/gateway/routes.js';
import { MAX_REGEX_PATH_LENGTH } from '../../src/base/util/regex.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry, Service } from '../../src/engines/registry/registry.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, waitForRoutes, type PlainApp } from '../fixtures/gateway-helpers.js';

const svc = (name: string, endpoints: Array<[string, Record<string, string>]>): Service => ({
  name,
  version: 'v1',
  metadata: {},
  endpoints: endpoints.map(([n, metadata]) => ({ name: n, metadata })),
  nodes: [{ id: `${name}-1`, address: '127.0.0.1', port: 9, metadata: {} }],
});

function shuffle<T>(items: T[], seed: number): T[] {
  const out = items.slice();
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('router: paths', () => {
  it('exact paths match exactly', () => {
    const p = compilePath('/call');
    assert.equal(p.kind, 'exact');
    assert.deepEqual(p.matchPath('/call'), {});
    for (const other of ['/foo/bar/call', '/call/', '/callx', '/call/x', '/CALL']) assert.equal(p.matchPath(other), undefined, other);
  });

  it('templates: {name} is one segment, a trailing /* is everything under', () => {
    const t = compilePath('/greeter/{name}');
    assert.equal(t.kind, 'template');
    assert.deepEqual(t.matchPath('/greeter/John'), { name: 'John' });
    assert.equal(t.matchPath('/greeter/'), undefined);
    assert.equal(t.matchPath('/greeter/a/b'), undefined);
    assert.equal(t.matchPath('/x/greeter/John'), undefined);
    const r = compilePath('/static/*');
    assert.deepEqual(r.matchPath('/static'), { '*': '' });
    assert.deepEqual(r.matchPath('/static/a/b.css'), { '*': 'a/b.css' });
    assert.equal(r.matchPath('/staticx'), undefined);
    assert.deepEqual(compilePath('/u/{id}/files/*').matchPath('/u/7/files/x/y'), { id: '7', '*': 'x/y' });
    assert.deepEqual(compilePath('/a.b/{x}').matchPath('/a.b/1'), { x: '1' });
    assert.equal(compilePath('/a.b/{x}').matchPath('/aXb/1'), undefined, 'literal parts are not regexes');
  });

  it('regexes start with ^ and match the whole path', () => {
    const r = compilePath('^/call');
    assert.equal(r.kind, 'regex');
    assert.deepEqual(r.matchPath('/call'), {});
    assert.equal(r.matchPath('/call/x'), undefined);
    assert.equal(r.matchPath('/foo/bar/call'), undefined);
    const alt = compilePath('^/a|/b');
    assert.ok(alt.matchPath('/a') && alt.matchPath('/b'));
    assert.equal(alt.matchPath('/x/b'), undefined, 'both alternatives anchored');
    assert.deepEqual(compilePath('^/items/(?<id>[0-9]{1,6})$').matchPath('/items/42'), { id: '42' });
  });

  it('invalid or dangerous paths are errors, never crashes', () => {
    for (const [path, why] of [
      ['^/bad(', /invalid regex/],
      ['^/(a)\\1', /invalid regex "\^\/\(a\)\\\\1": invalid escape sequence.*RE2 syntax: no backreferences, lookahead or lookbehind/],
      ['^/a(?!b)', /invalid regex.*RE2 syntax/],
      ['^/(?<=a)b', /invalid regex.*RE2 syntax/],
      ['^/x{1001}', /invalid regex|too complex/],
      ['^/[a-z]{500}', /too complex: about \d+ instructions/],
      ['^/((a{10}){10}){10}', /too complex/],
      ['^' + 'a'.repeat(2000), /longer than 1024/],
      ['no-slash', /must start with/],
      ['/a/*/b', /last segment/],
      ['/a/{b', /whole segment/],
      ['/a/x{b}', /whole segment/],
      ['/a/{b}/{b}', /twice/],
      ['/a b', /white space/],
    ] as const) {
      assert.throws(() => compilePath(path), why, path);
    }
    // Nested and adjacent quantifiers are accepted: RE2 matches them in linear time.
    for (const [pattern, yes, no] of [
      ['^/(a+)+$', '/aaaa', '/aaab'],
      ['^/(a|aa)*$', '/aaa', '/ab'],
      ['^/(x*){2,}', '/xx', '/y'],
      ['^/\\d+\\d+\\d+\\d+$', '/1234', '/123'],
      ['^/(v1|v2)/users/[a-z]+', '/v2/users/bob', '/v3/users/bob'],
    ] as const) {
      const r = compilePath(pattern);
      assert.ok(r.matchPath(yes), `${pattern} ${yes}`);
      assert.equal(r.matchPath(no), undefined, `${pattern} ${no}`);
    }
  });

  it('a path longer than the cap never matches a regex route; named groups that took no part are absent', () => {
    const any = compilePath('^/.*');
    assert.ok(any.matchPath('/' + 'x'.repeat(MAX_REGEX_PATH_LENGTH - 1)));
    assert.equal(any.matchPath('/' + 'x'.repeat(MAX_REGEX_PATH_LENGTH)), undefined);
    assert.deepEqual(compilePath('^/a(?<b>/b)?(?P<c>/c)?').matchPath('/a/c'), { c: '/c' });
  });

  it('comma lists keep regex commas', () => {
    assert.deepEqual(splitList(' /a, /b ,^/c{1,3},^/(d,e),^/[,]x,'), ['/a', '/b', '^/c{1,3}', '^/(d,e)', '^/[,]x']);
  });
});

describe('router: table', () => {
  const services = [
    svc('go.mesh.api.beta', [
      ['Beta.Exact', { handler: 'proxy', path: '/overlap' }],
      ['Beta.Tpl', { handler: 'rpc', path: '/things/{id}' }],
      ['Beta.Re', { handler: 'api', path: '^/things/[0-9]+' }],
    ]),
    svc('go.mesh.api.alpha', [
      ['Alpha.Exact', { handler: 'proxy', path: '/overlap' }],
      ['Alpha.Rest', { handler: 'rpc', path: '/things/*' }],
      ['Alpha.Long', { handler: 'rpc', path: '/things/{id}/parts' }],
      ['Alpha.Re', { handler: 'event', path: '^/things/.*', method: 'post,PUT' }],
      ['Alpha.Web', { handler: 'web', path: '/web' }],
      ['Alpha.Bad', { handler: 'soap', path: '/soap' }],
      ['Alpha.None', { description: 'not routed' }],
    ]),
  ];

  it('orders exact, templates, regexes; longer first; then service and endpoint; whatever the input order', () => {
    const expected = [
      ['exact', '/overlap', 'go.mesh.api.alpha', 'Alpha.Exact'],
      ['exact', '/overlap', 'go.mesh.api.beta', 'Beta.Exact'],
      ['exact', '/web', 'go.mesh.api.alpha', 'Alpha.Web'],
      ['template', '/things/{id}/parts', 'go.mesh.api.alpha', 'Alpha.Long'],
      ['template', '/things/{id}', 'go.mesh.api.beta', 'Beta.Tpl'],
      ['template', '/things/*', 'go.mesh.api.alpha', 'Alpha.Rest'],
      ['regex', '^/things/[0-9]+', 'go.mesh.api.beta', 'Beta.Re'],
      ['regex', '^/things/.*', 'go.mesh.api.alpha', 'Alpha.Re'],
    ];
    for (let seed = 1; seed <= 20; seed++) {
      const input = shuffle(services, seed).map((s) => ({ ...s, endpoints: shuffle(s.endpoints, seed * 7) }));
      const { routes, problems } = buildRoutes(input);
      assert.deepEqual(routes.map((r) => [r.kind, r.path, r.service, r.endpoint]), expected);
      assert.deepEqual(problems.map((p) => p.endpoint), ['Alpha.Bad']);
    }
    const { routes } = buildRoutes(services);
    assert.equal(routes.find((r) => r.endpoint === 'Alpha.Web')!.handler, 'proxy');
    assert.deepEqual(routes.find((r) => r.endpoint === 'Alpha.Re')!.methods, ['POST', 'PUT']);
  });

  it('matches the first route whose method, host and path fit', () => {
    const table = new RouteTable(buildRoutes(services).routes);
    assert.equal(table.match('GET', 'x', '/overlap')!.route.endpoint, 'Alpha.Exact');
    assert.equal(table.match('GET', 'x', '/things/7')!.route.endpoint, 'Beta.Tpl');
    assert.deepEqual(table.match('GET', 'x', '/things/7')!.params, { id: '7' });
    assert.equal(table.match('GET', 'x', '/things/7/parts')!.route.endpoint, 'Alpha.Long');
    assert.equal(table.match('GET', 'x', '/things/7/other')!.route.endpoint, 'Alpha.Rest');
    assert.equal(table.match('GET', 'x', '/nothing'), undefined);

    const hosts = new RouteTable(
      buildRoutes([
        svc('go.mesh.api.h', [
          ['H.Port', { path: '/p', host: 'a.example:8080' }],
          ['H.Any', { path: '/h', host: 'A.example' }],
          ['H.Wild', { path: '/w', host: '*.example.org', method: 'GET' }],
          ['H.V6', { path: '/v6', host: '[::1]' }],
        ]),
      ]).routes,
    );
    assert.equal(hosts.match('GET', 'a.example:8080', '/p')!.route.endpoint, 'H.Port');
    assert.equal(hosts.match('GET', 'a.example:9090', '/p'), undefined);
    assert.equal(hosts.match('GET', 'a.example', '/p'), undefined);
    assert.equal(hosts.match('GET', 'a.example:9090', '/h')!.route.endpoint, 'H.Any');
    assert.equal(hosts.match('GET', 'A.EXAMPLE', '/h')!.route.endpoint, 'H.Any');
    assert.equal(hosts.match('GET', 'b.example', '/h'), undefined);
    assert.equal(hosts.match('GET', 'x.y.example.org:1', '/w')!.route.endpoint, 'H.Wild');
    assert.equal(hosts.match('GET', 'example.org', '/w'), undefined);
    assert.equal(hosts.match('POST', 'x.example.org', '/w'), undefined);
    assert.equal(hosts.match('GET', '[::1]:8080', '/v6')!.route.endpoint, 'H.V6');
  });

  it('tries only the templates that can match the first segment, in table order (1,000 services)', () => {
    const many: Service[] = [];
    for (let i = 0; i < 1000; i++) {
      const n = String(i).padStart(4, '0');
      many.push(svc(`go.mesh.api.r${n}`, [[`R.T`, { path: `/r${n}/items/{id}` }], [`R.U`, { path: `/r${n}/u/{id}/parts` }], [`R.X`, { path: `^/r${n}/x/[0-9]+` }]]));
    }
    many.push(
      svc('go.mesh.api.b', [
        ['B.Short', { path: '/b/{name}' }],
        // Longer, so before /b/{name} in the table; starts with a parameter: tried for every path.
        ['B.Generic', { path: '/{service}/generic' }],
        ['B.Rest', { path: '/*' }],
      ]),
    );
    const { routes } = buildRoutes(many);
    let tried = 0;
    const counted = routes.map((r) => ({
      ...r,
      matchPath: (path: string) => {
        tried++;
        return r.matchPath(path);
      },
    }));
    const table = new RouteTable(counted);
    tried = 0;
    assert.equal(table.match('GET', 'x', '/b/call')!.route.endpoint, 'B.Short');
    // Not every service's templates (3,000 routes): only /b/* ones and those starting with a parameter or *.
    assert.ok(tried <= 3, `tried ${tried} routes`);
    // Order across the two lists: the longer generic template wins over /b/{name}.
    assert.equal(table.match('GET', 'x', '/b/generic')!.route.endpoint, 'B.Generic');
    assert.equal(table.match('GET', 'x', '/r0500/items/7')!.route.endpoint, 'R.T');
    assert.deepEqual(table.match('GET', 'x', '/r0500/items/7')!.params, { id: '7' });
    assert.equal(table.match('GET', 'x', '/r0500/u/7/parts')!.route.endpoint, 'R.U');
    // A regex comes after every template, but before nothing else matches: /* catches the rest.
    assert.equal(table.match('GET', 'x', '/r0500/x/12')!.route.endpoint, 'B.Rest');
    assert.equal(table.match('GET', 'x', '/zzz')!.route.endpoint, 'B.Rest');
    // The same answers as a walk over the whole table, in order.
    const walk = (path: string) => routes.find((r) => r.matchPath(path))?.endpoint;
    for (const path of ['/b/call', '/b/generic', '/r0001/items/1', '/r0999/u/2/parts', '/r0002/x/5', '/nothing/here', '/', '/b']) {
      assert.equal(table.match('GET', 'x', path)?.route.endpoint, walk(path), path);
    }
  });
});

describe('router: rebuilt from the registry', () => {
  it('builds at start, rebuilds (coalesced) on changes in the namespace only, keeps the table on failure', async () => {
    const registry = new MemoryRegistry();
    const logs: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void logs.push(line) });
    await registry.register(svc('go.mesh.api.one', [['One.A', { path: '/one' }]]));
    const router = new RegistryRouter({ registry, namespace: 'go.mesh.api', logger, debounceMs: 20 });
    await router.start();
    // Nothing scheduled and nothing running: the router's own state, read instead of waiting a while.
    const internals = router as unknown as { timer?: unknown; running?: unknown };
    const idle = () => internals.timer === undefined && internals.running === undefined;
    // Watches after the router: once this one has an event, the router has had it too.
    const seen: string[] = [];
    const marker = registry.watch((e) => void seen.push(e.service.name));
    try {
      assert.deepEqual(router.routes.map((r) => r.path), ['/one']);
      assert.equal(router.version, registry.revision());
      const builds = router.builds;
      for (let i = 0; i < 5; i++) await registry.register(svc(`go.mesh.api.n${i}`, [[`N.E${i}`, { path: `/n${i}` }]]));
      await waitFor(() => router.routes.length === 6 && idle());
      assert.ok(router.builds - builds <= 2, `coalesced: ${router.builds - builds} rebuilds for 5 changes`);
      const settled = router.builds;
      await registry.register(svc('go.mesh.srv.other', [['O.E', { path: '/other' }]]));
      await registry.register(svc('go.mesh.apix', [['X.E', { path: '/x' }]]));
      await waitFor(() => seen.includes('go.mesh.apix'));
      assert.ok(idle(), 'changes outside the namespace schedule no rebuild');
      assert.equal(router.builds, settled, 'changes outside the namespace do not rebuild');
      assert.ok(!router.routes.some((r) => r.path === '/other' || r.path === '/x'));
      await registry.register(svc('go.mesh.api.bad', [['Bad.E', { path: '^/(' }]]));
      await waitFor(() => router.builds > settled);
      assert.ok(logs.some((l) => l.includes('route ignored') && l.includes('invalid regex')));
      assert.equal(router.dump().routeConfigName, 'go.mesh.api');
      assert.equal(router.dump().table.length, 6);

      // A registry that fails: the previous table stays.
      const failing = Object.create(registry) as Registry;
      failing.listServices = () => Promise.reject(new Error('registry down'));
      const r2 = new RegistryRouter({ registry: failing, namespace: 'go.mesh.api', logger, retryMs: 10_000 });
      await r2.start();
      assert.equal(r2.routes.length, 0);
      r2.stop();
      assert.ok(logs.some((l) => l.includes('rebuild failed')));
    } finally {
      marker.stop();
      router.stop();
      await registry.close();
    }
  });
});

describe('router: two services with overlapping paths resolve the same way every run', () => {
  const dir = tempDir('mesh-router-');
  let registry: Registry;
  let alpha: PlainApp;
  let beta: PlainApp;

  const declare = (name: string) =>
    name === 'alpha'
      ? [
          { name: 'Web.Overlap', metadata: { handler: 'proxy', path: '/overlap' } },
          { name: 'Web.Thing', metadata: { handler: 'proxy', path: '/things/{id},/things/*' } },
          { name: 'Web.Re', metadata: { handler: 'proxy', path: '^/re/.*' } },
        ]
      : [
          { name: 'Web.Overlap', metadata: { handler: 'proxy', path: '/overlap' } },
          { name: 'Web.Thing', metadata: { handler: 'proxy', path: '/things/{id}/x' } },
          { name: 'Web.Re', metadata: { handler: 'proxy', path: '^/re/[0-9]+' } },
        ];

  before(async () => {
    registry = createRegistry('local', dir.path);
    [alpha, beta] = await Promise.all([startPlainApp('alpha'), startPlainApp('beta')]);
  });

  after(async () => {
    await Promise.all([alpha?.close(), beta?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  async function run(order: Array<['alpha' | 'beta', PlainApp]>): Promise<{ answers: string[]; table: unknown }> {
    const registered: Service[] = [];
    for (const [name, app] of order) registered.push(await registerPlain(registry, `go.mesh.api.${name}`, app.port, declare(name)));
    const gw = await startGatewayProcess(dir.path);
    try {
      const dump = await waitForRoutes(gw.admin, (t) => t.length === 7);
      const answers: string[] = [];
      for (const path of ['/overlap', '/things/1', '/things/1/x', '/things/1/y', '/re/1', '/re/a']) {
        const res = await http('GET', `${gw.url}${path}`);
        assert.equal(res.status, 200, `${path}: ${res.text}`);
        answers.push(`${path} → ${res.json().app}`);
      }
      return { answers, table: dump[0].route_table_dump };
    } finally {
      await gw.stop();
      for (const s of registered) await registry.deregister(s);
    }
  }

  it('same answers and the same /routes table after a restart, whatever the registration order', async () => {
    const first = await run([
      ['alpha', alpha],
      ['beta', beta],
    ]);
    const second = await run([
      ['beta', beta],
      ['alpha', alpha],
    ]);
    assert.deepEqual(first.answers, [
      '/overlap → alpha', // same exact path: by service name
      '/things/1 → alpha',
      '/things/1/x → beta', // the longer template first
      '/things/1/y → alpha',
      '/re/1 → beta', // the longer regex first
      '/re/a → alpha',
    ]);
    assert.deepEqual(second.answers, first.answers);
    assert.deepEqual(second.table, first.table);
  });
});
