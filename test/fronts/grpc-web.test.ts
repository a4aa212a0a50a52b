/**
 * gRPC-Web at the gateway (docs/grpc.md, "gRPC-Web: browsers calling gRPC services through the
 * gateway"): a real `mesh api` and a real gRPC node (@grpc/grpc-js, test/fixtures/grpc-greeter.ts),
 * called with raw gRPC-Web requests (fetch, HTTP/1.1; node:http2 for HTTP/2): unary and server
 * streaming in binary and -text modes, the node's status as the trailers frame or as headers, a
 * service nobody serves, a message past --max_body_size, malformed base64, stats and the access log.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:http2';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { grpcWebFrame, grpcWebFrames, trailersFrame, TRAILERS_FLAG } from '../../src/edge/handlers/grpc-web.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { PROTOS } from '../grpc-fixtures.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const root = protobuf.loadSync(join(PROTOS, 'greeter.proto'));
const HelloRequest = root.lookupType('helloworld.HelloRequest');
const HelloReply = root.lookupType('helloworld.HelloReply');
const CountRequest = root.lookupType('helloworld.CountRequest');
const FailRequest = root.lookupType('helloworld.FailRequest');
const LOG = ['--access_log=stdout', '--access_log_format=grpc-web=%GRPC_STATUS% cluster=%UPSTREAM_CLUSTER% path=%REQ(:PATH)% status=%RESPONSE_CODE%'];
const MAX = 1024;

/** One request message as a gRPC-Web body. */
function body(type: protobuf.Type, value: object): Buffer {
  return grpcWebFrame(0, type.encode(type.create(value)).finish());
}

/** The trailers frame's block as name → value. */
function trailersOf(payload: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of payload.toString('latin1').split('\r\n').filter((l) => l !== '')) {
    const at = line.indexOf(':');
    out[line.slice(0, at)] = line.slice(at + 1);
  }
  return out;
}

interface Answer {
  status: number;
  headers: Headers;
  messages: Array<Record<string, unknown>>;
  trailers?: Record<string, string>;
  raw: Buffer;
}

/** Splits an answer's body (decoded) into its messages and trailers. */
function parse(status: number, headers: Headers, raw: Buffer): Answer {
  const messages: Answer['messages'] = [];
  let trailers: Record<string, string> | undefined;
  for (const f of grpcWebFrames(raw)) {
    if (f.flag === TRAILERS_FLAG) trailers = trailersOf(f.payload);
    else messages.push(HelloReply.toObject(HelloReply.decode(f.payload)) as Record<string, unknown>);
  }
  return { status, headers, messages, trailers, raw };
}

