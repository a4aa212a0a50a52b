/** Property tests: JSON bodies (src/base/codec/json.ts), deep nesting included. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { JsonDepthError, MAX_JSON_DEPTH, jsonNestingExceeds, parseJson, stringifyJson } from '../../src/base/codec/json.js';
import { parseRpcCall } from '../../src/edge/handlers/rpc-endpoint.js';
import { MeshError } from '../../src/base/errors.js';

/** The real nesting depth of a parsed value, iteratively. */
function depthOf(value: unknown): number {
  let max = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (v && typeof v === 'object') {
      max = Math.max(max, d + 1);
      for (const child of Object.values(v)) stack.push([child, d + 1]);
    }
  }
  return max;
}

/** Random JSON text nested up to `depth`, strings full of brackets, quotes and backslashes. */
const trickyString = fc.array(fc.constantFrom('[', ']', '{', '}', '"', '\\', 'a', 'é', '\n'), { maxLength: 80 }).map((c) => c.join(''));
const nestedText = fc.letrec<{ value: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constantFrom('1', 'null', 'true', '12345678901234567890', '-0.5e3'),
    trickyString.map((s) => JSON.stringify(s)),
    fc.array(tie('value'), { maxLength: 3 }).map((a) => `[${a.join(',')}]`),
    // Unique keys: with a repeated key JSON.parse keeps the last value, and the text may be deeper than the value.
    fc.uniqueArray(fc.tuple(trickyString, tie('value')), { selector: ([k]) => k, maxLength: 3 }).map((e) => `{${e.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
  ),
})).value;

describe('fuzz: JSON bodies', () => {
  it('parseJson agrees with JSON.parse on valid JSON within the depth limit (exact big integers aside)', () => {
    fc.assert(
      fc.property(fc.json({ maxDepth: 8 }), (text) => {
        const ours = parseJson(text);
        assert.equal(stringifyJson(ours), JSON.stringify(JSON.parse(text)));
      }),
      { numRuns: 2000 },
    );
  });

  it('the depth scan agrees with the real depth, whatever the strings hold', () => {
    fc.assert(
      fc.property(nestedText, fc.integer({ min: 1, max: 8 }), (text, max) => {
        const depth = depthOf(JSON.parse(text));
        assert.equal(jsonNestingExceeds(text, max), depth > max, `${text} depth ${depth}, max ${max}`);
        assert.equal(jsonNestingExceeds(Buffer.from(text), max), depth > max, 'as bytes');
      }),
      { numRuns: 3000 },
    );
  });

  it('deep nesting of any shape is a JsonDepthError; at the limit it parses', () => {
    const opener = fc.array(fc.constantFrom('[', '{"k":', '{"[":'), { minLength: MAX_JSON_DEPTH - 2, maxLength: MAX_JSON_DEPTH + 200 });
    fc.assert(
      fc.property(opener, fc.constantFrom('1', '"]]]"', '[]', '{}', '12345678901234567890'), (opens, inner) => {
        const closers = opens.map((o) => (o === '[' ? ']' : '}')).reverse();
        const text = opens.join('') + inner + closers.join('');
        const depth = opens.length + (inner === '[]' || inner === '{}' ? 1 : 0);
        if (depth > MAX_JSON_DEPTH) assert.throws(() => parseJson(text), JsonDepthError);
        else assert.equal(depthOf(parseJson(text)), depth);
      }),
      { numRuns: 500 },
    );
  });

  it('random text: a value or a SyntaxError, never another error', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 30 }), fc.array(fc.constantFrom('[', ']', '{', '}', '"', '\\', ':', ',', '1', '12345678901234567890', 'true'), { maxLength: 200 }).map((c) => c.join(''))), (text) => {
        try {
          parseJson(text);
        } catch (err) {
          assert.ok(err instanceof SyntaxError, `${(err as Error).constructor.name}: ${(err as Error).message}`);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('/rpc bodies: a call or a 4xx MeshError, never another error', () => {
    const field = fc.oneof(fc.json({ maxDepth: 3 }), fc.constantFrom('"go.mesh.srv.x"', '"X.Y"', '"127.0.0.1:80"', '"[[[["', '"' + '['.repeat(100) + ']'.repeat(100) + '"'));
    const body = fc.oneof(
      fc.dictionary(fc.constantFrom('service', 'SERVICE', 'method', 'endpoint', 'request', 'address', 'x'), field, { maxKeys: 5 }).map((o) => `{${Object.entries(o).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
      fc.string({ maxLength: 40 }),
    );
    fc.assert(
      fc.property(body, fc.constantFrom(undefined, 'application/json', 'application/x-www-form-urlencoded', 'text/plain'), (text, type) => {
        try {
          const call = parseRpcCall('go.mesh.api', type, Buffer.from(text));
          assert.ok(call.service.length > 0);
          JSON.parse(call.request.toString());
        } catch (err) {
          assert.ok(err instanceof MeshError && err.code >= 400 && err.code < 500, String(err));
        }
      }),
      { numRuns: 3000 },
    );
  });
});
