/**
 * gRPC-Web framing (src/edge/handlers/grpc-web.ts), in process: the content types, frames and the
 * trailers block byte for byte, -text bodies made of separately padded chunks, frames cut short,
 * a message past the limit (RESOURCE_EXHAUSTED), base64 that is not (INVALID_ARGUMENT), and a
 * GrpcWebStream answering on a real node:http response: the node's chunks base64-encoded one by
 * one (a message split across two of them), then the trailers frame.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers.js';
import { startEdgeGateway } from '../fixtures/edge-gateway.js';
import { checkGrpcWebRequest, decodeGrpcWebText, grpcHeadersOf, grpcWebFrame, grpcWebFrames, grpcWebModeOf, GrpcWebRefusal, GrpcWebStream, trailersFrame, type GrpcWebCall } from '../../src/edge/handlers/grpc-web.js';

function refusal(code: number, message: string): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof GrpcWebRefusal, String(err));
    assert.equal(err.code, code);
    assert.equal(err.message, message);
    return true;
  };
}

describe('gRPC-Web framing', () => {
  it('reads the content types: binary or -text, the message format', () => {
    assert.deepEqual(grpcWebModeOf('application/grpc-web'), { text: false, format: 'proto' });
    assert.deepEqual(grpcWebModeOf('application/grpc-web+proto'), { text: false, format: 'proto' });
    assert.deepEqual(grpcWebModeOf('application/grpc-web+json; charset=utf-8'), { text: false, format: 'json' });
    assert.deepEqual(grpcWebModeOf('Application/gRPC-Web-Text'), { text: true, format: 'proto' });
    assert.deepEqual(grpcWebModeOf('application/grpc-web-text+proto'), { text: true, format: 'proto' });
    for (const other of [undefined, '', 'application/grpc', 'application/grpc+proto', 'application/json', 'application/grpc-webx', 'application/grpc-web-texts']) assert.equal(grpcWebModeOf(other), undefined, String(other));
  });

  it('writes frames and the trailers block byte for byte', () => {
    assert.deepEqual(grpcWebFrame(0, Buffer.from('hi')), Buffer.from([0, 0, 0, 0, 2, 0x68, 0x69]));
    assert.deepEqual(grpcWebFrame(0, Buffer.alloc(0)), Buffer.from([0, 0, 0, 0, 0]));
    const block = 'grpc-status:5\r\ngrpc-message:not%20here\r\nx-tag:a\r\nx-tag:b\r\n';
    assert.deepEqual(
      trailersFrame({ 'grpc-status': '5', 'Grpc-Message': 'not%20here', 'x-tag': ['a', 'b'], ':status': 200, skipped: undefined }),
      Buffer.concat([Buffer.from([0x80, 0, 0, 0, block.length]), Buffer.from(block, 'latin1')]),
    );
  });

  it('decodes -text bodies whose chunks were encoded and padded each on its own', () => {
    const body = Buffer.concat([grpcWebFrame(0, Buffer.from('hello')), grpcWebFrame(0, Buffer.from('world!'))]);
    assert.deepEqual(decodeGrpcWebText(body.toString('base64')), body);
    // Chunks of 1, 2 and the rest bytes: two padded groups inside the text.
    const chunked = [body.subarray(0, 1), body.subarray(1, 3), body.subarray(3)].map((c) => c.toString('base64')).join('');
    assert.equal(chunked.slice(0, 8), `${body.subarray(0, 1).toString('base64')}${body.subarray(1, 3).toString('base64')}`);
    assert.match(chunked.slice(0, 8), /^..==...=$/);
    assert.deepEqual(decodeGrpcWebText(chunked), body);
    assert.deepEqual(decodeGrpcWebText(''), Buffer.alloc(0));
  });

  it('refuses base64 that is not, with INVALID_ARGUMENT naming where', () => {
    assert.throws(() => decodeGrpcWebText('AAAAA'), refusal(3, 'the request body is not base64 (application/grpc-web-text): 5 characters, not a multiple of 4'));
    assert.throws(() => decodeGrpcWebText('AAAA*AAA'), refusal(3, 'the request body is not base64 (application/grpc-web-text): "*AAA" at offset 4'));
    assert.throws(() => decodeGrpcWebText('A=AA'), refusal(3, 'the request body is not base64 (application/grpc-web-text): "A=AA" at offset 0'));
    assert.throws(() => decodeGrpcWebText('AA\r\nAAAA'), refusal(3, 'the request body is not base64 (application/grpc-web-text): "AA\\r\\n" at offset 0'));
  });

  it('splits frames, and refuses a body that ends inside one', () => {
    const two = Buffer.concat([grpcWebFrame(0, Buffer.from('a')), grpcWebFrame(0x80, Buffer.from('grpc-status:0\r\n'))]);
    assert.deepEqual(grpcWebFrames(two).map((f) => [f.flag, f.payload.toString()]), [[0, 'a'], [0x80, 'grpc-status:0\r\n']]);
    assert.throws(() => grpcWebFrames(two.subarray(0, 3)), refusal(3, "the request body ends inside a message's 5-byte prefix (at byte 0)"));
    assert.throws(() => grpcWebFrames(two.subarray(0, 13)), refusal(3, 'the request body ends inside a message of 15 bytes (at byte 6)'));
  });

  it('refuses a message past the limit with RESOURCE_EXHAUSTED (by its prefix, the body cut short or not), and a frame no client sends', () => {
    checkGrpcWebRequest(grpcWebFrame(0, Buffer.alloc(10)), 10);
    assert.throws(() => checkGrpcWebRequest(grpcWebFrame(0, Buffer.alloc(11)), 10), refusal(8, 'a request message of 11 bytes is larger than 10 bytes (--max_body_size)'));
    const prefixOnly = Buffer.from([0, 0, 0x10, 0, 0]);
    assert.throws(() => checkGrpcWebRequest(prefixOnly, 10), refusal(8, 'a request message of 1048576 bytes is larger than 10 bytes (--max_body_size)'));
    assert.throws(() => checkGrpcWebRequest(grpcWebFrame(0x80, Buffer.alloc(1)), 10), refusal(3, 'a request frame with flag 0x80 (only messages, 0x00 or 0x01, are sent by a client)'));
  });

  it("gives the node the call's metadata with a gRPC content type, not the browser's HTTP", () => {
    const call: GrpcWebCall = { kind: 'grpc-web', grpcService: 'helloworld.Greeter', method: 'SayHello', text: true, format: 'proto' };
    const req = { headers: { host: 'gw:8080', 'content-type': 'application/grpc-web-text', 'content-length': '12', accept: 'application/grpc-web-text', 'x-grpc-web': '1', 'x-user-agent': 'grpc-web-javascript/0.1', 'grpc-timeout': '5S', authorization: 'Bearer t' } };
    assert.deepEqual(grpcHeadersOf(req as never, call), {
      ':path': '/helloworld.Greeter/SayHello',
      ':authority': 'gw:8080',
      'content-type': 'application/grpc+proto',
      te: 'trailers',
      'x-user-agent': 'grpc-web-javascript/0.1',
      'grpc-timeout': '5S',
      authorization: 'Bearer t',
    });
  });

  it('answers -text as it comes: each chunk of the node base64 on its own (a message split across two), then the trailers frame', async () => {
    const message = grpcWebFrame(0, Buffer.from('streamed message'));
    const trailers = { 'grpc-status': '0', 'grpc-message': '' };
    const call: GrpcWebCall = { kind: 'grpc-web', grpcService: 's.S', method: 'M', text: true, format: 'proto' };
    let requestBody: Buffer | undefined;
    const server = createServer((req, res) => {
      const stream = new GrpcWebStream(req, res, call, Buffer.from('request'));
      const read: Buffer[] = [];
      stream.on('data', (c: Buffer) => read.push(c));
      stream.on('end', () => (requestBody = Buffer.concat(read)));
      stream.on('wantTrailers', () => stream.sendTrailers(trailers));
      stream.respond({ ':status': 200, 'content-type': 'application/grpc+proto', 'x-meta': 'v' }, { waitForTrailers: true });
      stream.write(message.subarray(0, 7));
      stream.end(message.subarray(7));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/s.S/M`, { method: 'POST' });
      assert.equal(res.headers.get('content-type'), 'application/grpc-web-text+proto');
      assert.equal(res.headers.get('x-meta'), 'v');
      const text = await res.text();
      assert.equal(text, message.subarray(0, 7).toString('base64') + message.subarray(7).toString('base64') + trailersFrame(trailers).toString('base64'));
      const frames = grpcWebFrames(decodeGrpcWebText(text));
      assert.deepEqual(frames.map((f) => [f.flag, f.payload.toString()]), [[0, 'streamed message'], [0x80, 'grpc-status:0\r\ngrpc-message:\r\n']]);
      assert.equal(requestBody?.toString(), 'request');
    } finally {
      server.close();
    }
  });

  it('closes with CANCEL when the client left before the answer started (while its request was read)', async () => {
    const call: GrpcWebCall = { kind: 'grpc-web', grpcService: 's.S', method: 'M', text: false, format: 'proto' };
    const closed = new Promise<number>((resolve) => {
      const server = createServer((req, res) => {
        req.on('error', () => {});
        res.once('close', () => {
          const stream = new GrpcWebStream(req, res, call, Buffer.alloc(0));
          stream.once('close', () => {
            server.close();
            resolve(stream.rstCode);
          });
        });
      });
      server.listen(0, '127.0.0.1', () => {
        const client = request({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', method: 'POST', headers: { 'content-length': '100' } });
        client.on('error', () => {});
        client.write('abc', () => client.destroy());
      });
    });
    assert.equal(await closed, 8);
  });
});

describe('gRPC-Web at an in-process gateway: refusals and CORS', () => {
  it('answers the auth step and the rules of the method as gRPC statuses in headers; the preflight allows the gRPC-Web headers', async () => {
    const dir = tempDir('mesh-grpc-web-auth-');
    writeFileSync(join(dir.path, 'keys.txt'), 'k-0123456789abcdef web read\n');
    writeFileSync(join(dir.path, 'rules.yaml'), 'rules:\n  - service: go.mesh.srv.greeter\n    endpoint: helloworld.Greeter.Fail\n    access: deny\n');
    const gw = await startEdgeGateway(['--auth=key', `--auth_keys=${join(dir.path, 'keys.txt')}`, `--auth_rules=${join(dir.path, 'rules.yaml')}`, '--cors=https://app.example.com']);
    try {
      // A node nobody listens on: the calls below are refused before any node is asked.
      await gw.runtime.registry.register({ name: 'go.mesh.srv.greeter', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'n', address: '127.0.0.1', port: 9, metadata: { protocol: 'grpc', grpc_service: 'helloworld.Greeter' } }] });
      const post = (method: string, headers: Record<string, string> = {}) =>
        fetch(`${gw.url}/helloworld.Greeter/${method}`, { method: 'POST', headers: { 'content-type': 'application/grpc-web+proto', origin: 'https://app.example.com', ...headers }, body: grpcWebFrame(0, Buffer.alloc(0)) });
      const anonymous = await post('SayHello');
      assert.equal(anonymous.status, 200);
      assert.equal(anonymous.headers.get('grpc-status'), '16');
      assert.equal(anonymous.headers.get('content-type'), 'application/grpc-web+proto');
      assert.equal(anonymous.headers.get('access-control-allow-origin'), 'https://app.example.com');
      assert.equal(anonymous.headers.get('access-control-expose-headers'), 'Retry-After, RateLimit, RateLimit-Policy, Grpc-Status, Grpc-Message');
      assert.equal((await anonymous.arrayBuffer()).byteLength, 0);
      const denied = await post('Fail', { authorization: 'Bearer k-0123456789abcdef' });
      assert.equal(denied.headers.get('grpc-status'), '7');
      assert.equal(gw.counter('cluster.go.mesh.srv.greeter.upstream_rq_total'), 0);
      const preflight = await fetch(`${gw.url}/helloworld.Greeter/SayHello`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-grpc-web,x-user-agent,grpc-timeout' },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-headers'), 'content-type, x-grpc-web, x-user-agent, grpc-timeout');
      assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example.com');
    } finally {
      await gw.close();
      dir.cleanup();
    }
  });
});
