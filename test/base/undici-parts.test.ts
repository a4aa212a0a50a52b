/**
 * src/base/http/undici.ts loads undici's agent, pool, connector and `request` from its own modules
 * (not the index): they are undici's very objects, a dispatcher has the request API, and
 * `request(url, options)` sends what undici's index's `request` sends and throws what it throws,
 * against a real server on loopback.
 */
import { describe, it, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import type * as Undici from 'undici';
import { Agent, buildConnector, Pool, request } from '../../src/base/http/undici.js';
import { listenLoopback } from '../helpers.js';

const undici = createRequire(import.meta.url)('undici') as typeof Undici;

describe("undici's parts", () => {
  const seen: { method?: string; url?: string; body: string }[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, body });
      res.end(`${req.method} ${req.url}`);
    });
  });
  let base = '';
  let close: () => Promise<void>;
  before(async () => {
    const l = await listenLoopback(server);
    base = `http://127.0.0.1:${l.port}`;
    close = l.close;
  });
  after(() => close());

  it("are undici's own objects", () => {
    assert.equal(Agent, undici.Agent);
    assert.equal(Pool, undici.Pool);
    assert.equal(buildConnector, undici.buildConnector);
    assert.equal(typeof new Agent().request, 'function');
  });

  it('request(url, options) sends as undici.request does: GET by default, PUT with a body, the query kept, on the given dispatcher', async () => {
    const agent = new Agent();
    try {
      for (const send of [request, undici.request] as const) {
        seen.length = 0;
        const a = await send(`${base}/a?x=1`);
        assert.equal(await a.body.text(), 'GET /a?x=1');
        const b = await send(`${base}/b`, { body: 'hi' });
        assert.equal(await b.body.text(), 'PUT /b');
        const c = await send(new URL(`${base}/c`), { method: 'POST', body: 'yo', dispatcher: agent, headers: { 'x-a': '1' } });
        assert.equal(c.statusCode, 200);
        assert.equal(await c.body.text(), 'POST /c');
        assert.deepEqual(seen, [
          { method: 'GET', url: '/a?x=1', body: '' },
          { method: 'PUT', url: '/b', body: 'hi' },
          { method: 'POST', url: '/c', body: 'yo' },
        ]);
      }
    } finally {
      await agent.close();
    }
  });

  it('a URL undici refuses is refused in the same words', () => {
    for (const url of ['ftp://127.0.0.1/x', 'not a url', 'http://[::1']) {
      let theirs: unknown;
      try {
        void undici.request(url);
      } catch (err) {
        theirs = err;
      }
      assert.ok(theirs instanceof Error, url);
      assert.throws(() => void request(url), (e: unknown) => e instanceof Error && e.message === (theirs as Error).message && e.constructor.name === (theirs as Error).constructor.name, url);
    }
  });
});
