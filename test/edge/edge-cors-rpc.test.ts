/**
 * CORS (src/base/http/cors.ts, --cors, --cors_max_age) and the scoped /rpc (--rpc_allow,
 * --enable_rpc) on a real gateway on loopback, with exact headers and error JSON.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { FlagError, parseArgs } from '../../src/cli/flags.js';
import { resolveOptions } from '../../src/process/options.js';
import { globMatcher } from '../../src/base/util/regex.js';
import { http } from '../helpers.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startEdgeGateway, type EdgeGateway } from '../fixtures/edge-gateway.js';

const JSON_HEADERS = { 'content-type': 'application/json' };
const CORS_HEADERS = ['access-control-allow-origin', 'access-control-allow-credentials', 'access-control-allow-methods', 'access-control-allow-headers', 'access-control-max-age', 'access-control-expose-headers', 'vary'];

/** The CORS headers of an answer, those present only. */
function corsOf(headers: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(CORS_HEADERS.filter((h) => headers[h] !== undefined).map((h) => [h, headers[h]]));
}

describe('CORS', () => {
  let any: EdgeGateway;
  let listed: EdgeGateway;

  before(async () => {
    [any, listed] = await Promise.all([
      startEdgeGateway(['--cors=*']),
      startEdgeGateway(['--cors=http://a.example,https://b.example:8443', '--cors_max_age=120']),
    ]);
  });
  after(async () => {
    await Promise.all([any?.close(), listed?.close()]);
  });

  it('* : Access-Control-Allow-Origin: * on every answer, never credentials, no Vary', async () => {
    const res = await http('GET', `${any.url}/`, { headers: { origin: 'http://evil.example', cookie: 'a=b' } });
    assert.equal(res.status, 200);
    assert.deepEqual(corsOf(res.headers), { 'access-control-allow-origin': '*', 'access-control-expose-headers': 'Retry-After, RateLimit, RateLimit-Policy, Grpc-Status, Grpc-Message' });
    const noOrigin = await http('GET', `${any.url}/`);
    assert.deepEqual(corsOf(noOrigin.headers), { 'access-control-allow-origin': '*' });
    const pre = await http('OPTIONS', `${any.url}/greeter/say/hello`, {
      headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,mesh-timeout' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.text, '');
    assert.deepEqual(corsOf(pre.headers), {
      'access-control-allow-origin': '*',
      'access-control-allow-methods': 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
      'access-control-allow-headers': 'content-type, mesh-timeout',
      'access-control-max-age': '600',
    });
  });

  it('a list: a listed origin is reflected with credentials and Vary: Origin; another gets no CORS header', async () => {
    const ok = await http('GET', `${listed.url}/`, { headers: { origin: 'https://b.example:8443' } });
    assert.equal(ok.status, 200);
    assert.deepEqual(corsOf(ok.headers), {
      'access-control-allow-origin': 'https://b.example:8443',
      'access-control-allow-credentials': 'true',
      'access-control-expose-headers': 'Retry-After, RateLimit, RateLimit-Policy, Grpc-Status, Grpc-Message',
      vary: 'Origin',
    });
    for (const origin of ['http://evil.example', 'https://b.example', 'http://a.example.evil.example', 'null']) {
      const other = await http('GET', `${listed.url}/`, { headers: { origin } });
      assert.equal(other.status, 200, origin);
      assert.deepEqual(corsOf(other.headers), { vary: 'Origin' }, origin);
    }
    assert.deepEqual(corsOf((await http('GET', `${listed.url}/`)).headers), { vary: 'Origin' });
    // An error answer carries them too.
    const err = await http('GET', `${listed.url}/nope/x`, { headers: { origin: 'http://a.example' } });
    assert.equal(err.status, 404);
    assert.equal(err.headers['access-control-allow-origin'], 'http://a.example');
  });

  it('preflight: 204 with methods, the requested headers when allowed (else the fixed list), --cors_max_age; none for another origin', async () => {
    const pre = await http('OPTIONS', `${listed.url}/rpc`, {
      headers: { origin: 'http://a.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'Content-Type, Authorization, Mesh-Request-Id' },
    });
    assert.equal(pre.status, 204);
    assert.deepEqual(corsOf(pre.headers), {
      'access-control-allow-origin': 'http://a.example',
      'access-control-allow-credentials': 'true',
      'access-control-allow-methods': 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
      'access-control-allow-headers': 'content-type, authorization, mesh-request-id',
      'access-control-max-age': '120',
      vary: 'Origin',
    });
    const odd = await http('OPTIONS', `${listed.url}/rpc`, {
      headers: { origin: 'http://a.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, x-secret' },
    });
    assert.equal(odd.headers['access-control-allow-headers'], 'Accept, Accept-Language, Content-Language, Content-Type, Authorization, X-Requested-With, Traceparent, Tracestate, X-Grpc-Web, X-User-Agent, Grpc-Timeout');
    const evil = await http('OPTIONS', `${listed.url}/rpc`, { headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' } });
    assert.equal(evil.status, 204);
    assert.deepEqual(corsOf(evil.headers), { vary: 'Origin' });
    // A plain OPTIONS (no Access-Control-Request-Method) is not a preflight: the handler answers it.
    const plain = await http('OPTIONS', `${listed.url}/`, { headers: { origin: 'http://a.example' } });
    assert.equal(plain.status, 405);
  });

  it('flags: * alone, origins as scheme://host[:port]; bad values are FlagErrors; the API option too', () => {
    assert.deepEqual(parseArgs(['--cors=*'], {}).config.cors, ['*']);
    assert.equal(parseArgs([], {}).config.cors_max_age, 600);
    for (const [value, why] of [
      ['*,http://a.example', '* allows every origin: give it alone, or list the origins'],
      ['a.example', '"a.example" is not an origin: use scheme://host[:port] (e.g. https://app.example.com), or * for any'],
      ['http://a.example/', '"http://a.example/" is not an origin: use scheme://host[:port] (e.g. https://app.example.com), or * for any'],
      ['http://a.example/app', '"http://a.example/app" is not an origin: use scheme://host[:port] (e.g. https://app.example.com), or * for any'],
    ]) {
      assert.throws(() => parseArgs([`--cors=${value}`], {}), (err: unknown) => err instanceof FlagError && err.message === `invalid value "${value}" for flag --cors: ${why}`, value);
    }
    assert.throws(() => resolveOptions({ cors: ['http://a.example/x'] }), /^OptionsError: invalid option cors: "http:\/\/a\.example\/x" is not an origin/);
  });
});

describe('a scoped /rpc', () => {
  let app: PlainApp;
  let open: EdgeGateway;
  let scoped: EdgeGateway;
  let off: EdgeGateway;

  before(async () => {
    app = await startPlainApp('plain');
    [open, scoped, off] = await Promise.all([
      startEdgeGateway([]),
      startEdgeGateway(['--rpc_allow=go.mesh.srv.public*,go.mesh.api.?ne']),
      startEdgeGateway(['--enable_rpc=false']),
    ]);
    for (const gw of [open, scoped, off]) {
      for (const name of ['go.mesh.srv.public-a', 'go.mesh.srv.secret', 'go.mesh.api.one', 'go.mesh.api.rpc']) await registerPlain(gw.runtime.registry, name, app.port);
    }
  });
  after(async () => {
    await Promise.all([open?.close(), scoped?.close(), off?.close()]);
    await app?.close();
  });

  const call = (gw: EdgeGateway, service: string) => http('POST', `${gw.url}/rpc`, { headers: JSON_HEADERS, body: JSON.stringify({ service, method: 'Echo.Call', request: { x: 1 } }) });

  it('by default /rpc calls any service', async () => {
    for (const s of ['go.mesh.srv.public-a', 'go.mesh.srv.secret']) {
      const res = await call(open, s);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().service, s);
    }
  });

  it('--rpc_allow: listed globs pass; another service gets 403 error JSON and is never called', async () => {
    assert.equal((await call(scoped, 'go.mesh.srv.public-a')).json().service, 'go.mesh.srv.public-a');
    assert.equal((await call(scoped, 'go.mesh.api.one')).json().service, 'go.mesh.api.one');
    const before = app.received.length;
    for (const s of ['go.mesh.srv.secret', 'go.mesh.api.once', 'go.mesh.srv.publi']) {
      const res = await call(scoped, s);
      assert.equal(res.status, 403, s);
      assert.equal(res.headers['content-type'], 'application/json');
      assert.equal(res.text, `{"id":"go.mesh.api","code":403,"detail":"service ${s} may not be called through /rpc (--rpc_allow)","status":"Forbidden"}`);
    }
    assert.equal(app.received.length, before, 'nothing reached the backend');
  });

  it('--enable_rpc=false: /rpc goes where any unknown path goes (a one-element path names no service: 404)', async () => {
    const before = app.received.length;
    const res = await call(off, 'go.mesh.srv.secret');
    assert.equal(res.status, 404);
    assert.equal(res.text, '{"id":"go.mesh.api","code":404,"detail":"path /rpc names no service: use /<service>/<method>","status":"Not Found"}');
    assert.equal(app.received.length, before, 'nothing reached a backend');
    // /rpc/<method> is then an ordinary api path: service go.mesh.api.rpc.
    const routed = await http('POST', `${off.url}/rpc/call`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(routed.status, 201, routed.text);
    assert.equal(app.received[app.received.length - 1]!.headers['mesh-service'], 'go.mesh.api.rpc');
    const openOne = await http('POST', `${open.url}/rpc`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(openOne.status, 400, 'with /rpc on, the same path is the rpc endpoint');
  });

  it('flags and globs', () => {
    assert.deepEqual(parseArgs([], {}).config.enable_rpc, true);
    assert.deepEqual(parseArgs([], {}).config.rpc_allow, []);
    assert.throws(() => parseArgs(['--rpc_allow=go mesh'], {}), (err: unknown) => err instanceof FlagError && err.message === 'invalid value "go mesh" for flag --rpc_allow: "go mesh" is not a service name glob: letters, digits, . _ - and the wildcards * ?');
    const m = globMatcher('go.*.greeter*');
    assert.equal(m('go.mesh.srv.greeter'), true);
    assert.equal(m('go.x.greeter-v2'), true);
    assert.equal(m('go.greeter'), false);
    assert.equal(globMatcher('a?c')('abc'), true);
    assert.equal(globMatcher('a?c')('ac'), false);
    assert.equal(globMatcher('*')(''), true);
    assert.equal(globMatcher('exact')('exact.more'), false);
    // Linear: a pathological pattern on a long name answers at once.
    assert.equal(globMatcher('*a*a*a*a*a*a*a*b')('a'.repeat(5000)), false);
  });
});
