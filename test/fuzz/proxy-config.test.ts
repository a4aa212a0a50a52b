/**
 * Property tests: the `mesh proxy` config file (src/fronts/proxy/config.ts). Random YAML and JSON, and
 * random objects shaped like a config, give either a config or a ProxyConfigError naming the
 * file; never a TypeError or another crash.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { stringify } from 'yaml';
import { parseProxyConfig, ProxyConfigError } from '../../src/fronts/proxy/config.js';

function check(text: string): void {
  try {
    const config = parseProxyConfig(text, 'fuzz.yaml');
    assert.ok(Array.isArray(config.listeners) && Array.isArray(config.clusters));
    for (const l of config.listeners) for (const r of l.routes) assert.equal(typeof r.matches('/a/b'), 'boolean');
  } catch (err) {
    assert.ok(err instanceof ProxyConfigError, `${(err as Error)?.constructor?.name}: ${(err as Error)?.stack ?? String(err)}\n--- input:\n${text}`);
    assert.ok(err.message.startsWith('proxy config fuzz.yaml'), err.message);
  }
}

const scalar = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.integer({ min: -5, max: 70000 }),
  fc.double({ noNaN: false }),
  fc.boolean(),
  fc.constant(null),
  fc.constantFrom('/', '/api/', '^/(a+)+$', '^/(a)\\1', '127.0.0.1:0', ':0', '[::1]:80', 'backend', 'svc', '5s', '300ms', 'round_robin', 'random', 'least_request', '0', 'x:y', '__proto__'),
);
const value: fc.Arbitrary<unknown> = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small' },
    scalar,
    fc.array(tie('v'), { maxLength: 3 }),
    fc.dictionary(
      fc.oneof(
        fc.constantFrom('listeners', 'clusters', 'admin', 'name', 'address', 'routes', 'match', 'prefix', 'path', 'regex', 'cluster', 'service', 'prefix_rewrite', 'hosts', 'port', 'weight', 'zone', 'region', 'canary', 'lb_policy', 'circuit_breakers', 'outlier_detection', 'health_check', 'panic_threshold', 'connect_timeout', 'interval', 'timeout', '__proto__', 'constructor'),
        fc.string({ maxLength: 6 }),
      ),
      tie('v'),
      { maxKeys: 4 },
    ),
  ),
})).v;

/** Something close to a valid file, so that the deep checks run too. */
const shaped = fc.record({
  listeners: fc.array(
    fc.record({
      name: fc.oneof(fc.constantFrom('l', 'm'), scalar),
      address: fc.oneof(fc.constantFrom('127.0.0.1:0', ':0'), scalar),
      routes: fc.array(
        fc.record({ match: fc.oneof(fc.record({ prefix: scalar }), fc.record({ path: scalar }), fc.record({ regex: scalar }), value), cluster: fc.oneof(fc.constant('backend'), scalar) }, { requiredKeys: ['match'] }),
        { maxLength: 3 },
      ),
    }),
    { maxLength: 2 },
  ),
  clusters: fc.array(
    fc.record({
      name: fc.oneof(fc.constant('backend'), scalar),
      hosts: fc.oneof(fc.constant(['127.0.0.1:9001']), fc.array(fc.oneof(scalar, fc.record({ address: scalar, port: scalar })), { maxLength: 2 })),
      lb_policy: scalar,
      circuit_breakers: value,
      outlier_detection: value,
      health_check: value,
      panic_threshold: scalar,
      connect_timeout: scalar,
    }, { requiredKeys: ['name', 'hosts'] }),
    { maxLength: 2 },
  ),
  admin: value,
}, { requiredKeys: [] });

describe('fuzz: proxy config', () => {
  it('random YAML-ish text: a config or a ProxyConfigError', () => {
    const yamlish = fc.array(fc.constantFrom('listeners:', 'clusters:', '  - ', 'name: x', 'routes:', '    ', '{', '}', '[', ']', ':', '- ', '&a ', '*a', '<<: *a', '!!binary ', '"', "'", '\n', '#', 'match: { regex: "^/(" }', 'hosts: [1.2.3.4:5]', '? ', '---\n', '%YAML 1.2\n'), { maxLength: 30 }).map((p) => p.join(''));
    fc.assert(fc.property(fc.oneof(yamlish, fc.string({ maxLength: 60 })), check), { numRuns: 2000 });
  });

  it('random objects as YAML and as JSON: a config or a ProxyConfigError', () => {
    fc.assert(
      fc.property(fc.oneof(value, shaped), fc.boolean(), (obj, asJson) => {
        let text: string;
        try {
          text = asJson ? JSON.stringify(obj) ?? 'null' : stringify(obj);
        } catch {
          return; // not representable
        }
        check(text);
      }),
      { numRuns: 1500 },
    );
  });
});
