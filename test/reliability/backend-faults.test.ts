/**
 * Backend faults under load through a real gateway (`mesh api` on a temp local registry) in front
 * of three framework service processes (go.mesh.srv.who, Who.Am answers with its node id and pid):
 *
 *  - one node killed with SIGKILL while 8 keep-alive clients call it through POST /rpc;
 *  - the killed node started again on the same port: traffic reaches it again;
 *  - one node hung with SIGSTOP: measured without per-try timeouts, and with
 *    --client_per_try_timeout asserted lossless with the hung node ejected.
 *
 * Bounds are on failures, never on throughput: the machine running this may be slow and shared.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startGatewayProcess, http } from '../fixtures/gateway-helpers.js';
import { tempDir, waitFor } from '../helpers.js';
import { formatReport, percentile, startLoad, type LoadRequest } from './load.js';
import { ProcessGroup, startWho, type ServiceProcess } from './harness.js';

const WHO_AM: LoadRequest = {
  name: 'rpc Who.Am',
  method: 'POST',
  path: '/rpc',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Am', request: {} }),
};
const CONCURRENCY = 8;
/** Each client pauses 20 ms between requests: at most ~400 requests/s, modest on a shared machine. */
const PAUSE_MS = 20;
/**
 * Short registrations, so a dead node's entry expires (and its host leaves the cluster) within
 * seconds. With the default 30 s TTL the host at the restarted node's address stays ejected by
 * outlier detection for its whole ejection (base 30 s, checked every 10 s): measured 38 s before
 * traffic reached the restarted node.
 */
const SHORT_TTL = ['--register_ttl=3s', '--register_interval=1s'];

/** Counts answers per pid (Who.Am answers {node, pid}). */
function perPid(): { seen: Map<number, number>; onAnswer: (r: LoadRequest, status: number, body: string) => void } {
  const seen = new Map<number, number>();
  return {
    seen,
    onAnswer: (_r, status, body) => {
      if (status !== 200) return;
      const pid = (JSON.parse(body) as { pid: number }).pid;
      seen.set(pid, (seen.get(pid) ?? 0) + 1);
    },
  };
}

async function threeNodes(dir: string, group: ProcessGroup, flags: string[] = []): Promise<ServiceProcess[]> {
  return Promise.all([0, 1, 2].map(async () => group.add(await startWho(dir, { flags }))));
}

