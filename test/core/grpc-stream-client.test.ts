/**
 * The client side of gRPC streams (docs/grpc.md "Streaming"), through the public API
 * (`Mesh.stream`) against a plain @grpc/grpc-js server in this process on loopback, registered
 * with protocol=grpc: the stream's timeout is the gRPC deadline, cancel() reaches the server,
 * a slow consumer holds the server's writes back, a protobuf stream passes bytes through, a
 * down node is a 502 connection failure.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import { ReflectionService } from '@grpc/reflection';
import { Mesh } from '../../src/framework/mesh.js';
import { Runtime } from '../../src/process/runtime.js';
import { MeshError } from '../../src/base/errors.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { freePort, tempDir, waitFor, waitForStill } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';

type CountReq = { name: string; n: number; hold: boolean };

describe('gRPC streams from the framework client', () => {
  const dir = tempDir('mesh-grpc-stream-client-');
  let registry: Registry;
  let mesh: Mesh;
  let server: grpc.Server;
  const seen = { cancelled: [] as string[], deadline: [] as string[], written: 0, blocked: false, total: 0 };
  /** The 'big' stream: messages whose write grpc-js has completed, and whether a write waits. */
  const big = { flushed: 0, waiting: false };

  before(async () => {
    const def = protoLoader.loadSync(join(PROTOS, 'greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { helloworld: { Greeter: { service: grpc.ServiceDefinition } } };
    server = new grpc.Server();
    server.addService(pkg.helloworld.Greeter.service, {
      Count: (call: grpc.ServerWritableStream<CountReq, unknown>) => {
        const r = call.request;
        const deadline = call.getDeadline();
        call.on('cancelled', () => {
          seen.cancelled.push(r.name);
          if (Number.isFinite(Number(deadline))) seen.deadline.push(r.name);
        });
        if (r.name === 'flood') {
          // Writes as fast as the client takes them, waiting for 'drain' whenever write() says so.
          seen.total = r.n;
          void (async () => {
            for (let i = 1; i <= r.n; i++) {
              seen.written = i;
              if (!call.write({ message: `#${i} ${'x'.repeat(8192)}` })) {
                seen.blocked = true;
                await new Promise((resolve) => call.once('drain', resolve));
                seen.blocked = false;
              }
              if (call.cancelled) return;
            }
            call.end();
          })();
          return;
        }
        if (r.name === 'big') {
          // 1 MiB messages as fast as grpc-js takes them: the next write as soon as the last one's
          // callback says HTTP/2 took it (so the server's own buffer holds one message, not 16).
          const payload = 'x'.repeat(1024 * 1024);
          const next = (i: number): void => {
            if (i > r.n || call.cancelled) return void (i > r.n && call.end());
            big.waiting = true;
            call.write({ message: `#${i} ${payload}` }, () => {
              big.waiting = false;
              big.flushed = i;
              next(i + 1);
            });
          };
          next(1);
          return;
        }
        for (let i = 1; i <= r.n; i++) call.write({ message: `Hello ${r.name} #${i}` });
        if (!r.hold) call.end();
      },
      Chat: (call: grpc.ServerDuplexStream<{ name: string }, unknown>) => {
        call.on('data', (m: { name: string }) => call.write({ message: `Hello ${m.name}` }));
        call.on('end', () => call.end());
      },
    });
    new ReflectionService(def).addToServer(server);
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
    const down = await freePort();
    registry = createRegistry('local', dir.path);
    await registry.register({ name: 'go.mesh.srv.g', version: 'latest', metadata: {}, endpoints: [], nodes: [{ id: 'g', address: '127.0.0.1', port, metadata: { protocol: 'grpc' } }] });
    await registry.register({ name: 'go.mesh.srv.down', version: 'latest', metadata: {}, endpoints: [], nodes: [{ id: 'd', address: '127.0.0.1', port: down, metadata: { protocol: 'grpc' } }] });
    mesh = new Mesh(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, `--proto_path=${PROTOS}`, '--admin_address=off', '--log_level=error', '--client_retries=0']).config), 'test');
  });
  after(async () => {
    await mesh?.close();
    await registry?.close();
    server?.forceShutdown();
    dir.cleanup();
  });

  it('the stream timeout is the gRPC deadline: the server sees it, the consumer gets 504 after the messages before it', async () => {
    const got: string[] = [];
    // 2 s: time for the first message on a loaded machine; the server then holds the stream open.
    const err = await (async () => {
      for await (const m of mesh.stream<{ message: string }>('go.mesh.srv.g', 'Greeter.Count', { name: 'dl', n: 1, hold: true }, { timeout: '2s' })) got.push(m.message);
    })().then(
      () => assert.fail('the stream ended'),
      (e: unknown) => e as MeshError,
    );
    assert.deepEqual(got, ['Hello dl #1']);
    assert.ok(err instanceof MeshError);
    assert.equal(err.code, 504);
    assert.equal(err.detail, 'stream go.mesh.srv.g.Greeter.Count: deadline of 2000ms exceeded');
    await waitFor(() => seen.deadline.includes('dl'));
  });

  it('cancel() reaches the gRPC server (its call is cancelled); the consumer gets 499', async () => {
    const s = mesh.stream<{ message: string }>('go.mesh.srv.g', 'Greeter.Count', { name: 'cx', n: 1, hold: true });
    const it = s[Symbol.asyncIterator]();
    assert.equal((await it.next()).value?.message, 'Hello cx #1');
    s.cancel();
    await assert.rejects(it.next(), (e: MeshError) => e.code === 499);
    await waitFor(() => seen.cancelled.includes('cx'));
  });

  it('a consumer that does not pull holds the server back (its writes wait for drain); pulling again gets every message in order', async () => {
    const n = 2000; // 2000 x 8 KiB: far more than the read-ahead of the client and the HTTP/2 windows
    const s = mesh.stream<{ message: string }>('go.mesh.srv.g', 'Greeter.Count', { name: 'flood', n });
    const it = s[Symbol.asyncIterator]();
    assert.match((await it.next()).value!.message, /^#1 /);
    // Held: the server waits for 'drain' and has written nothing more since the last look.
    let last = -1;
    await waitFor(() => {
      const held = seen.blocked && seen.written === last;
      last = seen.written;
      return held;
    }, 10_000);
    const heldAt = seen.written;
    // What the HTTP/2 windows and the buffers on both sides hold: a few hundred KiB, not the 16 MiB of the stream.
    assert.ok(heldAt < 200, `the server wrote ${heldAt} of ${n} while the consumer did not read`);
    let count = 1;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      count++;
      assert.ok(r.value.message.startsWith(`#${count} `), `message ${count} in order`);
    }
    assert.equal(count, n);
  });

  it('the read-ahead is bounded by bytes (64 KiB, at least one message), not by a count of messages: 1 MiB messages wait on HTTP/2 flow control', async () => {
    // Measured at the server, where nothing on the client can hide it: how many 1 MiB messages
    // grpc-js let it write while the consumer holds one and reads no further. Each write waits for
    // the previous one to be taken by HTTP/2, so what the server wrote is what the consumer, the
    // client's read-ahead, grpc-js's parser and the HTTP/2 windows (64 KiB each) hold: measured 2
    // (the consumer's and the one read ahead; a third waits). A read-ahead of 16 messages
    // (grpc-js's own) let the server write 17, far beyond the bound. Whether the server has stopped is
    // seen as a write waiting with no progress over many polls; stopping early can only make
    // the count smaller, so the bound cannot fail by timing, only by reading ahead too much.
    const n = 200;
    const bound = 8;
    const s = mesh.stream<{ message: string }>('go.mesh.srv.g', 'Greeter.Count', { name: 'big', n });
    const it = s[Symbol.asyncIterator]();
    assert.match((await it.next()).value!.message, /^#1 x/);
    await waitForStill(() => big.flushed, { stepMs: 50, polls: 10, ready: () => big.waiting });
    assert.ok(big.flushed <= bound, `the server wrote ${big.flushed} MiB while the consumer held one message; bound ${bound} MiB`);
    // Reading again lets the server go on, in order.
    for (let i = 2; i <= bound + 4; i++) assert.match((await it.next()).value!.message, new RegExp(`^#${i} x`));
    await waitFor(() => big.flushed > bound);
    s.cancel();
    await waitFor(() => seen.cancelled.includes('big'));
  });

  it('a bidi stream in protobuf passes the bytes through both ways', async () => {
    const root = protobuf.loadSync(join(PROTOS, 'greeter.proto'));
    const Req = root.lookupType('helloworld.HelloRequest');
    const Reply = root.lookupType('helloworld.HelloReply');
    const requests = ['p1', 'p2'].map((name) => Req.encode(Req.create({ name })).finish());
    // The client below Mesh.stream (whose codecs need a message type for protobuf) takes raw payloads.
    const runtime = new Runtime(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, `--proto_path=${PROTOS}`, '--admin_address=off', '--log_level=error']).config), { role: 'cli' });
    const got: string[] = [];
    try {
      const call = await runtime.client.stream('go.mesh.srv.g', 'Greeter.Chat', { kind: 'bidi', contentType: 'application/protobuf' });
      for (const r of requests) await call.send(r);
      call.end();
      for await (const bytes of call) got.push((Reply.decode(bytes) as unknown as { message: string }).message);
      assert.equal(call.contentType, 'application/protobuf');
    } finally {
      await runtime.shutdown();
    }
    assert.deepEqual(got, ['Hello p1', 'Hello p2']);
  });

  it("without .proto files, the method and its kind come from the node's reflection service", async () => {
    const runtime = new Runtime(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, '--admin_address=off', '--log_level=error']).config), { role: 'cli' });
    try {
      const call = await runtime.client.stream('go.mesh.srv.g', 'Greeter.Count', { kind: 'server', request: Buffer.from('{"name":"refl","n":2}') });
      const got: string[] = [];
      for await (const m of call) got.push((JSON.parse(m.toString()) as { message: string }).message);
      assert.deepEqual(got, ['Hello refl #1', 'Hello refl #2']);
      const wrong = await runtime.client.stream('go.mesh.srv.g', 'Greeter.Count', { kind: 'bidi' });
      await assert.rejects(wrong.opened, (e: MeshError) => e.code === 400 && e.detail === '/helloworld.Greeter/Count is a server stream, not a bidi stream');
    } finally {
      await runtime.shutdown();
    }
  });

  it('a down gRPC node: 502 connection failed; the wrong kind: 400 before anything is sent', async () => {
    const down = await (async () => {
      for await (const _ of mesh.stream('go.mesh.srv.down', 'Greeter.Count', { name: 'x' }));
    })().then(
      () => assert.fail('the stream ended'),
      (e: unknown) => e as MeshError,
    );
    assert.equal(down.code, 502);
    assert.match(down.detail, /^stream go\.mesh\.srv\.down on 127\.0\.0\.1:\d+: connection failed: /);
    const kind = await (async () => {
      for await (const _ of mesh.stream('go.mesh.srv.g', 'Greeter.Chat', { name: 'x' }));
    })().then(
      () => assert.fail('the stream ended'),
      (e: unknown) => e as MeshError,
    );
    assert.equal(kind.code, 400);
    assert.equal(kind.detail, '/helloworld.Greeter/Chat is a bidi stream, not a server stream');
    const unary = await (async () => {
      for await (const _ of mesh.stream('go.mesh.srv.g', 'Greeter.SayHello', { name: 'x' }));
    })().then(
      () => assert.fail('the stream ended'),
      (e: unknown) => e as MeshError,
    );
    assert.equal(unary.detail, '/helloworld.Greeter/SayHello is a unary method: call it without a stream');
  });
});
