/**
 * Slow clients against the gateway and the sidecar (real processes): a few hundred raw sockets
 * that send their request headers one byte at a time (slowloris), or a declared body one byte at a
 * time, must not stop the server answering everyone else. Then, once the CLI knows them (another
 * branch adds them), `--request_headers_timeout` cuts the slow sockets off and `--max_connections`
 * bounds the sockets the process holds.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { readdirSync, readlinkSync } from 'node:fs';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { tempDir, waitFor } from '../helpers.js';
import { formatReport, startLoad, type LoadRequest } from './load.js';
import { ProcessGroup, startWho } from './harness.js';

const SLOW_SOCKETS = 300;
/** Each slow socket sends one byte this often. */
const DRIP_MS = 500;
/** How long the normal traffic runs while the slow sockets are open. */
const UNDER_ATTACK_MS = 6000;

interface SlowAttack {
  sockets: Socket[];
  connected(): number;
  /** Sockets the server closed (end or close from its side). */
  closedByServer(): number;
  stop(): void;
}

/**
 * Opens `n` sockets to 127.0.0.1:port; each drips its request one byte every DRIP_MS, never
 * finishing it: `headers` never ends the header block, `body` sends complete headers declaring a
 * 1 MB body and drips that.
 */
function slowAttack(port: number, n: number, mode: 'headers' | 'body'): SlowAttack {
  const sockets: Socket[] = [];
  let connected = 0;
  let closed = 0;
  let stopped = false;
  const head =
    mode === 'headers'
      ? 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '
      : 'POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"service":"';
  for (let i = 0; i < n; i++) {
    const s = connect(port, '127.0.0.1');
    s.setNoDelay(true);
    let pos = 0;
    let timer: NodeJS.Timeout | undefined;
    s.on('connect', () => {
      connected++;
      // The start of the request at once for bodies (the headers are complete), byte by byte for headers.
      if (mode === 'body') {
        s.write(head);
        pos = head.length;
      }
      timer = setInterval(() => {
        if (stopped || s.destroyed) return clearInterval(timer);
        s.write(pos < head.length ? head[pos++]! : 'a');
      }, DRIP_MS);
    });
    s.on('data', () => undefined);
    s.on('error', () => undefined);
    s.on('close', () => {
      clearInterval(timer);
      if (!stopped) closed++;
    });
    sockets.push(s);
  }
  return {
    sockets,
    connected: () => connected,
    closedByServer: () => closed,
    stop: () => {
      stopped = true;
      for (const s of sockets) s.destroy();
    },
  };
}

/** Sockets a process holds open (Linux: /proc/<pid>/fd links to socket:[...]); undefined elsewhere. */
function openSockets(pid: number): number | undefined {
  try {
    return readdirSync(`/proc/${pid}/fd`).filter((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:');
      } catch {
        return false;
      }
    }).length;
  } catch {
    return undefined;
  }
}

interface Target {
  name: string;
  port: number;
  pid: number;
  url: string;
  /** A normal request that must keep succeeding. */
  normal: LoadRequest;
}

const RPC_WHO: LoadRequest = {
  name: 'rpc Who.Am',
  method: 'POST',
  path: '/rpc',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Am', request: {} }),
};

/** Starts a who service and the gateway or the sidecar on a temp registry; runs body; stops all. */
async function withTarget(kind: 'gateway' | 'sidecar', flags: string[], body: (target: Target) => Promise<void>): Promise<void> {
  const tmp = tempDir('mesh-rel-slow-');
  const group = new ProcessGroup();
  try {
    group.add(await startWho(tmp.path));
    let target: Target;
    if (kind === 'gateway') {
      const gw = group.add(await startGatewayProcess(tmp.path, flags));
      target = { name: 'gateway', port: gw.port, pid: gw.proc.child.pid!, url: gw.url, normal: RPC_WHO };
    } else {
      const sc = group.add(await startSidecar(tmp.path, flags));
      target = { name: 'sidecar', port: sc.port, pid: sc.proc.child.pid!, url: sc.base, normal: RPC_WHO };
    }
    await body(target);
  } finally {
    await group.stopAll();
    tmp.cleanup();
  }
}

for (const kind of ['gateway', 'sidecar'] as const) {
  describe(`slow clients against the ${kind}`, () => {
    for (const mode of ['headers', 'body'] as const) {
      it(`${SLOW_SOCKETS} sockets sending their ${mode} one byte at a time: normal requests keep succeeding`, async (t) => {
        await withTarget(kind, [], async (target) => {
          const attack = slowAttack(target.port, SLOW_SOCKETS, mode);
          try {
            await waitFor(() => attack.connected() >= SLOW_SOCKETS, 20_000);
            const load = startLoad({ origin: target.url, concurrency: 4, pauseMs: 20, mix: [target.normal], durationMs: UNDER_ATTACK_MS });
            const report = await load.done;
            const held = openSockets(target.pid);
            t.diagnostic(
              `${kind}, ${SLOW_SOCKETS} slow ${mode} sockets (1 byte / ${DRIP_MS}ms): ${formatReport(report, 'normal traffic')}; ` +
                `slow sockets closed by the server: ${attack.closedByServer()}; sockets held by the ${kind}: ${held ?? 'n/a'}`,
            );
            // Node serves every connection on its own; slow ones cost a socket each, nothing more.
            // So every normal request succeeds, and promptly: 2 s is a generous bound for a
            // loopback call that takes milliseconds when the machine is idle.
            assert.equal(report.failed, 0, formatReport(report));
            assert.ok(report.total > 0);
            assert.ok(report.latency.p99 < 2000, formatReport(report));
          } finally {
            attack.stop();
          }
        });
      });
    }

    it('--request_headers_timeout=1s cuts slowloris sockets off; --max_connections=100 bounds the sockets held', async (t) => {
      await withTarget(kind, ['--request_headers_timeout=1s', '--max_connections=100'], async (target) => {
        const baseline = openSockets(target.pid);
        const attack = slowAttack(target.port, SLOW_SOCKETS, 'headers');
        try {
          // While the attack lasts, the process never holds many more sockets than the cap
          // (its own listeners, admin, registry and upstream sockets make the baseline).
          const deadline = Date.now() + 3000;
          let most = 0;
          while (Date.now() < deadline) {
            const n = openSockets(target.pid);
            if (n !== undefined) most = Math.max(most, n - (baseline ?? 0));
            await new Promise((r) => setTimeout(r, 100)); // a slowloris client's pace, not ordering
          }
          // Every slow socket it accepted is closed after the 1 s headers timeout (+ slack).
          await waitFor(() => attack.closedByServer() >= Math.min(100, attack.connected()), 15_000, 100);
          t.diagnostic(`${kind}: most sockets held above baseline ${most}; slow sockets closed by the server ${attack.closedByServer()}`);
          assert.ok(most <= 100 + 10, `the ${kind} held ${most} sockets above its baseline with --max_connections=100`);
        } finally {
          attack.stop();
        }
        // Once the slow sockets are gone, normal traffic succeeds.
        const report = await startLoad({ origin: target.url, concurrency: 4, pauseMs: 20, mix: [target.normal], durationMs: 2000 }).done;
        assert.equal(report.failed, 0, formatReport(report));
      });
    });
  });
}
