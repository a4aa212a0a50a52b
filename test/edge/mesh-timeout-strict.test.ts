/**
 * `Mesh-Timeout` is a whole number of milliseconds, read strictly (parseHeaderInteger in
 * src/core/transport/headers.ts): `0x10`, `1e3`, `1.5`, `-5`, `+5` or two values are a 400 naming the
 * value, at the edge (a real `mesh api` process, before any backend is called) and at a framework
 * service (unary and streaming endpoints), never a budget guessed from them.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { Mesh, type HandlerContext } from '../../src/index.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { parseHeaderInteger } from '../../src/core/transport/headers.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import { rawHttp, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const BAD = ['0x10', '1e3', '1.5', '-5', '+5', '', '1_000', '0b1', 'Infinity', '1234567890123456'];
const bad = (id: string, value: string) =>
  JSON.stringify({ id, code: 400, detail: `Mesh-Timeout ${JSON.stringify(value)} is not a whole number of milliseconds`, status: 'Bad Request' });

describe('parseHeaderInteger', () => {
  it('decimal digits only, at most 15 of them', () => {
    assert.equal(parseHeaderInteger('0'), 0);
    assert.equal(parseHeaderInteger('007'), 7);
    assert.equal(parseHeaderInteger(' 250 '), 250);
    assert.equal(parseHeaderInteger('999999999999999'), 999999999999999);
    for (const v of BAD) assert.equal(parseHeaderInteger(v), undefined, v);
    assert.equal(parseHeaderInteger(['1', '2']), undefined);
    assert.equal(parseHeaderInteger(undefined), undefined);
  });
});

describe('Mesh-Timeout at the edge and at a service', () => {
  const dir = tempDir('mesh-timeout-');
  let plain: PlainApp;
  let gw: GatewayProcess;
  const mesh = new Mesh({ logLevel: 'off', drainDelay: 0, registry: new MemoryRegistry(), broker: 'memory' });
  let servicePort = 0;

  before(async () => {
    const svc = mesh.service({ name: 'strict.svc' });
    svc.handle('Echo.Budget', (_req: unknown, ctx: HandlerContext) => ({ budget: ctx.deadline - Date.now() }));
    svc.stream(
      'Echo.Up',
      async function* () {
        yield { n: 1 };
      },
      { kind: 'server' },
    );
    const { services } = await mesh.start();
    servicePort = services[0]!.nodes[0]!.port;
    plain = await startPlainApp('plain');
    await registerPlain(createRegistry('local', dir.path), 'go.mesh.api.plain', plain.port);
    gw = await startGatewayProcess(dir.path);
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await mesh.close();
    dir.cleanup();
  });

  it('the gateway answers 400 naming the value, and calls no backend', async () => {
    for (const value of BAD) {
      const r = await rawHttp(gw.port, `GET /plain/echo/call HTTP/1.1\r\nHost: h\r\nMesh-Timeout: ${value}\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 400, value);
      assert.equal(r.body, bad('go.mesh.api', value));
    }
    const twice = await rawHttp(gw.port, 'GET /plain/echo/call HTTP/1.1\r\nHost: h\r\nMesh-Timeout: 10\r\nMesh-Timeout: 20\r\nConnection: close\r\n\r\n');
    assert.equal(twice.status, 400);
    assert.equal(JSON.parse(twice.body).detail, 'Mesh-Timeout given more than once');
    // a WebSocket handshake too
    const ws = await rawHttp(
      gw.port,
      'GET /plain/echo/call HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nMesh-Timeout: 1e3\r\n\r\n',
    );
    assert.equal(ws.status, 400);
    assert.equal(ws.body, bad('go.mesh.api', '1e3'));
    assert.equal(plain.received.length, 0);
    // a good one passes, and is the budget the backend sees
    const ok = await rawHttp(gw.port, 'GET /plain/echo/call HTTP/1.1\r\nHost: h\r\nMesh-Timeout: 1000\r\nConnection: close\r\n\r\n');
    assert.equal(ok.status, 201, ok.body);
    const seen = Number(plain.received.at(-1)!.headers['mesh-timeout']);
    assert.ok(seen > 0 && seen <= 1000, String(seen));
  });

  const post = (endpoint: string, timeout: string, extra: Record<string, string> = {}) =>
    request(`http://127.0.0.1:${servicePort}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mesh-service': 'strict.svc', 'mesh-endpoint': endpoint, 'mesh-timeout': timeout, ...extra },
      body: '{}',
    });

  it('a framework service answers 400 naming the value, unary and streaming', async () => {
    for (const value of ['0x10', '1e3', '1.5']) {
      const r = await post('Echo.Budget', value);
      assert.equal(r.statusCode, 400, value);
      assert.equal(await r.body.text(), bad('strict.svc', value));
      const s = await post('Echo.Up', value, { 'mesh-stream': 'server' });
      assert.equal(s.statusCode, 400, value);
      assert.equal(await s.body.text(), bad('strict.svc', value));
    }
    const ok = await post('Echo.Budget', '2000');
    assert.equal(ok.statusCode, 200);
    const { budget } = (await ok.body.json()) as { budget: number };
    assert.ok(budget > 0 && budget <= 2000, String(budget));
  });
});
