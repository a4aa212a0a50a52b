/**
 * Every resource `mesh xds` serves, from a realistic registry (several services, versions,
 * regions and zones, weights, health states, health check paths) and cluster settings (circuit
 * breakers and retry budgets, outlier detection, active health checks, panic threshold), passes
 * Envoy's own checks: the bytes served (the Any of each resource, as encodeSnapshot makes it)
 * decode with the full Envoy protos, and the decoded message, Any payloads included, breaks no
 * `validate.rules` annotation. The messages before encoding pass the same check (a field the
 * reduced protos of proto/xds lacked would show here and not in the bytes).
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EnvoyProtos, type Violation } from '../fixtures/envoy-validate.js';
import { buildSnapshot, RESOURCE_KINDS, SNAPSHOT_FIELD, TYPE_URLS, type XdsInput } from '../../src/xds/resources.js';
import { XdsProtos } from '../../src/xds/protos.js';
import { encodeSnapshot } from '../../src/xds/source.js';
import { resolveSettings, type ClusterSettings } from '../../src/core/upstream/config.js';
import type { Service } from '../../src/engines/registry/registry.js';

const typeName = (url: string) => url.slice(url.lastIndexOf('/') + 1);

/** A registry of five services over two regions and four zones, with versions, weights, health states and health check paths. */
function registry(): Service[] {
  const zones = [['eu-west', 'eu-west-1a'], ['eu-west', 'eu-west-1b'], ['us-east', 'us-east-1a'], ['us-east', 'us-east-1c']] as const;
  const health = [undefined, 'healthy', 'draining', 'degraded', 'unhealthy'];
  const services: Service[] = [];
  let port = 9000;
  for (const [s, name] of ['go.mesh.srv.greeter', 'go.mesh.srv.orders', 'go.mesh.srv.payments', 'go.mesh.srv.search', 'go.mesh.api.edge'].entries()) {
    for (const [v, version] of ['1.0.0', '1.1.0-canary'].entries()) {
      const nodes = Array.from({ length: 3 + s }, (_, i) => {
        const [region, zone] = zones[(i + v) % zones.length]!;
        const metadata: Record<string, string> = { region, zone, weight: String(v === 1 ? 10 : 90 - i) };
        const h = health[(i + s) % health.length];
        if (h) metadata.health = h;
        if (name !== 'go.mesh.srv.search') metadata.health_check_path = '/healthz';
        return { id: `${name}-${version}-${i}`, address: `10.${s}.${v}.${i + 1}`, port: port++, metadata };
      });
      services.push({ name, version, metadata: {}, endpoints: [{ name: 'Handler.Call', metadata: {} }], nodes });
    }
  }
  // An IPv6 node, and a node with no locality at all.
  services.push({ name: 'go.mesh.srv.legacy', version: '', metadata: {}, endpoints: [], nodes: [{ id: 'legacy-1', address: '::1', port: 7000, metadata: {} }, { id: 'legacy-2', address: '127.0.0.1', port: 7001, metadata: { weight: '100' } }] });
  return services;
}

const SETTINGS: ClusterSettings = {
  connectTimeoutMs: 750,
  lbPolicy: 'least_request',
  panicThresholdPercent: 30,
  circuitBreakers: {
    default: { maxConnections: 2048, maxPendingRequests: 512, maxRequests: 4096, maxRetries: 8, retryBudget: { percent: 25, minConcurrency: 5 } },
    high: { maxConnections: 100, maxRequests: 200 },
  },
  outlierDetection: { consecutive5xx: 3, intervalMs: 5000, baseEjectionTimeMs: 15_000, maxEjectionPercent: 50, successRateStdevFactor: 1.9, splitExternalLocalOriginErrors: true },
  healthCheck: { intervalMs: 3000, timeoutMs: 500, unhealthyThreshold: 3, healthyThreshold: 2, expectedStatuses: [[200, 300], [404, 405]] },
};

function input(settings: ClusterSettings = SETTINGS): XdsInput {
  return { services: registry(), settings: resolveSettings(settings, undefined, 'round_robin', true) };
}

const brief = (vs: Violation[]) => vs.map((v) => `${v.path} ${v.rule}: ${v.message}`);

describe('what mesh xds serves passes Envoy\'s validate.rules', () => {
  let envoy: EnvoyProtos;
  before(async () => {
    envoy = await EnvoyProtos.load();
  });

  for (const [what, settings] of [
    ['with every cluster setting', SETTINGS],
    ['with the defaults', {}],
    ['with outlier detection off and a health check of its own path', { outlierDetection: false, healthCheck: { path: '/ready', host: 'internal.example' } }],
  ] as Array<[string, ClusterSettings]>) {
    it(`every resource of every kind, ${what}: the served bytes and the messages`, () => {
      const snapshot = buildSnapshot(input(settings));
      const served = encodeSnapshot(new XdsProtos(), snapshot);
      let resources = 0;
      for (const kind of RESOURCE_KINDS) {
        const type = typeName(TYPE_URLS[kind]);
        const messages = snapshot[SNAPSHOT_FIELD[kind]];
        assert.equal(messages.size, 6, `${kind}: one per service`);
        for (const [name, message] of messages) {
          assert.deepEqual(brief(envoy.check(type, message)), [], `${kind} ${name} (the message)`);
          const { any } = served.resources[kind].get(name)!;
          assert.equal(any.type_url, TYPE_URLS[kind]);
          // The Any as an ADS response carries it: decoded with its type, payloads and all.
          assert.deepEqual(brief(envoy.validate('google.protobuf.Any', any)), [], `${kind} ${name} (the bytes served)`);
          const decoded = envoy.type(type).decode(any.value) as unknown as Record<string, unknown>;
          assert.equal(decoded[kind === 'endpoint' ? 'cluster_name' : 'name'], name);
          resources++;
        }
      }
      assert.equal(resources, 24);
    });
  }

  it('the check sees into a served resource: a broken one fails (so the passing ones mean something)', () => {
    const snapshot = buildSnapshot(input());
    const cla = structuredClone(snapshot.endpoints.get('go.mesh.srv.greeter')!) as Record<string, any>;
    cla.endpoints[0].lb_endpoints[0].load_balancing_weight = { value: 0 };
    cla.endpoints[1].priority = 129;
    const cluster = structuredClone(snapshot.clusters.get('go.mesh.srv.greeter')!) as Record<string, any>;
    cluster.health_checks[0].interval = { seconds: 0, nanos: 0 };
    cluster.common_lb_config.healthy_panic_threshold = { value: 101 };
    const listener = structuredClone(snapshot.listeners.get('go.mesh.srv.greeter')!) as Record<string, any>;
    listener.api_listener.api_listener.stat_prefix = '';
    const bytes = new XdsProtos();
    const violations = (kind: 'endpoint' | 'cluster' | 'listener', m: Record<string, unknown>) =>
      envoy.validate('google.protobuf.Any', bytes.encodeResource(kind, 'x', m).any).map((v) => `${v.path} ${v.rule}`).sort();
    assert.deepEqual(violations('endpoint', cla), ['endpoints[0].lb_endpoints[0].load_balancing_weight uint32.gte', 'endpoints[1].priority uint32.lte']);
    assert.deepEqual(violations('cluster', cluster), [
      'common_lb_config.healthy_panic_threshold.value double.lte',
      'health_checks[0].interval duration.gt',
    ]);
    assert.deepEqual(violations('listener', listener), ['api_listener.api_listener.stat_prefix string.min_len']);
  });
});
