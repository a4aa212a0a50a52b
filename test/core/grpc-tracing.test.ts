/**
 * Server spans of a framework service serving gRPC (`--server_protocol=grpc --tracing=otlp`,
 * docs/grpc.md "Stats and tracing"): an @grpc/grpc-js client calls it with a `traceparent` in its
 * metadata; a real OTLP receiver process (test/fixtures/otlp-receiver.ts) gets one server span per
 * call, in the caller's trace and child of its span, with the gRPC status (an error status for an
 * error call, a cancelled stream).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTOS } from '../grpc-fixtures.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import type { ReceivedSpan } from '../fixtures/otlp-receiver.js';

const SERVICE = join(ROOT, 'test/fixtures/grpc-framework-service.ts');
const RECEIVER = join(ROOT, 'test/fixtures/otlp-receiver.ts');
const SERVICE_NAME = 'go.mesh.srv.fwgreeter';
/** OTLP's numbers: SpanKind SERVER, Status ERROR. */
const SERVER = 2;
const STATUS_ERROR = 2;

type Greeter = grpc.Client & {
  SayHello(req: unknown, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, reply?: Record<string, string>) => void): void;
  Fail(req: unknown, md: grpc.Metadata, cb: (err: grpc.ServiceError | null) => void): void;
  Count(req: unknown, md: grpc.Metadata): grpc.ClientReadableStream<unknown>;
};

function traceMetadata(traceId: string, parent: string): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set('traceparent', `00-${traceId}-${parent}-01`);
  md.set('tracestate', 'vendor=x');
  return md;
}

describe('gRPC served by a framework service: server spans (--tracing=otlp)', () => {
  const home = tempDir();
  let receiver: RunningProcess;
  let receiverBase = '';
  let svc: RunningProcess;
  let client: Greeter;

  const spansOf = async (traceId: string, count: number): Promise<ReceivedSpan[]> =>
    waitFor(async () => {
      const spans = ((await http('GET', `${receiverBase}/spans`)).json() as ReceivedSpan[]).filter((s) => s.traceId === traceId);
      return spans.length >= count ? spans : undefined;
    }, 20_000);

  before(async () => {
    receiver = startProcess(['--import', 'tsx', RECEIVER], {}, '');
    receiverBase = `http://127.0.0.1:${await receiver.waitForPort(/otlp receiver listening on port (\d+)/, 15_000)}`;
    svc = startProcess(
      ['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--server_protocol=grpc', `--proto_path=${PROTOS}`, '--log_level=warning', '--tracing=otlp', `--tracing_address=${receiverBase}/v1/traces`],
      {},
      '',
    );
    const address = (await svc.waitForOutput(/listening on (127\.0\.0\.1:\d+)/, 15_000)).replace(/.*listening on /, '');
    const def = protoLoader.loadSync(join(PROTOS, 'greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { helloworld: { Greeter: new (address: string, creds: grpc.ChannelCredentials) => Greeter } };
    client = new pkg.helloworld.Greeter(address, grpc.credentials.createInsecure());
  });
  after(async () => {
    client?.close();
    await svc?.stop('SIGKILL');
    await receiver?.stop('SIGKILL');
    home.cleanup();
  });

  it("a call is a server span in the caller's trace, child of its span, with status OK; the handler sees the trace", async () => {
    const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent = '00f067aa0ba902b7';
    const reply = await new Promise<Record<string, string>>((resolve, reject) => client.SayHello({ name: 'T' }, traceMetadata(trace, parent), (err, r) => (err ? reject(err) : resolve(r!))));
    assert.equal(reply.x_trace, `trace ${trace}`);
    const [span, ...more] = await spansOf(trace, 1);
    assert.equal(more.length, 0);
    assert.equal(span!.kind, SERVER);
    assert.equal(span!.name, `${SERVICE_NAME}/Greeter.SayHello`);
    assert.equal(span!.parentSpanId, parent);
    assert.match(span!.spanId, /^[0-9a-f]{16}$/);
    assert.notEqual(span!.spanId, parent);
    assert.equal(span!.attributes['rpc.system'], 'grpc');
    assert.equal(span!.attributes['rpc.service'], SERVICE_NAME);
    assert.equal(span!.attributes['rpc.method'], 'Greeter.SayHello');
    assert.equal(Number(span!.attributes['rpc.grpc.status_code']), 0);
    assert.notEqual(span!.status.code, STATUS_ERROR);
  });

  it('an error call: the span has the gRPC status and an error status with the detail', async () => {
    const trace = '0af7651916cd43dd8448eb211c80319c';
    const parent = 'b7ad6b7169203331';
    const err = await new Promise<grpc.ServiceError>((resolve, reject) => client.Fail({ code: 404, details: 'no such thing' }, traceMetadata(trace, parent), (e) => (e ? resolve(e) : reject(new Error('no error')))));
    assert.equal(err.code, grpc.status.NOT_FOUND);
    const [span] = await spansOf(trace, 1);
    assert.equal(span!.name, `${SERVICE_NAME}/Greeter.Fail`);
    assert.equal(span!.parentSpanId, parent);
    assert.equal(Number(span!.attributes['rpc.grpc.status_code']), grpc.status.NOT_FOUND);
    assert.equal(span!.attributes['error.type'], String(grpc.status.NOT_FOUND));
    assert.deepEqual(span!.status, { code: STATUS_ERROR, message: 'no such thing' });
  });

  it('a server stream: one span, ended with the status the stream ended with', async () => {
    const trace = '11111111111111111111111111111111';
    const parent = '2222222222222222';
    const call = client.Count({ name: 'S', n: 2, fail_code: 503, fail_details: 'later' }, traceMetadata(trace, parent));
    const got: unknown[] = [];
    const status = await new Promise<grpc.StatusObject>((resolve) => {
      call.on('data', (m) => got.push(m));
      call.on('error', () => {});
      call.on('status', resolve);
    });
    assert.equal(got.length, 2);
    assert.equal(status.code, grpc.status.UNAVAILABLE);
    const [span] = await spansOf(trace, 1);
    assert.equal(span!.name, `${SERVICE_NAME}/Greeter.Count`);
    assert.equal(span!.parentSpanId, parent);
    assert.equal(Number(span!.attributes['rpc.grpc.status_code']), grpc.status.UNAVAILABLE);
    assert.deepEqual(span!.status, { code: STATUS_ERROR, message: 'later' });
  });

  it('a stream the caller cancels: the span ends CANCELLED', async () => {
    const trace = '33333333333333333333333333333333';
    const parent = '4444444444444444';
    const call = client.Count({ name: 'H', n: 1, hold: true }, traceMetadata(trace, parent));
    call.on('error', () => {});
    await new Promise<void>((resolve) => call.once('data', () => resolve()));
    call.cancel();
    const [span] = await spansOf(trace, 1);
    assert.equal(Number(span!.attributes['rpc.grpc.status_code']), grpc.status.CANCELLED);
    assert.equal(span!.status.code, STATUS_ERROR);
  });
});
