/**
 * A rule's `sessionPersistence` in process: the route file's field (src/edge/routes/file.ts: what
 * is read, each bad field's exact message and line, rpc and api routes and the Envoy translation
 * refusing it), the sealed token (src/edge/routes/session.ts: a forged, tampered, foreign or moved
 * token never opens) and a rule's sessions (which backend a token names, its timeouts, the answer's
 * cookie or header), on an injected clock.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkHandlers, parseRouteFile, type RuleSpec } from '../../src/edge/routes/file.js';
import { cookieValues, RuleSession, SessionTokens, type SessionToken } from '../../src/edge/routes/session.js';
import { envoyRoutes } from '../../src/xds/envoy-routes.js';
import { routeFileError } from '../fixtures/route-file-error.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

/** A proxy route of one rule; `session` is the rule's sessionPersistence lines (6 spaces in). */
function route(session: string, handler = 'proxy'): string {
  return `${HEAD}metadata: {name: r}\nspec:\n  handler: ${handler}\n  rules:\n    - name: web\n      backendRefs:\n        - {name: go.mesh.srv.a, version: v1, weight: 9}\n        - {name: go.mesh.srv.a, version: v2, weight: 1}\n      sessionPersistence:\n${session}`;
}

function rule(session: string): RuleSpec {
  return parseRouteFile(route(session), 'routes.yaml').routes[0]!.rules[0]!;
}

const error = routeFileError;

