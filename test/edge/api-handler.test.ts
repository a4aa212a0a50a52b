/**
 * The gateway's api handler in process, against a stand-in client: the API Request it encodes
 * (exact JSON, and protobuf for a node that asks for it), and the HTTP answer it writes from the
 * API Response (exact header lines and body).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect } from 'node:net';
import { once } from 'node:events';
import { handleApi, headerPairs } from '../../src/edge/handlers/api.js';
import type { EdgeHandlerContext } from '../../src/edge/handlers/front-end.js';
import type { CallOptions } from '../../src/core/client/client.js';
import type { UpstreamTarget } from '../../src/core/upstream/types.js';
import { sendError } from '../../src/base/http/respond.js';
import { PROTOBUF_CODEC } from '../../src/base/codec/codec.js';
import { apiTypes } from '../../src/base/codec/api-proto.js';

const fakeReq = (rawHeaders: string[]) => ({ rawHeaders }) as unknown as IncomingMessage;

describe('api handler: header names', () => {
  // The capitalisation rule itself: test/edge/headers.test.ts (canonicalHeaderKey).
  it('pairs: same names merged, hop-by-hop left out, the same on every call', () => {
    const req = fakeReq(['Host', 'h', 'X-A', '1', 'x-a', '2', 'Connection', 'close', 'KEEP-ALIVE', 'x', 'Content-Length', '3', 'accept', '*/*']);
    const expected = { 'X-A': { key: 'X-A', values: ['1', '2'] }, Accept: { key: 'Accept', values: ['*/*'] } };
    for (let i = 0; i < 3; i++) assert.deepEqual(headerPairs(req), expected);
  });

  it('pairs stay right when more distinct names are seen than are remembered', () => {
    for (let i = 0; i < 3000; i++) {
      const name = `x-n${i}-v`;
      assert.deepEqual(headerPairs(fakeReq([name, String(i), 'transfer-encoding', 'chunked'])), { [`X-N${i}-V`]: { key: `X-N${i}-V`, values: [String(i)] } });
    }
    assert.deepEqual(headerPairs(fakeReq(['te', 'x', 'x-n1-v', '1'])), { 'X-N1-V': { key: 'X-N1-V', values: ['1'] } });
  });
});

