import { test } from 'node:test';
import assert from 'node:assert/strict';
import { resolveRpcPath, resolveProxyPath, resolveEventPath, toCamel } from '../../src/edge/handlers/resolve.js';

const ns = 'go.mesh.api';

test('SPEC 4.4 request mapping', () => {
  assert.deepEqual(resolveRpcPath('/foo/bar', ns), { service: 'go.mesh.api.foo', method: 'Foo.Bar' });
  assert.deepEqual(resolveRpcPath('/foo/bar/baz', ns), { service: 'go.mesh.api.foo', method: 'Bar.Baz' });
  assert.deepEqual(resolveRpcPath('/foo/bar/baz/cat', ns), { service: 'go.mesh.api.foo.bar', method: 'Baz.Cat' });
});

test('SPEC 4.4 versioned paths', () => {
  assert.deepEqual(resolveRpcPath('/foo/bar', 'go.mesh.srv'), { service: 'go.mesh.srv.foo', method: 'Foo.Bar' });
  assert.deepEqual(resolveRpcPath('/v1/foo/bar', ns), { service: 'go.mesh.api.v1.foo', method: 'Foo.Bar' });
  assert.deepEqual(resolveRpcPath('/v1/foo/bar/baz', ns), { service: 'go.mesh.api.v1.foo', method: 'Bar.Baz' });
  assert.deepEqual(resolveRpcPath('/v2/foo/bar', ns), { service: 'go.mesh.api.v2.foo', method: 'Foo.Bar' });
  assert.deepEqual(resolveRpcPath('/v2/foo/bar/baz', ns), { service: 'go.mesh.api.v2.foo', method: 'Bar.Baz' });
});

test('query is ignored, - becomes CamelCase, bad paths resolve to nothing', () => {
  assert.deepEqual(resolveRpcPath('/greeter/say/hello?name=John', ns), { service: 'go.mesh.api.greeter', method: 'Say.Hello' });
  assert.deepEqual(resolveRpcPath('/foo/get-user', ns), { service: 'go.mesh.api.foo', method: 'Foo.GetUser' });
  assert.equal(toCamel('get-user-name'), 'GetUserName');
  assert.equal(resolveRpcPath('/', ns), undefined);
  assert.equal(resolveRpcPath('/foo', ns), undefined);
  assert.equal(resolveRpcPath('/foo//bar', ns), undefined);
  assert.equal(resolveRpcPath('/foo/b.r', ns), undefined);
  assert.equal(resolveRpcPath('/../etc', ns), undefined);
});

test('SPEC 4.4 proxy handler mapping', () => {
  assert.deepEqual(resolveProxyPath('/foo/bar', ns), { service: 'go.mesh.api.foo' });
  assert.deepEqual(resolveProxyPath('/greeter', ns), { service: 'go.mesh.api.greeter' });
  assert.deepEqual(resolveProxyPath('/greeter/:name', ns), { service: 'go.mesh.api.greeter' });
  assert.deepEqual(resolveProxyPath('/greeter/John?x=1', ns), { service: 'go.mesh.api.greeter' });
  assert.deepEqual(resolveProxyPath('/v1/greeter/x', ns), { service: 'go.mesh.api.v1.greeter' });
  assert.equal(resolveProxyPath('/', ns), undefined);
  assert.equal(resolveProxyPath('/a.b/c', ns), undefined);
});

test('event handler mapping', () => {
  assert.deepEqual(resolveEventPath('/user/login', ns), { topic: 'go.mesh.api.user', name: 'login' });
  assert.deepEqual(resolveEventPath('/foo/bar/baz', ns), { topic: 'go.mesh.api.foo', name: 'bar.baz' });
  assert.deepEqual(resolveEventPath('/v1/foo/bar', ns), { topic: 'go.mesh.api.v1.foo', name: 'bar' });
  assert.equal(resolveEventPath('/foo', ns), undefined);
});

test('RpcPathResolver remembers answers, ignores the query, and stays bounded', async () => {
  const { RpcPathResolver } = await import('../../src/edge/handlers/resolve.js');
  const r = new RpcPathResolver('go.mesh.srv', 2);
  const a = r.resolve('/foo/bar?x=1');
  assert.deepEqual(a, { service: 'go.mesh.srv.foo', method: 'Foo.Bar' });
  assert.equal(r.resolve('/foo/bar?y=2'), a, 'the same object: remembered');
  assert.equal(r.resolve('/nope'), undefined);
  assert.equal(r.resolve('/nope'), undefined);
  assert.deepEqual(r.resolve('/v1/foo/bar'), { service: 'go.mesh.srv.v1.foo', method: 'Foo.Bar' });
  assert.deepEqual(r.resolve('/foo/bar'), a, 'still right after the memory was dropped');
});
