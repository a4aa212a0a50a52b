/**
 * What `mesh api` (default handler, falling back to the api handler) writes for answers of an API
 * service that are not quite API Responses: a service's own JSON passes through byte for byte; an
 * object that mixes Response fields with other keys, or a field of the wrong type, is a 502 that
 * says what came back. A real gateway process, a plain node:http backend, a local registry.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createRegistry } from '../../src/engines/registry/create.js';
import { listenLoopback, rawHttp, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

/** What the backend answers, by endpoint (Mesh-Endpoint), with Content-Type application/json. */
const ANSWERS: Record<string, string> = {
  'Hello.Plain': '{"msg":"Hello","big":12345678901234567890}',
  'Hello.Array': '[1,"two"]',
  'Hello.Empty': '{}',
  'Hello.Mixed': '{"statusCode":201,"msg":"Hello","body":"x"}',
  'Hello.Body': '{"body":{"msg":"Hello"}}',
  'Hello.Header': '{"header":"x","body":"y"}',
  'Hello.Response': '{"statusCode":202,"body":"ok"}',
};

describe('mesh api: answers that are not API Responses', () => {
  const dir = tempDir('mesh-api-answers-');
  let backend: Server;
  let closeBackend: () => Promise<void>;
  let gw: GatewayProcess;

  before(async () => {
    backend = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const text = ANSWERS[String(req.headers['mesh-endpoint'])] ?? '{"unexpected":true}';
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      });
    });
    const bound = await listenLoopback(backend);
    closeBackend = bound.close;
    await registerPlain(createRegistry('local', dir.path), 'go.mesh.api.hello', bound.port);
    gw = await startGatewayProcess(dir.path);
  });

  after(async () => {
    await gw?.stop();
    await closeBackend?.();
    dir.cleanup();
  });

  const get = (path: string) => rawHttp(gw.port, `GET ${path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n`);
  const headLines = (head: string) => head.split('\r\n').filter((l) => !l.startsWith('Date: '));

  it("a JSON answer with none of the Response fields is passed through, byte for byte, as a 200", async () => {
    const r = await get('/hello/plain');
    assert.deepEqual(headLines(r.head), ['HTTP/1.1 200 OK', 'Content-Type: application/json', 'Content-Length: 42', 'Connection: close']);
    assert.equal(r.body, ANSWERS['Hello.Plain']);

    const a = await get('/hello/array');
    assert.equal(a.status, 200);
    assert.equal(a.headers['content-length'], '9');
    assert.equal(a.body, '[1,"two"]');
  });

  it('`{}` is the JSON of an empty API Response: an empty 200', async () => {
    const r = await get('/hello/empty');
    assert.deepEqual(headLines(r.head), ['HTTP/1.1 200 OK', 'Content-Type: application/json', 'Content-Length: 0', 'Connection: close']);
    assert.equal(r.body, '');
  });

  it('an API Response is still written as one', async () => {
    const r = await get('/hello/response');
    assert.equal(r.status, 202);
    assert.equal(r.body, 'ok');
  });

  it('Response fields mixed with other keys, or of the wrong type: a 502 that says what the service answered', async () => {
    const mixed = await get('/hello/mixed');
    assert.equal(mixed.status, 502);
    assert.equal(
      mixed.body,
      '{"id":"go.mesh.api","code":502,"detail":"go.mesh.api.hello answered an object with API Response fields and other keys (\\"msg\\"): not an API Response","status":"Bad Gateway"}',
    );
    const body = await get('/hello/body');
    assert.equal(body.status, 502);
    assert.equal(JSON.parse(body.body).detail, 'go.mesh.api.hello answered a body that is not a string (object): not an API Response');
    const header = await get('/hello/header');
    assert.equal(header.status, 502);
    assert.equal(JSON.parse(header.body).detail, 'go.mesh.api.hello answered a header that is not an object (string): not an API Response');
  });
});