describe('gRPC-Web through mesh api', () => {
  const dir = tempDir('mesh-grpc-web-');
  let node: RunningProcess;
  let registry: Registry;
  let gw: GatewayProcess;

  before(async () => {
    node = startProcess(['--import', 'tsx', GREETER, '--label=a'], {}, '');
    const port = await node.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: '127.0.0.1', port, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] });
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--enable_http2', `--max_body_size=${MAX}`, ...LOG]);
  });

  after(async () => {
    await gw?.stop();
    await node?.stop('SIGKILL');
    await registry?.close();
    dir.cleanup();
  });

  async function call(method: string, payload: Buffer | string, type = 'application/grpc-web+proto', extra: Record<string, string> = {}): Promise<Answer> {
    const res = await fetch(`${gw.url}/helloworld.Greeter/${method}`, { method: 'POST', headers: { 'content-type': type, 'x-grpc-web': '1', ...extra }, body: payload });
    const raw = Buffer.from(await res.arrayBuffer());
    return parse(res.status, res.headers, type.includes('-text') ? Buffer.from(raw.toString('latin1'), 'base64') : raw);
  }

  it('a unary call over HTTP/1.1: the message frame, then the trailers frame (binary)', async () => {
    const out = await call('SayHello', body(HelloRequest, { name: 'Ann' }), 'application/grpc-web+proto', { 'mesh-id': 'web-1' });
    assert.equal(out.status, 200);
    assert.equal(out.headers.get('content-type'), 'application/grpc-web+proto');
    // Exactly: one message frame, one trailers frame with the status.
    const frames = grpcWebFrames(out.raw);
    assert.deepEqual(frames.map((f) => f.flag), [0, TRAILERS_FLAG]);
    const { message, server, meshId } = out.messages[0]!;
    assert.deepEqual({ message, server, meshId }, { message: 'Hello Ann', server: 'a', meshId: 'web-1' });
    // The node's trailers, as HTTP/1 header lines.
    assert.deepEqual(frames[1]!.payload, Buffer.from('grpc-status:0\r\ngrpc-message:OK\r\n'));
    assert.deepEqual(out.raw.subarray(-5 - frames[1]!.payload.length), trailersFrame({ 'grpc-status': '0', 'grpc-message': 'OK' }));
  });

  it('application/grpc-web-text: a base64 request (in separately padded chunks) and a base64 answer', async () => {
    const req = body(HelloRequest, { name: 'Tex' });
    // Two chunks, each base64 on its own (the first padded): the gateway decodes them as one body.
    const text = req.subarray(0, 4).toString('base64') + req.subarray(4).toString('base64');
    assert.match(text, /=.+/, 'padding inside the body');
    const out = await call('SayHello', text, 'application/grpc-web-text', { accept: 'application/grpc-web-text' });
    assert.equal(out.headers.get('content-type'), 'application/grpc-web-text+proto');
    assert.equal(out.messages[0]?.message, 'Hello Tex');
    assert.equal(out.trailers?.['grpc-status'], '0');
  });

  it('server streaming: each message is sent as it comes, before the stream ends; a client that leaves cancels the node', async () => {
    const controller = new AbortController();
    const res = await fetch(`${gw.url}/helloworld.Greeter/Count`, { method: 'POST', headers: { 'content-type': 'application/grpc-web+proto' }, body: body(CountRequest, { name: 'Held', n: 1, hold: true }), signal: controller.signal });
    assert.equal(res.status, 200);
    // The node keeps the stream open after message 1: reading it proves the gateway did not wait for the end.
    const reader = res.body!.getReader();
    let got = Buffer.alloc(0);
    while (got.length < 5 || got.length < 5 + got.readUInt32BE(1)) {
      const { value, done } = await reader.read();
      assert.equal(done, false, 'the stream ended before message 1');
      got = Buffer.concat([got, value]);
    }
    const [first] = grpcWebFrames(got);
    assert.equal(first?.flag, 0);
    assert.equal(HelloReply.decode(first!.payload).toJSON().message, 'Hello Held #1');
    controller.abort();
    await node.waitForOutput(/cancelled Count Held/);
  });

  it('server streaming to the end, in -text mode: every message, then the status', async () => {
    const out = await call('Count', body(CountRequest, { name: 'Bo', n: 3 }).toString('base64'), 'application/grpc-web-text+proto');
    assert.deepEqual(out.messages.map((m) => m.message), ['Hello Bo #1', 'Hello Bo #2', 'Hello Bo #3']);
    assert.equal(out.trailers?.['grpc-status'], '0');
  });

  it("the node's error status after messages is the trailers frame; an error alone comes as headers", async () => {
    const streamed = await call('Count', body(CountRequest, { name: 'F', n: 1, failCode: 9, failDetails: 'not now' }));
    assert.deepEqual(streamed.messages.map((m) => m.message), ['Hello F #1']);
    assert.equal(streamed.trailers?.['grpc-status'], '9');
    assert.equal(streamed.trailers?.['grpc-message'], 'not%20now');
    const failed = await call('Fail', body(FailRequest, { code: 6, details: 'twice' }));
    assert.equal(failed.status, 200);
    assert.equal(failed.headers.get('grpc-status'), '6');
    assert.equal(failed.headers.get('grpc-message'), 'twice');
    assert.equal(failed.headers.get('content-type'), 'application/grpc-web+proto');
    assert.equal(failed.raw.length, 0);
  });

  it('refusals are gRPC statuses: a service nobody serves, a message past --max_body_size, base64 that is not', async () => {
    const res = await fetch(`${gw.url}/pkg.Nobody/Call`, { method: 'POST', headers: { 'content-type': 'application/grpc-web' }, body: grpcWebFrame(0, Buffer.alloc(0)) });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('grpc-status'), '12');
    assert.match(decodeURIComponent(res.headers.get('grpc-message') ?? ''), /^no mesh service serves pkg\.Nobody/);
    assert.equal((await res.arrayBuffer()).byteLength, 0);
    const big = await call('SayHello', body(HelloRequest, { name: 'x'.repeat(MAX + 1) }));
    assert.equal(big.headers.get('grpc-status'), '8');
    assert.equal(decodeURIComponent(big.headers.get('grpc-message') ?? ''), `a request message of ${MAX + 4} bytes is larger than ${MAX} bytes (--max_body_size)`);
    const bad = await call('SayHello', 'AAAA*AAA', 'application/grpc-web-text');
    assert.equal(bad.headers.get('grpc-status'), '3');
    assert.equal(decodeURIComponent(bad.headers.get('grpc-message') ?? ''), 'the request body is not base64 (application/grpc-web-text): "*AAA" at offset 4');
  });

  it('headers only the mesh sets, in any case or with _ for -, never reach the node as metadata (gRPC-Web over HTTP/1.1, native gRPC over h2c)', async () => {
    const forged = { 'Mesh-Peer-Identity': 'spiffe://mesh.local/svc/go.mesh.srv.admin', Mesh_Auth_Subject: 'root', 'MESH-AUTH-SCOPES': 'admin', 'x-trace': 'kept' };
    const seen = () => node.waitForOutput(/^metadata (\[.*\])$/m).then((line) => JSON.parse(line.slice('metadata '.length)) as string[]);
    const before = node.output().length;
    const web = await call('SayHello', body(HelloRequest, { name: 'show-metadata' }), 'application/grpc-web+proto', forged);
    assert.equal(web.trailers?.['grpc-status'], '0');
    const names = await seen();
    assert.ok(names.includes('x-trace'), `the node got: ${names.join(' ')}`);
    assert.deepEqual(names.filter((n) => /^mesh[-_](peer|auth)/.test(n)), []);
    // Native gRPC over h2c: the same headers as metadata.
    const session = connect(gw.url);
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/helloworld.Greeter/SayHello', 'content-type': 'application/grpc', te: 'trailers', 'mesh-peer-identity': forged['Mesh-Peer-Identity'], mesh_auth_subject: 'root', 'mesh-auth-scopes': 'admin', 'x-trace': 'kept' });
      const message = body(HelloRequest, { name: 'show-metadata' });
      stream.end(message);
      for await (const _ of stream) void _;
    } finally {
      session.close();
    }
    await waitFor(() => (node.output().slice(before).match(/^metadata /gm)?.length ?? 0) >= 2, 10_000);
    const lines = node.output().slice(before).match(/^metadata (\[.*\])$/gm)!;
    const native = JSON.parse(lines[1]!.slice('metadata '.length)) as string[];
    assert.ok(native.includes('x-trace'), `the node got: ${native.join(' ')}`);
    assert.deepEqual(native.filter((n) => /^mesh[-_](peer|auth)/.test(n)), []);
  });

  it('over HTTP/2 (h2c) as well', async () => {
    const session = connect(gw.url);
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/helloworld.Greeter/SayHello', 'content-type': 'application/grpc-web+proto', 'x-grpc-web': '1' });
      stream.end(body(HelloRequest, { name: 'H2' }));
      const chunks: Buffer[] = [];
      let headers: Record<string, unknown> = {};
      stream.on('response', (h) => (headers = h));
      for await (const c of stream) chunks.push(c as Buffer);
      assert.equal(headers[':status'], 200);
      assert.equal(headers['content-type'], 'application/grpc-web+proto');
      const out = parse(200, new Headers(), Buffer.concat(chunks));
      assert.equal(out.messages[0]?.message, 'Hello H2');
      assert.equal(out.trailers?.['grpc-status'], '0');
    } finally {
      session.close();
    }
  });

  it('counts calls per method and status, and logs their gRPC status, as native calls', async () => {
    const stats = await waitFor(async () => {
      const text = (await http('GET', `${gw.admin}/stats?filter=${encodeURIComponent('grpc\\.helloworld')}`)).text;
      return /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.Fail\.6: 1/.test(text) ? text : undefined;
    });
    assert.match(stats, /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.SayHello\.success: [3-9]/);
    assert.match(stats, /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.Count\.9: 1/);
    // Each line is written when its answer closed: wait for each (they need not come in order).
    for (const line of [
      /^grpc-web=6 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/Fail status=200$/m,
      /^grpc-web=12 cluster=- path=\/pkg\.Nobody\/Call status=200$/m,
      /^grpc-web=8 cluster=- path=\/helloworld\.Greeter\/SayHello status=200$/m,
      /^grpc-web=0 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/SayHello status=200$/m,
      /^grpc-web=9 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/Count status=200$/m,
    ]) {
      await waitFor(() => line.test(gw.proc.output()));
    }
  });
});
