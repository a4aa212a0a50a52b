/**
 * A live route file (src/edge/routes/live.ts), in process: a good new file replaces the table in
 * one assignment (what a request already read stays as it was), an unchanged one changes nothing,
 * a bad one keeps the table, counted each time and logged once until the error changes; an empty
 * one is refused, a comment alone is a file of no routes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { LiveRoutes } from '../../src/edge/routes/live.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { tempDir } from '../helpers.js';

const route = (version: string) =>
  `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {rules: [{backendRefs: [{name: svc, version: ${version}}]}]}\n`;

describe('live route file', () => {
  it('swaps on a good file, keeps the table on a bad one (counted, logged once)', async () => {
    const dir = tempDir('mesh-routes-live-');
    try {
      const file = join(dir.path, 'routes.yaml');
      writeFileSync(file, route('v1'));
      const lines: string[] = [];
      const log = pino({ level: 'info' }, new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }));
      const stats = new StatsStore();
      const live = new LiveRoutes({ file, stats, log });
      const req = { method: 'GET', host: undefined, path: '/', query: undefined, headers: {} };
      const first = live.table;
      assert.equal(first.match(req)?.backend?.version, 'v1');

      assert.equal(await live.reload(), true); // unchanged: nothing happens
      assert.equal(live.table, first);
      assert.equal(stats.counter('routes.update_success').value, 0);

      writeFileSync(file, route('v2'));
      assert.equal(await live.reload(), true);
      assert.notEqual(live.table, first);
      assert.equal(live.table.match(req)?.backend?.version, 'v2');
      assert.equal(first.match(req)?.backend?.version, 'v1'); // what a request read stays
      assert.equal(stats.counter('routes.update_success').value, 1);

      const good = live.table;
      writeFileSync(file, route('v 3'));
      assert.equal(await live.reload(), false);
      assert.equal(await live.reload(), false);
      assert.equal(live.table, good);
      assert.equal(stats.counter('routes.update_failure').value, 2);
      const failed = lines.filter((l) => l.includes('route file reload failed'));
      assert.equal(failed.length, 1);
      assert.match(failed[0]!, /line 4: HTTPRoute r spec\.rules\[0\]\.backendRefs\[0\]\.version: not a registry version/);
      assert.equal(live.dump().last_reload_error, JSON.parse(failed[0]!).err);

      // An empty file is refused (a file being rewritten, not "no routes"); a comment alone says "no routes".
      writeFileSync(file, '');
      assert.equal(await live.reload(), false);
      assert.equal(live.table, good);
      assert.equal(live.dump().last_reload_error, `${file}: is empty: an empty file is refused on a reload (write the configuration in full, or an explicitly empty one)`);
      writeFileSync(file, '# no routes\n');
      assert.equal(await live.reload(), true);
      assert.equal(live.table.size, 0);
      assert.equal(stats.gauge('routes.active').value, 0);
    } finally {
      dir.cleanup();
    }
  });
});
