/**
 * GRPCRoute documents in `--routes=FILE` at the gateway and the sidecar, and in a `mesh proxy`
 * listener's `route_file` (`http2: true`) (docs/routing.md,
 * "GRPCRoute"): a @grpc/grpc-js client calls helloworld.Greeter through the front, whose route
 * file sends each call by its method and metadata to a mesh service (and version), changes the
 * metadata the node gets and the headers the client gets, copies calls to a shadow service, and
 * answers UNAVAILABLE for a backend the registry does not have. A call no GRPCRoute matches goes
 * where it goes without the file; a changed file changes the routing. The nodes are @grpc/grpc-js
 * servers of this test, on loopback, that say who they are and what metadata they got.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';

const def = protoLoader.loadSync(join(ROOT, 'test/fixtures/grpc/greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const Greeter = (grpc.loadPackageDefinition(def) as any).helloworld.Greeter;

type Reply = { message: string; server: string; x_trace: string };
interface Answer {
  reply: Reply;
  headers: grpc.Metadata;
}

/** A node: answers SayHello and Slow with its label and the x-trace it got, and sends `x-internal` metadata; keeps each call's method and x-trace. */
async function node(label: string): Promise<{ port: number; calls: Array<{ method: string; trace: string }>; stop: () => Promise<void> }> {
  const calls: Array<{ method: string; trace: string }> = [];
  const server = new grpc.Server();
  const answer = (method: string) => (call: grpc.ServerUnaryCall<{ name: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
    const trace = String(call.metadata.get('x-trace')[0] ?? '');
    calls.push({ method, trace });
    const md = new grpc.Metadata();
    md.set('x-internal', 'secret');
    call.sendMetadata(md);
    cb(null, { message: `Hello ${call.request.name ?? ''}`, server: label, x_trace: trace });
  };
  server.addService(Greeter.service, { SayHello: answer('SayHello'), Slow: answer('Slow') });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  return { port, calls, stop: () => new Promise((resolve) => server.tryShutdown(() => resolve())) };
}

function unary(client: any, method: string, request: object, metadata = new grpc.Metadata()): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let headers = new grpc.Metadata();
    const call = client[method](request, metadata, (err: grpc.ServiceError | null, reply: Reply) => (err ? reject(err) : resolve({ reply, headers })));
    call.on('metadata', (md: grpc.Metadata) => (headers = md));
  });
}

function routes(canary: { v1: number; v2: number }, slow: boolean): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: greeter}
spec:
  rules:
    - name: tester
      matches:
        - method: {service: helloworld.Greeter, method: SayHello}
          headers: [{name: x-tester, value: ann}]
      backendRefs: [{name: go.mesh.srv.other}]
    - name: static
      matches:
        - method: {service: helloworld.Greeter, method: SayHello}
          headers: [{name: x-static, value: "yes"}]
      backendRefs: [{name: static-c}]
    - name: canary
      matches: [{method: {service: helloworld.Greeter, method: SayHello}}]
      backendRefs:
        - {name: go.mesh.srv.greeter, version: v1, weight: ${canary.v1}}
        - {name: go.mesh.srv.greeter, version: v2, weight: ${canary.v2}}
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier: {set: [{name: x-trace, value: routed}]}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {add: [{name: x-route, value: canary}], remove: [x-internal]}
        - type: RequestMirror
          requestMirror: {backendRef: {name: go.mesh.srv.shadow}}
${slow ? '    - name: slow\n      matches: [{method: {type: RegularExpression, method: "Sl.*"}}]\n      backendRefs: [{name: go.mesh.srv.other}]\n' : ''}    - name: nowhere
      matches: [{method: {service: pkg.Nobody}}]
      backendRefs: [{name: go.mesh.srv.nowhere}]
