/**
 * Streaming gRPC (docs/grpc.md "Streaming"), with real processes: a plain @grpc/grpc-js server
 * (test/fixtures/grpc-greeter.ts) registered with protocol=grpc, its server, client and bidi
 * methods reached by SSE and WebSocket clients through `mesh api` and `mesh sidecar`; a gRPC
 * error status mid-stream; cancellation reaching the gRPC server; kind mismatches; stream stats.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { readFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startProcess, runCli, tempDir, waitFor, http, ROOT, PRINTED, type RunningProcess } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';
import { openWs, refusal, sse } from '../fixtures/stream-clients.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const run = promisify(execFile);
const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const reply = (message: string) => `{"message":"${message}","count":"0","mood":"MOOD_UNSPECIFIED","tags":[],"server":"s","mesh_id":"","x_trace":""}`;

describe('gRPC streams at the edge', () => {
  const home = tempDir('mesh-grpc-stream-');
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let greeter: RunningProcess;
  let api: RunningProcess;
  let sc: SidecarProcess;
  let base = '';
  let ws = '';
  let admin = '';

  before(async () => {
    greeter = startProcess(['--import', 'tsx', GREETER, '--label=s'], {}, '');
    const port = await greeter.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    const record = { Name: 'go.mesh.srv.greeter', Nodes: [{ Id: 's', Address: '127.0.0.1', Port: port, Metadata: { protocol: 'grpc' } }] };
    const r = await runCli(['register', 'service', JSON.stringify(record)], env);
    assert.equal(r.code, 0, r.stderr);
    api = startProcess(['api', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--log_level=warning', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0']);
    const [apiPort, adminPort] = await Promise.all([api.waitForPort(PRINTED.api), api.waitForPort(PRINTED.apiAdmin)]);
    base = `http://127.0.0.1:${apiPort}`;
    ws = `ws://127.0.0.1:${apiPort}`;
    admin = `http://127.0.0.1:${adminPort}`;
    sc = await startSidecar(home.path, [`--proto_path=${PROTOS}`]);
  });
  after(async () => {
    await Promise.all([api, greeter].map((p) => p?.stop('SIGKILL')));
    await sc?.stop('SIGKILL');
    home.cleanup();
  });

  it('an SSE client gets a server stream of the gRPC server through mesh api, each message as JSON', async () => {
    const r = await sse(`${base}/greeter/count`, 'POST', '{"name":"Ann","n":3}');
    assert.equal(r.status, 200);
    assert.equal(r.type, 'text/event-stream');
    assert.equal(r.text, [1, 2, 3].map((i) => `data: ${reply(`Hello Ann #${i}`)}\n\n`).join(''));
    // GET with the query as the request (integer fields take strings of digits).
    const g = await sse(`${base}/greeter/count?name=Q&n=1`, 'GET');
    assert.equal(g.text, `data: ${reply('Hello Q #1')}\n\n`);
  });

  it('docs/grpc.md\'s curl of a server stream, run as written, prints the messages as SSE', async () => {
    const doc = readFileSync(join(ROOT, 'docs/grpc.md'), 'utf8');
    const line = doc.split('\n').find((l) => l.startsWith("curl -N -H 'accept: text/event-stream'"));
    assert.ok(line, 'docs/grpc.md has the SSE curl sample');
    const { stdout } = await run('sh', ['-c', line.replace('localhost:8080', base.replace('http://', ''))], { timeout: 20_000 });
    assert.equal(stdout, [1, 2, 3].map((i) => `data: ${reply(`Hello Ann #${i}`)}\n\n`).join(''));
  });

  it('a WebSocket client gets the server stream through mesh api; the end closes with 1000', async () => {
    const c = openWs(`${ws}/greeter/count`);
    await c.open;
    c.ws.send('{"name":"W","n":2}');
    assert.deepEqual(await c.done, { code: 1000, reason: '' });
    assert.deepEqual(c.messages, [reply('Hello W #1'), reply('Hello W #2')]);
  });

  it('a bidi stream echoes through the sidecar over a WebSocket; a client stream answers after the end', async () => {
    const c = openWs(`${sc.base.replace('http:', 'ws:')}/greeter/chat`);
    await c.open;
    c.ws.send('{"name":"one"}');
    await waitFor(() => c.messages.length === 1);
    c.ws.send('{"name":"two"}');
    await waitFor(() => c.messages.length === 2);
    c.ws.send('');
    assert.deepEqual(await c.done, { code: 1000, reason: '' });
    const got = c.messages.map((m) => JSON.parse(m) as { message: string; mesh_id: string });
    assert.deepEqual(
      got.map((m) => m.message),
      ['Hello one', 'Hello two'],
    );
    assert.notEqual(got[0]!.mesh_id, '', 'the request id goes as mesh-id metadata');
    const sum = openWs(`${sc.base.replace('http:', 'ws:')}/greeter/collect`);
    await sum.open;
    for (const name of ['a', 'b', 'c']) sum.ws.send(JSON.stringify({ name }));
    sum.ws.send('');
    assert.equal((await sum.done).code, 1000);
    assert.deepEqual(sum.messages, [reply('a+b+c')]);
  });

  it('a gRPC error status mid-stream: the WebSocket closes with 4000 + the mapped code, SSE ends with event: error', async () => {
    const c = openWs(`${ws}/greeter/count`);
    await c.open;
    c.ws.send('{"name":"E","n":2,"fail_code":5,"fail_details":"no more greetings"}');
    assert.deepEqual(await c.done, { code: 4404, reason: 'no more greetings' });
    assert.deepEqual(c.messages, [reply('Hello E #1'), reply('Hello E #2')]);
    const r = await sse(`${base}/greeter/count`, 'POST', '{"name":"E","n":1,"fail_code":8,"fail_details":"slow down"}');
    assert.equal(r.status, 200);
    assert.equal(r.text, `data: ${reply('Hello E #1')}\n\nevent: error\ndata: {"id":"helloworld.Greeter","code":429,"detail":"slow down","status":"Too Many Requests"}\n\n`);
    // An error before any message: SSE answers with the error itself.
    const early = await sse(`${base}/greeter/count`, 'POST', '{"name":"E","n":0,"fail_code":7,"fail_details":"not you"}');
    assert.equal(early.status, 403);
    assert.equal(early.text, '{"id":"helloworld.Greeter","code":403,"detail":"not you","status":"Forbidden"}');
  });

  it('cancellation reaches the gRPC server: a WebSocket client closing (gateway, sidecar) or an SSE client going away cancels its call', async () => {
    const c = openWs(`${ws}/greeter/count`);
    await c.open;
    c.ws.send('{"name":"ws-cancel","n":1,"hold":true}');
    await waitFor(() => c.messages.length === 1);
    c.ws.close(1000);
    await greeter.waitForOutput(/cancelled Count ws-cancel/);
    const sc2 = openWs(`${sc.base.replace('http:', 'ws:')}/greeter/chat`);
    await sc2.open;
    sc2.ws.send('{"name":"x"}');
    await waitFor(() => sc2.messages.length === 1);
    const id = (JSON.parse(sc2.messages[0]!) as { mesh_id: string }).mesh_id;
    sc2.ws.terminate();
    await greeter.waitForOutput(new RegExp(`cancelled Chat ${id}`));
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${base}/greeter/count`, { method: 'POST', headers: { accept: 'text/event-stream', 'content-type': 'application/json' } }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => {});
      req.once('error', reject);
      req.end('{"name":"sse-cancel","n":1,"hold":true}');
    });
    await greeter.waitForOutput(/cancelled Count sse-cancel/);
  });

  it('kinds come from the .proto: SSE on a bidi method is 406, a WebSocket on a unary one 404, a unary call of a stream 400', async () => {
    const r = await sse(`${base}/greeter/chat`, 'POST', '{}');
    assert.equal(r.status, 406);
    assert.equal(r.text, '{"id":"go.mesh.api","code":406,"detail":"endpoint Greeter.Chat of go.mesh.srv.greeter is a bidi stream: text/event-stream serves server streams only (use a WebSocket)","status":"Not Acceptable"}');
    const w = await refusal(`${ws}/greeter/say-hello`);
    assert.equal(w.status, 404);
    assert.match(w.body, /is not a streaming endpoint/);
    const u = await http('POST', `${base}/greeter/count`, { headers: { 'content-type': 'application/json' }, body: '{"name":"x"}' });
    assert.equal(u.status, 400);
    assert.equal(u.text, '{"id":"go.mesh.api","code":400,"detail":"/helloworld.Greeter/Count is a server stream: open it as a stream (a WebSocket, Server-Sent Events, Mesh.stream)","status":"Bad Request"}');
    // A message that does not fit the request type ends the stream with 400 naming the field.
    const c = openWs(`${ws}/greeter/count`);
    await c.open;
    c.ws.send('{"nme":"x"}');
    assert.deepEqual(await c.done, { code: 4400, reason: '/helloworld.Greeter/Count: nme: no such field in helloworld.CountRequest' });
  });

  it('the per-cluster stream stats count the gRPC streams', async () => {
    const before = await http('GET', `${admin}/stats?filter=greeter.upstream_rq_stream`);
    const total = (text: string, name: string) => Number(new RegExp(`cluster\\.go\\.mesh\\.srv\\.greeter\\.upstream_rq_stream_${name}: (\\d+)`).exec(text)?.[1] ?? 0);
    const r = await sse(`${base}/greeter/count`, 'POST', '{"name":"S","n":4}');
    assert.equal(r.status, 200);
    const after = await waitFor(async () => {
      const a = await http('GET', `${admin}/stats?filter=greeter.upstream_rq_stream`);
      return total(a.text, 'active') === 0 ? a : undefined;
    });
    assert.equal(total(after.text, 'total') - total(before.text, 'total'), 1);
    assert.equal(total(after.text, 'msgs_sent') - total(before.text, 'msgs_sent'), 1);
    assert.equal(total(after.text, 'msgs_received') - total(before.text, 'msgs_received'), 4);
  });
});
