/**
 * Native gRPC and gRPC-Web calls in traces (docs/grpc.md, "Native gRPC through the gateway and
 * the sidecar"; docs/observability.md): `mesh api --enable_http2 --tracing=otlp` exports, to a real
 * OTLP receiver process (test/fixtures/otlp-receiver.ts), a client span per call with
 * OpenTelemetry's RPC attributes, child of the gateway's server span, in the client's trace; a
 * status other than OK makes it an error span; and the node (a plain @grpc/grpc-js server,
 * test/fixtures/grpc-greeter.ts, that prints the `traceparent` metadata it got) continues the
 * trace under that span.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { grpcWebFrame, grpcWebFrames, TRAILERS_FLAG } from '../../src/edge/handlers/grpc-web.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import type { ReceivedSpan } from '../fixtures/otlp-receiver.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const RECEIVER = join(ROOT, 'test/fixtures/otlp-receiver.ts');
const def = protoLoader.loadSync(join(ROOT, 'test/fixtures/grpc/greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const Greeter = (grpc.loadPackageDefinition(def) as any).helloworld.Greeter;
/** OTLP's numbers: SpanKind SERVER and CLIENT, Status ERROR. */
const SERVER = 2;
const CLIENT = 3;
const STATUS_ERROR = 2;

function unary(client: any, method: string, request: object, md: grpc.Metadata): Promise<grpc.ServiceError | null> {
  return new Promise((resolve) => client[method](request, md, (err: grpc.ServiceError | null) => resolve(err)));
}

describe('native gRPC and gRPC-Web calls in traces (mesh api --enable_http2 --tracing=otlp)', () => {
  const dir = tempDir('mesh-grpc-tracing-');
  let receiver: RunningProcess;
  let receiverBase = '';
  let node: RunningProcess;
  let registry: Registry;
  let gw: GatewayProcess;
  let client: any;

  const spansOf = async (traceId: string, count: number): Promise<ReceivedSpan[]> =>
    waitFor(async () => {
      const spans = ((await http('GET', `${receiverBase}/spans`)).json() as ReceivedSpan[]).filter((s) => s.traceId === traceId);
      return spans.length >= count ? spans : undefined;
    }, 20_000);
  /** The `traceparent` the node got for the n-th call shown to it. */
  const nodeParent = async (n: number): Promise<{ traceId: string; parent: string }> => {
    const line = await waitFor(() => node.output().match(/^traceparent n \S+$/gm)?.[n]);
    const m = /^traceparent n 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(line);
    assert.ok(m, line);
    return { traceId: m[1]!, parent: m[2]! };
  };

  before(async () => {
    receiver = startProcess(['--import', 'tsx', RECEIVER], {}, '');
    receiverBase = `http://127.0.0.1:${await receiver.waitForPort(/otlp receiver listening on port (\d+)/, 15_000)}`;
    node = startProcess(['--import', 'tsx', GREETER, '--label=n'], {}, '');
    const port = await node.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'n', address: '127.0.0.1', port, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] });
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--enable_http2', '--tracing=otlp', `--tracing_address=${receiverBase}/v1/traces`]);
    client = new Greeter(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await gw?.stop();
    await node?.stop('SIGKILL');
    await receiver?.stop('SIGKILL');
    await registry?.close();
    dir.cleanup();
  });

  it("a call is a client span with the RPC attributes, child of the gateway's server span; the node's parent is that span", async () => {
    const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const md = new grpc.Metadata();
    md.set('traceparent', `00-${trace}-00f067aa0ba902b7-01`);
    md.set('x-show', '1');
    assert.equal(await unary(client, 'SayHello', { name: 'T' }, md), null);
    const spans = await spansOf(trace, 2);
    const server = spans.find((s) => s.kind === SERVER);
    const call = spans.find((s) => s.kind === CLIENT);
    assert.ok(server && call, JSON.stringify(spans));
    assert.equal(server.parentSpanId, '00f067aa0ba902b7');
    assert.equal(call.parentSpanId, server.spanId);
    assert.equal(call.name, 'helloworld.Greeter/SayHello');
    assert.deepEqual(
      { system: call.attributes['rpc.system'], service: call.attributes['rpc.service'], method: call.attributes['rpc.method'], code: call.attributes['rpc.grpc.status_code'], server: call.attributes['server.address'] },
      { system: 'grpc', service: 'helloworld.Greeter', method: 'SayHello', code: 0, server: 'go.mesh.srv.greeter' },
    );
    assert.notEqual(call.status.code, STATUS_ERROR);
    assert.deepEqual(await nodeParent(0), { traceId: trace, parent: call.spanId });
  });

  it('a status other than OK is an error span with its code', async () => {
    const trace = '5bf92f3577b34da6a3ce929d0e0e4737';
    const md = new grpc.Metadata();
    md.set('traceparent', `00-${trace}-00f067aa0ba902b8-01`);
    const err = await unary(client, 'Fail', { code: grpc.status.NOT_FOUND, details: 'no such greeting' }, md);
    assert.equal(err?.code, grpc.status.NOT_FOUND);
    const call = (await spansOf(trace, 2)).find((s) => s.kind === CLIENT);
    assert.ok(call);
    assert.equal(call.name, 'helloworld.Greeter/Fail');
    assert.equal(call.attributes['rpc.grpc.status_code'], 5);
    assert.equal(call.attributes['error.type'], '5');
    assert.deepEqual(call.status, { code: STATUS_ERROR, message: 'NOT_FOUND' });
  });

  it('a gRPC-Web call (HTTP/1.1) is traced the same way, its traceparent header the parent', async () => {
    const trace = '6bf92f3577b34da6a3ce929d0e0e4738';
    // HelloRequest { name: "W" }: field 1, length 1.
    const res = await fetch(`${gw.url}/helloworld.Greeter/SayHello`, {
      method: 'POST',
      headers: { 'content-type': 'application/grpc-web+proto', 'x-grpc-web': '1', traceparent: `00-${trace}-00f067aa0ba902b9-01`, 'x-show': '1' },
      body: grpcWebFrame(0, Buffer.from([0x0a, 0x01, 0x57])),
    });
    assert.equal(res.status, 200);
    const frames = grpcWebFrames(Buffer.from(await res.arrayBuffer()));
    assert.match(frames.find((f) => f.flag === TRAILERS_FLAG)!.payload.toString('latin1'), /grpc-status:0/);
    const spans = await spansOf(trace, 2);
    const server = spans.find((s) => s.kind === SERVER);
    const call = spans.find((s) => s.kind === CLIENT);
    assert.ok(server && call, JSON.stringify(spans));
    assert.equal(server.parentSpanId, '00f067aa0ba902b9');
    assert.equal(call.parentSpanId, server.spanId);
    assert.equal(call.attributes['rpc.system'], 'grpc');
    assert.equal(call.attributes['rpc.grpc.status_code'], 0);
    assert.deepEqual(await nodeParent(1), { traceId: trace, parent: call.spanId });
  });
});
