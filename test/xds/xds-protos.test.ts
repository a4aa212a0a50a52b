/**
 * mesh encodes xDS resources with the reduced Envoy protos of proto/xds. Here every kind of
 * resource mesh serves, built from a registry with every setting that shows in them, is decoded
 * with the FULL Envoy protos (the ones @grpc/grpc-js-xds carries) and compared field by field
 * with what the builder meant: each field is Envoy's field of that name, its value arrived, and
 * nothing else is set. Also: versions are content hashes (equal content, equal version).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import protobuf from 'protobufjs';
import { EnvoyProtos } from '../fixtures/envoy-validate.js';
import { buildSnapshot, RESOURCE_KINDS, SNAPSHOT_FIELD, TYPE_URLS, type Message, type XdsInput } from '../../src/xds/resources.js';
import { XdsProtos, versionOf } from '../../src/xds/protos.js';
import { encodeSnapshot } from '../../src/xds/source.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { envoyRoutes } from '../../src/xds/envoy-routes.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { SHOP_ROUTE_FILE } from '../fixtures/xds-route-file.js';

/** The full Envoy protos, with their imports (validate, xds, udpa, googleapis): test/fixtures/envoy-validate.ts loads them. */
export function fullEnvoyRoot(): protobuf.Root {
  return EnvoyProtos.loadSync().root;
}

const typeOfUrl = (root: protobuf.Root, url: string) => root.lookupType(url.slice(url.lastIndexOf('/') + 1));

/** True for a proto3 default (not on the wire): 0, '', false, an enum's zero value, an empty list. */
function isDefault(field: protobuf.Field, value: unknown): boolean {
  if (Array.isArray(value)) return value.length === 0;
  if (field.resolvedType instanceof protobuf.Enum) return field.resolvedType.values[value as string] === 0;
  if (field.resolvedType instanceof protobuf.Type) return false; // a message, even empty, is present
  return value === 0 || value === '' || value === false;
}

/**
 * Compares what mesh meant (`meant`) with what the full protos decoded (`got`, a toObject of
 * the full type) below `path`: every field of `meant` is a field of the full type, equal in
 * value; `got` holds no other field.
 */
function compare(root: protobuf.Root, type: protobuf.Type, meant: Message, got: Record<string, unknown>, path: string): number {
  let fields = 0;
  for (const [key, value] of Object.entries(meant)) {
    if (key === '@type') continue;
    const field = type.fields[key];
    assert.ok(field, `${path}.${key}: ${type.fullName} has no field ${key}`);
    fields++;
    const at = `${path}.${key}`;
    if (isDefault(field, value)) {
      // protobufjs writes a default it was given; the full protos then read the same default.
      if (got[key] !== undefined) assert.deepEqual(got[key], value, at);
      continue;
    }
    assert.notEqual(got[key], undefined, `${at}: missing after decoding with the full protos`);
    // A map: its entries by key, in key order on both sides.
    const entries = (o: unknown) => Object.entries(o as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1));
    if (field.map) assert.deepEqual(entries(got[key]).map(([k]) => k), entries(value).map(([k]) => k), `${at}: keys`);
    const values = field.repeated ? (value as unknown[]) : field.map ? entries(value).map(([, v]) => v) : [value];
    const decoded = field.repeated ? (got[key] as unknown[]) : field.map ? entries(got[key]).map(([, v]) => v) : [got[key]];
    assert.equal(decoded.length, values.length, `${at}: count`);
    values.forEach((v, i) => {
      const d = decoded[i];
      const rt = field.resolvedType;
      if (rt instanceof protobuf.Type && rt.fullName === '.google.protobuf.Any') {
        const m = v as Message;
        const any = d as { type_url: string; value: Uint8Array };
        assert.equal(any.type_url, m['@type'], `${at}: type_url`);
        const inner = typeOfUrl(root, any.type_url);
        fields += compare(root, inner, m, inner.toObject(inner.decode(any.value), { enums: String, longs: Number }), `${at}<${inner.name}>`);
      } else if (rt instanceof protobuf.Type) {
        fields += compare(root, rt, v as Message, d as Record<string, unknown>, at);
      } else {
        assert.deepEqual(d, v, at);
      }
    });
  }
  for (const key of Object.keys(got)) assert.ok(key in meant, `${path}.${key}: set on the wire but not by mesh`);
  return fields;
}

