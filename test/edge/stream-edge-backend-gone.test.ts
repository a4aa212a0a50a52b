/**
 * The backend side closing mid-stream reaches the edge client (docs/gateway.md "Streaming
 * endpoints"): a raw HTTP backend speaking docs/protocol.md writes one message frame and then
 * drops its connection without the end frame; a real `mesh api` process ends the WebSocket with
 * 4502 and the SSE response with `event: error` 502, after the message before it.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { encodeFrame } from '../../src/core/transport/frames.js';
import { tempDir } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { openWs, sse } from '../fixtures/stream-clients.js';

describe('a stream backend that goes away mid-stream', () => {
  const dir = tempDir('mesh-stream-gone-');
  let registry: Registry;
  let backend: Server;
  let gw: GatewayProcess;

  before(async () => {
    backend = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json', 'mesh-stream': 'server' });
        res.write(encodeFrame(0, '{"n":1}'), () => setImmediate(() => res.socket?.destroy()));
      });
    });
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    registry = createRegistry('local', dir.path);
    const port = (backend.address() as AddressInfo).port;
    await registry.register({ name: 'go.mesh.api.gone', version: 'v1', metadata: {}, endpoints: [{ name: 'Gone.Up', metadata: { stream: 'server' } }], nodes: [{ id: 'g', address: '127.0.0.1', port, metadata: {} }] });
    gw = await startGatewayProcess(dir.path);
  });
  after(async () => {
    await gw?.stop();
    backend?.closeAllConnections();
    await new Promise((r) => backend?.close(r));
    await registry?.close();
    dir.cleanup();
  });

  it('WebSocket: the message, then a 4502 close; SSE: the message, then event: error with code 502', async () => {
    const c = openWs(`${gw.url.replace('http:', 'ws:')}/gone/up`);
    await c.open;
    c.ws.send('{}');
    const closed = await c.done;
    assert.equal(closed.code, 4502, closed.reason);
    assert.match(closed.reason, /^stream go\.mesh\.api\.gone\.Gone\.Up: connection reset: /);
    assert.deepEqual(c.messages, ['{"n":1}']);
    const r = await sse(`${gw.url}/gone/up`, 'POST', '{}');
    assert.equal(r.status, 200);
    assert.match(r.text, /^data: \{"n":1\}\n\nevent: error\ndata: \{"id":"go\.mesh\.api","code":502,"detail":"stream go\.mesh\.api\.gone\.Gone\.Up: connection reset: [^"]+","status":"Bad Gateway"\}\n\n$/);
  });
});
