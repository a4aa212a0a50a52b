/** Property tests: the path resolver of the gateway and the sidecar (src/edge/handlers/resolve.ts). */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { resolveEventPath, resolveProxyPath, resolveRpcPath, RpcPathResolver, pathSegments } from '../../src/edge/handlers/resolve.js';

const NS = 'go.mesh.api';
const segment = fc.oneof(fc.stringMatching(/^[a-z][a-z0-9-]{0,6}$/), fc.constantFrom('v1', 'v22', '', '-', 'a--b', 'é', '%2F', '..', 'a b', '_x'));
const url = fc.oneof(
  fc.array(segment, { maxLength: 6 }).chain((parts) => fc.tuple(fc.constant('/' + parts.join('/')), fc.constantFrom('', '?', '?a=1', '/', '//', '#x'))).map(([p, s]) => p + s),
  fc.string({ maxLength: 30 }),
  fc.string({ unit: "binary", maxLength: 20 }),
);

describe('fuzz: path resolver', () => {
  it('never throws; a route names a service in the namespace and an Endpoint.Method', () => {
    const resolver = new RpcPathResolver(NS, 16);
    fc.assert(
      fc.property(url, (u) => {
        const rpc = resolveRpcPath(u, NS);
        if (rpc) {
          assert.ok(rpc.service.startsWith(NS + '.'), rpc.service);
          assert.match(rpc.method, /^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$/);
        }
        assert.deepEqual(resolver.resolve(u), rpc, 'the caching resolver agrees');
        const proxy = resolveProxyPath(u, NS);
        if (proxy) assert.ok(proxy.service.startsWith(NS + '.') && !/\s/.test(proxy.service));
        const event = resolveEventPath(u, NS);
        if (event) {
          assert.ok(event.topic.startsWith(NS + '.'));
          assert.ok(event.name.length > 0);
        }
        const segments = pathSegments(u);
        if (segments) for (const s of segments) assert.match(s, /^[A-Za-z0-9_-]+$/);
      }),
      { numRuns: 5000 },
    );
  });

  it('the query never changes the route', () => {
    fc.assert(
      fc.property(fc.array(segment, { maxLength: 5 }), fc.string({ maxLength: 10 }), (parts, query) => {
        const p = '/' + parts.join('/');
        assert.deepEqual(resolveRpcPath(`${p}?${query}`, NS), resolveRpcPath(p, NS));
      }),
      { numRuns: 3000 },
    );
  });
});