describe('backend faults under load through the gateway', () => {
  it('kill -9 of one of three nodes, then its restart on the same port', async (t) => {
    const tmp = tempDir('mesh-rel-kill-');
    const group = new ProcessGroup();
    try {
      const nodes = await threeNodes(tmp.path, group, SHORT_TTL);
      const gw = group.add(await startGatewayProcess(tmp.path, ['--client_retries=1']));
      const counter = perPid();
      const load = startLoad({ origin: gw.url, concurrency: CONCURRENCY, mix: [WHO_AM], pauseMs: PAUSE_MS, onAnswer: counter.onAnswer });
      try {
        // Warm: every node answered (the gateway knows all three).
        await waitFor(() => nodes.every((n) => (counter.seen.get(n.pid) ?? 0) >= 20), 30_000);
        const victim = nodes[1]!;
        const before = load.counts();
        process.kill(victim.pid, 'SIGKILL');
        await victim.proc.stop('SIGKILL');
        const killedAt = Date.now();
        // Keep the load on until the survivors served 600 more requests (some seconds on a slow machine).
        // and past the dead registration's expiry.
        await waitFor(() => load.counts().ok >= before.ok + 600 && Date.now() - killedAt > 4000, 60_000);
        const afterKill = load.counts();
        const lost = afterKill.failed - before.failed;
        const p99AfterKill = percentile(load.latenciesSince(killedAt).sort((a, b) => a - b), 99);
        t.diagnostic(`kill -9 of 1 of 3 nodes: ${afterKill.total - before.total} requests after the kill, ${lost} failed ${JSON.stringify(afterKill.failures)}, p99 after the kill ${p99AfterKill}ms`);
        // Ideal: 0. The requests in flight on the killed node are reset or refused; both are
        // retried (--client_retries=1) on another node, and Who.Am is an idempotent read. The
        // registry still lists the dead node (its registration has not expired), so new requests
        // keep being sent to it until outlier detection ejects it: those are retried too.
        // Retries are capped by the retry budget (at least 3 at once; 20 % of the requests in
        // flight), but a retry after a refused connection (nothing was sent) is not counted against
        // it, so only the requests in flight when the node died (reset) use it. A retry over the
        // budget is not made: the call answers with its reset, a 502. Bound here: at most one per
        // client, CONCURRENCY; the test below asserts the lossless case without pauses.
        assert.ok(lost <= CONCURRENCY, `requests lost when a node was killed: ${lost} ${JSON.stringify(afterKill.failures)} ${JSON.stringify(load.counts())}`);
        for (const kind of Object.keys(afterKill.failures)) assert.equal(kind, 'status:502', 'only the resets of retries over the budget, answered by the gateway');

        // Restart on the same port: the gateway's host (same address) serves again. The old
        // registration and the new one share the address; traffic must reach the new process.
        const again = group.add(await startWho(tmp.path, { port: victim.port, flags: SHORT_TTL }));
        const restartedAt = Date.now();
        await waitFor(() => (counter.seen.get(again.pid) ?? 0) >= 20, 60_000, 100);
        t.diagnostic(`restarted node served its 20th request ${Date.now() - restartedAt}ms after it printed its address`);
        const report = await load.stop();
        t.diagnostic(formatReport(report, 'kill + restart'));
        // Nothing more lost once the dead node was ejected, nor while it came back.
        assert.equal(report.failed, afterKill.failed, formatReport(report));
      } finally {
        await load.stop();
      }
    } finally {
      await group.stopAll();
      tmp.cleanup();
    }
  });

  it(
    'kill -9 of one of three nodes loses no idempotent read',
    async (t) => {
      const tmp = tempDir('mesh-rel-kill0-');
      const group = new ProcessGroup();
      try {
        const nodes = await threeNodes(tmp.path, group);
        // The retry budget allows as many retries at once as there are requests in flight: every
        // request on the killed node may be retried at the same moment (with the default of 3,
        // a fourth one in flight there is refused, and answered 502, as the budget says).
        const gw = group.add(await startGatewayProcess(tmp.path, ['--client_retries=1', `--retry_budget_min=${CONCURRENCY}`]));
        const counter = perPid();
        const load = startLoad({ origin: gw.url, concurrency: CONCURRENCY, mix: [WHO_AM], pauseMs: PAUSE_MS, onAnswer: counter.onAnswer });
        try {
          await waitFor(() => nodes.every((n) => (counter.seen.get(n.pid) ?? 0) >= 20), 30_000);
          const before = load.counts();
          process.kill(nodes[1]!.pid, 'SIGKILL');
          await waitFor(() => load.counts().ok >= before.ok + 600, 60_000);
          const report = await load.stop();
          t.diagnostic(formatReport(report, 'kill -9, lossless'));
          // Every request that failed on the dead node was retried on a live one.
          assert.equal(report.failed, 0, formatReport(report));
        } finally {
          await load.stop();
        }
      } finally {
        await group.stopAll();
        tmp.cleanup();
      }
    },
  );

  it('a hung node (SIGSTOP) with the current flags: only that node\'s share fails, with a 504 after the budget', async (t) => {
    const tmp = tempDir('mesh-rel-hung-');
    const group = new ProcessGroup();
    const BUDGET_MS = 1500;
    try {
      const nodes = await threeNodes(tmp.path, group);
      const gw = group.add(await startGatewayProcess(tmp.path, ['--client_retries=1', `--client_request_timeout=${BUDGET_MS}ms`]));
      const counter = perPid();
      const load = startLoad({ origin: gw.url, concurrency: CONCURRENCY, mix: [WHO_AM], pauseMs: PAUSE_MS, onAnswer: counter.onAnswer, timeoutMs: 10_000 });
      const victim = nodes[2]!;
      try {
        await waitFor(() => nodes.every((n) => (counter.seen.get(n.pid) ?? 0) >= 20), 30_000);
        const before = load.counts();
        process.kill(victim.pid, 'SIGSTOP');
        const hungAt = Date.now();
        // Long enough for several budgets to run out.
        await waitFor(() => load.counts().total >= before.total + 400 && Date.now() - hungAt > 4 * BUDGET_MS, 60_000);
        process.kill(victim.pid, 'SIGCONT');
        const report = await load.stop();
        const lost = report.failed - before.failed;
        const during = load.latenciesSince(hungAt).sort((a, b) => a - b);
        t.diagnostic(
          `SIGSTOP of 1 of 3 nodes, --client_request_timeout=${BUDGET_MS}ms, no per-try timeout: ${report.total - before.total} requests, ` +
            `${lost} failed ${JSON.stringify(report.failures)}; latency while hung p50=${percentile(during, 50)} p99=${percentile(during, 99)} max=${during.at(-1)}ms`,
        );
        // Today a hung node costs the requests sent to it: with no per-try timeout the first try
        // spends the whole budget, so there is no time left for the retry, and the answer is a
        // 504 after the budget. What must hold already: every failure is that clean 504 (no reset,
        // no hang past the budget), and the other nodes keep serving.
        for (const kind of Object.keys(report.failures)) assert.equal(kind, 'status:504', formatReport(report));
        assert.ok(report.latency.max < BUDGET_MS + 3000, `a request waited ${report.latency.max}ms, past the ${BUDGET_MS}ms budget`);
        assert.ok(report.ok - before.ok > 0, 'the healthy nodes kept serving');
      } finally {
        try {
          process.kill(victim.pid, 'SIGCONT');
        } catch {
          // gone
        }
        await load.stop();
      }
    } finally {
      await group.stopAll();
      tmp.cleanup();
    }
  });

  it('a hung node (SIGSTOP) with --client_per_try_timeout=200ms: no failure, the node ejected', async (t) => {
    const tmp = tempDir('mesh-rel-pertry-');
    const group = new ProcessGroup();
    try {
      const nodes = await threeNodes(tmp.path, group);
      const gw = group.add(await startGatewayProcess(tmp.path, ['--client_retries=1', '--client_request_timeout=5s', '--client_per_try_timeout=200ms']));
      const counter = perPid();
      const load = startLoad({ origin: gw.url, concurrency: CONCURRENCY, mix: [WHO_AM], pauseMs: PAUSE_MS, onAnswer: counter.onAnswer });
      const victim = nodes[0]!;
      try {
        await waitFor(() => nodes.every((n) => (counter.seen.get(n.pid) ?? 0) >= 20), 30_000);
        const before = load.counts();
        process.kill(victim.pid, 'SIGSTOP');
        // Expectation: the first try on the hung node times out after 200 ms and is retried on
        // another node within the 5 s budget, so nothing fails; after a few timeouts outlier
        // detection ejects the node (health_flags /failed_outlier_check in admin /clusters).
        await waitFor(async () => {
          const res = await http('GET', `${gw.admin}/clusters`);
          return new RegExp(`::127\\.0\\.0\\.1:${victim.port}::health_flags::[^\\n]*failed_outlier_check`).test(res.text);
        }, 30_000, 100);
        await waitFor(() => load.counts().ok >= before.ok + 300, 60_000);
        const report = await load.stop();
        t.diagnostic(formatReport(report, 'hung node, per-try timeout 200ms'));
        assert.equal(report.failed, 0, formatReport(report));
      } finally {
        try {
          process.kill(victim.pid, 'SIGCONT');
        } catch {
          // gone
        }
        await load.stop();
      }
    } finally {
      await group.stopAll();
      tmp.cleanup();
    }
  });
});
