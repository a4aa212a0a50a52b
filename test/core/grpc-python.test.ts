/**
 * A gRPC backend in another language: Python's grpcio (Debian's python3-grpcio, run with
 * /usr/bin/python3) serving helloworld.Greeter from the same .proto, stubs generated at test time
 * by grpc_tools.protoc, registered with protocol=grpc and reached through the gateway with JSON,
 * unary and streaming (SSE, WebSocket).
 * Skipped loudly when /usr/bin/python3 has no grpc (a failure with MESH_TEST_REQUIRE_ENGINES=1).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { PYTHON, PROTOS, pythonStubs } from '../grpc-fixtures.js';
import { startProcess, runCli, tempDir, http, waitFor, ROOT, PRINTED, type RunningProcess } from '../helpers.js';
import { openWs, sse } from '../fixtures/stream-clients.js';

const SERVER = join(ROOT, 'test/fixtures/grpc-python/greeter_server.py');

/** Generates the Python stubs of greeter.proto into dir; undefined (with a loud SKIP) when Python's grpc is missing. */

const SKIP_REASON = "Debian's /usr/bin/python3 has no grpc module: install python3-grpcio and python3-grpc-tools to run the Python gRPC server test (CI does; MESH_TEST_REQUIRE_ENGINES=1 makes this a failure)";

describe('a Python grpcio server behind the gateway', () => {
  const home = tempDir();
  const stubs = tempDir('mesh-pystubs-');
  const env = { MESH_REGISTRY_ADDRESS: home.path };
  let enabled = false;
  let py: { port: Promise<number>; stop(): void } | undefined;
  let api: RunningProcess | undefined;
  let apiPort = 0;

  before(async () => {
    enabled = pythonStubs(stubs.path);
    if (!enabled) return;
    py = startPython(stubs.path);
    const port = await py.port;
    const record = { Name: 'go.mesh.srv.pygreeter', Nodes: [{ Id: 'py', Address: '127.0.0.1', Port: port, Metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] };
    const r = await runCli(['register', 'service', JSON.stringify(record)], env);
    assert.equal(r.code, 0, r.stderr);
    api = startProcess(['api', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning']);
    apiPort = await api.waitForPort(PRINTED.api);
  });
  after(async () => {
    await api?.stop('SIGKILL');
    py?.stop();
    home.cleanup();
    stubs.cleanup();
  });

  it('JSON through the gateway reaches the Python server and comes back', async (t) => {
    if (!enabled) return t.skip(SKIP_REASON);
    const res = await http('POST', `http://127.0.0.1:${apiPort}/pygreeter/say-hello`, { headers: { 'content-type': 'application/json' }, body: '{"name":"Ann","count":"9007199254740993","mood":"GRUMPY","tags":["p","q"]}' });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, '{"message":"Hello Ann from python","count":"9007199254740993","mood":"GRUMPY","tags":["p","q"],"server":"python","mesh_id":"","x_trace":""}');
  });

  it('the go-micro path /<service>/<endpoint>/<method> names the gRPC service without metadata', async (t) => {
    if (!enabled) return t.skip(SKIP_REASON);
    const res = await http('POST', `http://127.0.0.1:${apiPort}/pygreeter/greeter/say-hello`, { headers: { 'content-type': 'application/json' }, body: '{"name":"Bo"}' });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().message, 'Hello Bo from python');
  });

  it("a Python status (context.abort) maps like any other: NOT_FOUND is 404 error JSON", async (t) => {
    if (!enabled) return t.skip(SKIP_REASON);
    const res = await http('POST', `http://127.0.0.1:${apiPort}/pygreeter/fail`, { headers: { 'content-type': 'application/json' }, body: '{"code":5,"details":"nothing here"}' });
    assert.equal(res.status, 404);
    assert.equal(res.text, '{"id":"helloworld.Greeter","code":404,"detail":"nothing here","status":"Not Found"}');
  });

  it('streams of the Python server through the gateway: SSE (with a status mid-stream) and a bidi WebSocket', async (t) => {
    if (!enabled) return t.skip(SKIP_REASON);
    const msg = (m: string) => `{"message":"${m} from python","count":"0","mood":"MOOD_UNSPECIFIED","tags":[],"server":"python","mesh_id":"","x_trace":""}`;
    const r = await sse(`http://127.0.0.1:${apiPort}/pygreeter/count`, 'POST', '{"name":"S","n":2,"fail_code":5,"fail_details":"no third"}');
    assert.equal(r.status, 200);
    assert.equal(r.text, `data: ${msg('Hello S #1')}\n\ndata: ${msg('Hello S #2')}\n\nevent: error\ndata: {"id":"helloworld.Greeter","code":404,"detail":"no third","status":"Not Found"}\n\n`);
    const c = openWs(`ws://127.0.0.1:${apiPort}/pygreeter/chat`);
    await c.open;
    c.ws.send('{"name":"one"}');
    await waitFor(() => c.messages.length === 1);
    c.ws.send('{"name":"two"}');
    c.ws.send('');
    assert.deepEqual(await c.done, { code: 1000, reason: '' });
    assert.deepEqual(c.messages, [msg('Hello one'), msg('Hello two')]);
  });
});

/** Starts the Python server; `port` resolves with the port it printed. */
function startPython(stubDir: string): { port: Promise<number>; stop(): void } {
  const child = spawn(PYTHON, ['-u', SERVER, stubDir], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const port = new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /python greeter listening on 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.on('exit', (code) => reject(new Error(`python server exited (${code}):\n${out}`)));
  });
  return { port, stop: () => void child.kill('SIGKILL') };
}
