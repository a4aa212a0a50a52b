/**
 * Authentication and authorization at the gateway (docs/security.md), against real `mesh api`
 * processes: bearer JWTs checked against a JWKS served by a real local HTTP server (and read from
 * a file), API keys, the rules (first match, /rpc by service and method, SIGHUP reload, a bad
 * file at start), the Mesh-Auth-* metadata a backend sees and the removal of spoofed ones.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CompactSign, SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, listenLoopback, rawHttp, runCli, tempDir, waitFor } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const ISSUER = 'https://issuer.test';
const AUDIENCE = 'mesh-api';
const err = (code: number, status: string, detail: string) => JSON.stringify({ id: 'go.mesh.auth', code, detail, status });
const unauthorized = (detail: string) => err(401, 'Unauthorized', detail);
const forbidden = (detail: string) => err(403, 'Forbidden', detail);
const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

const RULES = `# first match wins
rules:
  - service: go.mesh.api.plain
    endpoint: Public.*
    access: public
  - service: go.mesh.api.plain
    endpoint: Admin.*
    scopes: [admin, root]
  - service: go.mesh.api.plain
    endpoint: Blocked.*
    access: deny
  - path: /plain/
    access: authenticated
`;

describe('gateway auth: JWT, API keys, rules', () => {
  const dir = tempDir('mesh-auth-');
  let registry: Registry;
  let plain: PlainApp;
  let jwksServer: Server;
  let jwksClose: () => Promise<void>;
  let gw: GatewayProcess;
  let fileGw: GatewayProcess;
  let keyGw: GatewayProcess;
  let openGw: GatewayProcess;
  const keys: Record<string, { privateKey: CryptoKey; publicKey: CryptoKey }> = {};
  const rulesFile = join(dir.path, 'rules.yaml');
  const apiKey = 'k-0123456789abcdef-plain';
  const hashedKey = 'k-fedcba9876543210-hashed';

  const token = async (opts: { kid?: string; alg?: string; key?: CryptoKey; sub?: string; scope?: string; iss?: string; aud?: string; exp?: number | string } = {}) => {
    const kid = opts.kid ?? 'k1';
    const alg = opts.alg ?? (kid === 'k2' ? 'RS256' : 'ES256');
    let jwt = new SignJWT({ scope: opts.scope ?? 'read admin' })
      .setProtectedHeader({ alg, kid })
      .setSubject(opts.sub ?? 'alice')
      .setIssuer(opts.iss ?? ISSUER)
      .setAudience(opts.aud ?? AUDIENCE)
      .setIssuedAt();
    jwt = jwt.setExpirationTime(opts.exp ?? '5m');
    return jwt.sign(opts.key ?? keys[kid]!.privateKey);
  };
  /** A token signed by k1 over the payload bytes as given (numbers JSON.stringify cannot write). */
  const rawSigned = (payload: string) => new CompactSign(Buffer.from(payload)).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).sign(keys.k1!.privateKey);
  const get = (g: GatewayProcess, path: string, headers: Record<string, string> = {}) => http('GET', `${g.url}${path}`, { headers });
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
  const lastSeen = () => plain.received[plain.received.length - 1]!;

  before(async () => {
    for (const [kid, alg] of [['k1', 'ES256'], ['k2', 'RS256'], ['k3', 'ES256'], ['other', 'ES256']] as const) keys[kid] = await generateKeyPair(alg, { extractable: true });
    const jwk = async (kid: string, alg: string) => ({ ...(await exportJWK(keys[kid]!.publicKey)), kid, alg, use: 'sig' });
    const jwks = { keys: [await jwk('k1', 'ES256'), await jwk('k2', 'RS256')] };
    jwksServer = createServer((req, res) => {
      const body = JSON.stringify(jwks);
      res.writeHead(req.url === '/jwks.json' ? 200 : 404, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    const l = await listenLoopback(jwksServer);
    jwksClose = l.close;
    writeFileSync(join(dir.path, 'jwks.json'), JSON.stringify(jwks));
    writeFileSync(rulesFile, RULES);
    const sha = createHash('sha256').update(hashedKey).digest('hex');
    writeFileSync(join(dir.path, 'keys.txt'), `# API keys\n${apiKey} billing read,write\nsha256:${sha} reports read\n`);

    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    const common = ['--handler=rpc', `--auth_issuer=${ISSUER}`, `--auth_audience=${AUDIENCE}`];
    [gw, fileGw, keyGw, openGw] = await Promise.all([
      startGatewayProcess(dir.path, ['--auth=jwt', `--auth_jwks=http://127.0.0.1:${l.port}/jwks.json`, `--auth_rules=${rulesFile}`, ...common]),
      startGatewayProcess(dir.path, ['--auth=jwt', `--auth_jwks=${join(dir.path, 'jwks.json')}`, ...common]),
      startGatewayProcess(dir.path, ['--handler=rpc', '--auth=key', `--auth_keys=${join(dir.path, 'keys.txt')}`]),
      startGatewayProcess(dir.path, ['--handler=rpc']),
    ]);
  });

  after(async () => {
    await Promise.all([gw?.stop(), fileGw?.stop(), keyGw?.stop(), openGw?.stop()]);
    await plain?.close();
    await jwksClose?.().catch(() => undefined);
    await registry?.close();
    dir.cleanup();
  });

  it('a valid token: 200, and the backend sees the subject and scopes, never the client\'s own Mesh-Auth-* headers', async () => {
    const r = await get(gw, '/plain/echo/call', { ...bearer(await token()), 'mesh-auth-subject': 'root', 'Mesh-Auth-Scopes': 'everything', 'mesh-auth-other': 'x' });
    assert.equal(r.status, 200, r.text);
    const seen = lastSeen().headers;
    assert.equal(seen['mesh-auth-subject'], 'alice');
    assert.equal(seen['mesh-auth-scopes'], 'read admin');
    assert.equal(seen['mesh-auth-other'], undefined);
    // RS256 from the same JWKS
    const rs = await get(gw, '/plain/echo/call', bearer(await token({ kid: 'k2', sub: 'bob', scope: 'read' })));
    assert.equal(rs.status, 200, rs.text);
    assert.equal(lastSeen().headers['mesh-auth-subject'], 'bob');
  });

  it('Mesh-Auth-Subject and Mesh-Auth-Scopes: every byte outside the unreserved set percent-encoded, so no two subjects look the same', async () => {
    const cases: Array<[string, string, string, string]> = [
      ['bób', 'read', 'b%C3%B3b', 'read'],
      ['b%C3%B3b', 'read', 'b%25C3%25B3b', 'read'],
      ['auth0|42 x@y.z', 'read:all é%', 'auth0%7C42%20x%40y.z', 'read%3Aall %C3%A9%25'],
      ['A-z_0.9~', 'a b', 'A-z_0.9~', 'a b'],
    ];
    for (const [sub, scope, subject, scopes] of cases) {
      const r = await get(gw, '/plain/echo/call', bearer(await token({ sub, scope })));
      assert.equal(r.status, 200, r.text);
      assert.equal(lastSeen().headers['mesh-auth-subject'], subject, sub);
      assert.equal(lastSeen().headers['mesh-auth-scopes'], scopes, scope);
      assert.equal(decodeURIComponent(subject), sub);
    }
    // a lone surrogate has no UTF-8 form (it would arrive as U+FFFD, as another subject would)
    const lone = await get(gw, '/plain/echo/call', bearer(await rawSigned(`{"sub":"\\ud800","iss":"${ISSUER}","aud":"${AUDIENCE}","exp":${Math.floor(Date.now() / 1000) + 300}}`)));
    assert.equal(lone.status, 401);
    assert.equal(lone.text, unauthorized('invalid token: "sub" is not valid Unicode'));
  });

  it('a public rule: no token needed, and spoofed metadata is removed all the same', async () => {
    const r = await get(gw, '/plain/public/hello', { 'mesh-auth-subject': 'root' });
    assert.equal(r.status, 200, r.text);
    assert.equal(lastSeen().headers['mesh-auth-subject'], undefined);
  });

  it('auth off: the request goes through, and the client\'s Mesh-Auth-* and Mesh-Sidecar-Token headers are removed all the same', async () => {
    const r = await get(openGw, '/plain/echo/call', { 'Mesh-Auth-Subject': 'root', 'mesh-auth-scopes': 'everything', 'Mesh-Sidecar-Token': 't', 'x-kept': 'yes' });
    assert.equal(r.status, 200, r.text);
    const seen = lastSeen().headers;
    assert.equal(seen['mesh-auth-subject'], undefined);
    assert.equal(seen['mesh-auth-scopes'], undefined);
    assert.equal(seen['mesh-sidecar-token'], undefined);
    assert.equal(seen['x-kept'], 'yes');
  });

  it('no token where one is needed: 401 with the Bearer challenge', async () => {
    const r = await get(gw, '/plain/echo/call');
    assert.equal(r.status, 401);
    assert.equal(r.headers['www-authenticate'], 'Bearer realm="mesh"');
    assert.equal(r.text, unauthorized('a bearer token is required (Authorization: Bearer <token>)'));
  });

  it('expired, wrongly signed, alg none, wrong audience, wrong issuer: 401 invalid_token', async () => {
    const now = Math.floor(Date.now() / 1000);
    const cases: Array<[string, string]> = [
      [await token({ exp: now - 3600 }), 'invalid token: expired'],
      [await token({ key: keys.other!.privateKey }), 'invalid token: signature verification failed'],
      [`${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: 'alice', iss: ISSUER, aud: AUDIENCE, exp: now + 300 })}.`, 'invalid token: algorithm none is not allowed'],
      [`${b64({ alg: 'HS256', kid: 'k1' })}.${b64({ sub: 'alice', exp: now + 300 })}.c2ln`, 'invalid token: algorithm HS256 is not allowed'],
      [await token({ aud: 'someone-else' }), 'invalid token: audience not accepted'],
      [await token({ iss: 'https://evil.test' }), 'invalid token: issuer not accepted'],
      ['not-a-jwt', 'invalid token: malformed'],
      // signed, with a time claim that JSON reads as Infinity: never expires unless refused
      [await rawSigned(`{"sub":"alice","iss":"${ISSUER}","aud":"${AUDIENCE}","exp":1e400}`), 'invalid token: "exp" is not a finite number'],
      [await rawSigned(`{"sub":"alice","iss":"${ISSUER}","aud":"${AUDIENCE}","exp":${now + 300},"iat":1e400}`), 'invalid token: "iat" is not a finite number'],
    ];
    for (const [t, detail] of cases) {
      // even on a public route: a credential that is sent must be valid
      for (const path of ['/plain/echo/call', '/plain/public/x']) {
        const r = await get(gw, path, bearer(t));
        assert.equal(r.status, 401, `${detail} on ${path}`);
        assert.equal(r.headers['www-authenticate'], 'Bearer realm="mesh", error="invalid_token"');
        assert.equal(r.text, unauthorized(detail));
      }
    }
    // within the clock skew (30s): still accepted
    assert.equal((await get(gw, '/plain/echo/call', bearer(await token({ exp: now - 5 })))).status, 200);
  });

  it('rules: first match wins; a missing scope is 403, a deny rule is 403', async () => {
    const noAdmin = await token({ scope: 'read' });
    const r = await get(gw, '/plain/admin/reset', bearer(noAdmin));
    assert.equal(r.status, 403);
    assert.equal(r.headers['www-authenticate'], 'Bearer realm="mesh", error="insufficient_scope", scope="admin root"');
    assert.equal(r.text, forbidden('access to go.mesh.api.plain Admin.Reset needs scope admin or root (rule 2)'));
    assert.equal((await get(gw, '/plain/admin/reset', bearer(await token({ scope: 'root' })))).status, 200);
    const blocked = await get(gw, '/plain/blocked/x', bearer(await token()));
    assert.equal(blocked.status, 403);
    assert.equal(blocked.text, forbidden('access to go.mesh.api.plain Blocked.X denied by rule 3'));
    // Admin.* without a token: 401, not 403
    assert.equal((await get(gw, '/plain/admin/reset')).status, 401);
  });

  it('/rpc: the rules apply to the service and method of the body', async () => {
    const rpc = (body: unknown, headers: Record<string, string> = {}) =>
      http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const open = await rpc({ service: 'go.mesh.api.plain', method: 'Public.Hi', request: {} });
    assert.equal(open.status, 200, open.text);
    const needs = await rpc({ service: 'go.mesh.api.plain', method: 'Echo.Call', request: {} });
    assert.equal(needs.status, 401);
    assert.equal(needs.text, unauthorized('a bearer token is required (Authorization: Bearer <token>)'));
    const blocked = await rpc({ service: 'go.mesh.api.plain', endpoint: 'Blocked.Call' }, bearer(await token()));
    assert.equal(blocked.status, 403);
    assert.equal(blocked.text, forbidden('access to go.mesh.api.plain Blocked.Call denied by rule 3'));
    const ok = await rpc({ service: 'go.mesh.api.plain', method: 'Echo.Call' }, bearer(await token({ sub: 'carol' })));
    assert.equal(ok.status, 200, ok.text);
    assert.equal(lastSeen().headers['mesh-auth-subject'], 'carol');
  });

  it('dot segments are removed before the rules decide; a path that cannot be normalized safely: 400', async () => {
    for (const path of ['/plain/public/../admin/reset', '/plain/public/%2E%2E/admin/reset', '/plain/%61dmin/reset']) {
      const r = await rawHttp(gw.port, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 401, path);
      assert.equal(r.body, unauthorized('a bearer token is required (Authorization: Bearer <token>)'), path);
    }
    const refused: Array<[string, string]> = [
      ['/plain/public%2fx', 'invalid path: an encoded "/" (%2F) is refused'],
      ['//plain/admin/reset', 'invalid path: an empty segment ("//") is refused'],
    ];
    for (const [path, detail] of refused) {
      const r = await rawHttp(gw.port, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      assert.equal(r.status, 400, path);
      assert.equal(r.body, JSON.stringify({ id: 'go.mesh.api', code: 400, detail, status: 'Bad Request' }));
    }
  });

  it('a JWKS file works the same; no rules file: every request needs a token', async () => {
    assert.equal((await get(fileGw, '/plain/public/x')).status, 401);
    assert.equal((await get(fileGw, '/plain/public/x', bearer(await token({ kid: 'k2' })))).status, 200);
  });

  it('API keys: plaintext and sha256: entries; a wrong key is 401; the key is not forwarded', async () => {
    const ok = await get(keyGw, '/plain/echo/call', { authorization: `Bearer ${apiKey}` });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(lastSeen().headers['mesh-auth-subject'], 'billing');
    assert.equal(lastSeen().headers['mesh-auth-scopes'], 'read write');
    assert.equal(lastSeen().headers.authorization, undefined);
    const hashed = await get(keyGw, '/plain/echo/call', { authorization: `Bearer ${hashedKey}` });
    assert.equal(hashed.status, 200, hashed.text);
    assert.equal(lastSeen().headers['mesh-auth-subject'], 'reports');
    const bad = await get(keyGw, '/plain/echo/call', { authorization: `Bearer ${apiKey}x` });
    assert.equal(bad.status, 401);
    assert.equal(bad.headers['www-authenticate'], 'Bearer realm="mesh", error="invalid_token"');
    assert.equal(bad.text, unauthorized('invalid API key'));
    const none = await get(keyGw, '/plain/echo/call');
    assert.equal(none.text, unauthorized('an API key is required (Authorization: Bearer <key>)'));
    const basic = await get(keyGw, '/plain/echo/call', { authorization: 'Basic YTpi' });
    assert.equal(basic.headers['www-authenticate'], 'Bearer realm="mesh", error="invalid_request"');
    assert.equal(basic.text, unauthorized('Authorization: use the Bearer scheme'));
  });

  it('stats count allowed, denied and unauthenticated requests', async () => {
    const r = await http('GET', `${keyGw.admin}/stats?filter=auth`);
    const stats = Object.fromEntries(r.text.trim().split('\n').map((l) => l.split(': ')));
    assert.equal(stats['http.gateway.auth.allowed'], '2');
    assert.equal(stats['http.gateway.auth.unauthenticated'], '3');
    assert.equal(stats['http.gateway.auth.denied'], '0');
  });

  it('admin /auth_rules shows the rules; SIGHUP reloads a good file, and keeps the old rules on a bad one', async () => {
    const dump = (await http('GET', `${gw.admin}/auth_rules`)).json();
    assert.equal(dump.auth, 'jwt');
    assert.equal(dump.default, 'authenticated');
    assert.deepEqual(dump.rules[0], { index: 1, line: 3, service: 'go.mesh.api.plain', endpoint: 'Public.*', access: 'public' });
    assert.deepEqual(dump.rules[1], { index: 2, line: 6, service: 'go.mesh.api.plain', endpoint: 'Admin.*', scopes: ['admin', 'root'] });
    assert.equal(dump.rules.length, 4);

    // good file: Blocked.* becomes public
    writeFileSync(rulesFile, '- service: go.mesh.api.plain\n  endpoint: Blocked.*\n  access: public\n');
    gw.proc.child.kill('SIGHUP');
    await waitFor(async () => (await http('GET', `${gw.admin}/auth_rules`)).json().rules.length === 1);
    assert.equal((await get(gw, '/plain/blocked/x')).status, 200);
    assert.equal((await get(gw, '/plain/echo/call')).status, 401);

    // bad file: the old rules stay, the error is logged with its line
    writeFileSync(rulesFile, '- service: go.mesh.api.plain\n  endpoint: Blocked.*\n  access: pubic\n');
    gw.proc.child.kill('SIGHUP');
    await gw.proc.waitForOutput(/auth reload failed/);
    assert.match(gw.proc.output(), /--auth_rules \S+rules\.yaml: line 3: rule 1: access \\"pubic\\" is not public, authenticated or deny/);
    const after = (await http('GET', `${gw.admin}/auth_rules`)).json();
    assert.equal(after.rules.length, 1);
    assert.match(after.last_reload_error, /line 3: rule 1: access "pubic"/);
    assert.equal((await get(gw, '/plain/blocked/x')).status, 200);
    const stats = (await http('GET', `${gw.admin}/stats?filter=auth.rules`)).text;
    assert.equal(stats, 'auth.rules.update_failure: 1\nauth.rules.update_success: 1\n');
  });

  it('the JWKS server down: a known key still verifies, a new key id gets 401 at once', async () => {
    await jwksClose();
    assert.equal((await get(gw, '/plain/echo/call', bearer(await token()))).status, 200);
    const started = Date.now();
    const r = await get(gw, '/plain/echo/call', bearer(await token({ kid: 'k3' })));
    const ms = Date.now() - started;
    assert.equal(r.status, 401);
    assert.equal(r.text, unauthorized('invalid token: no key with kid "k3" in the JWKS'));
    // measured: a refused connection or the cooldown answers at once; the bound is the fetch timeout (3 s)
    assert.ok(ms < 4000, `took ${ms} ms`);
  });

  it('a rules file with an error stops the start: exit 2 naming the line (YAML and JSON)', async () => {
    const bad = join(dir.path, 'bad.yaml');
    writeFileSync(bad, 'rules:\n  - path: /a\n    access: public\n  - service: x\n    acess: deny\n');
    const y = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, '--auth=key', `--auth_keys=${join(dir.path, 'keys.txt')}`, `--auth_rules=${bad}`]);
    assert.equal(y.code, 2, y.stderr);
    assert.equal(y.stderr, `mesh: invalid value "${bad}" for flag --auth_rules: line 5: rule 2: unknown field "acess" (use service, endpoint, path, ignore_case, access, scopes, rate_limit, rate_limit_burst, name)\n`);
    // A rule's path is read like a request path: what a request could not carry is an error too.
    const badPath = join(dir.path, 'bad-path.yaml');
    writeFileSync(badPath, 'rules:\n  - path: /a;b/\n    access: deny\n  - path: /c\n    ignore_case: yes\n    access: deny\n');
    const p = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, `--auth_rules=${badPath}`]);
    assert.equal(p.code, 2, p.stderr);
    assert.equal(p.stderr, `mesh: invalid value "${badPath}" for flag --auth_rules: line 2: rule 1: path "/a;b/": ";" (path parameters) is refused\n`);
    writeFileSync(badPath, 'rules:\n  - path: /c\n    ignore_case: yes\n    access: deny\n');
    const c = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, `--auth_rules=${badPath}`]);
    assert.equal(c.code, 2, c.stderr);
    assert.equal(c.stderr, `mesh: invalid value "${badPath}" for flag --auth_rules: line 3: rule 1: ignore_case must be true or false\n`);
    const badRate = join(dir.path, 'bad-rate.yaml');
    writeFileSync(badRate, 'rules:\n  - path: /a\n    access: public\n    rate_limit: fast\n');
    const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, `--auth_rules=${badRate}`]);
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.stderr, `mesh: invalid value "${badRate}" for flag --auth_rules: line 4: rule 1: rate_limit "fast": use N/s, N/m, N/h or N/<duration> (e.g. 100/s), or 0 for no limit\n`);
    const badJson = join(dir.path, 'bad.json');
    writeFileSync(badJson, '[\n  {"path": "/a", "access": "public"},\n  {"path": "/b" "access": "deny"}\n]\n');
    const j = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, `--auth_rules=${badJson}`]);
    assert.equal(j.code, 2, j.stderr);
    assert.match(j.stderr, new RegExp(`^mesh: invalid value "${badJson.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}" for flag --auth_rules: line 3: not valid JSON`));
  });
});

