/** escapeRegExp (src/base/util/regex.ts): literal text in a regex, for JavaScript patterns and RE2 alike. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compilePathRegex, escapeRegExp } from '../../src/base/util/regex.js';

describe('escapeRegExp', () => {
  const table: Array<[string, string]> = [
    ['', ''],
    ['abc', 'abc'],
    ['a.b', 'a\\.b'],
    ['cluster.orders.', 'cluster\\.orders\\.'],
    ['.*+?^${}()|[]\\', '\\.\\*\\+\\?\\^\\$\\{\\}\\(\\)\\|\\[\\]\\\\'],
    ['/a-b/c_d~e', '/a-b/c_d~e'],
    ['v1:x,y=z!', 'v1:x,y=z!'],
    ['\u00e9\u4e2d', '\u00e9\u4e2d'],
  ];
  for (const [input, expected] of table) {
    it(`${JSON.stringify(input)} → ${JSON.stringify(expected)}`, () => {
      assert.equal(escapeRegExp(input), expected);
      assert.ok(new RegExp(`^${escapeRegExp(input)}$`).test(input));
    });
  }

  it('the escaped text matches exactly itself, in JavaScript and in RE2', () => {
    const text = fc.string({ unit: fc.constantFrom(...'.*+?^${}()|[]\\/-_ab1'), maxLength: 20 });
    fc.assert(
      fc.property(text, text, (a, b) => {
        const js = new RegExp(`^${escapeRegExp(a)}$`);
        assert.ok(js.test(a));
        assert.equal(js.test(b), a === b);
        const re2 = compilePathRegex(escapeRegExp(a));
        assert.ok(re2.test(a));
        assert.equal(re2.test(b), a === b);
      }),
      { numRuns: 2000 },
    );
  });
});
