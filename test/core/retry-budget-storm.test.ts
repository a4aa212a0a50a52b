/**
 * A retry storm through a real gateway (`mesh api --client_retries=3`): every node of a service
 * answers 503 while 32 keep-alive clients call it through POST /rpc. With the retry budget (the
 * default: 20 % of the cluster's active requests, at least 3 at once) the nodes see few more
 * requests than the clients sent, and the refused retries are counted
 * (upstream_rq_retry_overflow); with the budget off (--retry_budget_percent=0) every call makes
 * its 3 retries. The clients get the nodes' own 503 in both cases: a refused retry is not made,
 * and the call answers with the try before it.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { startGatewayProcess, http } from '../fixtures/gateway-helpers.js';
import { tempDir, waitFor } from '../helpers.js';
import { startLoad, type LoadReport, type LoadRequest } from '../reliability/load.js';

const SERVICE = 'go.mesh.srv.down';
const CLIENTS = 48;
/** Calls per run: enough for the budget's share to show, short on a shared machine. */
const CALLS = 800;
const DOWN = '{"id":"go.mesh.srv.down","code":503,"detail":"down for maintenance","status":"Service Unavailable"}';
const CALL: LoadRequest = {
  name: 'rpc Down.Call',
  method: 'POST',
  path: '/rpc',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ service: SERVICE, method: 'Down.Call', request: {} }),
  ok: (status) => status === 503,
};

interface Node {
  port: number;
  hits: number;
  server: Server;
}

/**
 * How long a node takes to fail. Longer than the client's first backoffs (10 ms, 20 ms), so that
 * most calls have a try in flight and the budget's share (20 % of them) is above its floor of 3
 * at once: the share, not the floor, is what the run measures.
 */
const FAIL_AFTER_MS = 80;

/** A node of the service that answers every call with 503 and an error body, after FAIL_AFTER_MS. */
async function downNode(): Promise<Node> {
  const n = { hits: 0 } as Node;
  n.server = createServer((req, res) => {
    n.hits++;
    req.resume();
    req.on('end', () => {
      // The node's answer time (fixture), not an ordering.
      const timer = setTimeout(() => {
        res.writeHead(503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(DOWN) });
        res.end(DOWN);
      }, FAIL_AFTER_MS);
      res.on('close', () => clearTimeout(timer));
    });
  });
  await new Promise<void>((r) => n.server.listen(0, '127.0.0.1', () => r()));
  n.port = (n.server.address() as AddressInfo).port;
  return n;
}

async function statValue(admin: string, name: string): Promise<number> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  const found = (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name);
  return found?.value ?? 0;
}

interface Run {
  calls: number;
  sent: number;
  retries: number;
  overflows: number;
  bodies: Set<string>;
  report: LoadReport;
}

describe('retry budget: a retry storm through the gateway', () => {
  const dir = tempDir('mesh-retry-storm-');
  let registry: Registry;
  const nodes: Node[] = [];
  after(async () => {
    for (const n of nodes) {
      n.server.closeAllConnections();
      await new Promise((r) => n.server.close(r));
    }
    await registry?.close();
    dir.cleanup();
  });

  /** CALLS calls through a gateway started with `flags`; what reached the nodes and what the gateway counted. */
  async function storm(flags: string[]): Promise<Run> {
    const gw = await startGatewayProcess(dir.path, ['--client_retries=3', ...flags]);
    try {
      const before = nodes.reduce((s, n) => s + n.hits, 0);
      const bodies = new Set<string>();
      const load = startLoad({ origin: gw.url, concurrency: CLIENTS, mix: [CALL], onAnswer: (_r, _status, body) => bodies.add(body) });
      await waitFor(() => load.counts().total >= CALLS, 120_000);
      // Waits for the calls in flight: every try they make has reached a node once it returns.
      const report = await load.stop();
      const cluster = `cluster.${SERVICE}.`;
      return {
        calls: report.total,
        sent: nodes.reduce((s, n) => s + n.hits, 0) - before,
        retries: await statValue(gw.admin, `${cluster}upstream_rq_retry`),
        overflows: await statValue(gw.admin, `${cluster}upstream_rq_retry_overflow`),
        bodies,
        report,
      };
    } finally {
      await gw.stop();
    }
  }

  it('the budget keeps the retries to its share; without it every call retries 3 times', async (t) => {
    registry = createRegistry('local', dir.path);
    for (let i = 0; i < 3; i++) nodes.push(await downNode());
    await registry.register({
      name: SERVICE,
      version: 'v1',
      metadata: {},
      endpoints: [{ name: 'Down.Call', metadata: {} }],
      nodes: nodes.map((n, i) => ({ id: `down-${i}`, address: '127.0.0.1', port: n.port, metadata: {} })),
    });

    const budget = await storm([]);
    t.diagnostic(`budget 20 %, at least 3: ${budget.calls} calls, ${budget.sent} requests at the nodes, ${budget.retries} retries made, ${budget.overflows} refused`);
    const off = await storm(['--retry_budget_percent=0']);
    t.diagnostic(`no budget: ${off.calls} calls, ${off.sent} requests at the nodes, ${off.retries} retries made, ${off.overflows} refused`);

    for (const run of [budget, off]) {
      // Every answer is the nodes' own 503: a refused retry is not made, the try before it answers.
      assert.equal(run.report.failed, 0, JSON.stringify(run.report.failures));
      assert.deepEqual([...run.bodies], [DOWN]);
      // What the nodes saw is the calls and the retries the gateway made, nothing else.
      assert.equal(run.sent, run.calls + run.retries);
    }
    // Without a budget: the storm, 4 tries per call.
    assert.equal(off.overflows, 0);
    assert.equal(off.sent, off.calls * 4);
    // With it: at most 20 % of the tries in flight are retries (at least 3 at once), so the retries
    // are about a quarter of the calls at most (20 % of the tries is 25 % of the first tries), and
    // the rest of the 3 retries per call are refused and counted.
    assert.ok(budget.sent <= budget.calls * 1.25 + 3, `${budget.sent} requests for ${budget.calls} calls`);
    assert.equal(budget.retries + budget.overflows >= budget.calls, true, 'every call asked for a retry at least once');
    assert.ok(budget.overflows > 0);
  });
});
