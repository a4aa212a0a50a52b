/**
 * Property tests: the gateway's route compiler and table, and the path regexes they share with
 * the proxy config. Random paths and endpoint metadata never throw anything but the documented
 * Error (a route problem), matching never throws (how long it takes on evil patterns is
 * router-regex-timing.test.ts's business), and RE2 whole-path matching agrees with
 * JavaScript's RegExp on the syntax both share.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { buildRoutes, compilePath, RouteTable, splitList } from '../../src/fronts/gateway/routes.js';
import type { Service } from '../../src/engines/registry/registry.js';
import { compilePathRegex, MAX_REGEX_PATH_LENGTH } from '../../src/base/util/regex.js';

/** Pieces of regexes and paths, evil ones included. */
const REGEX_TOKENS = ['a', 'b', '/', '.', '\\d', '\\w', '\\s', '[a-z]', '[^/]', '(', ')', '(?:', '|', '*', '+', '?', '{2}', '{1,3}', '{2,}', '^', '$', '\\1', '(?=', '(?<n>', '[', ']', '\\', '-', '{', '}', ','];
const regexSource = fc.array(fc.constantFrom(...REGEX_TOKENS), { maxLength: 24 }).map((t) => '^/' + t.join(''));
const pathChars = fc.constantFrom('a', 'b', '1', '/', ' ', '!', '-', '_', 'é', '{', '}', '*', '%');
const path = fc.oneof(
  fc.array(pathChars, { maxLength: 40 }).map((c) => '/' + c.join('')),
  fc.string({ maxLength: 40 }),
  fc.constantFrom('/' + 'a'.repeat(MAX_REGEX_PATH_LENGTH - 1), '/' + 'a'.repeat(MAX_REGEX_PATH_LENGTH), '/' + '1'.repeat(MAX_REGEX_PATH_LENGTH - 2) + 'x'),
);
const declared = fc.oneof(regexSource, path, fc.constantFrom('/a/{b}', '/a/*', '/{x}/{y}', '/*', '^/(a+)+$', '^/\\d+\\d+\\d+$'));

describe('fuzz: route compiler and table', () => {
  it('compilePath: a matcher, or an Error with a message; matching is total', () => {
    fc.assert(
      fc.property(declared, fc.array(path, { maxLength: 4 }), (pattern, paths) => {
        let compiled: ReturnType<typeof compilePath>;
        try {
          compiled = compilePath(pattern);
        } catch (err) {
          assert.ok(err instanceof Error && !(err instanceof TypeError) && !(err instanceof RangeError), String(err));
          assert.ok(err.message.length > 0);
          return;
        }
        for (const p of paths) {
          const value = compiled.matchPath(p);
          if (value !== undefined) for (const v of Object.values(value)) assert.equal(typeof v, 'string');
          if (compiled.kind === 'regex' && p.length > MAX_REGEX_PATH_LENGTH) assert.equal(value, undefined);
        }
      }),
      { numRuns: 1500 },
    );
  });

  it('regex errors name the pattern', () => {
    fc.assert(
      fc.property(regexSource, (source) => {
        try {
          compilePathRegex(source);
        } catch (err) {
          assert.match((err as Error).message, /^(invalid regex|regex) "/);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('RE2 whole-path matching agrees with RegExp on shared syntax', () => {
    const safe = fc.array(fc.constantFrom('a', 'b', '/', '.', '[ab]', '(a|b)', '(?:ab)', 'a*', 'b+', 'a?', '\\d', '[^/]', '(a|ab)', 'x{2}'), { minLength: 1, maxLength: 8 }).map((t) => t.join(''));
    const subject = fc.array(fc.constantFrom('a', 'b', '/', '1', 'x'), { maxLength: 10 }).map((c) => c.join(''));
    fc.assert(
      fc.property(safe, fc.array(subject, { minLength: 1, maxLength: 5 }), (source, subjects) => {
        const re2 = compilePathRegex(source);
        const js = new RegExp(`^(?:${source})$`);
        for (const s of subjects) assert.equal(re2.test(s), js.test(s), `${source} on ${JSON.stringify(s)}`);
      }),
      { numRuns: 1500 },
    );
  });

  it('buildRoutes and RouteTable: any metadata gives routes and problems, never a throw', () => {
    const metaValue = fc.oneof(fc.string({ maxLength: 12 }), declared, fc.constantFrom('rpc', 'api', 'proxy', 'web', 'event', 'soap', 'GET,post', 'g e t', '*.example.com', 'a.com:80'));
    const metadata = fc.dictionary(fc.constantFrom('path', 'PATH', 'handler', 'method', 'host', 'Host', 'other', '__proto__', 'constructor'), metaValue, { maxKeys: 5 });
    const service = fc.record({
      name: fc.constantFrom('go.mesh.api.a', 'go.mesh.api.b', 'x'),
      version: fc.constantFrom('v1', 'v2'),
      endpoints: fc.array(fc.record({ name: fc.string({ maxLength: 8 }), metadata }), { maxLength: 4 }),
    });
    fc.assert(
      fc.property(fc.array(service, { maxLength: 3 }), fc.array(path, { maxLength: 3 }), fc.constantFrom('GET', 'post', 'X'), fc.option(fc.string({ maxLength: 12 })), (services, paths, method, host) => {
        const { routes, problems } = buildRoutes(services.map((s) => ({ ...s, metadata: {}, nodes: [] }) as Service));
        for (const p of problems) assert.equal(typeof p.reason, 'string');
        const table = new RouteTable(routes);
        for (const p of paths) {
          table.match(method, host ?? undefined, p);
        }
        table.dump();
      }),
      { numRuns: 800 },
    );
  });

  it('splitList never loses a non-separator character', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (value) => {
        const parts = splitList(value);
        for (const part of parts) assert.ok(part.trim() === part && part !== '');
      }),
      { numRuns: 2000 },
    );
  });
});
