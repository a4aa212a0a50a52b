/** Stats scopes: a scope's stats are the store's under the scope's prefix; declared families. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StatsStore, declareStats } from '../../src/base/stats/store.js';
import { renderText } from '../../src/base/stats/render.js';

test('a scope hands out the store stat named prefix + suffix, and scopes nest', () => {
  const store = new StatsStore();
  const cluster = store.scope('cluster.go.mesh.srv.a.');
  assert.equal(cluster.prefix, 'cluster.go.mesh.srv.a.');
  cluster.counter('upstream_rq_total').inc(3);
  assert.equal(store.counter('cluster.go.mesh.srv.a.upstream_rq_total').value, 3);
  assert.equal(cluster.counter('upstream_rq_total'), store.counter('cluster.go.mesh.srv.a.upstream_rq_total'));
  const od = cluster.scope('outlier_detection.');
  assert.equal(od.prefix, 'cluster.go.mesh.srv.a.outlier_detection.');
  od.gauge('ejections_active').set(2);
  assert.equal(store.gauge('cluster.go.mesh.srv.a.outlier_detection.ejections_active').value, 2);
  cluster.histogram('upstream_rq_time').record(3);
  assert.equal(store.histogram('cluster.go.mesh.srv.a.upstream_rq_time').count, 1);
  assert.throws(() => cluster.gauge('upstream_rq_total'), /is a counter, not a gauge/);
});

test('declareStats makes every declared stat under the scope, one field per name', () => {
  const store = new StatsStore();
  const family = { counters: { ok: 'ratelimit.ok', over: 'ratelimit.over_limit' }, gauges: { active: 'downstream_rq_active' } } as const;
  const s = declareStats(store.scope('http.ingress.'), family);
  s.ok.inc();
  s.active.set(4);
  assert.equal(
    renderText(store.list()).toString(),
    'http.ingress.downstream_rq_active: 4\nhttp.ingress.ratelimit.ok: 1\nhttp.ingress.ratelimit.over_limit: 0\n',
  );
  // Declaring again finds the same stats.
  assert.equal(declareStats(store.scope('http.ingress.'), family).ok.value, 1);
});
