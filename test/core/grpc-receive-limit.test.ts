/**
 * A gRPC answer over the transport's receive limit is the node's fault, like an HTTP node's body
 * over the limit: the attempt fails as a reset (the client's 502, counted against the host), never
 * the node's RESOURCE_EXHAUSTED status (429, "slow down"). The gRPC transport in this process,
 * with a 1 KiB limit, against the plain grpc-js greeter (test/fixtures/grpc-greeter.ts) on loopback.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { GrpcTransport } from '../../src/core/transport/grpc/transport.js';
import { loadProtos } from '../../src/core/transport/grpc/protos.js';
import { TransportError, type RpcRequest } from '../../src/core/transport/rpc.js';
import type { UpstreamTarget } from '../../src/core/upstream/types.js';
import { startProcess, ROOT, type RunningProcess } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');

describe('gRPC: an answer over the receive limit', () => {
  let greeter: RunningProcess;
  let target: UpstreamTarget;
  const transport = new GrpcTransport({ schema: loadProtos({ paths: [PROTOS] }), maxResponseBytes: 1024, reflection: false });

  before(async () => {
    greeter = startProcess(['--import', 'tsx', GREETER, '--label=big'], {}, '');
    const port = await greeter.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    target = { key: `127.0.0.1:${port}`, address: '127.0.0.1', port, nodeId: 'big', metadata: { protocol: 'grpc' } } as unknown as UpstreamTarget;
  });
  after(async () => {
    transport.close();
    await greeter?.stop('SIGKILL');
  });

  const sayHello = (name: string) => {
    const request: RpcRequest = { service: 'go.mesh.srv.greeter', endpoint: 'Greeter.SayHello', id: 'rl', contentType: 'application/json', body: Buffer.from(JSON.stringify({ name })), timeoutMs: 5000 };
    return transport.senderFor(target)!(request);
  };

  it('under the limit: 200', async () => {
    const r = await sayHello('small');
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body.toString()).message, 'Hello small');
  });

  it('over the limit: a reset naming the limit (the client answers 502), not a 429', async () => {
    await assert.rejects(sayHello('x'.repeat(2000)), (err: unknown) => {
      assert.ok(err instanceof TransportError, String(err));
      assert.deepEqual(err.outcome, { kind: 'reset' });
      assert.match(err.message, /^response larger than the receive limit: Received message larger than max \(\d+ vs\.? 1024\)$/);
      return true;
    });
  });
});