describe('sessionPersistence: the route file', () => {
  it('reads every field, with the defaults (Cookie, Session lifetime, session-<rule>)', () => {
    assert.deepEqual(rule('        sessionName: shop\n        absoluteTimeout: 1h\n        idleTimeout: 10m\n        type: Cookie\n        cookieConfig: {lifetimeType: Permanent}\n').session, {
      name: 'shop',
      type: 'Cookie',
      lifetime: 'Permanent',
      absoluteTimeoutMs: 3_600_000,
      idleTimeoutMs: 600_000,
    });
    assert.deepEqual(rule('        {}\n').session, { name: 'session-web', type: 'Cookie', lifetime: 'Session' });
    assert.deepEqual(rule('        {type: Header, sessionName: X-Shop-Session}\n').session, { name: 'x-shop-session', type: 'Header', lifetime: 'Session' });
    assert.equal(parseRouteFile(`${HEAD}metadata: {name: r}\nspec:\n  rules:\n    - backendRefs: [{name: a}]\n`, 'routes.yaml').routes[0]!.rules[0]!.session, undefined);
  });

  it('each bad field refuses the file, naming its line', () => {
    const cases: Array<[string, string]> = [
      ['        {type: Sticky}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.type: must be Cookie or Header, not "Sticky"'],
      ['        {sessionName: "a b"}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: "a b" is not a valid cookie name (letters, digits and !#$%&\'*+-.^_`|~)'],
      ['        {type: Header, sessionName: "x:y"}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: "x:y" is not a valid header name (letters, digits and !#$%&\'*+-.^_`|~)'],
      [`        {sessionName: ${'s'.repeat(129)}}\n`, 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: longer than 128 characters'],
      ['        {sessionName: ""}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: must not be empty'],
      ['        {type: Header, sessionName: Cookie}\n', "routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: Cookie cannot be a session header (a header of the request's framing or the connection, or a cookie header)"],
      ['        {type: Header, sessionName: Connection}\n', "routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: Connection cannot be a session header (a header of the request's framing or the connection, or a cookie header)"],
      ['        {type: Header, sessionName: Mesh-Session}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: Mesh-Session cannot be a session header (a header the mesh sets or reads)'],
      ['        {type: Header, sessionName: Mesh_Auth_Subject}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.sessionName: Mesh_Auth_Subject cannot be a session header (a header the mesh sets or reads)'],
      ['        {absoluteTimeout: soon}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.absoluteTimeout: must be a Gateway API duration such as 500ms, 10s or 1m30s'],
      ['        {absoluteTimeout: 0s}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.absoluteTimeout: must be longer than 0s'],
      ['        {idleTimeout: 10}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.idleTimeout: must be a Gateway API duration such as 500ms, 10s or 1m30s'],
      ['        {idleTimeout: 0ms}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.idleTimeout: must be longer than 0s'],
      ['        cookieConfig: {lifetimeType: Permanent}\n', "routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.cookieConfig: absoluteTimeout is required with lifetimeType Permanent (it is the cookie's Max-Age)"],
      ['        cookieConfig: {lifetimeType: Forever}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.cookieConfig.lifetimeType: must be Session or Permanent, not "Forever"'],
      ['        cookieConfig: {path: /}\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence.cookieConfig.path: unknown field "path" (a CookieConfig has no such field)'],
      ['        type: Header\n        cookieConfig: {lifetimeType: Session}\n', 'routes.yaml line 13: HTTPRoute r spec.rules[0].sessionPersistence.cookieConfig: cookieConfig does not go with type Header'],
      ['        sessionName: s\n        stickiness: true\n', 'routes.yaml line 13: HTTPRoute r spec.rules[0].sessionPersistence.stickiness: unknown field "stickiness" (a SessionPersistence has no such field)'],
      ['        - s\n', 'routes.yaml line 12: HTTPRoute r spec.rules[0].sessionPersistence: must be a mapping (a SessionPersistence)'],
    ];
    for (const [session, message] of cases) assert.equal(error(route(session)), message, session);
  });

  it('rpc and api routes refuse it, naming why; the Envoy translation refuses it', () => {
    const text = route('        {sessionName: s}\n', 'rpc');
    assert.throws(() => checkHandlers(parseRouteFile(text, 'routes.yaml'), 'proxy'), {
      message: "routes.yaml line 7: HTTPRoute r spec.rules[0].sessionPersistence needs a proxy route (handler: proxy); this route's handler is rpc, whose calls go through the framework client: it picks a node per call and gives no answer header for the session's token",
    });
    const plain = `${HEAD}metadata: {name: r}\nspec:\n  rules:\n    - backendRefs: [{name: a}]\n      sessionPersistence: {sessionName: s}\n`;
    assert.throws(() => checkHandlers(parseRouteFile(plain, 'routes.yaml'), 'api'), { message: /^routes\.yaml line 6: HTTPRoute r spec\.rules\[0\]\.sessionPersistence needs a proxy route \(handler: proxy\); this route's handler is api, / });
    checkHandlers(parseRouteFile(plain, 'routes.yaml'), 'proxy');
    checkHandlers(parseRouteFile(route('        {sessionName: s}\n'), 'routes.yaml'), 'api');
    assert.throws(() => envoyRoutes(parseRouteFile(plain, 'routes.yaml'), { address: { host: '127.0.0.1', port: 10000 } }), {
      message: 'routes.yaml line 6: HTTPRoute r spec.rules[0].sessionPersistence is not translated for Envoy (mesh api, mesh sidecar and mesh proxy serve it)',
    });
  });
});

const TOKEN: SessionToken = { service: 'go.mesh.srv.a', version: 'v1', key: '10.0.0.7:8080', nodeId: 'a-1', start: 1_000, last: 2_000 };

describe('sessionPersistence: the token', () => {
  it('opens what it sealed, and nothing else: tampered, another key, another session name, garbage', () => {
    const tokens = new SessionTokens();
    const sealed = tokens.seal('shop', TOKEN);
    assert.match(sealed, /^[A-Za-z0-9_-]+$/);
    assert.ok(!sealed.includes('10.0.0.7') && !Buffer.from(sealed, 'base64url').toString('latin1').includes('10.0.0.7'), 'the node is not readable in the token');
    assert.deepEqual(tokens.open('shop', sealed), TOKEN);
    assert.notEqual(tokens.seal('shop', TOKEN), sealed, 'each token is sealed with its own IV');
    const bytes = Buffer.from(sealed, 'base64url');
    for (const at of [0, 12, bytes.length - 20, bytes.length - 1]) {
      const tampered = Buffer.from(bytes);
      tampered[at] = tampered[at]! ^ 1;
      assert.equal(tokens.open('shop', tampered.toString('base64url')), undefined, `byte ${at} flipped`);
    }
    assert.equal(new SessionTokens().open('shop', sealed), undefined, 'another process (key)');
    assert.equal(tokens.open('cart', sealed), undefined, 'moved to another session name');
    for (const junk of ['', 'x', 'a.b', sealed.slice(0, 20), `${sealed}A`, 'A'.repeat(3000)]) assert.equal(tokens.open('shop', junk), undefined, junk.slice(0, 30));
    assert.throws(() => new SessionTokens(Buffer.alloc(16)), /a session key is 32 bytes/);
  });

  it('reads a cookie among others, quoted or not, every value of the name', () => {
    assert.deepEqual(cookieValues('a=1; shop=xyz; b=2', 'shop'), ['xyz']);
    assert.deepEqual(cookieValues('shop="q"; shop=r', 'shop'), ['q', 'r']);
    assert.deepEqual(cookieValues('shopping=1; xshop=2', 'shop'), []);
    assert.deepEqual(cookieValues(undefined, 'shop'), []);
  });
});

describe('sessionPersistence: a rule', () => {
  const refs = rule('        {sessionName: shop}\n').backendRefs;
  const node = { key: '10.0.0.7:8080', nodeId: 'a-1' };

  function session(spec: string, clock: { now: number }, tokens = new SessionTokens()): RuleSession {
    return new RuleSession(rule(spec).session!, tokens, () => clock.now);
  }

  it('a new session: the answer sets the cookie; the next request finds its backend and node; the same node sets nothing', () => {
    const clock = { now: 10_000 };
    const s = session('        {sessionName: shop}\n', clock);
    const first = s.call(refs[1]!, undefined, false);
    assert.equal(first.prefer, undefined);
    const [name, cookie] = first.answerHeader(node)!;
    assert.equal(name, 'set-cookie');
    assert.match(cookie, /^shop=[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax$/);
    const token = cookie.slice('shop='.length, cookie.indexOf(';'));
    clock.now += 5_000;
    const hit = s.find({ cookie: `other=1; shop=${token}` }, refs)!;
    assert.equal(hit.backend, refs[1], 'the backend the session began on (v2), whatever the weights');
    assert.deepEqual([hit.token.start, hit.token.last], [10_000, 10_000]);
    const again = s.call(hit.backend, hit, true);
    assert.deepEqual(again.prefer, node);
    assert.equal(again.answerHeader(node), undefined, 'the same node: the token stays');
    // Another node took the request (the pinned one was gone): a new token, a new session.
    const moved = again.answerHeader({ key: '10.0.0.8:8080', nodeId: 'a-2' })!;
    assert.match(moved[1], /; Secure$/);
    const next = s.find({ cookie: moved[1].slice(0, moved[1].indexOf(';')) }, refs)!;
    assert.deepEqual([next.token.key, next.token.start], ['10.0.0.8:8080', 15_000]);
  });

  it('a token naming a backend the rule does not send to (another service or version, weight 0) is not a session', () => {
    const clock = { now: 10_000 };
    const tokens = new SessionTokens();
    const s = session('        {sessionName: shop}\n', clock, tokens);
    for (const t of [{ ...TOKEN, service: 'go.mesh.srv.admin' }, { ...TOKEN, version: 'v3' }, { ...TOKEN, version: '' }]) {
      assert.equal(s.find({ cookie: `shop=${tokens.seal('shop', { ...t, start: 9_000, last: 9_000 })}` }, refs), undefined, JSON.stringify(t));
    }
    const good = `shop=${tokens.seal('shop', { ...TOKEN, start: 9_000, last: 9_000 })}`;
    assert.equal(s.find({ cookie: good }, refs)?.backend, refs[0]);
    assert.equal(s.find({ cookie: good }, [{ ...refs[0]!, weight: 0 }, refs[1]!]), undefined, 'weight 0: never picked, sessions included');
    assert.equal(s.find({ cookie: `shop=${tokens.seal('shop', { ...TOKEN, start: 9_000 + 120_000, last: 9_000 + 120_000 })}` }, refs), undefined, 'a start in the future');
  });

  it('absoluteTimeout ends the session; a Permanent cookie has its Max-Age left', () => {
    const clock = { now: 100_000 };
    const tokens = new SessionTokens();
    const s = session('        {sessionName: shop, absoluteTimeout: 1m, cookieConfig: {lifetimeType: Permanent}}\n', clock, tokens);
    const cookie = s.call(refs[0]!, undefined, false).answerHeader(node)![1];
    assert.match(cookie, /; Max-Age=60$/);
    const pair = cookie.slice(0, cookie.indexOf(';'));
    clock.now += 59_000;
    const hit = s.find({ cookie: pair }, refs)!;
    assert.ok(hit);
    assert.match(s.call(hit.backend, hit, false).answerHeader({ key: 'b:1', nodeId: 'b' })![1], /; Max-Age=60$/, 'a new session on another node starts again');
    clock.now += 1_000;
    assert.equal(s.find({ cookie: pair }, refs), undefined, 'a minute after it began');
  });

  it('idleTimeout: every answer refreshes the token; one not refreshed in time ends the session', () => {
    const clock = { now: 100_000 };
    const s = session('        {type: Header, sessionName: X-Session, idleTimeout: 10s, absoluteTimeout: 1m}\n', clock);
    const [name, first] = s.call(refs[0]!, undefined, false).answerHeader(node)!;
    assert.equal(name, 'x-session');
    clock.now += 9_000;
    const hit = s.find({ 'x-session': first }, refs)!;
    assert.ok(hit);
    const [, refreshed] = s.call(hit.backend, hit, false).answerHeader(node)!;
    assert.notEqual(refreshed, first);
    clock.now += 9_000;
    assert.equal(s.find({ 'x-session': first }, refs), undefined, 'the first token: 18 s idle');
    const later = s.find({ 'x-session': refreshed }, refs)!;
    assert.deepEqual([later.token.start, later.token.last], [100_000, 109_000], 'the session keeps its start');
    clock.now = 100_000 + 60_000;
    assert.equal(s.find({ 'x-session': s.call(later.backend, later, false).answerHeader(node)![1] }, refs), undefined, 'absoluteTimeout still ends it');
  });
});