/** A registry and settings that exercise every field the builders write. */
function richInput(): XdsInput {
  const settings = resolveSettings(
    {
      healthCheck: { path: '/health', host: 'svc.local', intervalMs: 1500, timeoutMs: 250, expectedStatuses: [[200, 300]] },
      outlierDetection: { splitExternalLocalOriginErrors: true, successRateStdevFactor: 1.5, intervalMs: 2500 },
      circuitBreakers: { default: { maxRequests: 77, retryBudget: { percent: 12.5, minConcurrency: 4 } }, high: { maxConnections: 9 } },
      panicThresholdPercent: 0,
      connectTimeoutMs: 1250,
    },
    undefined,
    'least_request',
    true,
  );
  const node = (id: string, port: number, metadata: Record<string, string>) => ({ id, address: '10.0.0.' + port, port: 8000 + port, metadata });
  return {
    settings,
    services: [
      {
        name: 'go.mesh.srv.greeter',
        version: '1.0.0',
        metadata: {},
        endpoints: [],
        nodes: [node('g1', 1, { region: 'eu', zone: 'eu-1', weight: '3' }), node('g2', 2, { region: 'eu', zone: 'eu-2', health: 'draining' }), node('g3', 3, { health: 'unhealthy' })],
      },
      { name: 'go.mesh.srv.greeter', version: '2.0.0', metadata: {}, endpoints: [], nodes: [node('g4', 4, { region: 'us', zone: 'us-1', health: 'degraded', weight: '100' })] },
      { name: 'go.mesh.srv.other', version: '', metadata: {}, endpoints: [], nodes: [{ id: 'o1', address: '::1', port: 9, metadata: { health: 'strange' } }] },
    ],
  };
}

/** A route file that uses every field envoy-routes.ts writes (mesh xds --routes serves its listener and routes). */
const ROUTE_FILE = `${SHOP_ROUTE_FILE}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: more}
spec:
  rules:
    - matches: [{path: {value: /r2}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {port: 8443, statusCode: 302, path: {type: ReplaceFullPath, replaceFullPath: /x}}
    - matches: [{path: {value: /r3}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}
    - matches: [{path: {value: /r4}, headers: [{type: RegularExpression, name: x-a, value: 'a.*'}], queryParams: [{name: q, value: '1'}]}]
      backendRefs: [{name: go.mesh.srv.web}]
      timeouts: {backendRequest: 1s}
    - matches: [{path: {value: /r5}}]
      backendRefs: [{name: go.mesh.srv.web}]
      retry: {attempts: 1}
    - matches: [{path: {value: /r6}}]
      backendRefs: [{name: go.mesh.srv.web}]
      filters:
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
`;

