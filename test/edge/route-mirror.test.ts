/**
 * RequestMirror's bound (src/edge/handlers/mirror.ts), in process: copies over the cap of copies
 * in flight are dropped and counted, never queued; a copy that cannot find a node is counted as
 * failed and frees its place.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StatsStore } from '../../src/base/stats/store.js';
import { MirrorSender } from '../../src/edge/handlers/mirror.js';
import { ROUTE_STATS } from '../../src/edge/routes/effects.js';
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
});
