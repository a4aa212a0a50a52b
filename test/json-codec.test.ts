import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseJson, stringifyJson } from '../src/codec/json.js';
import { JSON_CODEC, codecFor, PROTOBUF_CODEC } from '../src/codec/codec.js';
import { apiTypes } from '../src/codec/api-proto.js';

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