describe('xDS resources decode with the full Envoy protos', () => {
  const root = fullEnvoyRoot();
  const protos = new XdsProtos();

  it('every resource of every kind: same fields, same values, nothing else', () => {
    const snapshot = buildSnapshot(richInput());
    let checked = 0;
    for (const kind of RESOURCE_KINDS) {
      const full = typeOfUrl(root, TYPE_URLS[kind]);
      const resources = snapshot[SNAPSHOT_FIELD[kind]];
      assert.equal(resources.size, 2, kind);
      for (const [name, message] of resources) {
        const bytes = protos.encode(kind, message);
        const got = full.toObject(full.decode(bytes), { enums: String, longs: Number });
        checked += compare(root, full, message, got, `${kind} ${name}`);
      }
    }
    assert.ok(checked > 100, `only ${checked} fields compared`);
  });

  it('the HTTP listener and routes of a route file (over RDS and inline): same fields, same values, nothing else', () => {
    const file = parseRouteFile(ROUTE_FILE, 'routes.yaml');
    let checked = 0;
    for (const rds of [true, false]) {
      const { listener, routeConfiguration } = envoyRoutes(file, { address: { host: '0.0.0.0', port: 10000 }, rds, versionSubsets: true });
      for (const [kind, message] of [['listener', listener], ['route', routeConfiguration]] as const) {
        const full = typeOfUrl(root, TYPE_URLS[kind]);
        const got = full.toObject(full.decode(protos.encode(kind, message)), { enums: String, longs: Number });
        checked += compare(root, full, message, got, `${kind} (rds ${rds})`);
      }
    }
    assert.ok(checked > 300, `only ${checked} fields compared`);
  });

  it('the settings show where Envoy reads them', () => {
    const snapshot = buildSnapshot(richInput());
    const cluster = snapshot.clusters.get('go.mesh.srv.greeter')!;
    assert.equal(cluster.lb_policy, 'LEAST_REQUEST');
    assert.deepEqual(cluster.connect_timeout, { seconds: 1, nanos: 250_000_000 });
    assert.deepEqual((cluster.common_lb_config as Message).healthy_panic_threshold, { value: 0 });
    const [def, high] = (cluster.circuit_breakers as { thresholds: Message[] }).thresholds;
    assert.deepEqual(def!.max_requests, { value: 77 });
    assert.deepEqual(def!.retry_budget, { budget_percent: { value: 12.5 }, min_retry_concurrency: { value: 4 } });
    assert.deepEqual(high!.max_connections, { value: 9 });
    const od = cluster.outlier_detection as Message;
    assert.deepEqual(od.success_rate_stdev_factor, { value: 1500 });
    assert.equal(od.split_external_local_origin_errors, true);
    assert.deepEqual(od.interval, { seconds: 2, nanos: 500_000_000 });
    assert.deepEqual(cluster.lb_subset_config, { fallback_policy: 'ANY_ENDPOINT', subset_selectors: [{ keys: ['version'], fallback_policy: 'NO_FALLBACK' }] });
    const [hc] = cluster.health_checks as Message[];
    assert.deepEqual(hc!.http_health_check, { path: '/health', host: 'svc.local', expected_statuses: [{ start: 200, end: 300 }] });

    const cla = snapshot.endpoints.get('go.mesh.srv.greeter')!;
    const localities = (cla.endpoints as Array<{ locality: Message; load_balancing_weight: { value: number }; lb_endpoints: Message[] }>).map((l) => [
      `${l.locality.region}/${l.locality.zone}`,
      l.load_balancing_weight.value,
      l.lb_endpoints.map((e) => e.health_status).join(','),
    ]);
    assert.deepEqual(localities, [
      ['/', 1, 'UNHEALTHY'],
      ['eu/eu-1', 3, 'HEALTHY'],
      ['eu/eu-2', 1, 'DRAINING'],
      ['us/us-1', 100, 'DEGRADED'],
    ]);
    const versionOf_ = (e: Message) => ((e.metadata as Message | undefined)?.filter_metadata as Record<string, { fields: { version: { stringValue: string } } }> | undefined)?.['envoy.lb']?.fields.version.stringValue;
    assert.deepEqual(
      (cla.endpoints as Array<{ lb_endpoints: Message[] }>).flatMap((l) => l.lb_endpoints.map(versionOf_)),
      ['1.0.0', '1.0.0', '1.0.0', '2.0.0'],
      'each endpoint carries the version it was registered with',
    );
    const other = snapshot.endpoints.get('go.mesh.srv.other')!;
    assert.equal((other.endpoints as Array<{ lb_endpoints: Message[] }>)[0]!.lb_endpoints[0]!.health_status, 'UNKNOWN');
    assert.equal((other.endpoints as Array<{ lb_endpoints: Message[] }>)[0]!.lb_endpoints[0]!.metadata, undefined, 'no version, no metadata');
  });

  it('versions are content hashes: the same content built twice has the same versions; a change moves only its kind', () => {
    const a = encodeSnapshot(protos, buildSnapshot(richInput()));
    const b = encodeSnapshot(new XdsProtos(), buildSnapshot(richInput()));
    assert.deepEqual(a.versions, b.versions);
    for (const v of Object.values(a.versions)) assert.match(v, /^[0-9a-f]{16}$/);
    const input = richInput();
    (input.services[0]!.nodes[0]!.metadata as Record<string, string>).weight = '4';
    const c = encodeSnapshot(protos, buildSnapshot(input));
    assert.notEqual(c.versions.endpoint, a.versions.endpoint);
    assert.equal(c.versions.cluster, a.versions.cluster);
    assert.equal(c.versions.listener, a.versions.listener);
    assert.equal(c.versions.route, a.versions.route);
    assert.equal(versionOf([...a.resources.route.values()]), a.versions.route);
  });
});