`;
}

interface Front {
  port: number;
  admin: string;
  proc: RunningProcess;
  stop(): Promise<unknown>;
}

const FRONTS: Record<string, (registryDir: string, file: string, cPort: number) => Promise<Front>> = {
  'mesh api': async (registryDir, file) => startGatewayProcess(registryDir, ['--enable_http2', `--routes=${file}`]),
  'mesh sidecar': async (registryDir, file) => {
    const sc = await startSidecar(registryDir, ['--enable_http2', `--routes=${file}`]);
    return { port: sc.port, admin: sc.admin, proc: sc.proc, stop: () => sc.stop() };
  },
  'mesh proxy': async (registryDir, file, cPort) => {
    const config = join(dirname(file), 'proxy.yaml');
    // A static cluster of the proxy's file is a backend too.
    writeFileSync(config, `listeners:\n  - {name: ingress, address: 127.0.0.1:0, http2: true, route_file: ${file}}\nclusters:\n  - {name: static-c, hosts: ["127.0.0.1:${cPort}"]}\n`);
    const proc = startProcess(['proxy', '-c', config, `--registry_address=${registryDir}`, '--admin_address=127.0.0.1:0', '--log_level=warning']);
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    const url = new URL(/mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!);
    const admin = /mesh proxy admin on (\S+)/.exec(proc.output())![1]!;
    return { port: Number(url.port), admin, proc, stop: () => proc.stop() };
  },
};

for (const [frontName, startFront] of Object.entries(FRONTS)) describe(`GRPCRoute through ${frontName}`, () => {
  const dir = tempDir('mesh-grpc-route-');
  const file = join(dir.path, 'routes.yaml');
  const nodes: Record<string, Awaited<ReturnType<typeof node>>> = {};
  let registry: Registry;
  let front: Front;
  let client: any;

  before(async () => {
    for (const label of ['a', 'b', 'c', 'shadow']) nodes[label] = await node(label);
    registry = createRegistry('local', join(dir.path, 'registry'));
    const at = (id: string, grpcService: boolean) => ({ id, address: '127.0.0.1', port: nodes[id]!.port, metadata: grpcService ? { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } : { protocol: 'grpc' } });
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [at('a', true)] });
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v2', metadata: {}, endpoints: [], nodes: [at('b', true)] });
    await registry.register({ name: 'go.mesh.srv.other', version: 'v1', metadata: {}, endpoints: [], nodes: [at('c', false)] });
    await registry.register({ name: 'go.mesh.srv.shadow', version: 'v1', metadata: {}, endpoints: [], nodes: [at('shadow', false)] });
    writeFileSync(file, routes({ v1: 0, v2: 1 }, true));
    front = await startFront(join(dir.path, 'registry'), file, nodes.c!.port);
    client = new Greeter(`127.0.0.1:${front.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await front?.stop();
    await Promise.all(Object.values(nodes).map((n) => n.stop()));
    await registry?.close();
    dir.cleanup();
  });

  it('sends a call by its method to the weighted backend\'s version, with the request and response header modifiers', async () => {
    for (let i = 0; i < 6; i++) {
      const { reply, headers } = await unary(client, 'SayHello', { name: 'Ann' });
      // Weight 0 for v1 (node a), 1 for v2 (node b).
      assert.equal(reply.server, 'b');
      assert.equal(reply.x_trace, 'routed');
      assert.deepEqual(headers.get('x-route'), ['canary']);
      assert.deepEqual(headers.get('x-internal'), []);
    }
    // The route wins over the service the call names.
    const md = new grpc.Metadata();
    md.set('mesh-service', 'go.mesh.srv.other');
    assert.equal((await unary(client, 'SayHello', { name: 'Ann' }, md)).reply.server, 'b');
  });

  it('sends a call by its metadata, or by a regular expression of its method, to another service', async () => {
    const md = new grpc.Metadata();
    md.set('x-tester', 'ann');
    const tester = await unary(client, 'SayHello', { name: 'Ann' }, md);
    assert.equal(tester.reply.server, 'c');
    // Not the canary rule's filters.
    assert.equal(tester.reply.x_trace, '');
    assert.deepEqual(tester.headers.get('x-internal'), ['secret']);
    assert.equal((await unary(client, 'Slow', { ms: 0 })).reply.server, 'c');
  });

  it('copies the calls of a rule with RequestMirror to the shadow service, with the modified metadata', async () => {
    const copies = await waitFor(() => (nodes.shadow!.calls.length >= 7 ? nodes.shadow!.calls : undefined));
    assert.deepEqual(new Set(copies.map((c) => `${c.method} ${c.trace}`)), new Set(['SayHello routed']));
    const stats = await waitFor(async () => {
      const text = (await http('GET', `${front.admin}/stats?filter=grpc_mirror`)).text;
      return /grpc_mirror\.sent: 7/.test(text) ? text : undefined;
    });
    assert.match(stats, /grpc_mirror\.dropped: 0/);
  });

  it(frontName === 'mesh proxy' ? 'sends a call to a static cluster of the proxy' : 'answers UNAVAILABLE for a backend that is no service of the registry', async () => {
    const md = new grpc.Metadata();
    md.set('x-static', 'yes');
    if (frontName === 'mesh proxy') return assert.equal((await unary(client, 'SayHello', { name: 'Ann' }, md)).reply.server, 'c');
    await assert.rejects(unary(client, 'SayHello', { name: 'Ann' }, md), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE && e.details === 'route greeter: service static-c: not found');
  });

  it('answers UNAVAILABLE for a backend the registry does not have', async () => {
    const Other = grpc.makeGenericClientConstructor({ Call: { path: '/pkg.Nobody/Call', requestStream: false, responseStream: false, requestSerialize: (x: Buffer) => x, requestDeserialize: (x: Buffer) => x, responseSerialize: (x: Buffer) => x, responseDeserialize: (x: Buffer) => x } }, 'Nobody');
    const other = new Other(`127.0.0.1:${front.port}`, grpc.credentials.createInsecure()) as any;
    try {
      await assert.rejects(
        new Promise((resolve, reject) => other.Call(Buffer.alloc(0), (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r)))),
        (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE && e.details === 'route greeter: service go.mesh.srv.nowhere: not found',
      );
    } finally {
      other.close();
    }
  });

  it('a changed file changes the routing; a call no GRPCRoute matches goes by its gRPC service', async () => {
    writeFileSync(file, routes({ v1: 1, v2: 0 }, false));
    await waitFor(async () => (await unary(client, 'SayHello', { name: 'Ann' })).reply.server === 'a', 15000);
    for (let i = 0; i < 4; i++) assert.equal((await unary(client, 'SayHello', { name: 'Ann' })).reply.server, 'a');
    if (frontName === 'mesh proxy') {
      // No rule for Slow now: the listener's own routes, as without GRPCRoutes (it has none: 404, which gRPC reads as UNIMPLEMENTED).
      await assert.rejects(unary(client, 'Slow', { ms: 0 }), (e: grpc.ServiceError) => e.code === grpc.status.UNIMPLEMENTED && e.details === 'Received HTTP status code 404');
      return;
    }
    // No rule for Slow now: the nodes that serve helloworld.Greeter (a and b), not the slow rule's c.
    for (let i = 0; i < 4; i++) assert.notEqual((await unary(client, 'Slow', { ms: 0 })).reply.server, 'c');
    const md = new grpc.Metadata();
    md.set('mesh-service', 'go.mesh.srv.other');
    assert.equal((await unary(client, 'Slow', { ms: 0 }, md)).reply.server, 'c');
  });
});

