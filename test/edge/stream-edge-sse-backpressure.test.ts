/**
 * An SSE client that does not read holds the backend back through a real `mesh api` process
 * (docs/gateway.md "Streaming endpoints": "a WebSocket or SSE client that does not read ..."):
 * the handler stops being pulled long before its end; reading again gets every event in order.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { Mesh } from '../../src/framework/mesh.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { tempDir, waitForStill } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

describe('SSE backpressure at the gateway', () => {
  const dir = tempDir('mesh-sse-bp-');
  const count = 4000; // 16 KiB messages: 64 MiB in all, far more than the buffers on the way hold
  const seen = { pulled: 0, done: false };
  let mesh: Mesh;
  let gw: GatewayProcess;

  before(async () => {
    mesh = new Mesh(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, '--admin_address=off', '--log_level=error', '--drain_delay=0s']).config), 'test');
    mesh.service({ name: 'go.mesh.api.flood' }).stream(
      'Flood.Many',
      async function* () {
        try {
          for (let i = 0; i < count; i++) {
            seen.pulled++;
            yield { n: i, pad: 'p'.repeat(16 * 1024) };
          }
        } finally {
          seen.done = true;
        }
      },
      { kind: 'server' },
    );
    await mesh.start();
    gw = await startGatewayProcess(dir.path);
  });
  after(async () => {
    await gw?.stop();
    await mesh?.close();
    dir.cleanup();
  });

  it('a client that does not read: the handler is held back; reading again gets every event in order', async () => {
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(`${gw.url}/flood/many`, { method: 'GET', headers: { accept: 'text/event-stream' } }, resolve);
      req.on('error', reject);
      req.end();
    });
    assert.equal(res.statusCode, 200);
    res.pause();
    await waitForStill(() => seen.pulled, { stepMs: 200, polls: 1, ready: (n) => n > 0 });
    assert.ok(seen.pulled < count / 2 && !seen.done, `the handler was pulled ${seen.pulled} of ${count} times for a client that read nothing`);
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (c: string) => (text += c));
    res.resume();
    await new Promise((r) => res.on('end', r));
    const ns = text.split('\n\n').filter(Boolean).map((e) => (JSON.parse(e.replace(/^data: /, '')) as { n: number }).n);
    assert.equal(ns.length, count);
    assert.ok(ns.every((n, i) => n === i));
  });
});
