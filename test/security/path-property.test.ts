/**
 * Property test: the auth rules and a decoding backend read the same path. For generated paths
 * (percent-encodings of any byte in either case, dot segments plain and encoded, `;`, mixed case,
 * doubled slashes, backslashes, broken escapes), the front ends' normalizer (src/base/http/path.ts)
 * either refuses the path, or the rule that matches the normalized path is the rule that matches
 * the path a fully decoding backend routes on: WSGI's PATH_INFO (every escape decoded, dot
 * segments removed), for the path as sent and for the path as forwarded, and a Spring/Tomcat-like
 * backend (`;params` stripped, `//` merged). The backend's side is written here, on its own
 * (test/fixtures/decoding-backend.ts), with each rule's path as the backend spells it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { normalizePath } from '../../src/base/http/path.js';
import { parseTarget } from '../../src/base/http/target.js';
import { parseRules, ruleMatches } from '../../src/edge/auth/rules.js';
import { springPath, wsgiPath } from '../fixtures/decoding-backend.js';

/** The rules file, and for each rule the prefix a backend compares (bytes, one character each) and whether case is ignored. */
const RULES: Array<{ yaml: string; backend: string; ignoreCase?: boolean }> = [
  { yaml: '- path: /raw/internal/\n  ignore_case: true\n  access: deny', backend: '/raw/internal/', ignoreCase: true },
  { yaml: '- path: /raw/admin/\n  scopes: [admin]', backend: '/raw/admin/' },
  { yaml: '- path: /raw/caf%C3%A9/\n  access: deny', backend: '/raw/caf\xc3\xa9/' },
  { yaml: '- path: /raw/café/x\n  access: authenticated', backend: '/raw/caf\xc3\xa9/x' },
  { yaml: '- path: /raw/x!y\n  access: deny', backend: '/raw/x!y' },
  { yaml: '- path: "/raw/a b/"\n  access: deny', backend: '/raw/a b/' },
  { yaml: '- path: /raw/Case/\n  access: authenticated', backend: '/raw/Case/' },
  { yaml: '- path: /raw/%25/\n  access: deny', backend: '/raw/%/' },
  { yaml: '- path: /raw/\n  access: public', backend: '/raw/' },
  { yaml: '- path: /\n  access: authenticated', backend: '/' },
];
const rules = parseRules(RULES.map((r) => r.yaml).join('\n'), false);

const lowerAscii = (s: string) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** The first rule (index) that a backend routing on `path` applies; -1 for none. */
function backendRule(path: string): number {
  return RULES.findIndex((r) => {
    const p = r.ignoreCase ? lowerAscii(path) : path;
    return r.backend.endsWith('/') ? p.startsWith(r.backend) : p === r.backend || p.startsWith(`${r.backend}/`);
  });
}

/** The first rule the gateway applies to a normalized path. */
function gatewayRule(path: string): number {
  return rules.findIndex((rule) => ruleMatches(rule, { path }));
}

const hex = (b: number, lower: boolean) => {
  const h = b.toString(16).padStart(2, '0');
  return `%${lower ? h : h.toUpperCase()}`;
};
const escapeOf = fc.tuple(fc.integer({ min: 0, max: 255 }), fc.boolean()).map(([b, lower]) => hex(b, lower));
const escapedWord = (word: string) =>
  fc.array(fc.constantFrom('plain', 'escaped', 'escapedLower', 'upper'), { minLength: word.length, maxLength: word.length }).map((how) =>
    [...word]
      .map((c, i) => {
        const b = c.charCodeAt(0);
        switch (how[i]) {
          case 'escaped':
            return hex(b, false);
          case 'escapedLower':
            return hex(b, true);
          case 'upper':
            return c.toUpperCase();
          default:
            return c;
        }
      })
      .join(''),
  );
