/**
 * Hung nodes: a backend that accepts TCP connections but never answers (a `net` server that reads
 * and ignores every request, as a process stopped with SIGSTOP does through the kernel backlog).
 * Per-try timeouts move the call to another host, hedging races an idempotent call against a
 * second host, and outlier detection ejects the hung host after consecutive failures.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { Runtime } from '../../src/process/runtime.js';
import { parseArgs, FlagError } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { ClusterManager } from '../../src/core/upstream/cluster-manager.js';
import type { OutlierDetectionConfig } from '../../src/core/upstream/config.js';
import { Client } from '../../src/core/client/client.js';
import { MeshError } from '../../src/base/errors.js';
import { waitFor } from '../helpers.js';

const closers: Array<() => Promise<unknown> | void> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

interface Hung {
  port: number;
  key: string;
  /** Requests seen (head bytes), never answered. */
  heads: string[];
  /** Connections the client closed. */
  closed: number;
}

/** Accepts connections and reads what comes, never answers. */
async function hungBackend(): Promise<Hung> {
  const h = { heads: [], closed: 0 } as unknown as Hung;
  const sockets = new Set<Socket>();
  const server: NetServer = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('data', (d: Buffer) => {
      const text = d.toString('latin1');
      if (/^POST /.test(text)) h.heads.push(text);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      sockets.delete(socket);
      h.closed++;
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.port = (server.address() as AddressInfo).port;
  h.key = `127.0.0.1:${h.port}`;
  closers.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return h;
}

interface Healthy {
  port: number;
  key: string;
  headers: IncomingHttpHeaders[];
}

async function healthyBackend(name: string): Promise<Healthy> {
  const b = { headers: [] } as unknown as Healthy;
  const server: Server = createHttpServer((req, res) => {
    req.resume();
    req.on('end', () => {
      b.headers.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ node: name }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  b.port = (server.address() as AddressInfo).port;
  b.key = `127.0.0.1:${b.port}`;
  closers.push(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  return b;
}

const node = (id: string, port: number) => ({ id, address: '127.0.0.1', port, metadata: {} });
const body = Buffer.from('{}');

function runtimeWith(...flags: string[]): Runtime {
  const rt = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', ...flags], {}).config), { role: 'test' });
  closers.push(() => rt.shutdown());
  return rt;
}

function manager(registry: MemoryRegistry, outlier: Partial<OutlierDetectionConfig> | false): { cm: ClusterManager; stats: StatsStore } {
  const stats = new StatsStore();
  const cm = new ClusterManager({ registry, stats, logging: new Logging('off'), lbPolicy: 'round_robin', defaults: { outlierDetection: outlier } });
  closers.push(() => cm.close(100));
  return { cm, stats };
}

test('--client_per_try_timeout and --client_hedge_delay: durations, default 0, a bad value names the flag', () => {
  const { config } = parseArgs([], {});
  assert.equal(config.client_per_try_timeout, 0);
  assert.equal(config.client_hedge_delay, 0);
  const set = parseArgs(['--client_per_try_timeout=250ms'], { MESH_CLIENT_HEDGE_DELAY: '1.5s' }).config;
  assert.equal(set.client_per_try_timeout, 250);
  assert.equal(set.client_hedge_delay, 1500);
  assert.throws(() => parseArgs(['--client_per_try_timeout=soon'], {}), (e: Error) => e instanceof FlagError && /--client_per_try_timeout/.test(e.message));
  assert.throws(() => parseArgs(['--client_hedge_delay=-1s'], {}), (e: Error) => e instanceof FlagError && /--client_hedge_delay/.test(e.message));
});

test('per-try timeout: with one hung and one healthy node every call succeeds on the healthy node, none reaches its deadline', async () => {
  const hung = await hungBackend();
  const good = await healthyBackend('good');
  const rt = runtimeWith('--client_request_timeout=5s', '--client_retries=1', '--client_per_try_timeout=1s');
  await rt.registry.register({ name: 'hang.a', version: '', metadata: {}, endpoints: [], nodes: [node('hung', hung.port), node('good', good.port)] });

  // Round robin alternates: of 4 calls, 2 try the hung node first. The per-try timeout (1 s) leaves
  // a loaded machine time for the healthy node's answer: what is counted is which tries timed out.
  for (let i = 0; i < 4; i++) {
    const res = await rt.client.call('hang.a', 'Who.Am', body);
    assert.equal(res.status, 200);
    assert.equal(res.body.toString(), '{"node":"good"}');
  }
  await waitFor(() => hung.heads.length === 2);
  const stat = (name: string) => rt.stats.counter(`cluster.hang.a.${name}`).value;
  assert.equal(stat('upstream_rq_per_try_timeout'), 2);
  assert.equal(stat('upstream_rq_timeout'), 0, 'the call never timed out');
  assert.equal(stat('upstream_rq_retry'), 2);
  const hungHost = rt.clusters.clusters()[0]!.hosts.find((h) => h.port === hung.port)!;
  assert.equal(hungHost.stats.rq_timeout, 2);
  assert.equal(hungHost.stats.rq_error, 2);
  // Each try carries its own budget in Mesh-Timeout: the per-try timeout, not the call's 5 s.
  for (const head of hung.heads) assert.match(head, /\r\nmesh-timeout: 1000\r\n/i);
  for (const h of good.headers) assert.ok(Number(h['mesh-timeout']) <= 1000, `healthy try got mesh-timeout ${h['mesh-timeout']}`);
});

test('per-try timeout as a call option; without one a call to the hung node spends the whole budget', async () => {
  const hung = await hungBackend();
  const good = await healthyBackend('good');
  const rt = runtimeWith('--client_request_timeout=600ms', '--client_retries=1');
  await rt.registry.register({ name: 'hang.b', version: '', metadata: {}, endpoints: [], nodes: [node('hung', hung.port), node('good', good.port)] });
  const outcomes: string[] = [];
  for (let i = 0; i < 2; i++) {
    try {
      await rt.client.call('hang.b', 'Who.Am', body);
      outcomes.push('ok');
    } catch (err) {
      assert.ok(err instanceof MeshError);
      assert.equal(err.code, 504);
      assert.match(err.detail, /timeout after 600ms/);
      outcomes.push('504');
    }
  }
  assert.deepEqual(outcomes.sort(), ['504', 'ok'], 'the try on the hung node used the whole budget');
  assert.equal(rt.stats.counter('cluster.hang.b.upstream_rq_timeout').value, 1);
  for (let i = 0; i < 2; i++) {
    const res = await rt.client.call('hang.b', 'Who.Am', body, { perTryTimeoutMs: 150 });
    assert.equal(res.body.toString(), '{"node":"good"}');
  }
  assert.equal(rt.stats.counter('cluster.hang.b.upstream_rq_per_try_timeout').value, 1);
  assert.match(hung.heads.at(-1)!, /\r\nmesh-timeout: 150\r\n/i);
});

test('hedging: an idempotent call is raced on a second host after the hedge delay, the hung try is cancelled; other calls are never hedged', async () => {
  const hung = await hungBackend();
  const good = await healthyBackend('good');
  const registry = new MemoryRegistry();
  closers.push(() => registry.close());
  await registry.register({ name: 'hedge', version: '', metadata: {}, endpoints: [], nodes: [node('hung', hung.port), node('good', good.port)] });
  const { cm, stats } = manager(registry, {});
  const client = new Client({ selector: cm, requestTimeoutMs: 600, retries: 0, hedgeDelayMs: 100 });
  const stat = (name: string) => stats.counter(`cluster.hedge.${name}`).value;
  const hungTries = () => cm.clusters()[0]?.hosts.find((h) => h.port === hung.port)?.stats.rq_total ?? 0;

  // Without the hedge a call that tried the hung node would fail with its 504 (no retries): each
  // answer from the good node, with no timeout counted, is the hedge at work.
  for (let i = 0; i < 4; i++) {
    const res = await client.call('hedge', 'Who.Am', body, { idempotent: true });
    assert.equal(res.body.toString(), '{"node":"good"}');
  }
  assert.equal(hungTries(), 2, 'round robin: 2 of the 4 calls tried the hung node first');
  assert.equal(stat('upstream_rq_hedged'), 2);
  assert.equal(stat('upstream_rq_cancelled'), 2, 'the losing tries are cancelled');
  assert.equal(stat('upstream_rq_timeout'), 0);
  // The cancelled try's connection is closed, so the hung node holds nothing of ours.
  await waitFor(() => hung.closed === 2);
  const hungHost = cm.clusters()[0]!.hosts.find((h) => h.port === hung.port)!;
  assert.equal(hungHost.stats.rq_error, 0, 'a cancelled try is not an error of the host');

  // The same call not marked idempotent: no hedge, the try on the hung node times out.
  const outcomes: number[] = [];
  for (let i = 0; i < 2; i++) {
    await client.call('hedge', 'Who.Am', body).then(
      () => outcomes.push(200),
      (err: MeshError) => outcomes.push(err.code),
    );
  }
  assert.deepEqual(outcomes.sort(), [200, 504]);
  assert.equal(stat('upstream_rq_hedged'), 2, 'non-idempotent calls are never hedged');
  assert.equal(stat('upstream_rq_timeout'), 1);
  // A call given a node is not hedged either.
  await assert.rejects(client.call('hedge', 'Who.Am', body, { idempotent: true, address: hung.key }), (err: MeshError) => err.code === 504);
  assert.equal(stat('upstream_rq_hedged'), 2);
});

test('hedging needs another host: with one node the call just waits for its try', async () => {
  const good = await healthyBackend('solo');
  const registry = new MemoryRegistry();
  closers.push(() => registry.close());
  await registry.register({ name: 'solo', version: '', metadata: {}, endpoints: [], nodes: [node('solo', good.port)] });
  const { cm, stats } = manager(registry, {});
  const client = new Client({ selector: cm, requestTimeoutMs: 2000, retries: 0, hedgeDelayMs: 1 });
  for (let i = 0; i < 5; i++) assert.equal((await client.call('solo', 'Who.Am', body, { idempotent: true })).status, 200);
  assert.equal(stats.counter('cluster.solo.upstream_rq_hedged').value, 0);
  assert.equal(stats.counter('cluster.solo.upstream_rq_cancelled').value, 0);
});

for (const split of [false, true]) {
  const kind = split ? 'consecutive_local_origin_failure' : 'consecutive_gateway_failure';
  test(`outlier detection (split_external_local_origin_errors ${split}): a hung host is ejected after 5 per-try timeouts as ${kind}; no call fails and none waits on it afterwards`, async () => {
    const hung = await hungBackend();
    const a = await healthyBackend('a');
    const b = await healthyBackend('b');
    const registry = new MemoryRegistry();
    closers.push(() => registry.close());
    const name = split ? 'od.split' : 'od.gw';
    await registry.register({ name, version: '', metadata: {}, endpoints: [], nodes: [node('hung', hung.port), node('a', a.port), node('b', b.port)] });
    // Envoy's defaults (5 consecutive failures) but for max_ejection_percent: 10 % of 3 hosts still allows one.
    const { cm, stats } = manager(registry, { splitExternalLocalOriginErrors: split });
    const client = new Client({ selector: cm, requestTimeoutMs: 5000, retries: 1, perTryTimeoutMs: 500 });
    const hungHost = () => cm.cluster(name)?.host(hung.key);
    let failed = 0;
    let calls = 0;
    const call = async () => {
      calls++;
      try {
        await client.call(name, 'Who.Am', body);
      } catch {
        failed++;
      }
    };
    while (!hungHost()?.failedOutlierCheck && calls < 100) await call();
    assert.equal(hungHost()!.failedOutlierCheck, true, `not ejected after ${calls} calls`);
    assert.equal(hungHost()!.stats.rq_timeout, 5, 'ejected at the 5th consecutive timeout');
    assert.equal(failed, 0);
    const od = (n: string) => stats.counter(`cluster.${name}.outlier_detection.${n}`).value;
    assert.equal(od(`ejections_detected_${kind}`), 1);
    assert.equal(od(`ejections_enforced_${kind}`), 1);
    assert.equal(od('ejections_enforced_total'), 1);
    assert.equal(stats.gauge(`cluster.${name}.outlier_detection.ejections_active`).value, 1);
    assert.equal(od(split ? 'ejections_detected_consecutive_gateway_failure' : 'ejections_detected_consecutive_local_origin_failure'), 0);
    assert.equal(od('ejections_detected_consecutive_5xx'), 0);

    // Afterwards: no try goes to the hung host, so no call waits on it (no per-try timeout more).
    const triesAtEjection = hungHost()!.stats.rq_total;
    const perTryTimeouts = stats.counter(`cluster.${name}.upstream_rq_per_try_timeout`).value;
    assert.equal(perTryTimeouts, 5, 'the five tries that ejected it');
    for (let i = 0; i < 30; i++) await call();
    assert.equal(failed, 0);
    assert.equal(hungHost()!.stats.rq_total, triesAtEjection);
    assert.equal(stats.counter(`cluster.${name}.upstream_rq_per_try_timeout`).value, perTryTimeouts);
  });
}

test('a retry after a refused connection does not count against max_retries; one after a reset does', async () => {
  const good = await healthyBackend('good');
  // A port nothing listens on: connections are refused, nothing is sent.
  const refused = await new Promise<number>((resolve) => {
    const s = createNetServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
  const registry = new MemoryRegistry();
  const stats = new StatsStore();
  const cm = new ClusterManager({
    registry,
    stats,
    logging: new Logging('off'),
    lbPolicy: 'round_robin',
    defaults: { outlierDetection: false, circuitBreakers: { default: { maxRetries: 0 } } },
  });
  closers.push(() => cm.close(100));
  const client = new Client({ selector: cm, requestTimeoutMs: 2000, retries: 1 });
  await registry.register({ name: 'dead.a', version: '', metadata: {}, endpoints: [], nodes: [node('refused', refused), node('good', good.port)] });
  // Round robin alternates: 2 of 4 calls try the refused node first, and their retries are not
  // refused by max_retries = 0.
  for (let i = 0; i < 4; i++) {
    const res = await client.call('dead.a', 'Who.Am', body);
    assert.equal(res.body.toString(), '{"node":"good"}');
  }
  assert.equal(stats.counter('cluster.dead.a.upstream_rq_retry').value, 2);
  assert.equal(stats.counter('cluster.dead.a.upstream_rq_retry_overflow').value, 0);

  // A node that resets the connection after reading the request: the request may have been
  // acted on, so its retry counts against max_retries (0 here): the breaker refuses it, the retry
  // is not made, and the call answers with the reset.
  const resets: Socket[] = [];
  const resetter = createNetServer((socket) => {
    resets.push(socket);
    socket.once('data', () => socket.resetAndDestroy());
    socket.on('error', () => undefined);
  });
  resetter.listen(0, '127.0.0.1');
  await once(resetter, 'listening');
  closers.push(() => new Promise((r) => resetter.close(r)));
  await registry.register({ name: 'dead.b', version: '', metadata: {}, endpoints: [], nodes: [node('reset', (resetter.address() as AddressInfo).port)] });
  await registry.register({ name: 'dead.b', version: '', metadata: {}, endpoints: [], nodes: [node('good', good.port)] });
  const outcomes: string[] = [];
  for (let i = 0; i < 4; i++) {
    try {
      await client.call('dead.b', 'Who.Am', body);
      outcomes.push('ok');
    } catch (err) {
      assert.ok(err instanceof MeshError);
      outcomes.push(`${err.code} ${err.detail}`);
    }
  }
  assert.equal(outcomes.filter((o) => o === 'ok').length, 2);
  const resetKey = `127.0.0.1:${(resetter.address() as AddressInfo).port}`;
  for (const o of outcomes.filter((o) => o !== 'ok')) assert.match(o, new RegExp(`^502 call dead\\.b on ${resetKey.replace(/\./g, '\\.')}: connection reset: `));
  assert.equal(outcomes.filter((o) => o !== 'ok').length, 2);
  assert.equal(stats.counter('cluster.dead.b.upstream_rq_retry_overflow').value, 2);
});
