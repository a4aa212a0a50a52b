/**
 * CORS in a real browser: chromium (MESH_TEST_CHROMIUM, through playwright-core, as in
 * test/fronts/browser.test.ts) opens two pages served from two loopback origins, http://127.0.0.1:<A>
 * (listed in the gateway's --cors) and http://localhost:<B> (not listed), and each makes a
 * cross-origin JSON POST to the gateway's /rpc (a preflight first). The listed origin's fetch
 * succeeds and reads the body; the other's rejects with a TypeError and never reaches the backend.
 * Skipped without chromium, a failure with MESH_TEST_REQUIRE_ENGINES=1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { engine } from '../helpers.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startEdgeGateway, type EdgeGateway } from '../fixtures/edge-gateway.js';

const CHROMIUM = engine('MESH_TEST_CHROMIUM', 'chromium');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'];

/** A server of one empty page, on 127.0.0.1:0. */
async function pageServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>page</title><p>page</p>');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as AddressInfo).port };
}

/** What the page's fetch gave: the status and JSON body, or the error's name and message. */
interface Outcome {
  status?: number;
  body?: { service?: string; body?: unknown };
  error?: string;
}

describe('CORS in chromium', { skip: CHROMIUM ? false : 'chromium not available: set MESH_TEST_CHROMIUM (e.g. /usr/bin/chromium)' }, () => {
  let browser: Browser;
  let app: PlainApp;
  let gw: EdgeGateway;
  let a: { server: Server; port: number };
  let b: { server: Server; port: number };

  before(async () => {
    [a, b, app] = await Promise.all([pageServer(), pageServer(), startPlainApp('plain')]);
    gw = await startEdgeGateway([`--cors=http://127.0.0.1:${a.port}`]);
    await registerPlain(gw.runtime.registry, 'go.mesh.srv.echo', app.port);
    browser = await chromium.launch({ executablePath: CHROMIUM!, headless: true, args: ARGS });
  });

  after(async () => {
    await browser?.close();
    await gw?.close();
    await app?.close();
    for (const s of [a, b]) await new Promise((r) => s?.server.close(r));
  });

  async function postFrom(origin: string): Promise<Outcome> {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${origin}/`);
      return await page.evaluate(async (url) => {
        try {
          const res = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ service: 'go.mesh.srv.echo', method: 'Echo.Call', request: { from: location.origin } }),
          });
          return { status: res.status, body: await res.json() };
        } catch (err) {
          return { error: `${(err as Error).name}: ${(err as Error).message}` };
        }
      }, `${gw.url}/rpc`);
    } finally {
      await context.close();
    }
  }

  it('the listed origin posts JSON cross-origin (after a preflight) and reads the answer', async () => {
    const origin = `http://127.0.0.1:${a.port}`;
    const before = app.received.length;
    const out = await postFrom(origin);
    assert.equal(out.error, undefined, out.error);
    assert.equal(out.status, 200);
    assert.equal(out.body?.service, 'go.mesh.srv.echo');
    assert.deepEqual(out.body?.body, { from: origin });
    assert.equal(app.received.length, before + 1);
  });

  it('another origin: the preflight gets no CORS header, fetch rejects with a TypeError, nothing reaches the backend', async () => {
    const before = app.received.length;
    const out = await postFrom(`http://localhost:${b.port}`);
    assert.equal(out.status, undefined);
    assert.match(out.error ?? '', /^TypeError: /);
    assert.equal(app.received.length, before, 'the POST was never sent');
  });
});
