/**
 * Streaming RPC in the framework (docs/api.md "Streams", docs/protocol.md "Streams"): server,
 * client and bidi streams between a Mesh service and a Mesh client on loopback; cancellation
 * reaching the handler; deadlines; backpressure; the wire format as raw bytes; bad input.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { Mesh, MeshError, type StreamContext } from '../../src/index.js';
import { encodeFrame, FrameDecoder } from '../../src/core/transport/frames.js';
import { http, waitFor, waitForStill } from '../helpers.js';

const quiet = { registry: 'memory', broker: 'memory', logLevel: 'off', drainDelay: 0, maxBodySize: 1024 } as const;

describe('streams in the framework', () => {
  const mesh = new Mesh(quiet);
  let port = 0;
  const seen = { cancelled: 0, finallyRan: 0, pulled: 0, bidiEnded: 0, lastReason: '', sleepAborted: [] as number[] };

  before(async () => {
    const svc = mesh.service({ name: 'go.mesh.srv.counter' });
    svc.stream(
      'Count.Up',
      async function* (req: { to: number }) {
        for (let i = 1; i <= req.to; i++) yield { n: i };
      },
      { kind: 'server' },
    );
    svc.stream(
      'Count.Forever',
      async function* (_req: unknown, ctx: StreamContext) {
        ctx.signal.addEventListener('abort', () => {
          seen.cancelled++;
          seen.lastReason = (ctx.signal.reason as MeshError).detail;
        });
        try {
          for (let i = 0; ; i++) {
            seen.pulled++;
            yield { n: i, pad: 'x'.repeat(500) };
          }
        } finally {
          seen.finallyRan++;
        }
      },
      { kind: 'server' },
    );
    svc.stream(
      'Count.Sleep',
      async function* (_req: unknown, ctx: StreamContext) {
        yield { n: 0 };
        await new Promise((r) => ctx.signal.addEventListener('abort', r));
        seen.sleepAborted.push((ctx.signal.reason as MeshError).code);
      },
      { kind: 'server' },
    );
    svc.stream(
      'Count.Sum',
      async (reqs: AsyncIterable<{ n: number }>) => {
        let sum = 0;
        for await (const r of reqs) sum += r.n;
        return { sum };
      },
      { kind: 'client' },
    );
    svc.stream(
      'Echo.Chat',
      async function* (reqs: AsyncIterable<{ say: string }>) {
        for await (const r of reqs) yield { echo: r.say };
        seen.bidiEnded++;
      },
      { kind: 'bidi' },
    );
    svc.stream(
      'Count.Fail',
      async function* () {
        yield { n: 1 };
        throw new MeshError('go.mesh.srv.counter', 409, 'counter conflict');
      },
      { kind: 'server' },
    );
    svc.handle('Count.Once', () => ({ n: 1 }));
    const { services } = await mesh.start();
    port = services[0]!.nodes[0]!.port;
  });
  after(() => mesh.close());

  it('advertises the kind in the endpoint metadata of the registry', async () => {
    const [record] = await mesh.registry.getService('go.mesh.srv.counter');
    const byName = Object.fromEntries(record!.endpoints.map((e) => [e.name, e.metadata.stream]));
    assert.equal(byName['Count.Up'], 'server');
    assert.equal(byName['Count.Sum'], 'client');
    assert.equal(byName['Echo.Chat'], 'bidi');
    assert.equal(byName['Count.Once'], undefined);
  });

  it('a server stream: every answer in order, then the end', async () => {
    const got: unknown[] = [];
    for await (const m of mesh.stream('go.mesh.srv.counter', 'Count.Up', { to: 5 })) got.push(m);
    assert.deepEqual(got, [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }, { n: 5 }]);
    assert.equal(mesh.runtime.stats.gauge('cluster.go.mesh.srv.counter.upstream_rq_stream_active').value, 0);
    assert.ok(mesh.runtime.stats.counter('cluster.go.mesh.srv.counter.upstream_rq_stream_msgs_received').value >= 5);
  });

  it('a client stream: many requests, one answer', async () => {
    async function* numbers() {
      for (let i = 1; i <= 10; i++) yield { n: i };
    }
    const got: unknown[] = [];
    for await (const m of mesh.stream('go.mesh.srv.counter', 'Count.Sum', numbers(), { kind: 'client' })) got.push(m);
    assert.deepEqual(got, [{ sum: 55 }]);
  });

  it('a bidi stream: answers come while requests are still being sent', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    async function* says() {
      yield { say: 'one' };
      await gate; // the second request waits for the first answer: bidi, not batch
      yield { say: 'two' };
    }
    const got: unknown[] = [];
    for await (const m of mesh.stream('go.mesh.srv.counter', 'Echo.Chat', says())) {
      got.push(m);
      release();
    }
    assert.deepEqual(got, [{ echo: 'one' }, { echo: 'two' }]);
    await waitFor(() => seen.bidiEnded === 1);
  });

  it('breaking out of the loop cancels the handler: its signal aborts and its finally runs', async () => {
    const before = seen.finallyRan;
    let n = 0;
    for await (const _ of mesh.stream('go.mesh.srv.counter', 'Count.Forever', {})) if (++n === 3) break;
    await waitFor(() => seen.finallyRan === before + 1 && seen.cancelled >= 1);
    assert.equal(seen.lastReason, 'the caller closed the stream');
  });

  it('an AbortSignal cancels: the iteration throws 499 and the handler is told', async () => {
    const ac = new AbortController();
    const stream = mesh.stream('go.mesh.srv.counter', 'Count.Sleep', {}, { signal: ac.signal });
    await assert.rejects(
      (async () => {
        for await (const _ of stream) ac.abort();
      })(),
      (err: MeshError) => err.code === 499 && err.id === 'go.mesh.client',
    );
    await waitFor(() => seen.sleepAborted.includes(499));
  });

  it('a deadline: the stream fails with 504 and the handler signal aborts', async () => {
    await assert.rejects(
      (async () => {
        for await (const _ of mesh.stream('go.mesh.srv.counter', 'Count.Sleep', {}, { timeout: '200ms' }));
      })(),
      (err: MeshError) => err.code === 504 && err.detail === 'stream go.mesh.srv.counter.Count.Sleep: deadline of 200ms exceeded',
    );
    // The server's own deadline (Mesh-Timeout) fires too, or the closed connection: either ends the handler.
    await waitFor(() => seen.sleepAborted.length >= 2);
  });

  it('a handler error after some answers ends the stream with that error', async () => {
    const got: unknown[] = [];
    await assert.rejects(
      (async () => {
        for await (const m of mesh.stream('go.mesh.srv.counter', 'Count.Fail', {})) got.push(m);
      })(),
      (err: MeshError) => err.code === 409 && err.detail === 'counter conflict' && err.id === 'go.mesh.srv.counter',
    );
    assert.deepEqual(got, [{ n: 1 }]);
  });

  it('a slow consumer pauses the handler: it is pulled only a bounded number of messages ahead', async () => {
    const pulledBefore = seen.pulled;
    const it = mesh.stream<{ n: number }>('go.mesh.srv.counter', 'Count.Forever', {})[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.value!.n, 0);
    // Nothing more is read: the handler fills the socket buffers and is then no longer pulled.
    await waitForStill(() => seen.pulled - pulledBefore, { stepMs: 100, polls: 1, timeoutMs: 10000, ready: (n) => n > 1 });
    const ahead = seen.pulled - pulledBefore;
    console.log(`# the handler was pulled ${ahead} messages ahead of a consumer that read one`);
    // ~520-byte frames: what the kernel's socket buffers hold (about 4 MiB here: tcp_wmem's max)
    // plus 64 KiB on each side; the bound leaves room for bigger kernel buffers, far below unbounded.
    assert.ok(ahead < 40000, `pulled ${ahead} messages ahead of a consumer that read one`);
    await it.return!();
  });

  it('on the wire: framed answers and an empty end frame, exact bytes', async () => {
    const body = Buffer.concat([encodeFrame(0, '{"to":2}'), encodeFrame(1)]);
    const { status, headers, data } = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Up', 'mesh-stream': 'server' }, body);
    assert.equal(status, 200);
    assert.equal(headers['mesh-stream'], 'server');
    assert.equal(headers['content-type'], 'application/json');
    assert.deepEqual(data, Buffer.concat([encodeFrame(0, '{"n":1}'), encodeFrame(0, '{"n":2}'), encodeFrame(1)]));
  });

  it('on the wire: an error end frame carries the error JSON', async () => {
    const body = Buffer.concat([encodeFrame(0, '{}'), encodeFrame(1)]);
    const { data } = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Fail', 'mesh-stream': 'server' }, body);
    assert.deepEqual(data, Buffer.concat([encodeFrame(0, '{"n":1}'), encodeFrame(1, '{"id":"go.mesh.srv.counter","code":409,"detail":"counter conflict","status":"Conflict"}')]));
  });

  it('bad input: missing or wrong Mesh-Stream, a unary endpoint streamed, an oversized message, bad flags', async () => {
    const one = Buffer.concat([encodeFrame(0, '{}'), encodeFrame(1)]);
    let r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Up' }, one);
    assert.equal(r.status, 400);
    assert.equal(r.data.toString(), '{"id":"go.mesh.srv.counter","code":400,"detail":"endpoint Count.Up is a server stream: call it with Mesh-Stream: server","status":"Bad Request"}');
    r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Up', 'mesh-stream': 'bidi' }, one);
    assert.equal(r.data.toString(), '{"id":"go.mesh.srv.counter","code":400,"detail":"Mesh-Stream: bidi does not match endpoint Count.Up, a server stream","status":"Bad Request"}');
    r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Once', 'mesh-stream': 'server' }, one);
    assert.equal(r.data.toString(), '{"id":"go.mesh.srv.counter","code":400,"detail":"endpoint Count.Once is not a streaming endpoint: call it without Mesh-Stream","status":"Bad Request"}');
    // maxBodySize is 1 KiB: a 2 KiB message of a client stream ends the stream with 413 in the end frame.
    const big = Buffer.concat([encodeFrame(0, `{"n":1,"pad":"${'x'.repeat(2048)}"}`), encodeFrame(1)]);
    r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Sum', 'mesh-stream': 'client' }, big);
    assert.equal(r.status, 200);
    assert.deepEqual(r.data, encodeFrame(1, '{"id":"go.mesh.srv.counter","code":413,"detail":"stream message of 2064 bytes is larger than 1024 bytes","status":"Payload Too Large"}'));
    // A server stream's request over the limit is refused before the stream starts.
    r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Up', 'mesh-stream': 'server' }, big);
    assert.equal(r.status, 413);
    const bad = Buffer.from([7, 0, 0, 0, 0]);
    r = await post(port, { 'mesh-service': 'go.mesh.srv.counter', 'mesh-endpoint': 'Count.Up', 'mesh-stream': 'server' }, bad);
    assert.equal(r.data.toString(), '{"id":"go.mesh.srv.counter","code":400,"detail":"stream frame with unknown flags 0x07","status":"Bad Request"}');
  });

  it('a raw client that closes its connection mid-stream ends the handler', async () => {
    const before = seen.finallyRan;
    const socket = connect(port, '127.0.0.1');
    const body = Buffer.concat([encodeFrame(0, '{}'), encodeFrame(1)]);
    socket.write(
      `POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nMesh-Service: go.mesh.srv.counter\r\nMesh-Endpoint: Count.Forever\r\nMesh-Stream: server\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    socket.write(body);
    await new Promise((r) => socket.once('data', r));
    socket.destroy();
    await waitFor(() => seen.finallyRan === before + 1);
  });

  it('the frame decoder cuts frames split anywhere and refuses a length over the limit', () => {
    const d = new FrameDecoder(10, 'x');
    const bytes = Buffer.concat([encodeFrame(0, 'abc'), encodeFrame(1)]);
    const frames = [];
    for (const b of bytes) frames.push(...d.push(Buffer.from([b])));
    assert.deepEqual(
      frames.map((f) => [f.flags, f.payload.toString()]),
      [
        [0, 'abc'],
        [1, ''],
      ],
    );
    assert.throws(() => new FrameDecoder(10, 'x').push(Buffer.from([0, 0, 0, 0, 11])), (e: MeshError) => e.code === 413);
  });
});

async function post(port: number, headers: Record<string, string>, body: Buffer): Promise<{ status: number; headers: Record<string, unknown>; data: Buffer }> {
  const r = await http('POST', `http://127.0.0.1:${port}/`, { headers: { 'content-type': 'application/json', ...headers }, body });
  return { status: r.status, headers: r.headers, data: r.bytes };
}

describe('a long stream on a server with a short --request_timeout', () => {
  const mesh = new Mesh({ ...quiet, requestTimeout: '400ms', requestHeadersTimeout: '200ms' });

  before(async () => {
    const svc = mesh.service({ name: 'go.mesh.srv.slowchat' });
    svc.handle('Echo.Once', (req: unknown) => req);
    svc.stream(
      'Echo.Chat',
      async function* (reqs: AsyncIterable<{ say: string }>) {
        for await (const r of reqs) yield { echo: r.say };
      },
      { kind: 'bidi' },
    );
    const { services } = await mesh.start();
    port = services[0]!.nodes[0]!.port;
  });
  after(() => mesh.close());
  let port = 0;

  it('a bidi stream whose requests last longer than the whole-request timeout is not cut off', async () => {
    let answered!: () => void;
    const first = new Promise<void>((r) => (answered = r));
    async function* says() {
      yield { say: 'one' };
      await first;
      // Longer than --request_timeout (400ms) between two requests of one request body.
      await new Promise((r) => setTimeout(r, 1000)); // must outlast --request_timeout (what is tested), not ordering
      yield { say: 'two' };
    }
    const got: unknown[] = [];
    for await (const m of mesh.stream('go.mesh.srv.slowchat', 'Echo.Chat', says())) {
      got.push(m);
      answered();
    }
    assert.deepEqual(got, [{ echo: 'one' }, { echo: 'two' }]);
  });

  it('the exemption is for streams only: a slow plain body on the same server is still cut with 408', async () => {
    // The stream above made the server ignore the request timeout for the sockets that carry a stream;
    // a slowloris body on another connection must not profit from it.
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (d: Buffer) => (received += d.toString('latin1')));
    socket.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nMesh-Service: go.mesh.srv.slowchat\r\nMesh-Endpoint: Echo.Once\r\nContent-Length: 100\r\n\r\n{');
    await new Promise((r) => socket.once('close', r));
    assert.match(received, /^HTTP\/1\.1 408 /);
  });
});

describe('streams carry the call context', () => {
  const mesh = new Mesh(quiet);
  const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';

  before(async () => {
    const inner = mesh.service({ name: 'go.mesh.srv.inner' });
    inner.handle('Echo.Context', (_req: unknown, ctx) => ({ id: ctx.id, traceId: ctx.traceId, tenant: ctx.metadata['x-tenant'] ?? null }));
    inner.stream(
      'Echo.Stream',
      async function* (_req: unknown, ctx: StreamContext) {
        yield { id: ctx.id, traceId: ctx.traceId, tenant: ctx.metadata['x-tenant'] ?? null };
      },
      { kind: 'server' },
    );
    const outer = mesh.service({ name: 'go.mesh.srv.outer' });
    // A stream handler that makes a unary call while it streams: the call carries the stream's context.
    outer.stream(
      'Relay.Unary',
      async function* () {
        yield await mesh.call('go.mesh.srv.inner', 'Echo.Context', {});
      },
      { kind: 'server' },
    );
    // A unary handler that opens a stream: the stream carries the call's context.
    outer.handle('Relay.Stream', async () => {
      const out: unknown[] = [];
      for await (const m of mesh.stream('go.mesh.srv.inner', 'Echo.Stream', {}, { kind: 'server' })) out.push(m);
      return out[0];
    });
    await mesh.start();
  });
  after(() => mesh.close());

  it('a call made inside a stream handler, and a stream opened inside a call handler, carry its id, metadata and trace', async () => {
    const metadata = { 'x-tenant': 'acme', traceparent: `00-${TRACE}-b7ad6b7169203331-01` };
    const fromStream: unknown[] = [];
    for await (const m of mesh.stream('go.mesh.srv.outer', 'Relay.Unary', {}, { kind: 'server', id: 'req-s', metadata })) fromStream.push(m);
    assert.deepEqual(fromStream, [{ id: 'req-s', traceId: TRACE, tenant: 'acme' }]);
    assert.deepEqual(await mesh.call('go.mesh.srv.outer', 'Relay.Stream', {}, { id: 'req-u', metadata }), { id: 'req-u', traceId: TRACE, tenant: 'acme' });
  });
});
