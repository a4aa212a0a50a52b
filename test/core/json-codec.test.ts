import { test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonDepthError, MAX_JSON_DEPTH, jsonNestingExceeds, parseJson, stringifyJson } from '../../src/base/codec/json.js';
import { JSON_CODEC, codecFor, PROTOBUF_CODEC } from '../../src/base/codec/codec.js';
import { apiTypes } from '../../src/base/codec/api-proto.js';

test('integers beyond 2^53 survive a round trip', () => {
  const text = '{"id":9007199254740993,"neg":-123456789012345678901,"small":42,"f":1.5,"s":"x\\"y","a":[18446744073709551615,true,null]}';
  const value = parseJson(text) as Record<string, unknown>;
  assert.equal(value.id, 9007199254740993n);
  assert.equal(value.small, 42);
  assert.equal(stringifyJson(value), text);
});

test('plain JSON uses the native parser and matches it', () => {
  const text = '{"a":[1,2,{"b":"c"}],"d":null,"e":1e3}';
  assert.deepEqual(parseJson(text), JSON.parse(text));
});

test('malformed JSON is a SyntaxError', () => {
  for (const bad of ['{', '{"a":}', '[1,]', '{"id":12345678901234567890', 'nul', '{"a":1} x']) assert.throws(() => parseJson(bad), SyntaxError, bad);
});

test('codec selection by content type', () => {
  assert.equal(codecFor(undefined), JSON_CODEC);
  assert.equal(codecFor('application/json; charset=utf-8'), JSON_CODEC);
  assert.equal(codecFor('application/protobuf'), PROTOBUF_CODEC);
  assert.equal(codecFor('text/plain'), undefined);
});

test('protobuf codec with the API messages of proto/api.proto', () => {
  const { Request } = apiTypes();
  const req = { method: 'GET', path: '/greeter/say/hello', header: {}, get: { name: { key: 'name', values: ['John'] } }, post: {}, body: '', url: '/greeter/say/hello?name=John' };
  const bytes = PROTOBUF_CODEC.encode(req, Request);
  const back = PROTOBUF_CODEC.decode(bytes, Request) as typeof req;
  assert.deepEqual(back.get, req.get);
  assert.equal(back.url, req.url);
  assert.throws(() => PROTOBUF_CODEC.encode({}), /needs a message type/);
});

test('stringifyJson: plain values take JSON.stringify as it is', () => {
  const values: unknown[] = [
    { a: [1, 2.5, -3e-7, null, true], s: 'x"\\\n\u2028é😀', nested: { e: {}, l: [] } },
    [undefined, () => 1, Symbol('s')],
    { skip: undefined, f: () => 1, d: new Date(0), n: NaN, i: -Infinity },
    'text',
    42,
    null,
    // Looks like the BigInt marker of the fallback, but there is no BigInt: stays a string.
    { s: '\u0000big:12\u0000' },
  ];
  for (const v of values) assert.equal(stringifyJson(v), JSON.stringify(v));
  assert.equal(stringifyJson(undefined), 'null');
  assert.equal(stringifyJson(() => 1), 'null');
});

test('stringifyJson: a BigInt anywhere falls back and keeps its exact digits', () => {
  assert.equal(stringifyJson(2n ** 64n), '18446744073709551616');
  assert.equal(stringifyJson(-(10n ** 25n)), '-10000000000000000000000000');
  const value = { id: 9007199254740993n, list: [1, 18446744073709551615n, { deep: -123456789012345678901n }], s: 'é', ok: true };
  const text = stringifyJson(value);
  assert.equal(text, '{"id":9007199254740993,"list":[1,18446744073709551615,{"deep":-123456789012345678901}],"s":"é","ok":true}');
  assert.deepEqual(parseJson(text), value);
  // Round trip through the codec: bytes in, the same bytes out.
  const bytes = Buffer.from(text);
  assert.equal(Buffer.from(JSON_CODEC.encode(JSON_CODEC.decode(bytes))).toString(), text);
  // toJSON still runs before the BigInt check, as JSON.stringify does.
  assert.equal(stringifyJson({ t: { toJSON: () => 5n } }), '{"t":5}');
});

test('stringifyJson: errors other than BigInt are those of JSON.stringify', () => {
  const loop: Record<string, unknown> = { a: 1 };
  loop.self = loop;
  assert.throws(() => stringifyJson(loop), (err: Error) => err instanceof TypeError && /circular/i.test(err.message));
  // A BigInt in a circular structure: still the circular error.
  const bigLoop: Record<string, unknown> = { n: 1n };
  bigLoop.self = bigLoop;
  assert.throws(() => stringifyJson(bigLoop), (err: Error) => err instanceof TypeError && /circular/i.test(err.message));
  const boom = { toJSON: () => { throw new RangeError('no'); } };
  assert.throws(() => stringifyJson(boom), RangeError);
});

