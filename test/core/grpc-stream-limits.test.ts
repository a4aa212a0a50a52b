/**
 * gRPC streams through `Mesh.stream` against a plain @grpc/grpc-js server in this process: a
 * message over --max_body_size ends the stream with 413 (docs/protocol.md "Message size"), and
 * the per-cluster gauge upstream_rq_stream_active counts a stream while it is open.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Mesh } from '../../src/framework/mesh.js';
import { MeshError } from '../../src/base/errors.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { tempDir, waitFor } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';

describe('gRPC streams: the message size limit and the active-stream gauge', () => {
  const dir = tempDir('mesh-grpc-stream-limits-');
  let registry: Registry;
  let mesh: Mesh;
  let server: grpc.Server;

  before(async () => {
    const def = protoLoader.loadSync(join(PROTOS, 'greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { helloworld: { Greeter: { service: grpc.ServiceDefinition } } };
    server = new grpc.Server();
    server.addService(pkg.helloworld.Greeter.service, {
      Count: (call: grpc.ServerWritableStream<{ name: string; n: number; hold: boolean }, unknown>) => {
        for (let i = 1; i <= call.request.n; i++) call.write({ message: call.request.name });
        if (!call.request.hold) call.end();
      },
    });
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
    registry = createRegistry('local', dir.path);
    await registry.register({ name: 'go.mesh.srv.lim', version: 'latest', metadata: {}, endpoints: [], nodes: [{ id: 'l', address: '127.0.0.1', port, metadata: { protocol: 'grpc' } }] });
    mesh = new Mesh(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, `--proto_path=${PROTOS}`, '--max_body_size=1KiB', '--admin_address=off', '--log_level=error']).config), 'test');
  });
  after(async () => {
    await mesh?.close();
    await registry?.close();
    server?.forceShutdown();
    dir.cleanup();
  });

  it('a message over --max_body_size ends the stream with 413 (nothing of it passed on); a stream of small messages then passes', async () => {
    const got: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const m of mesh.stream<{ message: string }>('go.mesh.srv.lim', 'Greeter.Count', { name: 'x'.repeat(2000), n: 2 })) got.push(m.message);
      })(),
      (err: MeshError) => err.code === 413 && err.id === 'go.mesh.client' && err.detail === 'stream message of 2003 bytes is larger than 1024 bytes',
    );
    assert.deepEqual(got, []);
    const ok: string[] = [];
    for await (const m of mesh.stream<{ message: string }>('go.mesh.srv.lim', 'Greeter.Count', { name: 'small', n: 2 })) ok.push(m.message);
    assert.deepEqual(ok, ['small', 'small']);
  });

  it('upstream_rq_stream_active is 1 while a stream is open and 0 once it is closed', async () => {
    const active = () => mesh.runtime.stats.gauge('cluster.go.mesh.srv.lim.upstream_rq_stream_active').value;
    const it = mesh.stream<{ message: string }>('go.mesh.srv.lim', 'Greeter.Count', { name: 'held', n: 1, hold: true })[Symbol.asyncIterator]();
    assert.equal((await it.next()).value!.message, 'held');
    assert.equal(active(), 1);
    await it.return!();
    await waitFor(() => active() === 0);
  });
});
