/**
 * gRPC streams at the edge without .proto files (docs/grpc.md "Streaming", "Protos and
 * reflection"), with real processes: a plain @grpc/grpc-js server offering the reflection service
 * (test/fixtures/grpc-greeter.ts --reflection) registered with protocol=grpc, and `mesh api` and
 * `mesh sidecar` started without --proto_path. Whether an endpoint streams, and how, comes from
 * the node's reflection service: its server stream reaches a WebSocket and an SSE client, its
 * bidi stream echoes over a WebSocket; a node without reflection, a down node and a node that
 * never answers are refused with a clear error, not a hang.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createServer, type Server, type Socket } from 'node:net';
import { request } from 'undici';
import { startProcess, runCli, tempDir, waitFor, freePort, ROOT, PRINTED, type RunningProcess } from '../helpers.js';
import { openWs, refusal } from '../fixtures/stream-clients.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const reply = (message: string) => `{"message":"${message}","count":"0","mood":"MOOD_UNSPECIFIED","tags":[],"server":"r","mesh_id":"","x_trace":""}`;

describe('gRPC streams at the edge from the reflection service (no --proto_path)', () => {
  const home = tempDir('mesh-grpc-stream-refl-');
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let reflective: RunningProcess;
  let plain: RunningProcess;
  let api: RunningProcess;
  let sc: SidecarProcess;
  /** Accepts TCP connections and never says a word of HTTP/2. */
  let mute: Server;
  const muted = new Set<Socket>();
  let base = '';
  let ws = '';

  const register = async (name: string, port: number): Promise<void> => {
    // grpc_service: the endpoints of /<name>/<method> (`Name.Method`) go to helloworld.Greeter.
    const record = { Name: name, Nodes: [{ Id: name, Address: '127.0.0.1', Port: port, Metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] };
    const r = await runCli(['register', 'service', JSON.stringify(record)], env);
    assert.equal(r.code, 0, r.stderr);
  };

  before(async () => {
    reflective = startProcess(['--import', 'tsx', GREETER, '--label=r', '--reflection'], {}, '');
    plain = startProcess(['--import', 'tsx', GREETER, '--label=p'], {}, '');
    mute = createServer((s) => {
      muted.add(s);
      s.on('error', () => {});
      s.on('close', () => muted.delete(s));
    });
    await new Promise<void>((resolve) => mute.listen(0, '127.0.0.1', resolve));
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [rPort, pPort] = await Promise.all([reflective.waitForPort(re), plain.waitForPort(re)]);
    await register('go.mesh.srv.greeter', rPort);
    await register('go.mesh.srv.plain', pPort);
    await register('go.mesh.srv.down', await freePort());
    await register('go.mesh.srv.mute', (mute.address() as { port: number }).port);
    // No --proto_path; a reflection service that does not answer is given up after 1 s.
    api = startProcess(['api', `--registry_address=${home.path}`, '--namespace=go.mesh.srv', '--handler=rpc', '--log_level=warning', '--address=127.0.0.1:0', '--admin_address=off', '--client_request_timeout=1s']);
    const apiPort = await api.waitForPort(PRINTED.api);
    base = `http://127.0.0.1:${apiPort}`;
    ws = `ws://127.0.0.1:${apiPort}`;
    sc = await startSidecar(home.path, []);
  });
  after(async () => {
    await Promise.all([api, reflective, plain].map((p) => p?.stop('SIGKILL')));
    await sc?.stop('SIGKILL');
    for (const s of muted) s.destroy();
    mute?.close();
    home.cleanup();
  });

  it("a WebSocket client gets the server stream of a node known only by its reflection service", async () => {
    const c = openWs(`${ws}/greeter/count`);
    await c.open;
    c.ws.send('{"name":"W","n":2}');
    assert.deepEqual(await c.done, { code: 1000, reason: '' });
    assert.deepEqual(c.messages, [reply('Hello W #1'), reply('Hello W #2')]);
  });

  it('an SSE client (undici) gets the same server stream', async () => {
    const res = await request(`${base}/greeter/count`, { method: 'POST', headers: { accept: 'text/event-stream', 'content-type': 'application/json' }, body: '{"name":"S","n":3}' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'text/event-stream');
    assert.equal(await res.body.text(), [1, 2, 3].map((i) => `data: ${reply(`Hello S #${i}`)}\n\n`).join(''));
  });

  it('a bidi stream echoes over a WebSocket, through mesh api and through mesh sidecar', async () => {
    for (const url of [`${ws}/greeter/chat`, `${sc.base.replace('http:', 'ws:')}/greeter/chat`]) {
      const c = openWs(url);
      await c.open;
      c.ws.send('{"name":"one"}');
      await waitFor(() => c.messages.length === 1);
      c.ws.send('{"name":"two"}');
      await waitFor(() => c.messages.length === 2);
      c.ws.send('');
      assert.deepEqual(await c.done, { code: 1000, reason: '' }, url);
      assert.deepEqual(
        c.messages.map((m) => (JSON.parse(m) as { message: string }).message),
        ['Hello one', 'Hello two'],
        url,
      );
    }
  });

  it('the reflected kinds are enforced: SSE on a bidi method is 406, a WebSocket on a unary one 404', async () => {
    const res = await request(`${base}/greeter/chat`, { method: 'POST', headers: { accept: 'text/event-stream', 'content-type': 'application/json' }, body: '{}' });
    assert.equal(res.statusCode, 406);
    assert.equal(await res.body.text(), '{"id":"go.mesh.api","code":406,"detail":"endpoint Greeter.Chat of go.mesh.srv.greeter is a bidi stream: text/event-stream serves server streams only (use a WebSocket)","status":"Not Acceptable"}');
    const w = await refusal(`${ws}/greeter/say-hello`);
    assert.equal(w.status, 404);
    assert.equal(w.body, '{"id":"go.mesh.api","code":404,"detail":"endpoint Greeter.SayHello of go.mesh.srv.greeter is not a streaming endpoint: no WebSocket endpoint here (a WebSocket serves streaming endpoints only)","status":"Not Found"}');
    const m = await refusal(`${ws}/greeter/nope`);
    assert.equal(m.status, 501);
    assert.equal(m.body, '{"id":"go.mesh.api","code":501,"detail":"gRPC service helloworld.Greeter has no method Nope (the node\'s reflection service)","status":"Not Implemented"}');
  });

  it('a node without reflection: 501; a down node: 502; a node that never answers: 504 after --client_request_timeout, not a hang', async () => {
    const none = await refusal(`${ws}/plain/count`);
    assert.equal(none.status, 501);
    assert.equal(none.body, '{"id":"go.mesh.api","code":501,"detail":"Plain.Count: no .proto files loaded for gRPC backends (--proto_path), and the node offers no reflection service","status":"Not Implemented"}');
    const sse = await request(`${base}/plain/count`, { method: 'POST', headers: { accept: 'text/event-stream', 'content-type': 'application/json' }, body: '{}' });
    assert.equal(sse.statusCode, 501);
    assert.equal(await sse.body.text(), none.body);
    const down = await refusal(`${ws}/down/count`);
    assert.equal(down.status, 502);
    assert.match(down.body, /^\{"id":"go\.mesh\.api","code":502,"detail":"service go\.mesh\.srv\.down: the kind of Down\.Count from the reflection service of 127\.0\.0\.1:\d+: [^"]+","status":"Bad Gateway"\}$/);
    const mutePort = (mute.address() as { port: number }).port;
    const slow = await refusal(`${ws}/mute/count`);
    assert.equal(slow.status, 504);
    assert.equal(slow.body, `{"id":"go.mesh.api","code":504,"detail":"service go.mesh.srv.mute: the kind of Mute.Count from the reflection service of 127.0.0.1:${mutePort}: no answer within 1000ms","status":"Gateway Timeout"}`);
  });
});
