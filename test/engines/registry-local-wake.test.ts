/**
 * What wakes the local registry's watchers (src/engines/registry/local/watcher.ts): where the
 * registry's directory can be watched, a write by another connection and a known node's expiry,
 * not the poll. Each test gives the watching registry a poll of an hour, so an event that arrives
 * was brought by the directory's watch or the expiry's timer; the poll is only a fallback then.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { WATCHED_POLL_MS } from '../../src/engines/registry/local/watcher.js';
import type { WatchEvent } from '../../src/engines/registry/registry.js';
import { node, svc } from '../registry-contract.js';
import { tempDir, waitFor } from '../helpers.js';

const HOUR = 3_600_000;

describe('local registry: what wakes a watcher', () => {
  const tmp = tempDir('mesh-registry-wake-');
  const open: LocalRegistry[] = [];
  const registry = (pollMs?: number) => {
    const r = new LocalRegistry(tmp.path, { pollMs });
    open.push(r);
    return r;
  };
  after(async () => {
    for (const r of open) await r.close();
    tmp.cleanup();
  });

  it('a write by another connection, with no poll due for an hour', async () => {
    const watching = registry(HOUR);
    const writer = registry();
    const events: WatchEvent[] = [];
    const w = watching.watch((e) => events.push(e));
    try {
      await writer.register(svc('go.mesh.srv.woken', '1', [node('w-1', 9201)]));
      await waitFor(() => events.some((e) => e.action === 'create' && e.service.name === 'go.mesh.srv.woken'), 10_000);
      await writer.deregister(svc('go.mesh.srv.woken', '1', [node('w-1', 9201)]));
      await waitFor(() => events.some((e) => e.action === 'delete' && e.service.name === 'go.mesh.srv.woken'), 10_000);
    } finally {
      w.stop();
    }
  });

  it("a known node's expiry, with no poll due for an hour and no write", async () => {
    const watching = registry(HOUR);
    const writer = registry();
    const events: WatchEvent[] = [];
    await writer.register(svc('go.mesh.srv.mortal', '1', [node('m-1', 9202)]), { ttlMs: 300 });
    const w = watching.watch((e) => events.push(e));
    try {
      await waitFor(() => events.some((e) => e.action === 'delete' && e.service.name === 'go.mesh.srv.mortal'), 10_000);
    } finally {
      w.stop();
    }
  });

  it('the poll, a fallback, runs every second while the directory is watched (50 ms where it cannot be)', async () => {
    const r = registry();
    const w = r.watch(() => undefined);
    try {
      assert.equal(WATCHED_POLL_MS, 1000);
      assert.equal(r.pollEveryMs, WATCHED_POLL_MS);
    } finally {
      w.stop();
    }
    assert.equal(r.pollEveryMs, undefined, 'no poll without watchers or registrations');
  });
});