describe('a rule with its own rate limit', () => {
  const dir = tempDir('mesh-auth-rate-');
  let registry: Registry;
  let plain: PlainApp;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    await registerPlain(registry, 'go.mesh.api.other', plain.port);
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, 'rules:\n  - service: go.mesh.api.plain\n    endpoint: Costly.*\n    access: public\n    rate_limit: 1/h\n    rate_limit_burst: 2\n  - path: /\n    access: public\n');
    gw = await startGatewayProcess(dir.path, [`--auth_rules=${rules}`]);
  });
  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('the rule\'s bucket refuses the third request with 429 and the RateLimit fields; other resources are not limited', async () => {
    const costly = () => http('GET', `${gw.url}/plain/costly/run`);
    const first = await costly();
    assert.equal(first.status, 201, first.text); // the plain app's answer status
    assert.equal(first.headers['ratelimit-policy'], '"rule-1";q=2;w=7200');
    assert.equal((await costly()).status, 201);
    const third = await costly();
    assert.equal(third.status, 429);
    assert.equal(third.text, JSON.stringify({ id: 'go.mesh.api', code: 429, detail: `rate limit of 1/h (burst 2) exceeded (rule 1): retry after ${third.headers['retry-after']}s`, status: 'Too Many Requests' }));
    assert.ok(Number(third.headers['retry-after']) > 1000, String(third.headers['retry-after']));
    assert.match(String(third.headers.ratelimit), /^"rule-1";r=0;t=\d+$/);
    for (let i = 0; i < 5; i++) assert.equal((await http('GET', `${gw.url}/plain/cheap/run`)).status, 201);
    for (let i = 0; i < 5; i++) assert.equal((await http('GET', `${gw.url}/other/costly/run`)).status, 201);
    const shown = (await http('GET', `${gw.admin}/auth_rules`)).json<{ rules: Array<Record<string, unknown>> }>();
    assert.deepEqual(shown.rules[0]!.rate_limit, { per_second: 1 / 3600, burst: 2 });
    // Without --rate_limit the rules' buckets are the guard's own store, counted as a shared store's are.
    const stats = (await http('GET', `${gw.admin}/stats?filter=${encodeURIComponent('^rate_limit\\.rule\\.')}`)).text;
    assert.match(stats, /^rate_limit\.rule\.allowed: 2$/m, stats);
    assert.match(stats, /^rate_limit\.rule\.limited: 1$/m, stats);
  });
});
