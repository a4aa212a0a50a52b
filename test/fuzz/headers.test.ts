/** Property tests: wire headers (src/core/transport/headers.ts). */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { connectionNamed, endToEndHeaders, isHopByHop, rawNameIs, HEADER_ENDPOINT, HEADER_SERVICE, HEADER_TIMEOUT } from '../../src/core/transport/headers.js';

const name = fc.oneof(
  fc.constantFrom('connection', 'keep-alive', 'te', 'host', 'content-length', 'content-type', 'x-a', 'x-b', HEADER_SERVICE, HEADER_ENDPOINT, HEADER_TIMEOUT, '__proto__', 'constructor', 'toString'),
  fc.string({ maxLength: 10 }),
);
const value = fc.oneof(fc.string({ maxLength: 20 }), fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 }), fc.constant(undefined), fc.constantFrom('close', 'keep-alive', 'x-a, X-B', 'Upgrade', ',,', ' x-a '));

describe('fuzz: wire headers', () => {
  it('endToEndHeaders: any header object gives strings, without hop-by-hop, Connection-named or protocol headers', () => {
    fc.assert(
      fc.property(fc.dictionary(name, value, { maxKeys: 8 }), (headers) => {
        const out = endToEndHeaders(headers as Record<string, string | string[] | undefined>);
        const named = connectionNamed(headers['connection'] as string | string[] | undefined);
        for (const [k, v] of Object.entries(out)) {
          assert.equal(typeof v, 'string');
          assert.ok(!isHopByHop(k), k);
          assert.ok(!named?.has(k), k);
          assert.ok(k !== HEADER_SERVICE && k !== HEADER_ENDPOINT && k !== HEADER_TIMEOUT && k !== 'content-type', k);
          const original = headers[k];
          assert.equal(v, Array.isArray(original) ? original.join(', ') : original);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('connectionNamed: undefined for keep-alive/close, else trimmed lower-case names', () => {
    fc.assert(
      fc.property(fc.oneof(value, fc.string({ unit: 'binary', maxLength: 12 })), (v) => {
        const named = connectionNamed(v as string | string[] | undefined);
        if (named) for (const n of named) assert.equal(n, n.trim().toLowerCase());
      }),
      { numRuns: 5000 },
    );
  });

  it('rawNameIs agrees with a case-insensitive comparison of latin1 names', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.constantFrom('connection', 'content-length', 'x-a'), (n, lower) => {
        const buf = Buffer.from(n, 'latin1');
        assert.equal(rawNameIs(buf, lower), buf.toString('latin1').toLowerCase() === lower);
      }),
      { numRuns: 3000 },
    );
  });
});