describe('api handler: request and response', () => {
  let server: Server;
  let port = 0;
  let answer: { status: number; contentType: string; body: Buffer };
  const calls: Array<{ service: string; endpoint: string; json: string; proto: Uint8Array; opts: CallOptions }> = [];
  const fe = {
    edge: {
      client: {
        call: async (service: string, endpoint: string, _body: Uint8Array, opts: CallOptions) => {
          const json = opts.encodeFor!({ metadata: {} } as unknown as UpstreamTarget);
          const proto = opts.encodeFor!({ metadata: { content_type: 'application/protobuf' } } as unknown as UpstreamTarget);
          assert.equal(json.contentType, 'application/json');
          assert.equal(proto.contentType, 'application/protobuf');
          calls.push({ service, endpoint, json: Buffer.from(json.body).toString('utf8'), proto: proto.body, opts });
          return answer;
        },
      },
    },
    namespace: 'go.mesh.api',
    errorId: 'go.mesh.api',
    maxBodyBytes: 1024,
  } as unknown as EdgeHandlerContext;

  before(async () => {
    server = createServer((req, res) => {
      handleApi(fe, { service: 'go.mesh.api.t', method: 'T.Call' }, req, res).catch((err) => sendError(res, err));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as { port: number }).port;
  });
  after(() => server.close());

  /** One request on its own connection; the raw answer: status line, header lines (no Date), body. */
  async function raw(request: string): Promise<{ status: string; headers: string[]; body: Buffer }> {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.write(request);
    await once(socket, 'end');
    const all = Buffer.concat(chunks);
    const split = all.indexOf('\r\n\r\n');
    const [status, ...headers] = all.subarray(0, split).toString('latin1').split('\r\n');
    return { status: status!, headers: headers.filter((h) => !h.startsWith('Date: ')), body: all.subarray(split + 4) };
  }

  const answerWith = (value: unknown) => {
    answer = { status: 200, contentType: 'application/json', body: Buffer.from(JSON.stringify(value)) };
  };

  it('the API Request: exact JSON (headers, query, form, body, url) and the same message in protobuf', async () => {
    answerWith({ statusCode: 201, header: {}, body: '' });
    const body = 'name=Bob&';
    const r = await raw(
      'POST /t/call?x=1&x=2&y= HTTP/1.1\r\nHost: h\r\nX-Custom: v\r\nx-custom: w\r\nCONTENT-TYPE: application/x-www-form-urlencoded\r\n' +
        `Mesh-Id: abc\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    assert.equal(r.status, 'HTTP/1.1 201 Created');
    const call = calls.at(-1)!;
    assert.deepEqual([call.service, call.endpoint, call.opts.id], ['go.mesh.api.t', 'T.Call', 'abc']);
    assert.equal(
      call.json,
      '{"method":"POST","path":"/t/call","header":{"X-Custom":{"key":"X-Custom","values":["v","w"]},' +
        '"Content-Type":{"key":"Content-Type","values":["application/x-www-form-urlencoded"]},"Mesh-Id":{"key":"Mesh-Id","values":["abc"]}},' +
        '"get":{"x":{"key":"x","values":["1","2"]},"y":{"key":"y","values":[""]}},"post":{"name":{"key":"name","values":["Bob"]}},' +
        '"body":"name=Bob&","url":"/t/call?x=1&x=2&y="}',
    );
    const decoded = PROTOBUF_CODEC.decode(call.proto, apiTypes().Request);
    assert.deepEqual(decoded, JSON.parse(call.json));
  });

  it('the HTTP answer: pairs as header lines, hop-by-hop dropped, Content-Type by default, body as UTF-8', async () => {
    answerWith({
      statusCode: 0,
      header: {
        'x-a': { key: 'X-Answer', values: ['1', '2'] },
        conn: { key: 'Connection', values: ['x'] },
        TE: { values: ['t'] },
        'X-Nokey': { values: ['k'] },
        Empty: {},
      },
      body: 'héllo',
    });
    const r = await raw('GET /t/call HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 'HTTP/1.1 200 OK');
    assert.deepEqual(r.headers, ['X-Answer: 1', 'X-Answer: 2', 'X-Nokey: k', 'Content-Type: application/json', 'Content-Length: 6', 'Connection: close']);
    assert.equal(r.body.toString('utf8'), 'héllo');
    const call = calls.at(-1)!;
    assert.equal(call.json, '{"method":"GET","path":"/t/call","header":{},"get":{},"post":{},"body":"","url":"/t/call"}');
  });

  it("the answer's Content-Length is the gateway's own; a value that is not a list is one header line", async () => {
    answerWith({
      statusCode: 200,
      header: {
        cl: { key: 'content-length', values: ['999'] },
        CL: { key: 'Content-Length', values: ['1'] },
        one: { key: 'X-One', values: 'single' },
      },
      body: 'abc',
    });
    const r = await raw('GET /t/call HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 'HTTP/1.1 200 OK');
    assert.deepEqual(r.headers, ['X-One: single', 'Content-Type: application/json', 'Content-Length: 3', 'Connection: close']);
    assert.equal(r.body.toString('utf8'), 'abc');
  });

  it('a Content-Type of the answer, in any case, is kept; a big status code or a bad answer is a 502', async () => {
    answerWith({ statusCode: 404, header: { ct: { key: 'content-type', values: ['text/plain'] } }, body: 'no' });
    let r = await raw('GET /t/call HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 'HTTP/1.1 404 Not Found');
    assert.deepEqual(r.headers, ['content-type: text/plain', 'Content-Length: 2', 'Connection: close']);
    assert.equal(r.body.toString(), 'no');

    answer = { status: 200, contentType: 'application/json', body: Buffer.from('{"statusCode":12345678901234567890}') };
    r = await raw('GET /t/call HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 'HTTP/1.1 502 Bad Gateway');
    assert.equal(JSON.parse(r.body.toString()).detail, 'go.mesh.api.t answered statusCode 12345678901234567000');

    answer = { status: 200, contentType: 'application/json', body: Buffer.from('{"statusCode":') };
    r = await raw('GET /t/call HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n');
    assert.equal(r.status, 'HTTP/1.1 502 Bad Gateway');
    assert.match(JSON.parse(r.body.toString()).detail, /^go\.mesh\.api\.t answered something that is not an API Response: /);
  });
});
