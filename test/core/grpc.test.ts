/**
 * gRPC backends (docs/grpc.md), with real processes: plain @grpc/grpc-js servers
 * (test/fixtures/grpc-greeter.ts, not the mesh framework) registered in the local registry with
 * metadata protocol=grpc, reached unary with JSON at the edge by `mesh call`, the gateway's rpc
 * handler, `/rpc` and the sidecar; gRPC status → HTTP status and error JSON; deadlines; a down
 * node; bad .proto files.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { startProcess, runCli, tempDir, waitFor, freePort, http, ROOT, PRINTED, type RunningProcess } from '../helpers.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
import { PROTOS } from '../grpc-fixtures.js';
const JSON_CT = { 'content-type': 'application/json' };

function startGreeter(label: string, ...extra: string[]): RunningProcess {
  return startProcess(['--import', 'tsx', GREETER, `--label=${label}`, ...extra], {}, '');
}

async function register(env: Record<string, string>, name: string, nodes: Array<{ id: string; port: number }>): Promise<void> {
  const record = { Name: name, Nodes: nodes.map((n) => ({ Id: n.id, Address: '127.0.0.1', Port: n.port, Metadata: { protocol: 'grpc' } })) };
  const r = await runCli(['register', 'service', JSON.stringify(record)], env);
  assert.equal(r.code, 0, r.stderr);
}

describe('gRPC backends', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let a: RunningProcess;
  let b: RunningProcess;
  let api: RunningProcess;
  let slowApi: RunningProcess;
  let sidecar: RunningProcess;
  let reflective: RunningProcess;
  let bareApi: RunningProcess;
  let barePort = 0;
  let apiPort = 0;
  let adminPort = 0;
  let slowPort = 0;
  let sidecarPort = 0;
  let deadPort = 0;
  const hostPorts: Record<string, number> = {};

  before(async () => {
    a = startGreeter('a');
    b = startGreeter('b');
    reflective = startGreeter('r', '--reflection');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    [hostPorts.a, hostPorts.b, hostPorts.r] = await Promise.all([a.waitForPort(re), b.waitForPort(re), reflective.waitForPort(re)]);
    await register(env, 'go.mesh.srv.reflective', [{ id: 'r', port: hostPorts.r! }]);
    deadPort = await freePort();
    await register(env, 'go.mesh.srv.greeter', [
      { id: 'a', port: hostPorts.a! },
      { id: 'b', port: hostPorts.b! },
    ]);
    // One node that is down and one that is up.
    await register(env, 'go.mesh.srv.flaky', [
      { id: 'dead', port: deadPort },
      { id: 'live', port: hostPorts.a! },
    ]);
    await register(env, 'go.mesh.srv.down', [{ id: 'dead', port: deadPort }]);
    const common = [`--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--log_level=warning'];
    api = startProcess(['api', ...common, '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--enable_rpc']);
    slowApi = startProcess(['api', ...common, '--address=127.0.0.1:0', '--admin_address=off', '--client_request_timeout=300ms']);
    sidecar = startProcess(['sidecar', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning']);
    // No --proto_path: only what the nodes' reflection services say.
    bareApi = startProcess(['api', `--registry_address=${home.path}`, '--namespace=go.mesh.srv', '--handler=rpc', '--log_level=warning', '--address=127.0.0.1:0', '--admin_address=off']);
    barePort = await bareApi.waitForPort(PRINTED.api);
    [apiPort, adminPort, slowPort, sidecarPort] = await Promise.all([api.waitForPort(PRINTED.api), api.waitForPort(PRINTED.apiAdmin), slowApi.waitForPort(PRINTED.api), sidecar.waitForPort(PRINTED.sidecar)]);
  });
  after(async () => {
    await Promise.all([api, slowApi, sidecar, bareApi, a, b, reflective].map((p) => p?.stop('SIGKILL')));
    home.cleanup();
  });

  it('mesh call reaches a gRPC node: JSON in, JSON out (fields in .proto order, int64 as a string, enums by name)', async () => {
    const r = await runCli(['call', 'go.mesh.srv.greeter', 'Greeter.SayHello', '{"name":"Ann","count":"12345678901234567","mood":"HAPPY","tags":["x"]}', `--proto_path=${PROTOS}`, '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as Record<string, string>;
    assert.deepEqual(Object.keys(out), ['message', 'count', 'mood', 'tags', 'server', 'mesh_id', 'x_trace']);
    assert.equal(out.message, 'Hello Ann');
    assert.equal(out.count, '12345678901234567', 'int64 beyond 2^53 survives as a string');
    assert.equal(out.mood, 'HAPPY');
    assert.deepEqual(out.tags, ['x']);
    assert.match(out.server!, /^[ab]$/);
    assert.notEqual(out.mesh_id, '', 'the request id goes as mesh-id metadata');
  });

  it('the full service name works too, and defaults are written out', async () => {
    const r = await runCli(['call', 'go.mesh.srv.greeter', 'helloworld.Greeter.SayHello', '{}', `--proto_path=${PROTOS}`, '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.equal(out.message, 'Hello ');
    assert.equal(out.count, '0');
    assert.equal(out.mood, 'MOOD_UNSPECIFIED');
    assert.deepEqual(out.tags, []);
  });

  it('--proto_files loads just the files named (relative to --proto_path)', async () => {
    const r = await runCli(['call', 'go.mesh.srv.greeter', 'Greeter.SayHello', '{"name":"F"}', `--proto_path=${PROTOS}`, '--proto_files=greeter.proto', '--output=json'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { message: string }).message, 'Hello F');
  });

  it('application/protobuf passes through as it is, both ways', async () => {
    const root = protobuf.loadSync(join(PROTOS, 'greeter.proto'));
    const Req = root.lookupType('helloworld.HelloRequest');
    const Reply = root.lookupType('helloworld.HelloReply');
    const body = Buffer.from(Req.encode(Req.create({ name: 'Pb', count: 5 })).finish());
    const res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: { 'content-type': 'application/protobuf' }, body });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['content-type'], 'application/protobuf');
    const reply = Reply.toObject(Reply.decode(res.bytes), { longs: String }) as { message: string; count: string };
    assert.equal(reply.message, 'Hello Pb');
    assert.equal(reply.count, '5');
  });

  it('the gateway (rpc handler) reaches it with JSON, load balanced over both nodes, forwarding headers as metadata', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: { ...JSON_CT, 'x-trace': 't1' }, body: '{"name":"Bo"}' });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['content-type'], 'application/json');
      const out = res.json<Record<string, string>>();
      assert.equal(out.message, 'Hello Bo');
      assert.equal(out.x_trace, 't1');
      seen.add(out.server!);
    }
    assert.deepEqual([...seen].sort(), ['a', 'b']);
  });

  it('a GET query becomes the request message', async () => {
    const res = await http('GET', `http://127.0.0.1:${apiPort}/greeter/say-hello?name=Q&count=7`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().message, 'Hello Q');
    assert.equal(res.json().count, '7');
  });

  it('/rpc reaches it', async () => {
    const res = await http('POST', `http://127.0.0.1:${apiPort}/rpc`, { headers: JSON_CT, body: JSON.stringify({ service: 'go.mesh.srv.greeter', endpoint: 'Greeter.SayHello', request: { name: 'Cy' } }) });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().message, 'Hello Cy');
  });

  it('/rpc on the gateway and the sidecar takes the full gRPC name, as mesh call does; one rule refuses the same bad names everywhere', async () => {
    for (const port of [apiPort, sidecarPort]) {
      for (const field of ['method', 'endpoint']) {
        const res = await http('POST', `http://127.0.0.1:${port}/rpc`, { headers: JSON_CT, body: JSON.stringify({ service: 'go.mesh.srv.greeter', [field]: 'helloworld.Greeter.SayHello', request: { name: 'Full' } }) });
        assert.equal(res.status, 200, `${port} ${field}: ${res.text}`);
        assert.equal(res.json().message, 'Hello Full');
      }
      for (const [bad, problem] of [
        ['SayHello', '"SayHello" is not Endpoint.Method'],
        ['helloworld..Greeter.SayHello', '"helloworld..Greeter.SayHello" is not Endpoint.Method'],
        ['Greeter.SayHello.', '"Greeter.SayHello." is not Endpoint.Method'],
        ['Greeter.Say-Hello', '"Greeter.Say-Hello" is not Endpoint.Method'],
        [`A.${'b'.repeat(200)}`, 'longer than 200 characters'],
      ]) {
        const res = await http('POST', `http://127.0.0.1:${port}/rpc`, { headers: JSON_CT, body: JSON.stringify({ service: 'go.mesh.srv.greeter', method: bad, request: {} }) });
        assert.equal(res.status, 400, res.text);
        const id = port === apiPort ? 'go.mesh.api' : 'go.mesh.sidecar';
        assert.equal(res.text, JSON.stringify({ id, code: 400, detail: `method: ${problem}`, status: 'Bad Request' }));
        const cli = await runCli(['call', 'go.mesh.srv.greeter', bad, '{}'], env);
        assert.equal(cli.code, 2);
        assert.equal(cli.stderr, `mesh: call: ${problem}\n`);
        assert.equal(cli.stdout, '');
      }
    }
  });

  it('the sidecar reaches it', async () => {
    const res = await http('POST', `http://127.0.0.1:${sidecarPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"name":"Di"}' });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().message, 'Hello Di');
  });

  it('a gRPC status becomes its HTTP status and error JSON (detail = the status details)', async () => {
    const res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/fail`, { headers: JSON_CT, body: '{"code":5,"details":"no such greeting"}' });
    assert.equal(res.status, 404);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.text, '{"id":"helloworld.Greeter","code":404,"detail":"no such greeting","status":"Not Found"}');
    const table: Array<[number, number, string]> = [
      [1, 499, 'Client Closed Request'],
      [2, 500, 'Internal Server Error'],
      [3, 400, 'Bad Request'],
      [6, 409, 'Conflict'],
      [7, 403, 'Forbidden'],
      [8, 429, 'Too Many Requests'],
      [9, 400, 'Bad Request'],
      [10, 409, 'Conflict'],
      [11, 400, 'Bad Request'],
      [12, 501, 'Not Implemented'],
      [13, 500, 'Internal Server Error'],
      [15, 500, 'Internal Server Error'],
      [16, 401, 'Unauthorized'],
      [4, 504, 'Gateway Timeout'],
      [14, 503, 'Service Unavailable'],
    ];
    for (const [code, status, text] of table) {
      const r = await http('POST', `http://127.0.0.1:${apiPort}/rpc`, { headers: JSON_CT, body: JSON.stringify({ service: 'go.mesh.srv.greeter', endpoint: 'Greeter.Fail', request: { code, details: `d${code}` } }) });
      assert.equal(r.status, status, `gRPC code ${code}: ${r.text}`);
      assert.equal(r.text, JSON.stringify({ id: 'helloworld.Greeter', code: status, detail: `d${code}`, status: text }), `gRPC code ${code}`);
    }
  });

  it('a status without details has its code name as detail', async () => {
    const res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/fail`, { headers: JSON_CT, body: '{"code":7}' });
    assert.equal(res.text, '{"id":"helloworld.Greeter","code":403,"detail":"PERMISSION_DENIED","status":"Forbidden"}');
  });

  it('a method not in the protos is 501; a streaming one called unary is 400; a field not in the message is 400', async () => {
    let res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/nope`, { headers: JSON_CT, body: '{}' });
    assert.equal(res.status, 501);
    assert.equal(res.text, '{"id":"go.mesh.api","code":501,"detail":"gRPC service helloworld.Greeter has no method Nope, and the node offers no reflection service","status":"Not Implemented"}');
    res = await http('POST', `http://127.0.0.1:${apiPort}/rpc`, { headers: JSON_CT, body: '{"service":"go.mesh.srv.greeter","endpoint":"Nothing.Here","request":{}}' });
    assert.equal(res.text, '{"id":"go.mesh.api","code":501,"detail":"no gRPC service Nothing, and the node offers no reflection service","status":"Not Implemented"}');
    res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/chat`, { headers: JSON_CT, body: '{}' });
    assert.equal(res.text, '{"id":"go.mesh.api","code":400,"detail":"/helloworld.Greeter/Chat is a bidi stream: open it as a stream (a WebSocket, Server-Sent Events, Mesh.stream)","status":"Bad Request"}');
    res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"nme":"x"}' });
    assert.equal(res.text, '{"id":"go.mesh.api","code":400,"detail":"/helloworld.Greeter/SayHello: nme: no such field in helloworld.HelloRequest","status":"Bad Request"}');
    res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"count":"many"}' });
    assert.equal(res.status, 400);
    assert.match(res.text, /count: must be an integer/);
    res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"mood":"SAD"}' });
    assert.equal(res.text, '{"id":"go.mesh.api","code":400,"detail":"/helloworld.Greeter/SayHello: mood: must be one of MOOD_UNSPECIFIED, HAPPY, GRUMPY","status":"Bad Request"}');
  });

  it('none of those 4xx/501 refusals count against the nodes', async () => {
    const stats = await http('GET', `http://127.0.0.1:${adminPort}/stats?filter=greeter.*ejections_enforced_total`);
    assert.match(stats.text, /cluster\.go\.mesh\.srv\.greeter\.outlier_detection\.ejections_enforced_total: 0/);
  });

  it('without --proto_path, the node\'s reflection service gives the messages', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await http('POST', `http://127.0.0.1:${barePort}/reflective/greeter/say-hello`, { headers: JSON_CT, body: '{"name":"Rf","count":"12345678901234567","mood":"GRUMPY"}' });
      assert.equal(res.status, 200, res.text);
      const out = res.json<Record<string, string>>();
      assert.equal(out.message, 'Hello Rf');
      assert.equal(out.count, '12345678901234567');
      assert.equal(out.mood, 'GRUMPY');
      assert.equal(out.server, 'r');
    }
    const res = await http('POST', `http://127.0.0.1:${barePort}/reflective/greeter/fail`, { headers: JSON_CT, body: '{"code":6,"details":"twice"}' });
    assert.equal(res.text, '{"id":"helloworld.Greeter","code":409,"detail":"twice","status":"Conflict"}');
  });

  it('without --proto_path and without reflection: 501, not counted against the node', async () => {
    const res = await http('POST', `http://127.0.0.1:${barePort}/greeter/greeter/say-hello`, { headers: JSON_CT, body: '{}' });
    assert.equal(res.status, 501);
    assert.equal(res.text, '{"id":"go.mesh.api","code":501,"detail":"Greeter.SayHello: no .proto files loaded for gRPC backends (--proto_path), and the node offers no reflection service","status":"Not Implemented"}');
    const again = await http('POST', `http://127.0.0.1:${barePort}/reflective/greeter/nope`, { headers: JSON_CT, body: '{}' });
    assert.equal(again.text, '{"id":"go.mesh.api","code":501,"detail":"gRPC service helloworld.Greeter has no method Nope (the node\'s reflection service)","status":"Not Implemented"}');
  });

  it('a slow method past --client_request_timeout is a 504 like any timed-out call', async () => {
    const res = await http('POST', `http://127.0.0.1:${slowPort}/greeter/slow`, { headers: JSON_CT, body: '{"ms":3000}' });
    assert.equal(res.status, 504);
    assert.match(res.text, /^\{"id":"go\.mesh\.api","code":504,"detail":"call go\.mesh\.srv\.greeter on 127\.0\.0\.1:\d+: timeout after 300ms","status":"Gateway Timeout"\}$/);
  });

  it('a gRPC node that is down: 502 like any node; with a live node beside it the call is retried there and the dead one ejected', async () => {
    const rpc = (service: string) => http('POST', `http://127.0.0.1:${apiPort}/rpc`, { headers: JSON_CT, body: JSON.stringify({ service, endpoint: 'Greeter.SayHello', request: { name: 'E' } }) });
    let res = await rpc('go.mesh.srv.down');
    assert.equal(res.status, 502, res.text);
    assert.match(res.text, new RegExp(`^\\{"id":"go\\.mesh\\.api","code":502,"detail":"call go\\.mesh\\.srv\\.down on 127\\.0\\.0\\.1:${deadPort}: connection failed: No connection established[^"]*","status":"Bad Gateway"\\}$`));
    for (let i = 0; i < 12; i++) {
      res = await rpc('go.mesh.srv.flaky');
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().server, 'a');
    }
    const stats = await waitFor(async () => {
      const s = await http('GET', `http://127.0.0.1:${adminPort}/stats?filter=flaky`);
      return /outlier_detection\.ejections_enforced_total: [1-9]/.test(s.text) ? s.text : undefined;
    });
    assert.match(stats, /cluster\.go\.mesh\.srv\.flaky\.upstream_cx_connect_fail: [1-9]|cluster\.go\.mesh\.srv\.flaky\.upstream_rq_retry: [1-9]/);
    const clusters = await http('GET', `http://127.0.0.1:${adminPort}/clusters`);
    assert.match(clusters.text, new RegExp(`go\\.mesh\\.srv\\.flaky::127\\.0\\.0\\.1:${deadPort}::health_flags::/failed_outlier_check`));
  });
});

describe('gRPC: bad .proto files and flags', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path };
  after(() => home.cleanup());

  it('a .proto with a syntax error stops the start: exit 1, file:line on stderr', async () => {
    const dir = join(home.path, 'protos');
    mkdirSync(join(dir, 'sub'), { recursive: true });
    writeFileSync(join(dir, 'ok.proto'), 'syntax = "proto3";\npackage ok;\nmessage A { string a = 1; }\n');
    writeFileSync(join(dir, 'sub/broken.proto'), 'syntax = "proto3";\npackage b;\n\nmessage B {\n  string name = 1\n  int32 x = 2;\n}\n');
    const r = await runCli(['api', `--proto_path=${dir}`, '--address=127.0.0.1:0', '--admin_address=off'], env);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^mesh: \.proto files: sub\/broken\.proto:6: illegal token 'int32'/m);
    const c = await runCli(['call', 'x', 'A.B', '{}', `--proto_path=${dir}`], env);
    assert.equal(c.code, 1);
    assert.match(c.stderr, /sub\/broken\.proto:6: /);
  });

  it('an unterminated string names the file too; a missing import and a missing directory are clear', async () => {
    const dir = join(home.path, 'protos2');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'a.proto'), 'syntax = "proto3";\nimport "b.proto";\nmessage A { string a = 1; }\n');
    writeFileSync(join(dir, 'b.proto'), 'syntax = "proto3";\n\noption go_package = "unterminated;\nmessage B {}\n');
    let r = await runCli(['call', 'x', 'A.B', '{}', `--proto_path=${dir}`, '--proto_files=a.proto'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^mesh: \.proto files: b\.proto:3: illegal string/m);
    writeFileSync(join(dir, 'b.proto'), 'syntax = "proto3";\nimport "missing.proto";\n');
    r = await runCli(['call', 'x', 'A.B', '{}', `--proto_path=${dir}`, '--proto_files=b.proto'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /missing\.proto/);
    r = await runCli(['call', 'x', 'A.B', '{}', `--proto_path=${join(dir, 'nope')}`], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--proto_path \S+nope: not a directory/);
    r = await runCli(['call', 'x', 'A.B', '{}', '--proto_files=a.proto'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--proto_files needs --proto_path/);
  });
});
