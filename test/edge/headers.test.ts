/**
 * Header names (src/core/transport/headers.ts): canonicalHeaderKey, Go's CanonicalMIMEHeaderKey rule,
 * table-driven. End to end: test/fronts/sidecar.test.ts (broker frames) and test/edge/api-handler.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalHeaderKey } from '../../src/core/transport/headers.js';

describe('canonicalHeaderKey', () => {
  // [input, expected]: the expected values are what Go's textproto.CanonicalMIMEHeaderKey returns.
  const table: Array<[string, string]> = [
    // letters: first and after '-' upper, the rest lower
    ['content-type', 'Content-Type'],
    ['Content-Type', 'Content-Type'],
    ['CONTENT-TYPE', 'Content-Type'],
    ['X-FOO-bar', 'X-Foo-Bar'],
    ['ETAG', 'Etag'],
    ['x', 'X'],
    ['mesh-id', 'Mesh-Id'],
    ['www-authenticate', 'Www-Authenticate'],
    // empty parts and dashes at either end
    ['a--b-', 'A--B-'],
    ['-foo', '-Foo'],
    ['-', '-'],
    // digits and other token characters are kept; only '-' starts a new word
    ['x-2fa-code', 'X-2fa-Code'],
    ['1abc', '1abc'],
    ['x_foo_bar', 'X_foo_bar'],
    ['x.y.z', 'X.y.z'],
    ["a!#$%&'*+.^_`|~Z", "A!#$%&'*+.^_`|~z"],
    // not a token: unchanged
    ['', ''],
    ['content type', 'content type'],
    ['foo bar', 'foo bar'],
    ['x-foo:', 'x-foo:'],
    ['x/y', 'x/y'],
    ['x(y)', 'x(y)'],
    ['x"y', 'x"y'],
    ['x\ty', 'x\ty'],
    ['x\u0000y', 'x\u0000y'],
    ['x-\u00e9t\u00e9', 'x-\u00e9t\u00e9'],
    ['\u00c9TAG', '\u00c9TAG'],
  ];
  for (const [input, expected] of table) {
    it(`${JSON.stringify(input)} → ${JSON.stringify(expected)}`, () => {
      assert.equal(canonicalHeaderKey(input), expected);
      // Idempotent: the canonical form of a canonical form is itself.
      assert.equal(canonicalHeaderKey(expected), expected);
    });
  }
});
