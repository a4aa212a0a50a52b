/**
 * Reliability under a hung node, with real processes: three framework services (who-service)
 * share a local registry; a steady load of calls goes through a framework client with a per-try
 * timeout and one retry. One service is stopped with SIGSTOP (its kernel still accepts
 * connections, nothing answers), later continued with SIGCONT.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { ClusterManager } from '../../src/core/upstream/cluster-manager.js';
import { Client } from '../../src/core/client/client.js';
import { ROOT, startProcess, tempDir, waitFor, sleep, type RunningProcess } from '../helpers.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');
const SERVICE = 'go.mesh.srv.who';
const PER_TRY_MS = 200;
const EJECTION_MS = 1_000;

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

test('SIGSTOP one of 3 nodes under load: no call fails, the node is ejected quickly, calls stay fast, and it returns after SIGCONT', async () => {
  const home = tempDir();
  const children: RunningProcess[] = [];
  const registry = createRegistry('local', home.path);
  const stats = new StatsStore();
  const cm = new ClusterManager({
    registry,
    stats,
    logging: new Logging('off'),
    lbPolicy: 'round_robin',
    defaults: { outlierDetection: { baseEjectionTimeMs: EJECTION_MS, intervalMs: 100 } },
  });
  const client = new Client({ selector: cm, requestTimeoutMs: 5_000, retries: 1, perTryTimeoutMs: PER_TRY_MS });
  let stopped: RunningProcess | undefined;
  let stop = false;
  try {
    // A long TTL: the stopped process must stay registered, so that only outlier detection takes it out.
    for (let i = 0; i < 3; i++) {
      children.push(startProcess(['--import', 'tsx', WHO, `--registry_address=${home.path}`, '--register_ttl=60s', '--register_interval=20s', '--log_level=warning'], {}, ''));
    }
    await Promise.all(children.map((c) => c.waitForOutput(/listening on/, 20_000)));
    const nodeOfPid = new Map<number, string>();
    await waitFor(async () => {
      const r = await client.callValue<{ node: string; pid: number }>(SERVICE, 'Who.Am', {});
      nodeOfPid.set(r.pid, r.node);
      return nodeOfPid.size === 3;
    }, 15_000, 10);

    // Steady load: 4 callers, each call's start time, duration and result recorded.
    const calls: Array<{ at: number; ms: number; ok: boolean; node?: string }> = [];
    const worker = async () => {
      while (!stop) {
        const at = Date.now();
        try {
          const r = await client.callValue<{ node: string }>(SERVICE, 'Who.Am', {});
          calls.push({ at, ms: Date.now() - at, ok: true, node: r.node });
        } catch {
          calls.push({ at, ms: Date.now() - at, ok: false });
        }
        await sleep(5); // pacing, not ordering
      }
    };
    const workers = Array.from({ length: 4 }, () => worker());
    await waitFor(() => calls.length >= 50, 10_000, 10);

    stopped = children[0]!;
    const stoppedNode = nodeOfPid.get(stopped.child.pid!)!;
    const host = cm.cluster(SERVICE)!.hosts().find((h) => h.nodeId === stoppedNode)!;
    assert.ok(host, 'the stopped node is a host of the cluster');
    const stoppedAt = Date.now();
    stopped.child.kill('SIGSTOP');
    await waitFor(() => host.failedOutlierCheck, 5_000, 5);
    const ejectedAfter = Date.now() - stoppedAt;
    const ejectedAt = Date.now();
    // 5 consecutive per-try timeouts; the first ones run concurrently.
    assert.ok(ejectedAfter < 5 * PER_TRY_MS + 1_500, `ejected ${ejectedAfter} ms after SIGSTOP`);
    assert.equal(stats.counter(`cluster.${SERVICE}.outlier_detection.ejections_enforced_consecutive_gateway_failure`).value, 1);

    // A while of load with the node out.
    await waitFor(() => calls.filter((c) => c.at > ejectedAt).length >= 100, 10_000, 10);
    const after = calls.filter((c) => c.at > ejectedAt && c.ok);
    const p99 = percentile(after.map((c) => c.ms), 99);
    assert.ok(p99 < PER_TRY_MS, `p99 after ejection ${p99} ms`);
    assert.ok(after.every((c) => c.node !== stoppedNode));

    // SIGCONT: the node answers again once its ejection time is over.
    stopped.child.kill('SIGCONT');
    await waitFor(() => !host.failedOutlierCheck, EJECTION_MS + 3_000, 10);
    const returnedAfter = Date.now() - host.ejectedAt;
    assert.ok(returnedAfter >= EJECTION_MS, `returned ${returnedAfter} ms after ejection`);
    const back = Date.now();
    await waitFor(() => calls.some((c) => c.at > back && c.node === stoppedNode), 5_000, 10);

    stop = true;
    await Promise.all(workers);
    const failed = calls.filter((c) => !c.ok).length;
    assert.equal(failed, 0, `${failed} of ${calls.length} calls failed`);
    const all = calls.map((c) => c.ms);
    // Reported for the record (run with --test-reporter=spec to see it).
    console.log(
      `hung node: ${calls.length} calls, 0 failed; ejected ${ejectedAfter} ms after SIGSTOP; p50/p99/max overall ${percentile(all, 50)}/${percentile(all, 99)}/${Math.max(...all)} ms; p99 after ejection ${p99} ms; back ${returnedAfter} ms after ejection`,
    );
  } finally {
    stop = true;
    if (stopped) stopped.child.kill('SIGCONT');
    await Promise.all(children.map((c) => c.stop('SIGKILL')));
    await cm.close(100);
    await registry.close();
    home.cleanup();
  }
});
