/**
 * What mesh xds builds from the registry's nodes (src/xds/resources.ts), as plain messages: the
 * active health check only where mesh's own clusters would check every node at one path, and
 * endpoints read as mesh's own clusters read nodes (weight, zone, region), with what had to be
 * corrected said.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildCluster, buildLoadAssignment, type Message } from '../../src/xds/resources.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import type { Node } from '../../src/engines/registry/registry.js';

const node = (id: string, metadata: Record<string, string> = {}): Node => ({ id, address: '127.0.0.1', port: 8000 + id.length, metadata });
const settings = resolveSettings(undefined, undefined, 'round_robin', true);
const checkedPath = (nodes: Node[], s = settings) => ((buildCluster('svc', nodes, s).health_checks as Message[] | undefined)?.[0]?.http_health_check as Message | undefined)?.path;

describe('mesh xds clusters: the active health check', () => {
  it('one when every node names the same path; none when one names none or they differ', () => {
    assert.equal(checkedPath([node('a', { health_check_path: '/h' }), node('bb', { health_check_path: 'h' })]), '/h');
    assert.equal(checkedPath([node('a', { health_check_path: '/h' }), node('bb')]), undefined);
    assert.equal(checkedPath([node('a', { health_check_path: '/h' }), node('bb', { health_check_path: '/other' })]), undefined);
    assert.equal(checkedPath([node('a'), node('bb')]), undefined);
  });

  it('the settings\' path stands for the nodes that name none', () => {
    const withPath = { ...settings, healthCheck: { ...settings.healthCheck, path: '/s' } };
    assert.equal(checkedPath([node('a'), node('bb')], withPath), '/s');
    assert.equal(checkedPath([node('a', { health_check_path: '/s' }), node('bb')], withPath), '/s');
    assert.equal(checkedPath([node('a', { health_check_path: '/h' }), node('bb')], withPath), undefined);
  });
});

describe('mesh xds endpoints', () => {
  it('weights, zones and regions as mesh reads them; a weight it corrects is said, with the service and node', () => {
    const said: string[] = [];
    const cla = buildLoadAssignment('svc', [node('a', { weight: 'heavy', zone: 'z1', region: 'r' }), node('bb', { weight: '250' })], { warn: (m) => said.push(m) });
    const endpoints = cla.endpoints as Array<{ locality: Message; lb_endpoints: Array<{ load_balancing_weight: { value: number }; endpoint: { hostname: string } }> }>;
    assert.deepEqual(
      endpoints.map((l) => [l.locality.region, l.locality.zone, l.lb_endpoints.map((e) => `${e.endpoint.hostname}=${e.load_balancing_weight.value}`).join()]),
      [
        ['', '', 'bb=100'],
        ['r', 'z1', 'a=1'],
      ],
    );
    assert.deepEqual(said, [
      'service svc: node a (127.0.0.1:8001): weight "heavy" is not a number; using 1',
      'service svc: node bb (127.0.0.1:8002): weight 250 is outside 1..100 or not an integer; using 100',
    ]);
  });
});
