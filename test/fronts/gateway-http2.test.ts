/**
 * HTTP/2 at the gateway (`--enable_http2`; src/edge/front-server.ts, docs/gateway.md "HTTP/2"):
 * one request set sent over HTTP/1.1, over h2c by prior knowledge and over h2 by ALPN on the TLS
 * listener gets the same answers (status and error JSON bytes): a route to a backend, a path that
 * names no service, a path refused by its normal form, a header with `_` (reject), a CORS
 * preflight, the health path, a body over --max_body_size, a foreign Host (`:authority` on h2).
 * HTTP/1.1 on the same port is served as before and `Upgrade: h2c` stays refused. Attacker cases
 * with a raw HTTP/2 client (test/fixtures/h2-raw.ts): more streams than the concurrent-stream cap,
 * a header list over its bound, a connection-specific header, Host against `:authority`, neither.
 * A drain sends GOAWAY and lets the stream in flight finish. Real servers on loopback; a real
 * client (node:http2, and curl when it speaks HTTP/2). The api, rpc and event handlers, SSE streams
 * and tracing: gateway-http2-handlers.test.ts.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClientHttp2Session } from 'node:http2';
import { overHttp1, overHttp2, session, view, pick, type Answer, type Case } from '../fixtures/h2-client.js';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import type { FrontPhase } from '../../src/edge/front-server.js';
import type { FrontRequest } from '../../src/base/http/front-types.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startEdgeGateway } from '../fixtures/edge-gateway.js';
import { FRAME, H2_ERROR, frame, headersFrames, indexedStatus, RawH2, requestFields } from '../fixtures/h2-raw.js';
import { http, rawHttp, tempDir, waitFor } from '../helpers.js';

const SERVICE = 'go.mesh.srv.web';
const ORIGIN = 'https://app.example';
const MAX_BODY = 1024;

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: only}
spec:
  handler: proxy
  rules:
    - matches: [{path: {type: Exact, value: /only}}]
      backendRefs: [{name: ${SERVICE}}]
`;

interface Started {
  port: number;
  url: string;
  runtime: Runtime;
  gateway: Gateway;
  phases: Array<[FrontPhase, FrontRequest]>;
  entered: (pred: (p: FrontPhase, req: FrontRequest) => boolean) => Promise<void>;
}



const CASES: Case[] = [
  { name: 'a route to a backend', method: 'GET', path: '/only?x=1', compare: (a) => ({ status: a.status, seen: pick(JSON.parse(a.body.toString()), ['method', 'url']) }) },
  {
    name: 'an rpc call (POST /rpc)',
    method: 'POST',
    path: '/rpc',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ service: SERVICE, endpoint: 'Echo.Call', request: { a: 1 } }),
  },
  { name: 'an rpc call the node refuses (its error JSON)', method: 'POST', path: '/rpc', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ service: SERVICE, endpoint: 'Echo.Fail', request: {} }) },
  { name: 'a path that names no service', method: 'GET', path: '/nope' },
  { name: 'a path refused by its normal form', method: 'GET', path: '/a%2fb' },
  { name: 'a header with _ (reject)', method: 'GET', path: '/only', headers: { x_forwarded_for: '10.0.0.1' } },
  {
    name: 'a CORS preflight',
    method: 'OPTIONS',
    path: '/only',
    headers: { origin: ORIGIN, 'access-control-request-method': 'POST' },
    compare: (a) => ({ status: a.status, body: a.body.toString(), allow: a.headers['access-control-allow-origin'], methods: a.headers['access-control-allow-methods'] }),
  },
  { name: 'the health path', method: 'GET', path: '/_mesh/health' },
  { name: 'a body over --max_body_size', method: 'POST', path: '/only', headers: { 'content-type': 'text/plain' }, body: 'x'.repeat(MAX_BODY * 4) },
  { name: 'a foreign Host (:authority)', method: 'GET', path: '/nope', headers: { host: 'other.example' } },
  { name: 'too many header fields', method: 'GET', path: '/only', headers: Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`x-h${i}`, 'v'])) },
];

describe('mesh api over HTTP/2 (--enable_http2)', () => {
  const dir = tempDir('mesh-gateway-h2-');
  let app: PlainApp;
  const running: Runtime[] = [];
  let plain: Started;
  let tls: Started | undefined;

  async function start(flags: string[]): Promise<Started> {
    const registry = new MemoryRegistry();
    await registerPlain(registry, SERVICE, app.port);
    const file = join(dir.path, 'routes.yaml');
    writeFileSync(file, ROUTES);
    const all = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--headers_with_underscores=reject', `--cors=${ORIGIN}`, `--max_body_size=${MAX_BODY}`, ...flags];
    const runtime = new Runtime(optionsFromFlags(parseArgs(all, {}).config, { registry }), { role: 'api' });
    running.push(runtime);
    await runtime.startTls();
    const phases: Array<[FrontPhase, FrontRequest]> = [];
    const waiters: Array<() => void> = [];
    const onPhase = (p: FrontPhase, req: FrontRequest) => {
      phases.push([p, req]);
      for (const w of waiters.splice(0)) w();
    };
    /** Resolves once a phase `pred` picks is entered (from now on). */
    const entered = (pred: (p: FrontPhase, req: FrontRequest) => boolean) =>
      new Promise<void>((resolve) => {
        const from = phases.length;
        const check = () => (phases.slice(from).some(([p, req]) => pred(p, req)) ? resolve() : waiters.push(check));
        waiters.push(check);
      });
    const gateway = new Gateway(runtime, { address: '127.0.0.1:0', routesFile: file, http2: true, onPhase });
    const bound = await gateway.start();
    const scheme = flags.includes('--enable_tls') ? 'https' : 'http';
    return { port: bound.port, url: `${scheme}://127.0.0.1:${bound.port}`, runtime, gateway, phases, entered };
  }

  before(async () => {
    app = await startPlainApp('web');
    plain = await start([]);
    const gen = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', `${dir.path}/key.pem`, '-out', `${dir.path}/cert.pem`]);
    if (gen.status === 0) tls = await start(['--enable_tls', `--tls_cert_file=${dir.path}/cert.pem`, `--tls_key_file=${dir.path}/key.pem`]);
  });
  after(async () => {
    await Promise.all(running.map((r) => r.shutdown()));
    await app.close();
    dir.cleanup();
  });

  it('the request set gets the same answers over HTTP/1.1 and h2c (prior knowledge)', async () => {
    const s = await session(plain.url);
    try {
      for (const c of CASES) {
        const one = await overHttp1(plain.url, c);
        const two = await overHttp2(s, c);
        assert.deepEqual(view(c, two), view(c, one), c.name);
      }
    } finally {
      s.close();
    }
    // Each kind of connection counted under Envoy's names.
    const stats = plain.runtime.stats;
    assert.ok(stats.counter('http.gateway.downstream_cx_http2_total').value >= 1);
    assert.ok(stats.counter('http.gateway.downstream_cx_http1_total').value >= CASES.length);
  });

  it('the request set gets the same answers over HTTPS/1.1 and h2 chosen by ALPN on the TLS listener', async (t) => {
    if (!tls) return t.skip('openssl not available: install it (Debian package openssl) to test TLS');
    const s = await session(tls.url);
    try {
      assert.equal(s.alpnProtocol, 'h2');
      for (const c of CASES) {
        const one = await overHttp1(tls.url, c);
        const two = await overHttp2(s, c);
        assert.deepEqual(view(c, two), view(c, one), c.name);
      }
    } finally {
      s.close();
    }
    // A client that offers only http/1.1 by ALPN is served HTTP/1.1.
    const res = await http('GET', `${tls.url}/_mesh/health`, { insecure: true });
    assert.equal(res.status, 200);
    assert.ok(tls.runtime.stats.counter('http.gateway.downstream_cx_http2_total').value >= 1);
  });

  it('the auth step (401 and its challenge) and --rate_limit (429) answer HTTP/2 as HTTP/1.1', async () => {
    writeFileSync(join(dir.path, 'keys.txt'), 'k-0123456789abcdef billing read\n');
    // Four requests a minute, keyed by the client's address: HTTP/1.1 and HTTP/2 share the bucket.
    const g = await startEdgeGateway(['--auth=key', `--auth_keys=${join(dir.path, 'keys.txt')}`, '--rate_limit=4/m', '--rate_limit_burst=4'], { http2: true });
    const s = await session(g.url);
    try {
      const none: Case = { name: 'no key', method: 'GET', path: '/nope' };
      const one = await overHttp1(g.url, none);
      const two = await overHttp2(s, none);
      assert.equal(one.status, 401);
      assert.deepEqual(view(none, two), view(none, one));
      assert.equal(two.headers['www-authenticate'], one.headers['www-authenticate']);
      const keyed: Case = { name: 'a key', method: 'GET', path: '/nope', headers: { authorization: 'Bearer k-0123456789abcdef' } };
      const three = await overHttp1(g.url, keyed);
      const four = await overHttp2(s, keyed);
      assert.equal(three.status, 404);
      assert.deepEqual(view(keyed, four), view(keyed, three));
      // The fifth and sixth: over the limit.
      const five = await overHttp2(s, keyed);
      const six = await overHttp1(g.url, keyed);
      assert.equal(six.status, 429);
      // The same but for the seconds to wait, which may have ticked between the two.
      const limited = (a: Answer) => ({ ...(view(keyed, a) as object), body: a.body.toString().replace(/retry after \d+s/, 'retry after Ns') });
      assert.deepEqual(limited(five), limited(six));
      assert.ok(five.headers['retry-after'] !== undefined);
      assert.equal(g.counter('http.gateway.ratelimit.over_limit'), 2);
    } finally {
      s.close();
      await g.close();
    }
  });

  it('the access log writes an HTTP/2 request as an HTTP/1.1 one, with its protocol, scheme and client address', async () => {
    const format = '%PROTOCOL% %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %REQ(:AUTHORITY)% %REQ(:SCHEME)% %DOWNSTREAM_REMOTE_ADDRESS% %BYTES_RECEIVED%';
    const tlsFlags = tls ? ['--enable_tls', `--tls_cert_file=${dir.path}/cert.pem`, `--tls_key_file=${dir.path}/key.pem`] : [];
    for (const flags of tls ? [[], tlsFlags] : [[]]) {
      const file = join(dir.path, `access-${flags.length}.log`);
      const g = await start([`--access_log=${file}`, `--access_log_format=${format}`, ...flags]);
      const scheme = flags.length > 0 ? 'https' : 'http';
      const health = CASES.find((c) => c.name === 'the health path')!;
      const posted: Case = { name: 'a body', method: 'POST', path: '/nope', headers: { 'content-type': 'text/plain' }, body: 'abc' };
      await overHttp1(g.url, health);
      const s = await session(g.url);
      try {
        await overHttp2(s, health);
        await overHttp2(s, posted);
      } finally {
        s.close();
      }
      await waitFor(() => (existsSync(file) ? readFileSync(file, 'utf8') : '').split('\n').length > 3, 10_000);
      const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
      const authority = `127.0.0.1:${g.port}`;
      assert.match(lines[0]!, new RegExp(`^HTTP/1\\.1 GET /_mesh/health 200 ${authority} ${scheme} 127\\.0\\.0\\.1:\\d+ 0$`));
      assert.match(lines[1]!, new RegExp(`^HTTP/2 GET /_mesh/health 200 ${authority} ${scheme} 127\\.0\\.0\\.1:\\d+ 0$`));
      assert.match(lines[2]!, new RegExp(`^HTTP/2 POST /nope 404 ${authority} ${scheme} 127\\.0\\.0\\.1:\\d+ 3$`));
      await g.runtime.shutdown();
    }
  });

  it('curl speaks HTTP/2 to it (--http2-prior-knowledge, and --http2 over TLS)', async (t) => {
    const version = spawnSync('curl', ['-V'], { encoding: 'utf8' });
    if (version.status !== 0 || !/\bHTTP2\b/.test(version.stdout)) return t.skip('curl with HTTP/2 not installed');
    const curl = (args: string[]) =>
      new Promise<string>((resolve, reject) => {
        const p = spawn('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_version} %{http_code}', ...args]);
        let out = '';
        let err = '';
        p.stdout.on('data', (d: Buffer) => (out += d.toString()));
        p.stderr.on('data', (d: Buffer) => (err += d.toString()));
        p.on('error', reject);
        p.on('close', () => resolve(err ? `${out} ${err.trim()}` : out));
      });
    assert.equal(await curl(['--http2-prior-knowledge', `${plain.url}/_mesh/health`]), '2 200');
    assert.equal(await curl(['--http2-prior-knowledge', `${plain.url}/only`]), '2 200');
    // A body answered before it was read (404): the upload completes, curl sees no reset.
    writeFileSync(join(dir.path, 'upload.txt'), 'x'.repeat(200_000));
    assert.equal(await curl(['--http2-prior-knowledge', '--data-binary', `@${join(dir.path, 'upload.txt')}`, `${plain.url}/nope`]), '2 404');
    if (tls) assert.equal(await curl(['--http2', '-k', `${tls.url}/only`]), '2 200');
  });

  it('HTTP/1.1 `Upgrade: h2c` stays refused', async () => {
    const answer = await rawHttp(plain.port, 'GET /only HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n');
    assert.equal(answer.status, 400, answer.head);
    assert.match(answer.body, /Upgrade: h2c is refused/);
  });

  it('Host and :authority naming different hosts is a 400; a request with neither is refused', async () => {
    const raw = await RawH2.open(plain.port);
    try {
      raw.send(headersFrames(1, requestFields('GET', '/_mesh/health', 'a.example', [['host', 'b.example']]), true));
      assert.equal(indexedStatus(await raw.answer(1)), 400);
      // Neither: malformed (RFC 9113 8.3.1), the stream is reset before it reaches the edge (HTTP/1.1 without Host: node's 400).
      raw.send(headersFrames(3, requestFields('GET', '/_mesh/health', undefined), true));
      const reset = await raw.answer(3);
      assert.equal(reset.type, FRAME.RST_STREAM);
      assert.equal(reset.payload.readUInt32BE(0), H2_ERROR.PROTOCOL_ERROR);
      assert.equal((await rawHttp(plain.port, 'GET /_mesh/health HTTP/1.1\r\nConnection: close\r\n\r\n')).status, 400);
      // Agreeing (in any case) is fine, and so is Host alone.
      raw.send(headersFrames(5, requestFields('GET', '/_mesh/health', 'A.example', [['host', 'a.example']]), true));
      assert.equal(indexedStatus(await raw.answer(5)), 200);
      raw.send(headersFrames(7, requestFields('GET', '/_mesh/health', undefined, [['host', 'a.example']]), true));
      assert.equal(indexedStatus(await raw.answer(7)), 200);
    } finally {
      raw.close();
    }
  });

  it('a connection-specific header or an upper-case name sent over HTTP/2 resets its stream; CONNECT is not served; the connection goes on', async () => {
    const raw = await RawH2.open(plain.port);
    try {
      for (const [i, field] of ([['connection', 'keep-alive'], ['transfer-encoding', 'chunked'], ['upgrade', 'websocket'], ['keep-alive', '5'], ['proxy-connection', 'x']] as Array<[string, string]>).entries()) {
        const stream = 1 + 2 * i;
        raw.send(headersFrames(stream, requestFields('GET', '/_mesh/health', 'localhost', [field]), true));
        const f = await raw.answer(stream);
        assert.equal(f.type, FRAME.RST_STREAM, field[0]);
        assert.equal(f.payload.readUInt32BE(0), H2_ERROR.PROTOCOL_ERROR, field[0]);
      }
      // An upper-case name too (RFC 9113 8.2.1).
      raw.send(headersFrames(11, requestFields('GET', '/_mesh/health', 'localhost', [['X-Upper', '1']]), true));
      const upper = await raw.answer(11);
      assert.equal(upper.type, FRAME.RST_STREAM);
      assert.equal(upper.payload.readUInt32BE(0), H2_ERROR.PROTOCOL_ERROR);
      // CONNECT is not served (node:http2 answers 405 without a 'connect' listener).
      raw.send(headersFrames(13, [[':method', 'CONNECT'], [':authority', 'example.com:443']], true));
      assert.equal(indexedStatus(await raw.answer(13)), 405);
      raw.send(headersFrames(15, requestFields('GET', '/_mesh/health', 'localhost'), true));
      assert.equal(indexedStatus(await raw.answer(15)), 200);
    } finally {
      raw.close();
    }
  });

  it('a header list over its bound resets the stream (the connection goes on), as HTTP/1.1 answers 431', async () => {
    const big = 'a'.repeat(20_000);
    const one = await http('GET', `${plain.url}/_mesh/health`, { headers: { 'x-big': big } });
    assert.equal(one.status, 431);
    const raw = await RawH2.open(plain.port);
    try {
      raw.send(headersFrames(1, requestFields('GET', '/_mesh/health', 'localhost', [['x-big', big]]), true));
      const f = await raw.answer(1);
      assert.ok(f.type === FRAME.RST_STREAM || indexedStatus(f) === undefined, 'not served');
      raw.send(headersFrames(3, requestFields('GET', '/_mesh/health', 'localhost'), true));
      assert.equal(indexedStatus(await raw.answer(3)), 200);
    } finally {
      raw.close();
    }
  });

  it('more streams at once than the cap (100) are refused, and the server stays up', async () => {
    const raw = await RawH2.open(plain.port);
    const streams = 150;
    try {
      // Each stream opened and left open (no END_STREAM): the body never comes.
      const before = plain.phases.length;
      const flood: Buffer[] = [];
      for (let i = 0; i < streams; i++) flood.push(headersFrames(1 + 2 * i, requestFields('POST', '/only', 'localhost', [['content-type', 'text/plain']]), false));
      raw.send(Buffer.concat(flood));
      // Refused: by RST_STREAM REFUSED_STREAM, or the whole connection by GOAWAY.
      await raw.until((f) => (f.type === FRAME.RST_STREAM && f.payload.readUInt32BE(0) === H2_ERROR.REFUSED_STREAM) || f.type === FRAME.GOAWAY);
      const handled = plain.phases.slice(before).filter(([p, req]) => p === 'handle' && req.httpVersionMajor === 2 && req.method === 'POST').length;
      assert.ok(handled <= 100, `${handled} streams reached the handler`);
    } finally {
      raw.close();
    }
    const s = await session(plain.url);
    try {
      assert.equal((await overHttp2(s, CASES.find((c) => c.name === 'the health path')!)).status, 200);
    } finally {
      s.close();
    }
  });

  it('--request_timeout bounds each stream: a body that never ends gets the 408 of HTTP/1.1', async () => {
    const g = await start(['--request_timeout=1s', '--request_headers_timeout=1s']);
    // HTTP/1.1: headers, part of a body announced longer, then nothing.
    const one = await rawHttp(g.port, 'POST /only HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nfirst');
    const s = await session(g.url);
    try {
      const req = s.request({ ':method': 'POST', ':path': '/only', 'content-type': 'text/plain', 'content-length': '100' });
      req.write('first');
      const answer = await new Promise<Answer>((resolve) => {
        const chunks: Buffer[] = [];
        let head: Answer['headers'] = {};
        req.on('response', (h) => (head = h as Answer['headers']));
        req.on('data', (d: Buffer) => chunks.push(d));
        req.on('close', () => resolve({ status: Number(head[':status']), headers: head, body: Buffer.concat(chunks) }));
        req.on('error', () => undefined);
      });
      assert.equal(one.status, 408);
      assert.equal(answer.status, 408);
      assert.equal(answer.body.toString(), one.body);
      assert.equal(g.runtime.stats.counter('http.gateway.downstream_rq_timeout').value, 2);
      // The connection goes on.
      assert.equal((await overHttp2(s, CASES.find((c) => c.name === 'the health path')!)).status, 200);
    } finally {
      s.close();
    }
  });

  it('an answer sent before the body ended: the rest is read and dropped for a while (as HTTP/1.1 lingers), then the stream is reset with NO_ERROR', async () => {
    const s = await session(plain.url);
    try {
      // A body that comes whole: the client's upload completes, no reset (curl 7.88 takes one as a failure).
      const whole = await overHttp2(s, { name: 'whole', method: 'POST', path: '/nope', headers: { 'content-type': 'text/plain' }, body: 'x'.repeat(200_000) });
      assert.equal(whole.status, 404);
    } finally {
      s.close();
    }
  });

  it('an answer sent before a body that never ends: the stream does not outlive it', async () => {
    const s = await session(plain.url);
    try {
      const req = s.request({ ':method': 'POST', ':path': '/nope', 'content-type': 'text/plain', 'content-length': '100000' });
      req.write('first');
      let status = 0;
      req.on('response', (h) => (status = Number(h[':status'])));
      req.resume();
      await new Promise<void>((resolve) => req.on('close', resolve));
      assert.equal(status, 404);
      assert.equal(req.rstCode, 0);
      assert.equal(plain.runtime.stats.gauge('http.gateway.downstream_rq_active').value, 0);
    } finally {
      s.close();
    }
  });

  it('streams opened and reset at once, again and again (rapid reset), leave the server serving', async () => {
    const raw = await RawH2.open(plain.port);
    try {
      let id = 1;
      for (let round = 0; round < 10; round++) {
        const burst: Buffer[] = [];
        for (let i = 0; i < 100; i++, id += 2) {
          burst.push(headersFrames(id, requestFields('POST', '/only', 'localhost', [['content-type', 'text/plain']]), false));
          burst.push(frame(FRAME.RST_STREAM, 0, id, Buffer.from([0, 0, 0, H2_ERROR.CANCEL])));
        }
        raw.send(Buffer.concat(burst));
      }
      // The server answers a PING on the same connection once it went through all of that, or it closed the connection.
      raw.send(frame(FRAME.PING, 0, 0, Buffer.alloc(8)));
      await raw.until((f) => f.type === FRAME.PING || f.type === FRAME.GOAWAY).catch(() => undefined);
    } finally {
      raw.close();
    }
    const s = await session(plain.url);
    try {
      assert.equal((await overHttp2(s, CASES.find((c) => c.name === 'the health path')!)).status, 200);
    } finally {
      s.close();
    }
  });

  it('a drain sends GOAWAY; the stream in flight finishes, then the gateway closes', async () => {
    const g = await start(['--drain_timeout=10s']);
    const s = await session(g.url);
    const handled = g.entered((p) => p === 'handle');
    const req = s.request({ ':method': 'POST', ':path': '/only', 'content-type': 'text/plain' });
    const chunks: Buffer[] = [];
    const answered = new Promise<number>((resolve) => {
      req.on('response', (h) => resolve(Number(h[':status'])));
    });
    req.on('data', (d: Buffer) => chunks.push(d));
    const ended = new Promise<void>((resolve) => req.on('end', resolve));
    req.write('first ');
    await handled;
    const goaway = new Promise<void>((resolve) => s.once('goaway', () => resolve()));
    const closed = g.gateway.close();
    await goaway;
    req.end('second');
    assert.equal(await answered, 200);
    await ended;
    assert.equal(JSON.parse(Buffer.concat(chunks).toString()).body, 'first second');
    await closed;
    assert.equal(g.runtime.stats.counter('http.gateway.downstream_cx_destroy_active_rq').value, 0);
    s.close();
  });
});
