/**
 * Limits of a front server (src/base/http/lifecycle.ts) on loopback with raw sockets: the connection cap
 * (--max_connections, downstream_cx_overflow), the header and whole-request read timeouts (408
 * error JSON), the header-count limit (431 error JSON), and the flags' checks.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { parseArgs, FlagError } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { Runtime } from '../../src/process/runtime.js';
import { FrontServer } from '../../src/edge/front-server.js';
import { readBody } from '../../src/base/http/body.js';
import { sendJson } from '../../src/base/http/respond.js';
import { http, tempDir, waitFor } from '../helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { edgeContext } from '../../src/edge/context.js';

const ID = 'go.mesh.api';

async function startFront(flags: string[]): Promise<{ runtime: Runtime; port: number; counter: (n: string) => number; gauge: (n: string) => number }> {
  const runtime = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0', ...flags], {}).config), { role: 'test' });
  const front = new FrontServer({
    edge: edgeContext(runtime),
    statPrefix: 'limits',
    errorId: ID,
    handle: async (req, res) => {
      const body = await readBody(req, 1024, ID);
      sendJson(res, 200, { bytes: body.length, headers: req.rawHeaders.length / 2 });
    },
  });
  const bound: AddressInfo = await front.listen('127.0.0.1:0');
  runtime.onShutdown(() => front.close().then(() => undefined));
  return {
    runtime,
    port: bound.port,
    counter: (n) => runtime.stats.counter(`http.limits.${n}`).value,
    gauge: (n) => runtime.stats.gauge(`http.limits.${n}`).value,
  };
}

/** Opens a raw connection and collects everything it receives until it closes. */
function rawConnection(port: number): { socket: Socket; received: () => string; closed: Promise<void> } {
  const socket = connect(port, '127.0.0.1');
  let data = '';
  socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
  socket.on('error', () => undefined);
  const closed = once(socket, 'close').then(() => undefined);
  return { socket, received: () => data, closed };
}

function bodyOf(response: string): string {
  return response.slice(response.indexOf('\r\n\r\n') + 4);
}

function statusOf(response: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
}

async function get(port: number, path = '/'): Promise<{ status: number; body: string }> {
  const res = await http('GET', `http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: res.text };
}

describe('--max_connections', () => {
  let s: Awaited<ReturnType<typeof startFront>>;
  before(async () => {
    s = await startFront(['--max_connections=3', '--request_headers_timeout=1s', '--request_timeout=2s']);
  });
  after(() => s.runtime.shutdown());

  test('a connection over the cap is closed at once and counted; slow ones are cut at the header timeout, then requests are answered', async () => {
    const slow = [rawConnection(s.port), rawConnection(s.port), rawConnection(s.port)];
    for (const c of slow) c.socket.write('GET / HTTP/1.1\r\nHost: x\r\n');
    await waitFor(() => s.gauge('downstream_cx_active') === 3);
    const extra = rawConnection(s.port);
    extra.socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await extra.closed;
    assert.equal(extra.received(), '', 'the connection over the cap gets nothing');
    await waitFor(() => s.counter('downstream_cx_overflow') === 1);
    assert.equal(s.gauge('downstream_cx_active'), 3, 'the dropped connection was never served');
    // The slow connections are cut by the header timeout (408), freeing the slots.
    await Promise.all(slow.map((c) => c.closed));
    for (const c of slow) assert.equal(statusOf(c.received()), 408);
    await waitFor(() => s.gauge('downstream_cx_active') === 0);
    const ok = await get(s.port);
    assert.equal(ok.status, 200);
    assert.equal(s.counter('downstream_cx_overflow'), 1);
  });
});

describe('read timeouts', () => {
  let s: Awaited<ReturnType<typeof startFront>>;
  before(async () => {
    s = await startFront(['--request_headers_timeout=1s', '--request_timeout=1s']);
  });
  after(() => s.runtime.shutdown());

  test('slowloris: a header sent one byte at a time is cut at the header timeout with 408 error JSON', async () => {
    const c = rawConnection(s.port);
    const text = 'GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(200);
    const started = Date.now();
    let i = 0;
    const timer = setInterval(() => {
      if (i < text.length && !c.socket.destroyed) c.socket.write(text[i++]!);
    }, 50);
    await c.closed;
    clearInterval(timer);
    const elapsed = Date.now() - started;
    const response = c.received();
    assert.equal(statusOf(response), 408);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.equal(bodyOf(response), '{"id":"go.mesh.api","code":408,"detail":"request headers not received within 1s (--request_headers_timeout)","status":"Request Timeout"}');
    // Measured: the timeout is honoured within the 1 s check interval (generous bound).
    assert.ok(elapsed >= 900 && elapsed < 4000, `cut after ${elapsed} ms`);
    assert.ok(i < text.length, 'cut before the header was complete');
    assert.ok(s.counter('downstream_rq_header_timeout') >= 1);
  });

  test('a slow body (Content-Length 100, one byte per 200 ms) is cut at the request timeout with 408 error JSON', async () => {
    const before4xx = s.counter('downstream_rq_4xx');
    const c = rawConnection(s.port);
    c.socket.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n');
    const started = Date.now();
    const timer = setInterval(() => {
      if (!c.socket.destroyed) c.socket.write('x');
    }, 200);
    await c.closed;
    clearInterval(timer);
    const elapsed = Date.now() - started;
    const response = c.received();
    assert.equal(statusOf(response), 408);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.equal(bodyOf(response), '{"id":"go.mesh.api","code":408,"detail":"request not received within 1s (--request_timeout)","status":"Request Timeout"}');
    assert.ok(elapsed >= 900 && elapsed < 4000, `cut after ${elapsed} ms`);
    assert.equal(s.counter('downstream_rq_timeout'), 1);
    await waitFor(() => s.counter('downstream_rq_4xx') === before4xx + 1);
  });

  test('a request that arrives in time is answered', async () => {
    const res = await fetch(`http://127.0.0.1:${s.port}/echo`, { method: 'POST', body: 'x'.repeat(100) });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).bytes, 100);
  });
});