describe('GRPCRoute on a Gateway listener of mesh api', () => {
  const dir = tempDir('mesh-grpc-route-listener-');
  const file = join(dir.path, 'routes.yaml');
  const nodes: Record<string, Awaited<ReturnType<typeof node>>> = {};
  let registry: Registry;
  let gw: Awaited<ReturnType<typeof startGatewayProcess>>;
  let listener: URL;
  const clients: any[] = [];
  const clientOf = (port: string | number, authority?: string) => {
    const c = new Greeter(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), authority ? { 'grpc.default_authority': authority } : {});
    clients.push(c);
    return c;
  };

  before(async () => {
    for (const label of ['a', 'b']) nodes[label] = await node(label);
    registry = createRegistry('local', join(dir.path, 'registry'));
    for (const [label, version] of [['a', 'v1'], ['b', 'v2']] as const) {
      await registry.register({ name: 'go.mesh.srv.greeter', version, metadata: {}, endpoints: [], nodes: [{ id: label, address: '127.0.0.1', port: nodes[label]!.port, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] });
    }
    writeFileSync(file, `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web}
spec:
  listeners:
    - {name: grpc, port: 50051, protocol: HTTP, hostname: grpc.example.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: on-listener}
spec:
  parentRefs: [{name: web, sectionName: grpc}]
  rules:
    - matches: [{method: {service: helloworld.Greeter}}]
      backendRefs: [{name: go.mesh.srv.greeter, version: v2}]
      filters:
        - type: ResponseHeaderModifier
          responseHeaderModifier: {add: [{name: x-route, value: listener}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: own}
spec:
  rules:
    - matches: [{method: {service: helloworld.Greeter}}]
      backendRefs: [{name: go.mesh.srv.greeter, version: v1}]
`);
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--enable_http2', `--routes=${file}`, '--gateway_ports=50051=0']);
    listener = new URL(/mesh api Gateway port 50051 on (\S+) /.exec(gw.proc.output())![1]!);
  });

  after(async () => {
    for (const c of clients) c.close();
    await gw?.stop();
    await Promise.all(Object.values(nodes).map((n) => n.stop()));
    await registry?.close();
    dir.cleanup();
  });

  it("serves a native call the listener's GRPCRoute takes; the own listener keeps the routes without parentRefs", async () => {
    const { reply, headers } = await unary(clientOf(listener.port, 'grpc.example.com'), 'SayHello', { name: 'Ann' });
    assert.equal(reply.server, 'b');
    assert.deepEqual(headers.get('x-route'), ['listener']);
    const own = await unary(clientOf(gw.port), 'SayHello', { name: 'Ann' });
    assert.equal(own.reply.server, 'a');
    assert.deepEqual(own.headers.get('x-route'), []);
  });

  it('serves a gRPC-Web call over HTTP/1.1 the same way, by its Host', async () => {
    const method = Greeter.service.SayHello;
    const message = method.requestSerialize({ name: 'Web' }) as Buffer;
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
    frame.writeUInt32BE(message.length, 1);
    const res = await http('POST', `${listener.origin}/helloworld.Greeter/SayHello`, { headers: { host: 'grpc.example.com', 'content-type': 'application/grpc-web+proto' }, body: frame });
    assert.equal(res.status, 200);
    assert.equal(res.headers['x-route'], 'listener');
    const body = res.bytes;
    const reply = method.responseDeserialize(body.subarray(5, 5 + body.readUInt32BE(1))) as Reply;
    assert.equal(reply.server, 'b');
    assert.equal(reply.message, 'Hello Web');
  });

  it("a host the listener does not take is no route (404, which gRPC reads as UNIMPLEMENTED), and reaches no node", async () => {
    const before = nodes.a!.calls.length + nodes.b!.calls.length;
    await assert.rejects(unary(clientOf(listener.port, 'other.example.com'), 'SayHello', { name: 'Eve' }), (e: grpc.ServiceError) => e.code === grpc.status.UNIMPLEMENTED && e.details === 'Received HTTP status code 404');
    assert.equal(nodes.a!.calls.length + nodes.b!.calls.length, before);
  });
});
