/**
 * gRPC-Web on `mesh sidecar` and `mesh proxy` (docs/grpc.md, "gRPC-Web"): the gateway's gRPC-Web
 * (test/fronts/grpc-web.test.ts) on the other two fronts, with a real gRPC node (@grpc/grpc-js,
 * test/fixtures/grpc-greeter.ts) and raw gRPC-Web requests over HTTP/1.1 (fetch). The sidecar serves
 * it without --enable_http2 and answers its auth step as a gRPC status with CORS; a `mesh proxy`
 * listener serves the calls a GRPCRoute of its route file takes, the rest go where they went.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { grpcWebFrame, grpcWebFrames, trailersFrame, TRAILERS_FLAG } from '../../src/edge/handlers/grpc-web.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { PROTOS } from '../grpc-fixtures.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const root = protobuf.loadSync(join(PROTOS, 'greeter.proto'));
const HelloRequest = root.lookupType('helloworld.HelloRequest');
const HelloReply = root.lookupType('helloworld.HelloReply');
const CountRequest = root.lookupType('helloworld.CountRequest');
const LOG = ['--access_log=stdout', '--access_log_format=grpc-web=%GRPC_STATUS% cluster=%UPSTREAM_CLUSTER% path=%REQ(:PATH)%'];
const KEY = 'k-0123456789abcdef';
const ORIGIN = 'https://app.example.com';

function body(type: protobuf.Type, value: object): Buffer {
  return grpcWebFrame(0, type.encode(type.create(value)).finish());
}

interface Answer {
  status: number;
  headers: Headers;
  raw: Buffer;
  messages: string[];
  trailers?: string;
}

async function call(base: string, path: string, payload: Buffer | string, type = 'application/grpc-web+proto', extra: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': type, 'x-grpc-web': '1', ...extra }, body: payload });
  const got = Buffer.from(await res.arrayBuffer());
  const raw = type.includes('-text') ? Buffer.from(got.toString('latin1'), 'base64') : got;
  const messages: string[] = [];
  let trailers: string | undefined;
  for (const f of grpcWebFrames(raw)) {
    if (f.flag === TRAILERS_FLAG) trailers = f.payload.toString('latin1');
    else messages.push(String(HelloReply.toObject(HelloReply.decode(f.payload)).message));
  }
  return { status: res.status, headers: res.headers, raw, messages, trailers };
}

interface Front {
  base: string;
  admin: string;
  proc: RunningProcess;
  stop(): Promise<unknown>;
}

const GRPC_ROUTE = `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: greeter}
spec:
  rules:
    - matches: [{method: {service: helloworld.Greeter}}]
      backendRefs: [{name: go.mesh.srv.greeter}]
    - matches: [{method: {service: pkg.Nobody}}]
      backendRefs: [{name: go.mesh.srv.nowhere}]
`;

const FRONTS: Record<string, (registryDir: string, dir: string) => Promise<Front>> = {
  // No --enable_http2: gRPC-Web is HTTP/1.1 too.
  'mesh sidecar': async (registryDir, dir) => {
    writeFileSync(join(dir, 'keys.txt'), `${KEY} web read\n`);
    const sc = await startSidecar(registryDir, ['--auth=key', `--auth_keys=${join(dir, 'keys.txt')}`, `--cors=${ORIGIN}`, ...LOG]);
    return { base: sc.base, admin: sc.admin, proc: sc.proc, stop: () => sc.stop() };
  },
  'mesh proxy': async (registryDir, dir) => {
    writeFileSync(join(dir, 'routes.yaml'), GRPC_ROUTE);
    writeFileSync(join(dir, 'proxy.yaml'), `listeners:\n  - {name: ingress, address: 127.0.0.1:0, http2: true, route_file: ${join(dir, 'routes.yaml')}}\n`);
    const proc = startProcess(['proxy', '-c', join(dir, 'proxy.yaml'), `--registry_address=${registryDir}`, '--admin_address=127.0.0.1:0', '--log_level=warning', ...LOG]);
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    const base = /mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!.replace(/\/$/, '');
    const admin = /mesh proxy admin on (\S+)/.exec(proc.output())![1]!;
    return { base, admin, proc, stop: () => proc.stop() };
  },
};

for (const [frontName, startFront] of Object.entries(FRONTS)) describe(`gRPC-Web through ${frontName}`, () => {
  const dir = tempDir('mesh-grpc-web-front-');
  const auth = frontName === 'mesh sidecar' ? { authorization: `Bearer ${KEY}` } : {};
  let node: RunningProcess;
  let registry: Registry;
  let front: Front;

  before(async () => {
    node = startProcess(['--import', 'tsx', GREETER, '--label=a'], {}, '');
    const port = await node.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: '127.0.0.1', port, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] });
    front = await startFront(join(dir.path, 'registry'), dir.path);
  });

  after(async () => {
    await front?.stop();
    await node?.stop('SIGKILL');
    await registry?.close();
    dir.cleanup();
  });

  it('a unary call over HTTP/1.1: the message frame, then the trailers frame', async () => {
    const out = await call(front.base, '/helloworld.Greeter/SayHello', body(HelloRequest, { name: 'Ann' }), 'application/grpc-web+proto', auth);
    assert.equal(out.status, 200);
    assert.equal(out.headers.get('grpc-message'), null);
    assert.equal(out.headers.get('content-type'), 'application/grpc-web+proto');
    assert.deepEqual(grpcWebFrames(out.raw).map((f) => f.flag), [0, TRAILERS_FLAG]);
    assert.deepEqual(out.messages, ['Hello Ann']);
    assert.deepEqual(out.raw.subarray(-5 - Buffer.byteLength(out.trailers!)), trailersFrame({ 'grpc-status': '0', 'grpc-message': 'OK' }));
    await waitFor(() => /^grpc-web=0 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/SayHello$/m.test(front.proc.output()));
  });

  it('server streaming in -text mode: every message, then the status', async () => {
    const out = await call(front.base, '/helloworld.Greeter/Count', body(CountRequest, { name: 'Bo', n: 3 }).toString('base64'), 'application/grpc-web-text', auth);
    assert.equal(out.headers.get('content-type'), 'application/grpc-web-text+proto');
    assert.deepEqual(out.messages, ['Hello Bo #1', 'Hello Bo #2', 'Hello Bo #3']);
    assert.equal(out.trailers, 'grpc-status:0\r\ngrpc-message:OK\r\n');
  });

  it('attacker: headers only the mesh sets, in any case or with _ for -, never reach the node as metadata', async () => {
    const before = node.output().length;
    const forged = { 'Mesh-Peer-Identity': 'spiffe://mesh.local/svc/go.mesh.srv.admin', Mesh_Auth_Subject: 'root', 'MESH-AUTH-SCOPES': 'admin', 'x-trace': 'kept' };
    const out = await call(front.base, '/helloworld.Greeter/SayHello', body(HelloRequest, { name: 'show-metadata' }), 'application/grpc-web+proto', { ...auth, ...forged });
    assert.equal(out.trailers, 'grpc-status:0\r\ngrpc-message:OK\r\n');
    const line = await waitFor(() => /^metadata (\[.*\])$/m.exec(node.output().slice(before))?.[1]);
    const names = JSON.parse(line) as string[];
    assert.ok(names.includes('x-trace'), `the node got: ${names.join(' ')}`);
    // No underscore spelling and no peer identity ever; the sidecar's auth step sets Mesh-Auth-* itself from the key it verified.
    const mine = frontName === 'mesh sidecar' ? /^mesh_|^mesh-peer/ : /^mesh[-_](peer|auth)/;
    assert.deepEqual(names.filter((n) => mine.test(n)), []);
  });

  it('a service that cannot be called is a gRPC status in headers, never error JSON', async () => {
    const out = await call(front.base, '/pkg.Nobody/Call', grpcWebFrame(0, Buffer.alloc(0)), 'application/grpc-web+proto', auth);
    assert.equal(out.status, 200);
    assert.equal(out.raw.length, 0);
    if (frontName === 'mesh proxy') {
      assert.equal(out.headers.get('grpc-status'), '14');
      assert.equal(decodeURIComponent(out.headers.get('grpc-message') ?? ''), 'route greeter: service go.mesh.srv.nowhere: not found');
    } else {
      assert.equal(out.headers.get('grpc-status'), '12');
      assert.match(decodeURIComponent(out.headers.get('grpc-message') ?? ''), /^no mesh service serves pkg\.Nobody/);
    }
  });

  if (frontName === 'mesh sidecar') {
    it('the auth step refuses a call as a gRPC status with CORS headers, and no node is asked', async () => {
      const calls = async () => (await http('GET', `${front.admin}/stats?filter=${encodeURIComponent('grpc\\.helloworld\\.Greeter\\.SayHello\\.success')}`)).text;
      const before = await calls();
      const out = await call(front.base, '/helloworld.Greeter/SayHello', body(HelloRequest, { name: 'Eve' }), 'application/grpc-web+proto', { origin: ORIGIN });
      assert.equal(out.status, 200);
      assert.equal(out.headers.get('grpc-status'), '16');
      assert.equal(out.headers.get('content-type'), 'application/grpc-web+proto');
      assert.equal(out.headers.get('access-control-allow-origin'), ORIGIN);
      assert.equal(out.headers.get('access-control-expose-headers'), 'Retry-After, RateLimit, RateLimit-Policy, Grpc-Status, Grpc-Message');
      assert.equal(out.raw.length, 0);
      assert.match(before, /SayHello\.success: [1-9]/);
      assert.equal(await calls(), before);
    });
  } else {
    it('a call no GRPCRoute takes goes where it went: no route on this listener (404 error JSON)', async () => {
      const res = await fetch(`${front.base}/other.Service/Call`, { method: 'POST', headers: { 'content-type': 'application/grpc-web+proto' }, body: grpcWebFrame(0, Buffer.alloc(0)) });
      assert.equal(res.status, 404);
      assert.equal((await res.json() as { id: string }).id, 'go.mesh.proxy');
    });
  }
});