describe('header count', () => {
  let s: Awaited<ReturnType<typeof startFront>>;
  before(async () => {
    s = await startFront([]);
  });
  after(() => s.runtime.shutdown());

  function withHeaders(n: number): string {
    let text = 'GET /h HTTP/1.1\r\nHost: x\r\n';
    for (let i = 1; i < n; i++) text += `X-H${i}: v\r\n`;
    return text + '\r\n';
  }

  test('150 header fields: 431 error JSON, connection closed', async () => {
    const c = rawConnection(s.port);
    c.socket.write(withHeaders(150));
    await c.closed;
    const response = c.received();
    assert.equal(statusOf(response), 431);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.equal(bodyOf(response), '{"id":"go.mesh.api","code":431,"detail":"more than 100 header fields","status":"Request Header Fields Too Large"}');
  });

  test('100 header fields are accepted', async () => {
    const c = rawConnection(s.port);
    c.socket.write(withHeaders(100));
    await waitFor(() => c.received().includes('"headers":100'));
    assert.equal(statusOf(c.received()), 200);
    c.socket.destroy();
  });
});

test('limit flags: defaults and bad values (exit 2)', () => {
  const { config } = parseArgs([], {});
  assert.equal(config.max_connections, 10000);
  assert.equal(config.request_headers_timeout, 10_000);
  assert.equal(config.request_timeout, 30_000);
  assert.equal(config.drain_delay, 1000);
  assert.equal(config.drain_timeout, 10_000);
  assert.equal(parseArgs(['--request_timeout=0', '--request_headers_timeout=0'], {}).config.request_timeout, 0);
  const bad = (argv: string[], re: RegExp) => assert.throws(() => parseArgs(argv, {}), (e: Error) => e instanceof FlagError && e.exitCode === 2 && re.test(e.message));
  bad(['--max_connections=-1'], /--max_connections/);
  bad(['--max_connections=lots'], /--max_connections/);
  bad(['--drain_timeout=-1s'], /--drain_timeout.*negative/);
  bad(['--drain_delay=soon'], /--drain_delay/);
  bad(['--request_headers_timeout=5s', '--request_timeout=1s'], /--request_headers_timeout: longer than --request_timeout/);
});

test('the RPC server of a framework service: over --max_connections a connection is closed at once and counted', async () => {
  const { Service } = await import('../../src/framework/server/service.js');
  const runtime = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0', '--max_connections=1'], {}).config), { role: 'test' });
  try {
    const svc = new Service(runtime, { name: 'go.mesh.srv.capped' });
    const record = await svc.start();
    const port = record.nodes[0]!.port;
    const held = rawConnection(port);
    await once(held.socket, 'connect');
    const extra = rawConnection(port);
    await extra.closed;
    assert.equal(extra.received(), '');
    await waitFor(() => runtime.stats.counter('http.rpc.downstream_cx_overflow').value === 1);
    held.socket.destroy();
    await held.closed;
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.status === 200);
  } finally {
    await runtime.shutdown();
  }
});

describe('the admin listener', () => {
  test('has the same connection cap and header timeout', async () => {
    const runtime = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--max_connections=2', '--request_headers_timeout=1s', '--request_timeout=2s'], {}).config),
      { role: 'test' },
    );
    try {
      const admin = (await runtime.startAdmin('127.0.0.1:0'))!;
      const slow = [rawConnection(admin.port), rawConnection(admin.port)];
      for (const c of slow) c.socket.write('GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n');
      await waitFor(async () => {
        const extra = rawConnection(admin.port);
        extra.socket.write('GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
        await extra.closed;
        return extra.received() === '';
      });
      await waitFor(() => runtime.stats.counter('http.admin.downstream_cx_overflow').value >= 1);
      // The slow ones are cut at the header timeout; then the admin answers again.
      await Promise.all(slow.map((c) => c.closed));
      for (const c of slow) assert.equal(statusOf(c.received()), 408);
      const res = await fetch(`http://127.0.0.1:${admin.port}/ready`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'LIVE\n');
    } finally {
      await runtime.shutdown();
    }
  });
});

describe('a body refused before it all arrived', () => {
  test('the client reads the 413 even when it asked for Connection: close and is still sending (no reset)', async () => {
    // A real sidecar process (the client and the server in two processes, as in life). Its
    // --max_body_size is 4 MiB: a 4 MiB + 1 body is refused from its Content-Length while the
    // client is still writing. Node would close the socket on unread data right after the answer
    // (the client asked for Connection: close), and the kernel's reset could discard the 413 before
    // the client read it (measured: 32 of 40 lost); the rest is read and dropped first.
    const dir = tempDir('mesh-linger-');
    const sc = await startSidecar(dir.path);
    try {
      for (let i = 0; i < 20; i++) {
        const res = await http('POST', `${sc.base}/broker?topic=t`, { headers: { connection: 'close' }, body: Buffer.alloc(4 * 1024 * 1024 + 1) });
        assert.equal(res.status, 413, `round ${i}`);
        assert.equal(res.text, '{"id":"go.mesh.sidecar","code":413,"detail":"request body larger than 4194304 bytes","status":"Payload Too Large"}');
      }
    } finally {
      await sc.stop();
      dir.cleanup();
    }
  });
});
