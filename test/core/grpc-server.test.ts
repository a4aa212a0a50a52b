/**
 * A framework service that serves gRPC (`--server_protocol=grpc`, docs/grpc.md): runService
 * with the service's .proto files registers protocol=grpc and answers its handlers over
 * @grpc/grpc-js; Python's grpcio client (stubs generated at test time from the same .proto)
 * calls it, and so does `mesh call` (a gRPC backend like any other). Python parts skip loudly
 * when /usr/bin/python3 has no grpc (a failure with MESH_TEST_REQUIRE_ENGINES=1).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { PYTHON, PROTOS, pythonStubs } from '../grpc-fixtures.js';
import { startProcess, runCli, tempDir, waitFor, http, ROOT, PRINTED, type RunningProcess } from '../helpers.js';
import { openWs, sse } from '../fixtures/stream-clients.js';

const SERVICE = join(ROOT, 'test/fixtures/grpc-framework-service.ts');
const CLIENT = join(ROOT, 'test/fixtures/grpc-python/greeter_client.py');


describe('a framework service serving gRPC', () => {
  const home = tempDir();
  const stubs = tempDir('mesh-pystubs-');
  const env = { MESH_REGISTRY_ADDRESS: home.path };
  let svc: RunningProcess;
  let address = '';
  let python = false;

  before(async () => {
    python = pythonStubs(stubs.path);
    svc = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=grpc', `--proto_path=${PROTOS}`, '--log_level=warning'], {}, '');
    address = (await svc.waitForOutput(/listening on (127\.0\.0\.1:\d+)/)).replace(/.*listening on /, '');
  });
  after(async () => {
    await svc?.stop('SIGKILL');
    home.cleanup();
    stubs.cleanup();
  });

  const py = (method: string, json: string): string => {
    const r = spawnSync(PYTHON, [CLIENT, stubs.path, address, method, json], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim();
  };

  it('registers protocol=grpc and the gRPC service it serves', async () => {
    const r = await runCli(['get', 'service', 'go.mesh.srv.fwgreeter', '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    const node = (JSON.parse(r.stdout) as { nodes: Array<{ address: string; port: number; metadata: Record<string, string> }> }).nodes[0]!;
    assert.equal(`${node.address}:${node.port}`, address);
    assert.equal(node.metadata.protocol, 'grpc');
    assert.equal(node.metadata.transport, 'grpc');
    assert.equal(node.metadata.grpc_service, 'helloworld.Greeter');
  });

  it("Python's grpcio client calls a handler", (t) => {
    if (!python) return t.skip('no Python grpc');
    const out = JSON.parse(py('SayHello', '{"name":"Py","count":"9007199254740993","mood":"HAPPY","tags":["a","b"]}')) as Record<string, unknown>;
    assert.deepEqual(out, { message: 'Hello Py from mesh', count: '9007199254740993', mood: 'HAPPY', tags: ['a', 'b'], server: 'framework', x_trace: 'from-python' });
  });

  it('a MeshError of the handler is the gRPC status of its HTTP code, detail as the message', (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.equal(py('Fail', '{"code":404,"details":"no such thing"}'), 'status NOT_FOUND no such thing');
    assert.equal(py('Fail', '{"code":400,"details":"bad"}'), 'status INVALID_ARGUMENT bad');
    assert.equal(py('Fail', '{"code":503,"details":"later"}'), 'status UNAVAILABLE later');
    assert.equal(py('Fail', '{"code":403,"details":"no"}'), 'status PERMISSION_DENIED no');
  });

  it('an answer that does not fit the response message is INTERNAL', (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.equal(py('Slow', '{}'), 'status INTERNAL the answer of Greeter.Slow does not fit helloworld.HelloReply: count: must be an integer (a number or a string of digits)');
  });

  const lines = (method: string, json: string): string[] => py(method, json).split('\n');
  const fw = (message: string) => `{"message": "${message}", "server": "framework"}`;

  it("streaming handlers are the streaming gRPC methods: Python's grpcio client reads a server stream", (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.deepEqual(lines('Count', '{"name":"P","n":3}'), [fw('Hello P #1'), fw('Hello P #2'), fw('Hello P #3'), 'status OK']);
  });

  it('a MeshError thrown mid-stream ends the gRPC stream with the mapped status, after the messages before it', (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.deepEqual(lines('Count', '{"name":"P","n":1,"fail_code":404,"fail_details":"no more"}'), [fw('Hello P #1'), 'status NOT_FOUND no more']);
    assert.deepEqual(lines('Count', '{"name":"P","n":0,"fail_code":429,"fail_details":"slow down"}'), ['status RESOURCE_EXHAUSTED slow down']);
  });

  it('bidi and client streams: the handler gets the async iterable of requests', (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.deepEqual(lines('Chat', '[{"name":"a"},{"name":"b"}]'), [fw('Hello a'), fw('Hello b'), 'status OK']);
    assert.deepEqual(lines('Collect', '[{"name":"a"},{"name":"b"},{"name":"c"}]'), [fw('a+b+c'), 'status OK']);
  });

  it("the gRPC client cancelling aborts the handler's ctx.signal (499)", async (t) => {
    if (!python) return t.skip('no Python grpc');
    assert.deepEqual(lines('CountCancel', '{"name":"pc","n":1,"hold":true}'), [fw('Hello pc #1'), 'cancelled']);
    await svc.waitForOutput(/aborted Count pc 499/);
  });

  it('mesh callers reach its streams: SSE and WebSocket through the gateway', async () => {
    const api = startProcess(['api', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning']);
    try {
      const port = await api.waitForPort(PRINTED.api);
      const r = await sse(`http://127.0.0.1:${port}/fwgreeter/greeter/count`, 'POST', '{"name":"G","n":2}');
      assert.equal(r.status, 200);
      const data = r.text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e.replace(/^data: /, '')) as { message: string; mesh_id: string });
      assert.deepEqual(data.map((d) => d.message), ['Hello G #1', 'Hello G #2']);
      assert.notEqual(data[0]!.mesh_id, '', 'the stream carries the request id as mesh-id');
      const c = openWs(`ws://127.0.0.1:${port}/fwgreeter/greeter/chat`);
      await c.open;
      c.ws.send('{"name":"x"}');
      await waitFor(() => c.messages.length === 1);
      c.ws.send('');
      assert.deepEqual(await c.done, { code: 1000, reason: '' });
      assert.equal((JSON.parse(c.messages[0]!) as { message: string }).message, 'Hello x');
    } finally {
      await api.stop('SIGKILL');
    }
  });

  it('the gateway reaches it; the W3C trace context goes along as gRPC metadata', async () => {
    const api = startProcess(['api', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning']);
    try {
      const port = await api.waitForPort(PRINTED.api);
      const res = await http('POST', `http://127.0.0.1:${port}/fwgreeter/greeter/say-hello`, {
        headers: { 'content-type': 'application/json', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
        body: '{"name":"T"}',
      });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().message, 'Hello T from mesh');
      assert.equal(res.json().x_trace, 'trace 4bf92f3577b34da6a3ce929d0e0e4736', 'the handler is in the caller\'s trace');
    } finally {
      await api.stop('SIGKILL');
    }
  });

  it('mesh call reaches it as a gRPC backend (and its errors come back mapped)', async () => {
    let r = await runCli(['call', 'go.mesh.srv.fwgreeter', 'Greeter.SayHello', '{"name":"M"}', `--proto_path=${PROTOS}`, '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { message: string }).message, 'Hello M from mesh');
    r = await runCli(['call', 'go.mesh.srv.fwgreeter', 'Greeter.Fail', '{"code":409,"details":"dup"}', `--proto_path=${PROTOS}`, '--output=json'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, '{"id":"helloworld.Greeter","code":409,"detail":"dup","status":"Conflict"}\n');
  });
});

describe('--server_protocol=grpc: bad setups stop the start', () => {
  const home = tempDir();
  after(() => home.cleanup());

  it('without --proto_path: exit 1, saying so', async () => {
    const p = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=grpc', '--admin_address=off'], {}, '');
    const code = await waitFor(() => p.child.exitCode !== null && p.child.exitCode, 20_000).catch(() => p.child.exitCode);
    assert.equal(code, 1, p.output());
    assert.match(p.output(), /--server_protocol=grpc: service go\.mesh\.srv\.fwgreeter needs its \.proto files \(--proto_path\)/);
  });

  it('a streaming handler whose method is of another kind: exit 1, naming both', async () => {
    const p = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=grpc', `--proto_path=${PROTOS}`, '--admin_address=off'], { MESH_TEST_BAD_KIND: '1' }, '');
    const code = await waitFor(() => p.child.exitCode !== null && p.child.exitCode, 20_000).catch(() => p.child.exitCode);
    assert.equal(code, 1, p.output());
    assert.match(p.output(), /--server_protocol=grpc: endpoint Greeter\.Chat of go\.mesh\.srv\.fwgreeter is a server stream, but \/helloworld\.Greeter\/Chat is a bidi stream/);
  });

  it('a bad --server_protocol is a flag error (exit 2)', async () => {
    const p = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=http2', '--admin_address=off'], {}, '');
    const code = await waitFor(() => p.child.exitCode !== null && p.child.exitCode, 20_000).catch(() => p.child.exitCode);
    assert.equal(code, 2, p.output());
    assert.match(p.output(), /--server_protocol/);
  });
});
