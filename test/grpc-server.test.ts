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
import { PYTHON, PROTOS, pythonStubs } from './grpc-fixtures.js';
import { startProcess, runCli, tempDir, waitFor, http, ROOT, PRINTED, type RunningProcess } from './helpers.js';

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

  it('a bad --server_protocol is a flag error (exit 2)', async () => {
    const p = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=http2', '--admin_address=off'], {}, '');
    const code = await waitFor(() => p.child.exitCode !== null && p.child.exitCode, 20_000).catch(() => p.child.exitCode);
    assert.equal(code, 2, p.output());
    assert.match(p.output(), /--server_protocol/);
  });
});
