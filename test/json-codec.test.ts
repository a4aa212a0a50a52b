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