const ASCII = [...Array(0x7f - 0x21).keys()].map((i) => String.fromCharCode(0x21 + i)).filter((c) => c !== '?');
const segment = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('raw', 'internal', 'Internal', 'INTERNAL', 'admin', 'public', 'x', 'café', 'caf%C3%A9', 'caf%c3%a9', 'x!y', 'x%21y', 'a b', 'a%20b', 'Case', 'case', '%25', '%') },
  { weight: 3, arbitrary: fc.constantFrom('.', '..', '%2e', '%2E', '%2e%2e', '.%2E', '%2E.', '...', '') },
  { weight: 2, arbitrary: fc.constantFrom(';', ';a=b', '..;', 'internal;a=b', '%3B', '%3b', '%2F', '%2f', '%5C', '\\', '%00', '%G1', '%4', '#') },
  { weight: 3, arbitrary: fc.oneof(escapedWord('internal'), escapedWord('admin'), escapedWord('raw'), escapedWord('..'), escapedWord('Case')) },
  { weight: 2, arbitrary: fc.array(fc.oneof(fc.constantFrom(...ASCII), escapeOf), { maxLength: 4 }).map((p) => p.join('')) },
);
/** Mostly paths under /raw/ (where the rules are), some of any shape. */
const rawPath = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(fc.oneof(fc.constant('raw'), escapedWord('raw')), fc.array(segment, { maxLength: 6 })).map(([first, rest]) => `/${[first, ...rest].join('/')}`) },
  { weight: 2, arbitrary: fc.array(segment, { maxLength: 6 }).map((s) => `/${s.join('/')}`) },
  { weight: 1, arbitrary: fc.array(fc.oneof(fc.constantFrom(...ASCII), escapeOf), { maxLength: 24 }).map((c) => c.join('')) },
);

describe('property: the rules and a decoding backend see the same path', () => {
  it('refused, or the same rule matches for the gateway, WSGI (as sent and as forwarded) and a Spring-like backend', () => {
    let accepted = 0;
    let respelled = 0;
    fc.assert(
      fc.property(rawPath, (raw) => {
        const n = normalizePath(raw);
        if ('refused' in n) {
          assert.match(n.refused, /^invalid path: /);
          return;
        }
        accepted++;
        const normal = n.path;
        const rule = gatewayRule(normal);
        assert.equal(rule, backendRule(wsgiPath(raw)), `WSGI, as sent: ${raw} -> ${normal}`);
        assert.equal(rule, backendRule(wsgiPath(normal)), `WSGI, as forwarded: ${raw} -> ${normal}`);
        assert.equal(rule, backendRule(springPath(raw)), `Spring-like, as sent: ${raw} -> ${normal}`);
        assert.equal(rule, backendRule(springPath(normal)), `Spring-like, as forwarded: ${raw} -> ${normal}`);
        if (normal !== raw && rule !== backendRule(raw)) respelled++;
        // The normal form is a fixed point, and has no dot segment, empty segment, `;` or lower-case escape.
        assert.deepEqual(normalizePath(normal), { path: normal });
        assert.doesNotMatch(normal, /\/\.\.?(\/|$)|\/\/|;|%[0-9A-F]?[a-f]/);
      }),
      { numRuns: 20000 },
    );
    // The generator reaches both sides: many paths pass, and many of those only match their rule once normalized.
    assert.ok(accepted > 4000, `accepted ${accepted}`);
    assert.ok(respelled > 500, `respelled ${respelled}`);
  });

  it('the query is never touched: only the path part of a target changes', () => {
    fc.assert(
      fc.property(rawPath, fc.array(fc.oneof(fc.constantFrom(...ASCII, '?'), escapeOf), { maxLength: 12 }), (raw, query) => {
        const q = query.join('');
        const t = parseTarget(`${raw}?${q}`);
        const n = normalizePath(raw);
        assert.equal(t.query, q);
        if ('refused' in n) assert.deepEqual({ refused: t.refused, url: t.url }, { refused: n.refused, url: `${raw}?${q}` });
        else assert.deepEqual({ url: t.url, path: t.path, refused: t.refused }, { url: `${n.path}?${q}`, path: n.path, refused: undefined });
      }),
      { numRuns: 5000 },
    );
  });
});
