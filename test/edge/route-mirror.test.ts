/**
 * RequestMirror's bound (src/edge/handlers/mirror.ts), in process: copies over the cap of copies
 * in flight are dropped and counted, never queued; a copy that cannot find a node is counted as
 * failed and frees its place. A mirror's percent or fraction: each request drawn on its own.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StatsStore } from '../../src/base/stats/store.js';
import { MirrorSender } from '../../src/edge/handlers/mirror.js';
import { ROUTE_STATS, RuleEffects } from '../../src/edge/routes/effects.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { declareStats } from '../../src/base/stats/store.js';
import type { UpstreamLease } from '../../src/core/upstream/types.js';
import { waitFor } from '../helpers.js';

describe('RequestMirror', () => {
  it('at most the cap of copies in flight: the others are dropped and counted; failures counted', async () => {
    const stats = declareStats(new StatsStore().scope('vhost.*.route.r.'), ROUTE_STATS);
    const pending: Array<(err: Error) => void> = [];
    const clusters = { acquire: () => new Promise<UpstreamLease>((_resolve, reject) => pending.push(reject)) };
    const mirrors = new MirrorSender(clusters, 1000, 2);
    const request = { method: 'GET', path: '/a', headers: [], body: undefined };
    mirrors.send(['s1', 's2'], request, stats);
    mirrors.send(['s1'], request, stats);
    assert.equal(mirrors.active, 2);
    assert.equal(stats.mirrorSent.value, 2);
    assert.equal(stats.mirrorDropped.value, 1);
    for (const reject of pending) reject(new Error('no host'));
    await waitFor(() => mirrors.active === 0);
    assert.equal(stats.mirrorFailed.value, 2);
    mirrors.send(['s1'], request, stats);
    assert.equal(stats.mirrorSent.value, 3);
    assert.equal(mirrors.active, 1);
    pending[2]!(new Error('no host'));
    await waitFor(() => mirrors.active === 0);
  });

  it("a mirror's percent and fraction: a share of the requests, by the injected draw", () => {
    const file = parseRouteFile(
      `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  rules:
    - backendRefs: [{name: a}]
      filters:
        - {type: RequestMirror, requestMirror: {backendRef: {name: all}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: twenty}, percent: 20}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: half}, fraction: {numerator: 25, denominator: 50}}}
        - {type: RequestMirror, requestMirror: {backendRef: {name: none}, percent: 0}}
`,
      'routes.yaml',
    );
    let next = 0;
    const draws: number[] = [];
    const effects = new RuleEffects(file.routes[0]!.rules[0]!, new StatsStore().scope('vhost.*.route.r.'), () => draws[next++] ?? 0.99);
    const draw = (...values: number[]) => {
      draws.splice(0, draws.length, ...values);
      next = 0;
      return effects.drawMirrors();
    };
    // One draw per mirror with a share (the whole-share mirror draws nothing): twenty, half, none.
    assert.deepEqual(draw(0.19, 0.49, 0), ['all', 'twenty', 'half']);
    assert.deepEqual(draw(0.2, 0.5, 0), ['all']);
    assert.deepEqual(draw(0, 0.99, 0), ['all', 'twenty']);
    assert.equal(next, 3);
    // Over many seeded draws, the shares come out as written.
    let seed = 42;
    const lcg = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const seeded = new RuleEffects(file.routes[0]!.rules[0]!, new StatsStore().scope('vhost.*.route.s.'), lcg);
    const counts: Record<string, number> = {};
    for (let i = 0; i < 10_000; i++) for (const s of seeded.drawMirrors()) counts[s] = (counts[s] ?? 0) + 1;
    assert.equal(counts.all, 10_000);
    assert.equal(counts.none, undefined);
    assert.ok(Math.abs(counts.twenty! - 2000) < 200, String(counts.twenty));
    assert.ok(Math.abs(counts.half! - 5000) < 250, String(counts.half));
  });
});
