/**
 * SIGTERM under load loses nothing: a rolling restart of the three nodes of a service behind a
 * gateway, each node stopped with SIGTERM while 8 keep-alive clients call it back to back (some
 * calls slow, so there is always something in flight on the node that stops), then started again
 * on the same port.
 *
 * What the drain promises (docs/architecture.md, "Shutdown and drain"): the node deregisters
 * first, keeps serving for --drain_delay while the gateway's registry watch drops it, answers with
 * `Connection: close`, finishes what is in flight and exits 0. So no call may fail: not the ones in
 * flight on the stopping node, not the ones the gateway sends it during the delay.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { tempDir, waitFor } from '../helpers.js';
import { formatReport, startLoad, type LoadRequest } from './load.js';
import { ProcessGroup, startWho, type ServiceProcess } from './harness.js';

const rpc = (method: string, request: unknown): LoadRequest => ({
  name: method,
  method: 'POST',
  path: '/rpc',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ service: 'go.mesh.srv.who', method, request }),
});
/** Mostly quick calls; one in eight takes 300 ms, so a stopping node always has calls in flight. */
const MIX = [...Array.from({ length: 7 }, () => rpc('Who.Am', {})), rpc('Who.Slow', { ms: 300 })];
const NODE_FLAGS = ['--drain_delay=500ms', '--drain_timeout=5s', '--register_ttl=10s', '--register_interval=2s'];

describe('SIGTERM under load', () => {
  it('a rolling restart of every node of a service loses no call', async (t) => {
    const tmp = tempDir('mesh-rel-sigterm-');
    const group = new ProcessGroup();
    try {
      const nodes: ServiceProcess[] = await Promise.all([0, 1, 2].map(async () => group.add(await startWho(tmp.path, { flags: NODE_FLAGS }))));
      // No retries: a call that reaches a stopping node must be served by it, not rescued by a retry.
      const gw = group.add(await startGatewayProcess(tmp.path, ['--client_retries=0']));
      const served = new Map<number, number>();
      const load = startLoad({
        origin: gw.url,
        concurrency: 8,
        mix: MIX,
        onAnswer: (_r, status, body) => {
          if (status !== 200) return;
          const pid = (JSON.parse(body) as { pid?: number }).pid;
          if (pid !== undefined) served.set(pid, (served.get(pid) ?? 0) + 1);
        },
      });
      try {
        await waitFor(() => nodes.every((n) => (served.get(n.pid) ?? 0) >= 20), 30_000);
        for (let i = 0; i < nodes.length; i++) {
          const old = nodes[i]!;
          const stoppedAt = Date.now();
          const code = await old.proc.stop('SIGTERM');
          t.diagnostic(`node ${i} (pid ${old.pid}) drained and exited ${code} in ${Date.now() - stoppedAt} ms; ${JSON.stringify(load.counts())}`);
          assert.equal(code, 0, `node ${i} exit code (1 means it cut requests off):\n${old.proc.output().slice(-1500)}`);
          const fresh = group.add(await startWho(tmp.path, { port: old.port, flags: NODE_FLAGS }));
          nodes[i] = fresh;
          await waitFor(() => (served.get(fresh.pid) ?? 0) >= 20, 30_000);
        }
      } finally {
        const report = await load.stop();
        t.diagnostic(formatReport(report, 'rolling restart'));
        assert.equal(report.failed, 0, formatReport(report));
        assert.ok(report.ok > 500, `too little traffic to prove anything: ${formatReport(report)}`);
      }
    } finally {
      await group.stopAll();
      tmp.cleanup();
    }
  });
});
