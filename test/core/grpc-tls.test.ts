/**
 * TLS to gRPC backends and mutual TLS of gRPC-serving framework services
 * (src/core/transport/grpc/credentials.ts), with real @grpc/grpc-js servers on loopback and
 * certificates made by openssl (test/fixtures/pki.ts):
 * - a node outside the mesh with `tls=true` is verified against --grpc_tls_ca_file's roots and
 *   its host name (`tls_server_name`); another CA's certificate is refused;
 * - a node with `mtls=true` is called with the workload certificate, and must present the SPIFFE
 *   ID of the service called: a wrong identity, or another CA, gets no request;
 * - under --mtls=strict a plain node is not called;
 * - a framework gRPC server under --mtls=strict refuses a caller without a mesh certificate, and
 *   a renewed certificate applies to the next connection.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { join } from 'node:path';
import { connect, type PeerCertificate } from 'node:tls';
import { GrpcTransport } from '../../src/core/transport/grpc/transport.js';
import { TransportError, type RpcRequest } from '../../src/core/transport/rpc.js';
import { loadProtos } from '../../src/core/transport/grpc/protos.js';
import { GrpcServer } from '../../src/framework/server/grpc-server.js';
import type { UpstreamTarget } from '../../src/core/upstream/types.js';
import { makePki, testWorkloadTls, type Pki, type TestCa } from '../fixtures/pki.js';
import { PROTOS } from '../grpc-fixtures.js';

const def = protoLoader.loadSync(join(PROTOS, 'greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const pkg = grpc.loadPackageDefinition(def) as unknown as { helloworld: { Greeter: { service: grpc.ServiceDefinition } } };
const schema = loadProtos({ paths: [PROTOS] });

/** A plain @grpc/grpc-js greeter with these credentials; counts the calls it answered. */
async function greeter(credentials: grpc.ServerCredentials): Promise<{ port: number; calls: () => number; stop: () => void }> {
  const server = new grpc.Server();
  let calls = 0;
  server.addService(pkg.helloworld.Greeter.service, {
    SayHello: (call: grpc.ServerUnaryCall<{ name: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      calls++;
      cb(null, { message: `Hello ${call.request.name}` });
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials, (err, p) => (err ? reject(err) : resolve(p))));
  return { port, calls: () => calls, stop: () => server.forceShutdown() };
}

const always = <T>(v: T) => () => v;

const target = (port: number, metadata: Record<string, string>): UpstreamTarget =>
  ({ key: `127.0.0.1:${port}`, address: '127.0.0.1', port, nodeId: `n${port}`, metadata: { protocol: 'grpc', ...metadata } }) as unknown as UpstreamTarget;

const request = (service: string, name: string): RpcRequest => ({
  service,
  endpoint: 'helloworld.Greeter.SayHello',
  id: name,
  contentType: 'application/json',
  body: Buffer.from(JSON.stringify({ name })),
  timeoutMs: 5000,
});

async function refusal(p: Promise<unknown>): Promise<TransportError> {
  const err = await p.then(
    () => assert.fail('the call went through'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof TransportError, String(err));
  return err;
}

describe('gRPC: TLS to nodes outside the mesh, mutual TLS to mesh nodes', () => {
  let pki: Pki;
  let mesh: TestCa;
  let other: TestCa;
  before(() => {
    pki = makePki();
    mesh = pki.ca('mesh-root');
    other = pki.ca('other-root');
  });
  after(() => pki.cleanup());

  it('tls=true: verified against the given roots and tls_server_name; a certificate of another CA is refused', async () => {
    const leaf = other.leaf('outside', undefined, ['greeter.internal']);
    const server = await greeter(grpc.ServerCredentials.createSsl(null, [{ private_key: Buffer.from(leaf.key), cert_chain: Buffer.from(leaf.cert) }]));
    const meta = { tls: 'true', tls_server_name: 'greeter.internal' };
    const trusting = new GrpcTransport({ schema, reflection: false, tlsRoots: Buffer.from(other.cert) });
    const wrongRoots = new GrpcTransport({ schema, reflection: false, tlsRoots: Buffer.from(mesh.cert) });
    try {
      const ok = await trusting.senderFor(target(server.port, meta))!(request('go.mesh.srv.outside', 'Ann'), {});
      assert.equal(ok.status, 200);
      assert.equal(JSON.parse(ok.body.toString()).message, 'Hello Ann');
      const refused = await wrongRoots.senderFor(target(server.port, meta))!(request('go.mesh.srv.outside', 'Bob'), {}).then(
        () => assert.fail('the call went through'),
        (e: unknown) => e,
      );
      assert.ok(refused instanceof TransportError, String(refused));
      assert.equal(server.calls(), 1);
    } finally {
      trusting.close();
      wrongRoots.close();
      server.stop();
    }
  });

  it('mtls=true: the node must present the SPIFFE ID of the service called; another identity or CA gets no request', async () => {
    const caller = testWorkloadTls('permissive', mesh.leaf('mesh.api'), [mesh.cert]);
    const serve = (leaf: { cert: string; key: string }) =>
      greeter(grpc.ServerCredentials.createSsl(Buffer.from(mesh.cert), [{ private_key: Buffer.from(leaf.key), cert_chain: Buffer.from(leaf.cert) }], true));
    const right = await serve(mesh.leaf('go.mesh.srv.greeter'));
    const impostor = await serve(mesh.leaf('go.mesh.srv.other'));
    const foreign = await serve(other.leaf('go.mesh.srv.greeter'));
    const transport = new GrpcTransport({ schema, reflection: false, workload: () => caller });
    try {
      const ok = await transport.senderFor(target(right.port, { mtls: 'true' }))!(request('go.mesh.srv.greeter', 'Ann'), {});
      assert.equal(ok.status, 200, ok.body.toString());
      const wrong = await refusal(transport.senderFor(target(impostor.port, { mtls: 'true' }))!(request('go.mesh.srv.greeter', 'Eve'), {}));
      assert.notEqual(wrong.outcome.kind, 'response');
      await refusal(transport.senderFor(target(foreign.port, { mtls: 'true' }))!(request('go.mesh.srv.greeter', 'Mallory'), {}));
      assert.equal(impostor.calls(), 0);
      assert.equal(foreign.calls(), 0);
      assert.equal(right.calls(), 1);
    } finally {
      transport.close();
      for (const s of [right, impostor, foreign]) s.stop();
    }
  });

  it('--mtls=strict: a node without mtls=true is not called (a connect failure, nothing sent)', async () => {
    const server = await greeter(grpc.ServerCredentials.createInsecure());
    const transport = new GrpcTransport({ schema, reflection: false, workload: always(testWorkloadTls('strict', mesh.leaf('mesh.api'), [mesh.cert])) });
    try {
      const err = await refusal(transport.senderFor(target(server.port, {}))!(request('go.mesh.srv.plain', 'Ann'), {}));
      assert.equal(err.outcome.kind, 'connect_failure');
      assert.match(err.message, /does not serve mutual TLS/);
      assert.equal(server.calls(), 0);
    } finally {
      transport.close();
      server.stop();
    }
  });

  it('a framework gRPC server under --mtls=strict: mesh callers only; a renewed certificate serves the next connection', async () => {
    const first = mesh.leaf('go.mesh.srv.greeter');
    const workload = testWorkloadTls('strict', first, [mesh.cert]);
    const server = new GrpcServer(
      { service: 'go.mesh.srv.greeter', schema, drainTimeoutMs: 1000, maxBodyBytes: 1 << 20, workload },
      [{ name: 'helloworld.Greeter.SayHello', handler: async (req: unknown) => ({ message: `Hi ${(req as { name: string }).name}` }) } as never],
    );
    const port = await server.listen('127.0.0.1', 0);
    assert.equal(server.mutualTls, true);
    const caller = new GrpcTransport({ schema, reflection: false, workload: always(testWorkloadTls('strict', mesh.leaf('mesh.api'), [mesh.cert])) });
    const peerSerial = () =>
      new Promise<string>((resolve, reject) => {
        const leaf = mesh.leaf('mesh.cli');
        const s = connect({ host: '127.0.0.1', port, ca: mesh.cert, cert: leaf.cert, key: leaf.key, ALPNProtocols: ['h2'], rejectUnauthorized: false }, () => {
          resolve((s.getPeerCertificate() as PeerCertificate).serialNumber);
          s.destroy();
        });
        s.on('error', reject);
      });
    try {
      const ok = await caller.senderFor(target(port, { mtls: 'true' }))!(request('go.mesh.srv.greeter', 'Ann'), {});
      assert.equal(ok.status, 200, ok.body.toString());
      assert.equal(JSON.parse(ok.body.toString()).message, 'Hi Ann');
      // No client certificate: the handshake fails.
      const plainTls = await new Promise<string>((resolve) => {
        const s = connect({ host: '127.0.0.1', port, ca: mesh.cert, ALPNProtocols: ['h2'], rejectUnauthorized: false }, () => {
          s.once('data', () => resolve('data'));
          s.once('close', () => resolve('closed'));
        });
        s.on('error', (e: Error) => resolve(`error: ${e.message}`));
      });
      assert.notEqual(plainTls, 'data');
      // A plaintext gRPC caller: no answer.
      const plain = new GrpcTransport({ schema, reflection: false });
      await refusal(plain.senderFor(target(port, {}))!(request('go.mesh.srv.greeter', 'Plain'), {}));
      plain.close();
      assert.equal((await peerSerial()).toUpperCase(), first.serial.padStart(first.serial.length + (first.serial.length % 2), '0'));
      const renewed = mesh.leaf('go.mesh.srv.greeter');
      workload.use(renewed);
      assert.equal((await peerSerial()).toUpperCase(), renewed.serial.padStart(renewed.serial.length + (renewed.serial.length % 2), '0'));
    } finally {
      caller.close();
      await server.close();
    }
  });
});
