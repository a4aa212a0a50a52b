/**
 * Native gRPC through the gateway and the sidecar (`--enable_http2`, docs/grpc.md): gRPC clients in two
 * languages (@grpc/grpc-js, and Python's grpcio as a team's app would be) point their channel at
 * the gateway and call `helloworld.Greeter/...`; the gateway finds the mesh service in the
 * registry (the nodes' `grpc_service`, or `:authority`, or `mesh-service`), balances each call over
 * its nodes (plain @grpc/grpc-js servers, test/fixtures/grpc-greeter.ts) and passes messages,
 * metadata, trailers and status through. Stats per service, method and status; a service nobody
 * serves; auth refusals as gRPC statuses.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { PYTHON, pythonStubs } from '../grpc-fixtures.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const PY_CLIENT = join(ROOT, 'test/fixtures/grpc-python/greeter_client.py');
const def = protoLoader.loadSync(join(ROOT, 'test/fixtures/grpc/greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const Greeter = (grpc.loadPackageDefinition(def) as any).helloworld.Greeter;

type Reply = { message: string; server: string; mesh_id: string; x_trace: string };

function unary(client: any, method: string, request: object, metadata = new grpc.Metadata()): Promise<Reply> {
  return new Promise((resolve, reject) => client[method](request, metadata, (err: grpc.ServiceError | null, reply: Reply) => (err ? reject(err) : resolve(reply))));
}

interface Front {
  port: number;
  admin: string;
  proc: RunningProcess;
  stop(): Promise<unknown>;
}

/** Each call's gRPC status in the access log (stdout). */
const LOG = ['--access_log=stdout', '--access_log_format=grpc=%GRPC_STATUS% cluster=%UPSTREAM_CLUSTER% path=%REQ(:PATH)%'];

const FRONTS: Record<string, (registryDir: string) => Promise<Front>> = {
  'mesh api': async (registryDir) => startGatewayProcess(registryDir, ['--enable_http2', ...LOG]),
  'mesh sidecar': async (registryDir) => {
    const sc = await startSidecar(registryDir, ['--enable_http2', ...LOG]);
    return { port: Number(new URL(sc.base).port), admin: sc.admin, proc: sc.proc, stop: () => sc.stop() };
  },
};