test('JSON codec decodes a Buffer, a Uint8Array view and an empty body', () => {
  const text = '{"big":12345678901234567890,"s":"é"}';
  const buf = Buffer.from(`xx${text}yy`);
  const view = new Uint8Array(buf.buffer, buf.byteOffset + 2, buf.byteLength - 4);
  assert.deepEqual(JSON_CODEC.decode(view), { big: 12345678901234567890n, s: 'é' });
  assert.deepEqual(JSON_CODEC.decode(buf.subarray(2, buf.length - 2)), { big: 12345678901234567890n, s: 'é' });
  assert.deepEqual(JSON_CODEC.decode(new Uint8Array(0)), {});
});

test('nesting deeper than MAX_JSON_DEPTH is a JsonDepthError, on both parser paths and through the codec', () => {
  const nested = (n: number, inner = '1') => '['.repeat(n) + inner + ']'.repeat(n);
  assert.deepEqual(parseJson(nested(MAX_JSON_DEPTH)), JSON.parse(nested(MAX_JSON_DEPTH)));
  assert.equal(stringifyJson(parseJson(nested(MAX_JSON_DEPTH, '12345678901234567890'))), nested(MAX_JSON_DEPTH, '12345678901234567890'), 'the BigInt path at the limit');
  for (const inner of ['1', '12345678901234567890', '{"a":{}}']) {
    for (const n of [MAX_JSON_DEPTH + 1, 10_000, 200_000]) {
      assert.throws(() => parseJson(nested(n, inner)), (err: Error) => err instanceof JsonDepthError && err instanceof SyntaxError && err.message === 'JSON nesting deeper than 64 levels of arrays and objects');
    }
  }
  assert.throws(() => JSON_CODEC.decode(Buffer.from(nested(100_000))), JsonDepthError);
  // Unbalanced or invalid input: the scan never throws, the parser reports the syntax.
  assert.throws(() => parseJson('['.repeat(10) + '"unterminated'), (err: Error) => !(err instanceof JsonDepthError));
});

test('jsonNestingExceeds skips strings (escapes included) and scans Buffers as bytes', () => {
  assert.equal(jsonNestingExceeds('[[[]]]', 3), false);
  assert.equal(jsonNestingExceeds('[[[[]]]]', 3), true);
  assert.equal(jsonNestingExceeds('[{"a":[]}]', 3), false);
  // String.raw: the JSON text exactly as written.
  assert.equal(jsonNestingExceeds(String.raw`["[[[[", "\\", [["x"]]]`, 3), false);
  assert.equal(jsonNestingExceeds(String.raw`["\\", [[[1]]]]`, 3), true, 'an escaped backslash ends before the quote');
  assert.equal(jsonNestingExceeds(String.raw`["\\"[[[[`, 3), true);
  assert.equal(jsonNestingExceeds(String.raw`["\"[[[[["]`, 3), false, 'an escaped quote does not end the string');
  assert.equal(jsonNestingExceeds(`["${'é'.repeat(100)}\\\\", [[[1]]]]`, 3), true, 'long strings (indexOf path) end at the right quote');
  assert.equal(jsonNestingExceeds(`["${'x'.repeat(100)}\\\\\\"[[[[["]`, 3), false, 'long strings: an escaped quote after an escaped backslash');
  assert.equal(jsonNestingExceeds(Buffer.from(`{"é€":[[[["ü"]]]]}`), 4), true);
  assert.equal(jsonNestingExceeds(Buffer.from(`{"é€":[[["ü"]]]}`), 4), false);
  assert.equal(jsonNestingExceeds('"unterminated [[[[[', 3), false);
});

test('"__proto__" is an own property on both parser paths, never the prototype', () => {
  for (const text of ['{"__proto__":{"admin":true},"n":1}', '{"__proto__":{"admin":true},"n":12345678901234567890}']) {
    const value = parseJson(text) as Record<string, unknown>;
    assert.equal(Object.getPrototypeOf(value), Object.prototype, text);
    assert.equal((value as { admin?: boolean }).admin, undefined, text);
    assert.deepEqual(Object.keys(value), ['__proto__', 'n']);
    assert.deepEqual(value['__proto__'], { admin: true });
    assert.equal(stringifyJson(value), text);
  }
});

test('long digit runs inside strings stay strings; outside, big integers still decode exactly', () => {
  assert.deepEqual(parseJson('{"ts":"1732600000000000000","id":"00000000000000000001"}'), { ts: '1732600000000000000', id: '00000000000000000001' });
  const mixed = parseJson('{"s":"12345678901234567890","n":12345678901234567890,"f":0.12345678901234567}') as Record<string, unknown>;
  assert.equal(mixed.s, '12345678901234567890');
  assert.equal(mixed.n, 12345678901234567890n);
  assert.equal(mixed.f, 0.12345678901234567);
  // A string that ends in backslashes, then a long integer.
  assert.deepEqual(parseJson('["a\\\\",12345678901234567890]'), ['a\\', 12345678901234567890n]);
});
