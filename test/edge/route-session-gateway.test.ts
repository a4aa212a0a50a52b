/**
 * A proxy route's `sessionPersistence` on a real `mesh api --routes` process, with two nodes of a
 * service (plain HTTP apps on loopback, in the local registry) and a node of another service:
 * the first answer sets the session's cookie, the requests that send it all go to that node and
 * those without it spread; a tampered or forged token is balanced anew (and gets a fresh one); a
 * node deregistered is left for the other, with a new token; the Header type likewise; a token
 * issued for another service's node (same session name, another rule) never reaches that node.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, startGatewayProcess, startPlainApp, type GatewayProcess, type HttpAnswer, type PlainApp } from '../fixtures/gateway-helpers.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const WEB = 'go.mesh.srv.web';
const ADMIN = 'go.mesh.srv.admin';

const ROUTES = `${HEAD}metadata: {name: shop}
spec:
  handler: proxy
  rules:
    - name: cookie
      matches: [{path: {value: /web}}]
      backendRefs: [{name: ${WEB}}]
      sessionPersistence: {sessionName: shop}
    - name: header
      matches: [{path: {value: /hdr}}]
      backendRefs: [{name: ${WEB}}]
      sessionPersistence: {sessionName: X-Shop-Session, type: Header}
    - name: admin
      matches: [{path: {value: /admin}}]
      backendRefs: [{name: ${ADMIN}}]
      sessionPersistence: {sessionName: shop}
`;

/** The cookie pair (`shop=...`) an answer sets; undefined: none. */
function setCookie(res: HttpAnswer): string | undefined {
  const all = res.headers['set-cookie'] ?? [];
  assert.ok(all.length <= 1, `one session cookie at most: ${all.join(' | ')}`);
  const line = all[0];
  if (line === undefined) return undefined;
  assert.match(line, /^shop=[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax$/);
  return line.slice(0, line.indexOf(';'));
}

/** Flips one bit of a token's sealed bytes. */
function tamper(token: string): string {
  const bytes = Buffer.from(token, 'base64url');
  bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 4;
  return bytes.toString('base64url');
}

describe('mesh api --routes: sessionPersistence', () => {
  const dir = tempDir('mesh-session-');
  const routesFile = join(dir.path, 'routes.yaml');
  let registry: Registry;
  let one: PlainApp;
  let two: PlainApp;
  let admin: PlainApp;
  let gw: GatewayProcess;

  const node = (name: string, app: PlainApp) => ({ id: `${name}-node`, address: '127.0.0.1', port: app.port, metadata: {} });
  const register = (service: string, name: string, app: PlainApp) => registry.register({ name: service, version: 'v1', metadata: {}, endpoints: [], nodes: [node(name, app)] });

  before(async () => {
    registry = createRegistry('local', dir.path);
    [one, two, admin] = await Promise.all([startPlainApp('one'), startPlainApp('two'), startPlainApp('admin')]);
    await register(WEB, 'one', one);
    await register(WEB, 'two', two);
    await register(ADMIN, 'admin', admin);
    writeFileSync(routesFile, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routesFile}`]);
  });

  after(async () => {
    await gw?.stop();
    await Promise.all([one?.close(), two?.close(), admin?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  /** One GET through the gateway: the app that answered and the answer. */
  async function get(path: string, headers: Record<string, string> = {}): Promise<{ app: string; res: HttpAnswer }> {
    const res = await http('GET', `${gw.url}${path}`, { headers });
    assert.equal(res.status, 200, res.text);
    return { app: res.json<{ app: string }>().app, res };
  }

  /** The apps that answered n requests sent with these headers, and whether any answer set a token. */
  async function apps(n: number, path: string, headers: Record<string, string> = {}, token = (res: HttpAnswer) => setCookie(res)): Promise<{ apps: Set<string>; tokens: number }> {
    const seen = new Set<string>();
    let tokens = 0;
    for (let i = 0; i < n; i++) {
      const { app, res } = await get(path, headers);
      seen.add(app);
      if (token(res) !== undefined) tokens++;
    }
    return { apps: seen, tokens };
  }

  it('the first answer sets the cookie; 20 requests with it hit the same node, without it they spread', async () => {
    const first = await get('/web/a');
    const cookie = setCookie(first.res);
    assert.ok(cookie, 'a new session gets its token');
    const pinned = await apps(20, '/web/a', { cookie: `theme=dark; ${cookie}` });
    assert.deepEqual([...pinned.apps], [first.app], 'every request of the session goes to its node');
    assert.equal(pinned.tokens, 0, 'a good token on its node is not sent again');
    const spread = await apps(20, '/web/a');
    assert.deepEqual([...spread.apps].sort(), ['one', 'two'], 'without the cookie, requests are balanced');
    assert.equal(spread.tokens, 20, 'each request without a token begins a session');
    // The backend gets the request as the client sent it, cookie included.
    const echoed = (await get('/web/a', { cookie })).res.json<{ headers: Record<string, string> }>();
    assert.equal(echoed.headers.cookie, cookie);
  });

  it('a tampered or forged token is balanced anew, and the answer carries a fresh token that holds', async () => {
    const cookie = setCookie((await get('/web/b')).res)!;
    const forged = [`shop=${tamper(cookie.slice('shop='.length))}`, `shop=${randomBytes(80).toString('base64url')}`, 'shop=../../127.0.0.1:22', 'shop='];
    for (const bad of forged) {
      const answer = await get('/web/b', { cookie: bad });
      const fresh = setCookie(answer.res);
      assert.ok(fresh && fresh !== bad && fresh !== cookie, `${bad.slice(0, 30)}: a new session`);
      const held = await apps(5, '/web/b', { cookie: fresh });
      assert.deepEqual([...held.apps], [answer.app], 'the fresh token pins its node');
    }
    // Balanced anew means both nodes are reached over a few forged tokens.
    const spread = await apps(20, '/web/b', { cookie: forged[1]! });
    assert.deepEqual([...spread.apps].sort(), ['one', 'two']);
  });

  it('a token issued for another service (same session name, another rule) never reaches that node', async () => {
    const adminAnswer = await get('/admin/x');
    assert.equal(adminAnswer.app, 'admin');
    const adminCookie = setCookie(adminAnswer.res)!;
    const stolen = await apps(20, '/web/x', { cookie: adminCookie });
    assert.ok(!stolen.apps.has('admin'), 'the web rule only sends to its own backend');
    assert.equal(stolen.tokens, 20, 'the foreign token is not the session: each answer carries a new one');
    // A Header token moved into the cookie (another session name) does not open either.
    const headerToken = (await get('/hdr/x')).res.headers['x-shop-session'] as string;
    assert.ok(setCookie((await get('/web/x', { cookie: `shop=${headerToken}` })).res));
  });

  it('the Header type: the answer carries the header; requests that send it stay on the node; a forged one is balanced anew', async () => {
    const first = await get('/hdr/a');
    const token = first.res.headers['x-shop-session'];
    assert.equal(typeof token, 'string');
    assert.equal(first.res.headers['set-cookie'], undefined, 'no cookie with the Header type');
    const headerToken = (res: HttpAnswer) => res.headers['x-shop-session'] as string | undefined;
    const pinned = await apps(20, '/hdr/a', { 'x-shop-session': token as string }, headerToken);
    assert.deepEqual([...pinned.apps], [first.app]);
    assert.equal(pinned.tokens, 0);
    const spread = await apps(20, '/hdr/a', { 'x-shop-session': tamper(token as string) }, headerToken);
    assert.deepEqual([...spread.apps].sort(), ['one', 'two']);
    assert.equal(spread.tokens, 20);
  });

  it('a node deregistered: its session is balanced anew onto the other node, with a new token', async () => {
    // A session on node "one" (sessions begin where the balancer sends them).
    let pair: string | undefined;
    await waitFor(async () => {
      const { app, res } = await get('/web/d');
      pair = setCookie(res);
      return app === 'one';
    });
    assert.deepEqual([...(await apps(5, '/web/d', { cookie: pair! })).apps], ['one']);
    await registry.deregister({ name: WEB, version: 'v1', metadata: {}, endpoints: [], nodes: [node('one', one)] });
    // Once the gateway has the registry's change, the session's request goes to "two" and gets a new token.
    const moved = await waitFor(async () => {
      const { app, res } = await get('/web/d', { cookie: pair! });
      return app === 'two' ? res : undefined;
    }, 15000);
    const fresh = setCookie(moved);
    assert.ok(fresh && fresh !== pair, 'the answer carries the new node\'s token');
    const held = await apps(10, '/web/d', { cookie: fresh });
    assert.deepEqual([...held.apps], ['two']);
    assert.equal(held.tokens, 0);
    // Node "one" is back: the new session stays on "two"; the old token, on its node again, is good again.
    await register(WEB, 'one', one);
    await waitFor(async () => (await get('/web/d', { cookie: pair! })).app === 'one', 15000);
    assert.deepEqual([...(await apps(10, '/web/d', { cookie: fresh })).apps], ['two']);
  });
});
