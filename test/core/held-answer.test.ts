/**
 * A backend that announces `Content-Length: 100`, sends 5 bytes and holds the connection. RPC
 * (`/rpc`, the api handler, the rpc handler): the call's budget covers the whole answer, so the
 * client gets a 504 once --client_request_timeout has passed. The proxy handler streams the answer
 * as it comes: a body that sends nothing for --stream_idle_timeout is cut (the client sees the head,
 * the 5 bytes, then the connection closed), and the host is not kept. Real `mesh api` processes,
 * a node:net backend on loopback.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { createRegistry } from '../../src/engines/registry/create.js';
import { http, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

describe('a backend that holds its answer after the head', () => {
  const dir = tempDir('mesh-held-');
  let backend: Server;
  const sockets = new Set<Socket>();
  let gw: GatewayProcess;
  let proxyGw: GatewayProcess;

  before(async () => {
    backend = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
      // Answers the first request's head, 5 of the 100 bytes announced, and holds.
      socket.once('data', () => socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":'));
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
    const port = (backend.address() as { port: number }).port;
    await registerPlain(createRegistry('local', dir.path), 'go.mesh.api.held', port);
    [gw, proxyGw] = await Promise.all([
      startGatewayProcess(dir.path, ['--client_request_timeout=400ms', '--client_retries=0']),
      startGatewayProcess(dir.path, ['--handler=proxy', '--client_request_timeout=400ms', '--stream_idle_timeout=400ms', '--client_retries=0']),
    ]);
  });

  after(async () => {
    await Promise.all([gw?.stop(), proxyGw?.stop()]);
    for (const s of sockets) s.destroy();
    backend.close();
    dir.cleanup();
  });

  it('/rpc, the api handler and the rpc handler: 504 within the call budget', async () => {
    const rpc = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json' }, body: '{"service":"go.mesh.api.held","endpoint":"Held.Call","request":{}}', timeoutMs: 10_000 });
    assert.equal(rpc.status, 504, rpc.text);
    assert.match(rpc.json().detail, /^call go\.mesh\.api\.held on 127\.0\.0\.1:\d+: timeout after 400ms$/);
    const api = await http('GET', `${gw.url}/held/call`, { timeoutMs: 10_000 });
    assert.equal(api.status, 504, api.text);
  });

  it('the proxy handler: a body silent for --stream_idle_timeout is cut after what came', async () => {
    const got = await new Promise<{ status: number; body: string; aborted: boolean }>((resolve, reject) => {
      const req = httpRequest(`${proxyGw.url}/held/x`, { agent: false }, (res) => {
        let body = '';
        let aborted = false;
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('aborted', () => (aborted = true));
        res.on('error', () => undefined);
        res.on('close', () => resolve({ status: res.statusCode ?? 0, body, aborted }));
      });
      req.setTimeout(10_000, () => req.destroy(new Error('no end within 10 s')));
      req.on('error', reject);
      req.end();
    });
    assert.deepEqual(got, { status: 200, body: '{"a":', aborted: true });
  });
});
