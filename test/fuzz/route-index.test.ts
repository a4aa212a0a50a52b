/**
 * Property tests of the route table's index (src/edge/routes/table.ts): regex rules indexed by
 * their literal prefix and Exact/PathPrefix rules by their first segment give, for every request,
 * the rule a scan of every entry in precedence order gives (first match wins). And the literal
 * prefix is sound: every path a regex matches starts with it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compilePathRegex, literalPrefix } from '../../src/base/util/regex.js';
import { CompiledRoutes, type RouteRequest } from '../../src/edge/routes/table.js';
import type { MatchSpec, RouteFile, RouteSpec } from '../../src/edge/routes/file.js';

/** Pieces of regexes: literals that collide with the paths below, and every kind of meta character. */
const TOKENS = ['/', 'a', 'b', 'ab', '/a', '/b', '\\.', '.', '.*', '[ab]', '[^/]+', '(a|b)', '(?:ab)?', '|', 'a?', 'b*', 'a+', '{0,2}', '{2}', '^', '$', '(?i)', 'A', '\\d', '1', '\\/'];
const regex = fc
  .array(fc.constantFrom(...TOKENS), { minLength: 1, maxLength: 8 })
  .map((t) => t.join(''))
  .filter((source) => {
    try {
      compilePathRegex(source);
      return true;
    } catch {
      return false;
    }
  });
const segment = fc.constantFrom('a', 'b', 'ab', 'ba', 'a.b', '1', 'A');
const path = fc.array(segment, { minLength: 0, maxLength: 4 }).chain((segs) => fc.boolean().map((slash) => `/${segs.join('/')}${slash && segs.length > 0 ? '/' : ''}`));
const pathMatch: fc.Arbitrary<MatchSpec['path']> = fc.oneof(
  { weight: 3, arbitrary: regex.map((value) => ({ type: 'RegularExpression' as const, value })) },
  { weight: 1, arbitrary: path.map((value) => ({ type: 'PathPrefix' as const, value })) },
  { weight: 1, arbitrary: path.map((value) => ({ type: 'Exact' as const, value })) },
);
const match = fc.record({ path: pathMatch, method: fc.constantFrom(undefined, 'GET', 'POST') });

function routeFile(rules: Array<Array<{ path: MatchSpec['path']; method: string | undefined }>>): RouteFile {
  const routes: RouteSpec[] = rules.map((matches, r) => ({
    name: `r${r}`,
    line: r + 1,
    hostnames: [],
    rules: [
      {
        name: `r${r}-0`,
        index: 0,
        line: r + 1,
        matches: matches.map((m) => ({ path: m.path, ...(m.method ? { method: m.method } : {}), headers: [], queryParams: [] })),
        backendRefs: [{ name: `s${r}`, weight: 1 }],
        filters: { mirrors: [] },
      },
    ],
  }));
  return { file: 'routes.yaml', version: 'x', routes };
}

/** The oracle: every entry in precedence order, the first whose method and path match. */
function linear(table: CompiledRoutes, req: RouteRequest): MatchSpec | undefined {
  for (const { match } of table.inOrder()) {
    if (match.method !== undefined && match.method !== req.method) continue;
    const { type, value } = match.path;
    const prefix = value.length > 1 && value.endsWith('/') ? value.slice(0, -1) : value;
    const ok =
      type === 'Exact'
        ? req.path === value
        : type === 'RegularExpression'
          ? compilePathRegex(value).test(req.path)
          : prefix === '/' || (req.path.startsWith(prefix) && (req.path.length === prefix.length || req.path[prefix.length] === '/'));
    if (ok) return match;
  }
  return undefined;
}

describe('fuzz: the route table index', () => {
  it('literalPrefix: every path a regex matches starts with it', () => {
    fc.assert(
      fc.property(regex, fc.array(path, { maxLength: 8 }), (source, paths) => {
        const re = compilePathRegex(source);
        const prefix = literalPrefix(source);
        for (const p of paths) if (re.test(p)) assert.ok(p.startsWith(prefix), `${source} matches ${p}, which does not start with ${JSON.stringify(prefix)}`);
      }),
      { numRuns: 3000 },
    );
    assert.equal(literalPrefix('/svc/items/[0-9]+'), '/svc/items/');
    assert.equal(literalPrefix('^/a\\.b[cd]'), '/a.b');
    assert.equal(literalPrefix('/a/(b|c)'), '/a');
    assert.equal(literalPrefix('/b(?i){0,2}'), '/');
    assert.equal(literalPrefix('/ab*'), '/a');
    assert.equal(literalPrefix('/a|/b'), '');
    assert.equal(literalPrefix('(?i)/a'), '');
    // RE2's quoting hides what the reading sees: no prefix is claimed; nor past ASCII.
    for (const [source, matching] of [['/x\\Q(\\E|/y', '/y'], ['/a\\Q\\E*', '/'], ['/ab\\Q\\E{0,1}', '/a'], ['/a\u{1F600}?', '/a']] as const) {
      assert.ok(compilePathRegex(source).test(matching), `${source} matches ${matching}`);
      assert.ok(matching.startsWith(literalPrefix(source)), `${source}: ${JSON.stringify(literalPrefix(source))}`);
    }
  });

  it('the first match is the one a scan of every entry in precedence order finds', () => {
    fc.assert(
      fc.property(fc.array(fc.array(match, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 12 }), fc.array(fc.tuple(path, fc.constantFrom('GET', 'POST')), { minLength: 1, maxLength: 10 }), (rules, requests) => {
        const table = new CompiledRoutes(routeFile(rules));
        for (const [p, method] of requests) {
          const req: RouteRequest = { method, host: 'example.com', path: p, query: undefined, headers: {} };
          assert.equal(table.match(req)?.match, linear(table, req), `${method} ${p}`);
        }
      }),
      { numRuns: 1500 },
    );
  });
});