for (const [frontName, startFront] of Object.entries(FRONTS)) describe(`native gRPC through ${frontName} --enable_http2`, () => {
  const dir = tempDir('mesh-grpc-native-');
  const stubs = tempDir('mesh-pystubs-');
  let a: RunningProcess;
  let b: RunningProcess;
  let registry: Registry;
  let gw: Front;
  let client: any;
  let python = false;

  before(async () => {
    python = pythonStubs(stubs.path);
    a = startProcess(['--import', 'tsx', GREETER, '--label=a'], {}, '');
    b = startProcess(['--import', 'tsx', GREETER, '--label=b'], {}, '');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [pa, pb] = await Promise.all([a.waitForPort(re), b.waitForPort(re)]);
    registry = createRegistry('local', join(dir.path, 'registry'));
    const node = (id: string, port: number) => ({ id, address: '127.0.0.1', port, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } });
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [node('a', pa), node('b', pb)] });
    // Another mesh service of the same gRPC service: reached by naming it.
    await registry.register({ name: 'go.mesh.srv.greeter-b', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'b', address: '127.0.0.1', port: pb, metadata: { protocol: 'grpc' } }] });
    gw = await startFront(join(dir.path, 'registry'));
    client = new Greeter(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await gw?.stop();
    await Promise.all([a, b].map((p) => p?.stop('SIGKILL')));
    await registry?.close();
    dir.cleanup();
    stubs.cleanup();
  });

  it('a grpc-js channel at the gateway calls the service by its gRPC name, each call balanced', async () => {
    const md = new grpc.Metadata();
    md.set('mesh-id', 'native-1');
    const reply = await unary(client, 'SayHello', { name: 'Ann' }, md);
    assert.equal(reply.message, 'Hello Ann');
    assert.equal(reply.mesh_id, 'native-1');
    const servers = new Set<string>();
    for (let i = 0; i < 10; i++) servers.add((await unary(client, 'SayHello', { name: 'x' })).server);
    assert.deepEqual([...servers].sort(), ['a', 'b']);
  });

  it('passes streams both ways and the node\'s status', async () => {
    const got: string[] = [];
    const count = client.Count({ name: 'Bo', n: 3 });
    count.on('data', (r: Reply) => got.push(r.message));
    await once(count, 'end');
    assert.deepEqual(got, ['Hello Bo #1', 'Hello Bo #2', 'Hello Bo #3']);
    const chat = client.Chat();
    const echoes: string[] = [];
    chat.on('data', (r: Reply) => {
      echoes.push(r.message);
      chat.end();
    });
    chat.write({ name: 'hi' });
    await once(chat, 'end');
    assert.deepEqual(echoes, ['Hello hi']);
    await assert.rejects(unary(client, 'Fail', { code: grpc.status.ALREADY_EXISTS, details: 'twice' }), (e: grpc.ServiceError) => e.code === grpc.status.ALREADY_EXISTS && e.details === 'twice');
  });

  it('names the service by mesh-service metadata or :authority', async (t) => {
    const md = new grpc.Metadata();
    md.set('mesh-service', 'go.mesh.srv.greeter-b');
    for (let i = 0; i < 4; i++) assert.equal((await unary(client, 'SayHello', { name: 'x' }, md)).server, 'b');
    // The sidecar answers only its own host names: an :authority that names a service is refused there (its Host check).
    if (frontName === 'mesh sidecar') return t.diagnostic('the sidecar refuses a foreign :authority (its Host check): not asked');
    const byAuthority = new Greeter(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure(), { 'grpc.default_authority': 'go.mesh.srv.greeter-b' });
    try {
      for (let i = 0; i < 4; i++) assert.equal((await unary(byAuthority, 'SayHello', { name: 'x' })).server, 'b');
    } finally {
      byAuthority.close();
    }
  });

  it('answers UNIMPLEMENTED for a gRPC service no mesh service serves', async () => {
    const Other = grpc.makeGenericClientConstructor({ Call: { path: '/pkg.Nobody/Call', requestStream: false, responseStream: false, requestSerialize: (x: Buffer) => x, requestDeserialize: (x: Buffer) => x, responseSerialize: (x: Buffer) => x, responseDeserialize: (x: Buffer) => x } }, 'Nobody');
    const other = new Other(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure()) as any;
    try {
      await assert.rejects(
        new Promise((resolve, reject) => other.Call(Buffer.alloc(0), (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r)))),
        (e: grpc.ServiceError) => e.code === grpc.status.UNIMPLEMENTED && /no mesh service serves pkg\.Nobody/.test(e.details),
      );
    } finally {
      other.close();
    }
  });

  it('counts calls per service, method and status, as Envoy names them', async () => {
    const stats = await waitFor(async () => {
      const text = (await http('GET', `${gw.admin}/stats?filter=${encodeURIComponent('grpc\\.helloworld')}`)).text;
      return /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.Fail\.6: 1/.test(text) ? text : undefined;
    });
    assert.match(stats, /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.SayHello\.success: [1-9]/);
    assert.match(stats, /cluster\.go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.Fail\.failure: 1/);
    await waitFor(() => /^grpc=6 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/Fail$/m.test(gw.proc.output()));
    assert.match(gw.proc.output(), /^grpc=0 cluster=go\.mesh\.srv\.greeter path=\/helloworld\.Greeter\/SayHello$/m);
    await waitFor(() => /^grpc=12 cluster=- path=\/pkg\.Nobody\/Call$/m.test(gw.proc.output()));
    assert.match((await http('GET', `${gw.admin}/stats?filter=downstream_cx_http2_total`)).text, /http\.(gateway|sidecar)\.downstream_cx_http2_total: [1-9]/);
  });

  it("Python's grpcio channel at the gateway calls unary and streaming methods", (t) => {
    if (!python) return t.skip('no Python grpc');
    const py = (method: string, json: string) => {
      const r = spawnSync(PYTHON, [PY_CLIENT, stubs.path, `127.0.0.1:${gw.port}`, method, json], { encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 0, r.stderr);
      return r.stdout.trim();
    };
    const hello = JSON.parse(py('SayHello', '{"name":"Py"}')) as Reply;
    assert.equal(hello.message, 'Hello Py');
    assert.equal(hello.x_trace, 'from-python');
    assert.equal(py('Fail', '{"code":5,"details":"gone"}'), 'status NOT_FOUND gone');
    const lines = py('Count', '{"name":"Py","n":2}').split('\n');
    assert.deepEqual(lines.map((l) => (l.startsWith('{') ? (JSON.parse(l) as Reply).message : l)), ['Hello Py #1', 'Hello Py #2', 'status OK']);
  });
});
