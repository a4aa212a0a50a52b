/**
 * SidecarStreamCall (src/cli/sidecar-stream.ts) against a ws server on loopback standing in for the
 * sidecar: backpressure (a consumer that does not read pauses the socket; what waits in memory
 * stays bounded; reading again gets every answer in order), cancel closing the socket, the close
 * codes mapped to errors.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { WebSocketServer, WebSocket } from 'ws';
import { SidecarStreamCall, closeError } from '../../src/cli/sidecar-stream.js';
import { MeshError } from '../../src/base/errors.js';
import { waitFor, waitForStill } from '../helpers.js';

const COUNT = 400;
const PAD = 'p'.repeat(64 * 1024);

describe('SidecarStreamCall', () => {
  let wss: WebSocketServer;
  let port = 0;
  /** What each test's server side does with its socket and the first message. */
  let onRequest: (ws: WebSocket, first: string) => void = () => {};
  const serverSockets: WebSocket[] = [];

  before(async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    await once(wss, 'listening');
    port = (wss.address() as { port: number }).port;
    wss.on('connection', (ws) => {
      serverSockets.push(ws);
      ws.once('message', (d) => onRequest(ws, d.toString()));
    });
  });
  after(async () => {
    for (const ws of serverSockets) ws.terminate();
    await new Promise<void>((r) => wss.close(() => r()));
  });

  async function open(kind: 'server' | 'bidi' = 'server'): Promise<{ call: SidecarStreamCall; ws: WebSocket }> {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/rpc`, { perMessageDeflate: false });
    await once(ws, 'open');
    return { call: new SidecarStreamCall(ws, 'go.mesh.srv.s', 'A.B', kind, Buffer.from('{"go":1}')), ws };
  }

  it('a consumer that does not read pauses the socket: memory stays bounded; reading again gets every answer in order', async () => {
    let completed = 0;
    onRequest = (ws, first) => {
      assert.equal(first, '{"go":1}');
      for (let i = 0; i < COUNT; i++) ws.send(JSON.stringify({ i, pad: PAD }), () => completed++);
      ws.close(1000);
    };
    const { call, ws } = await open();
    const it = call[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(JSON.parse(first.value!.toString()).i, 0);
    await waitFor(() => ws.isPaused);
    assert.ok(call.buffered < 256 * 1024, `${call.buffered} bytes waiting`);
    // The server's sends stop completing once the paused socket's buffers are full; an unpaused
    // socket would have read everything (and `completed` would reach COUNT).
    await waitForStill(() => completed, { stepMs: 100, polls: 3 });
    assert.ok(ws.isPaused);
    assert.ok(call.buffered < 256 * 1024, `${call.buffered} bytes waiting`);
    assert.ok(completed < COUNT, 'the server could not send everything: the kernel buffers are full');
    let next = 1;
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      assert.equal(JSON.parse(r.value.toString()).i, next++);
    }
    assert.equal(next, COUNT);
  });

  it('cancel closes the socket (the sidecar cancels its call) and the iteration ends with 499', async () => {
    onRequest = (ws) => ws.send('{"n":1}');
    const { call } = await open();
    const server = serverSockets[serverSockets.length - 1]!;
    const closed = once(server, 'close');
    const it = call[Symbol.asyncIterator]();
    assert.equal((await it.next()).value!.toString(), '{"n":1}');
    call.cancel();
    const [code] = await closed;
    assert.equal(code, 1000);
    await assert.rejects(it.next(), (err: MeshError) => err.code === 499);
  });

  it('bidi: send writes text frames, end sends the empty frame; a 4000+code close is that error after the answers', async () => {
    const got: string[] = [];
    onRequest = (ws, first) => {
      got.push(first);
      ws.on('message', (d, binary) => {
        assert.equal(binary, false);
        got.push(d.toString());
        if (d.toString() === '') {
          ws.send('{"done":true}');
          ws.close(4409, 'counter jammed');
        }
      });
    };
    const { call } = await open('bidi');
    await call.send(Buffer.from('{"a":1}'));
    await call.send(Buffer.from('{"a":2}'));
    call.end();
    const answers: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const m of call) answers.push(m.toString());
      })(),
      (err: MeshError) => err.code === 409 && err.detail === 'counter jammed' && err.id === 'go.mesh.sidecar',
    );
    assert.deepEqual(answers, ['{"done":true}']);
    assert.deepEqual(got, ['{"a":1}', '{"a":2}', '']);
  });

  it('close codes: 1000 the end, 4000+code that error, 1009 413, 1001 503, anything else 502', () => {
    assert.equal(closeError(1000, '', 'x'), undefined);
    assert.deepEqual(closeError(4504, 'deadline exceeded', 'x')!.toBody(), '{"id":"go.mesh.sidecar","code":504,"detail":"deadline exceeded","status":"Gateway Timeout"}');
    assert.equal(closeError(1009, '', 'x')!.code, 413);
    assert.equal(closeError(1001, 'shutting down', 'x')!.code, 503);
    assert.deepEqual(closeError(1006, '', 'stream s.A.B through the sidecar')!.toBody(), '{"id":"go.mesh.cli","code":502,"detail":"stream s.A.B through the sidecar: the WebSocket closed with 1006 without an end","status":"Bad Gateway"}');
  });
});
