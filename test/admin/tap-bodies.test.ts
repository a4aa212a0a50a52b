/**
 * admin /tap bodies on real `mesh api` processes (proxy handler) in front of a real backend:
 * refused (403) unless the process allows them, absent unless the tap asks; captured exactly, cut
 * at --tap_bodies_max_bytes with the exact prefix, base64 when binary, JSON fields redacted at any
 * depth (a cut JSON body hidden whole), over HTTP/2 too; a large streamed body reaches the backend unchanged while
 * tapped; the token guards bodies as it guards /tap. Then `mesh tap --bodies -o json` and
 * `mesh tap replay`: the backend sees the same method, path and body, without the redacted
 * headers; a truncated, uncaptured or malformed event is refused naming its line, nothing sent.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { connect } from 'node:http2';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { openTap } from '../fixtures/tap-client.js';
import { http, registerPlain, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

const CAP = 64;
/** The first 16 hex digits of a body's SHA-256 (short enough for an answer under the cap). */
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex').slice(0, 16);
const BINARY = Buffer.from([0xff, 0x00, 0xfe, 0x80, 0x41, 0x0a, 0xc3]);

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A backend that records every request whole: /echo/bin answers binary bytes, /echo/json a JSON body with a secret, others `ok`, the body's length and (a prefix of) its SHA-256. */
async function startBackend(): Promise<{ port: number; seen: Seen[]; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      if (req.url?.endsWith('/bin')) {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        return res.end(BINARY);
      }
      if (req.url?.endsWith('/json')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end('{"ok":true,"session":{"token":"resp-s3cret"}}');
      }
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(`ok ${body.length} ${sha(body)}`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** The event of the request to `path`, once the tap has it. */
async function eventOf(tap: Tap, path: string): Promise<Record<string, any>> {
  return waitFor(() => tap.events().find((e) => e.path === path));
}

describe('admin /tap bodies', () => {
  const dir = tempDir();
  let registry: Registry;
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let off: GatewayProcess;
  let on: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await startBackend();
    await registerPlain(registry, 'go.mesh.api.echo', backend.port);
    [off, on] = await Promise.all([
      startGatewayProcess(dir.path, ['--handler=proxy']),
      startGatewayProcess(dir.path, ['--handler=proxy', `--tap_bodies_max_bytes=${CAP}`, '--tap_redact_json_fields=password,token', '--max_body_size=8MiB', '--enable_http2']),
    ]);
  });

  after(async () => {
    await Promise.all([off?.stop(), on?.stop()]);
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('off by default: bodies=true is 403 error JSON, and a tap shows no body', async () => {
    const refused = await http('GET', `${off.admin}/tap?bodies=true`);
    assert.equal(refused.status, 403);
    assert.equal(refused.headers['content-type'], 'application/json');
    assert.equal(refused.text, '{"id":"go.mesh.admin","code":403,"detail":"tap bodies are not allowed on this process: start it with --tap_bodies_max_bytes=SIZE to allow bodies=true","status":"Forbidden"}');
    const bad = await http('GET', `${on.admin}/tap?bodies=yes`);
    assert.equal(bad.status, 400);
    assert.equal(bad.text, '{"id":"go.mesh.admin","code":400,"detail":"invalid tap parameter bodies=\\"yes\\": true or false","status":"Bad Request"}');
    for (const [gw, query] of [[off, ''], [off, '?bodies=false'], [on, '']] as const) {
      const tap = await openTap(gw.admin, query);
      try {
        assert.equal(tap.res.statusCode, 200);
        await http('POST', `${gw.url}/echo/plain-off`, { body: 'hello', headers: { 'content-type': 'text/plain' } });
        const e = await eventOf(tap, '/echo/plain-off');
        assert.equal(e.bytes_in, 5);
        assert.ok(!('request_body' in e) && !('response_body' in e), JSON.stringify(e));
      } finally {
        tap.close();
      }
    }
  });

  it('asked and allowed: both bodies captured exactly, as text; a tap that did not ask still gets none', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    const plain = await openTap(on.admin);
    try {
      const answer = await http('POST', `${on.url}/echo/text?x=1`, { body: 'hello, tap', headers: { 'content-type': 'text/plain; charset=utf-8' } });
      assert.equal(answer.status, 200);
      const e = await eventOf(tap, '/echo/text');
      assert.deepEqual(e.request_body, { bytes: 10, truncated: false, encoding: 'utf8', data: 'hello, tap', redacted: false });
      assert.deepEqual(e.response_body, { bytes: answer.bytes.length, truncated: false, encoding: 'utf8', data: answer.text, redacted: false });
      assert.equal(e.scheme, 'http');
      const bare = await eventOf(plain, '/echo/text');
      assert.ok(!('request_body' in bare) && !('response_body' in bare), JSON.stringify(bare));
    } finally {
      tap.close();
      plain.close();
    }
  });

  it('over the cap: truncated, with the exact prefix and the whole count', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    try {
      const body = Array.from({ length: 100 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');
      await http('POST', `${on.url}/echo/long`, { body, headers: { 'content-type': 'text/plain' } });
      const e = await eventOf(tap, '/echo/long');
      assert.deepEqual(e.request_body, { bytes: 100, truncated: true, encoding: 'utf8', data: body.slice(0, CAP), redacted: false });
      assert.equal(backend.seen.at(-1)!.body.toString(), body);
    } finally {
      tap.close();
    }
  });

  it('binary bodies are base64', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    try {
      const answer = await http('PUT', `${on.url}/echo/bin`, { body: BINARY, headers: { 'content-type': 'application/octet-stream' } });
      assert.deepEqual(answer.bytes, BINARY);
      const e = await eventOf(tap, '/echo/bin');
      assert.deepEqual(e.request_body, { bytes: BINARY.length, truncated: false, encoding: 'base64', data: BINARY.toString('base64'), redacted: false });
      assert.deepEqual(e.response_body, { bytes: BINARY.length, truncated: false, encoding: 'base64', data: BINARY.toString('base64'), redacted: false });
      // Text that is not valid UTF-8 is base64 too.
      await http('POST', `${on.url}/echo/latin1`, { body: BINARY, headers: { 'content-type': 'text/plain' } });
      assert.equal((await eventOf(tap, '/echo/latin1')).request_body.encoding, 'base64');
    } finally {
      tap.close();
    }
  });

  it('JSON fields are redacted at any depth (any case); a truncated JSON body is redacted whole', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    try {
      const sent = '{"user":"ada","Password":"s3cret","items":[{"token":"t0k"}]}';
      await http('POST', `${on.url}/echo/json`, { body: sent, headers: { 'content-type': 'application/json' } });
      const e = await eventOf(tap, '/echo/json');
      assert.deepEqual(e.request_body, { bytes: sent.length, truncated: false, encoding: 'utf8', data: '{"user":"ada","Password":"[redacted]","items":[{"token":"[redacted]"}]}', redacted: true });
      assert.deepEqual(e.response_body, { bytes: 45, truncated: false, encoding: 'utf8', data: '{"ok":true,"session":{"token":"[redacted]"}}', redacted: true });
      assert.ok(!JSON.stringify(e).includes('s3cret') && !JSON.stringify(e).includes('t0k'));
      // The backend got the body as sent.
      assert.equal(backend.seen.at(-1)!.body.toString(), sent);
      const long = JSON.stringify({ note: 'x'.repeat(CAP), password: 'l0ng-s3cret' });
      await http('POST', `${on.url}/echo/json-long`, { body: long, headers: { 'content-type': 'application/problem+json' } });
      const cut = await eventOf(tap, '/echo/json-long');
      assert.deepEqual(cut.request_body, { bytes: long.length, truncated: true, encoding: 'utf8', data: '[redacted]', redacted: true });
    } finally {
      tap.close();
    }
  });

  it('over HTTP/2 (h2c) too', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    const session = connect(on.url);
    try {
      const stream = session.request({ ':method': 'POST', ':path': '/echo/h2', 'content-type': 'text/plain' });
      stream.end('h2 body');
      let answer = '';
      stream.setEncoding('utf8');
      stream.on('data', (d: string) => (answer += d));
      await new Promise((r) => stream.on('end', r));
      const e = await eventOf(tap, '/echo/h2');
      assert.deepEqual(e.request_body, { bytes: 7, truncated: false, encoding: 'utf8', data: 'h2 body', redacted: false });
      assert.deepEqual(e.response_body, { bytes: Buffer.byteLength(answer), truncated: false, encoding: 'utf8', data: answer, redacted: false });
    } finally {
      session.close();
      tap.close();
    }
  });

  it('a large body streamed through a tapped request reaches the backend unchanged', async () => {
    const tap = await openTap(on.admin, '?bodies=true');
    try {
      const size = 3 * 1024 * 1024;
      const body = Buffer.alloc(size);
      for (let i = 0; i < size; i++) body[i] = (i * 7 + (i >> 10)) & 0xff;
      const digest = sha(body);
      // Sent in 64 KiB writes, without a Content-Length (chunked): the request streams.
      const answer = await new Promise<string>((resolve, reject) => {
        const req = request(`${on.url}/echo/big`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, agent: false }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => resolve(text));
        });
        req.on('error', reject);
        for (let at = 0; at < size; at += 65536) req.write(body.subarray(at, at + 65536));
        req.end();
      });
      assert.equal(answer, `ok ${size} ${digest}`);
      const e = await eventOf(tap, '/echo/big');
      assert.equal(e.bytes_in, size);
      assert.deepEqual(e.request_body, { bytes: size, truncated: true, encoding: 'base64', data: body.subarray(0, CAP).toString('base64'), redacted: false });
    } finally {
      tap.close();
    }
  });
});

describe('admin /tap bodies with --admin_token', () => {
  const dir = tempDir();
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--tap_bodies_max_bytes=1KiB'], { MESH_ADMIN_TOKEN: 'tap-token' });
  });
  after(async () => {
    await gw?.stop();
    dir.cleanup();
  });

  it('no bodies without the token (401), nor cross-site with it (403)', async () => {
    const none = await http('GET', `${gw.admin}/tap?bodies=true`);
    assert.equal(none.status, 401);
    assert.equal(none.text, 'Unauthorized: this admin interface needs "Authorization: Bearer <token>"\n');
    const cross = await http('GET', `${gw.admin}/tap?bodies=true`, { headers: { authorization: 'Bearer tap-token', 'sec-fetch-site': 'cross-site' } });
    assert.equal(cross.status, 403);
    const tap = await openTap(gw.admin, '?bodies=true', { authorization: 'Bearer tap-token' });
    try {
      assert.equal(tap.res.statusCode, 200);
    } finally {
      tap.close();
    }
  });
});

describe('mesh tap --bodies and mesh tap replay', () => {
  const dir = tempDir();
  let registry: Registry;
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let gw: GatewayProcess;
  const file = (name: string) => join(dir.path, name);

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await startBackend();
    await registerPlain(registry, 'go.mesh.api.echo', backend.port);
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', `--tap_bodies_max_bytes=${CAP}`]);
  });

  after(async () => {
    await gw?.stop();
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('replays a captured request: same method, path, query and body; redacted headers not sent', async () => {
    const tap = startProcess(['tap', `--admin=${new URL(gw.admin).host}`, '--bodies', '-o', 'json', '--path=/echo/order']);
    let line: string;
    try {
      await tap.waitForOutput(/tapping/);
      const answer = await http('POST', `${gw.url}/echo/order?id=7`, {
        body: '{"item":"tea","qty":2}',
        headers: { 'content-type': 'application/json', authorization: 'Bearer user-s3cret', cookie: 'sid=s3cret', 'x-request-tag': 'replay-me' },
      });
      assert.equal(answer.status, 200);
      line = await tap.waitForOutput(/^\{.*"path":"\/echo\/order".*\}$/m);
    } finally {
      assert.equal(await tap.stop('SIGTERM'), 0);
    }
    const original = backend.seen.at(-1)!;
    writeFileSync(file('order.ndjson'), `${line}\n`);
    const before = backend.seen.length;
    const r = await runCli(['tap', 'replay', file('order.ndjson')]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(backend.seen.length, before + 1);
    const again = backend.seen.at(-1)!;
    assert.equal(again.method, 'POST');
    assert.equal(again.url, original.url);
    assert.deepEqual(again.body, original.body);
    assert.equal(again.headers['x-request-tag'], 'replay-me');
    assert.equal(again.headers['content-type'], 'application/json');
    assert.equal(again.headers.authorization, undefined);
    assert.equal(again.headers.cookie, undefined);
    assert.equal(r.stdout, `200 OK\nok 22 ${sha('{"item":"tea","qty":2}')}\n`);
    assert.equal(r.stderr, `mesh tap replay: ${file('order.ndjson')}:1: POST ${gw.url}/echo/order?id=7\n`);
    // --to sends it elsewhere (here: straight to the backend), -o json says what came back.
    const direct = await runCli(['tap', 'replay', file('order.ndjson'), '--line=1', `--to=http://127.0.0.1:${backend.port}`, '-o', 'json']);
    assert.equal(direct.code, 0, direct.stderr);
    const out = JSON.parse(direct.stdout);
    assert.equal(out.status, 200);
    assert.equal(out.line, 1);
    assert.equal(backend.seen.at(-1)!.url, '/echo/order?id=7');
  });

  it('refuses a truncated, an uncaptured or a malformed event, naming its line, and sends nothing', async () => {
    const tap = await openTap(gw.admin, '?bodies=true');
    const plain = await openTap(gw.admin);
    let cut: Record<string, any>;
    let bare: Record<string, any>;
    try {
      await http('POST', `${gw.url}/echo/cut`, { body: 'y'.repeat(CAP + 1), headers: { 'content-type': 'text/plain' } });
      cut = await eventOf(tap, '/echo/cut');
      bare = await eventOf(plain, '/echo/cut');
    } finally {
      tap.close();
      plain.close();
    }
    const before = backend.seen.length;
    writeFileSync(file('mixed.ndjson'), `${JSON.stringify(cut)}\n${JSON.stringify(bare)}\nnot json\n{"method":"GET"}\n`);
    const cases: Array<[string[], string]> = [
      [['--line=1'], `mesh tap replay: ${file('mixed.ndjson')}:1: the request body was truncated (65 bytes, more than --tap_bodies_max_bytes): not replayed\n`],
      [['--line=2'], `mesh tap replay: ${file('mixed.ndjson')}:2: the request body was not captured (tap with mesh tap --bodies, on a process started with --tap_bodies_max_bytes): not replayed\n`],
      [['--line=3'], `mesh tap replay: ${file('mixed.ndjson')}:3: not a JSON line (Unexpected token 'o', "not json" is not valid JSON)\n`],
      [['--line=4'], `mesh tap replay: ${file('mixed.ndjson')}:4: not a tap event: "path" is not a path\n`],
      [[], `mesh tap replay: ${file('mixed.ndjson')}:1: the request body was truncated (65 bytes, more than --tap_bodies_max_bytes): not replayed\n`],
    ];
    for (const [flags, stderr] of cases) {
      const r = await runCli(['tap', 'replay', file('mixed.ndjson'), ...flags]);
      assert.equal(r.code, 1, flags.join(' '));
      assert.equal(r.stderr, stderr);
      assert.equal(r.stdout, '');
    }
    assert.equal(backend.seen.length, before, 'nothing was sent');
    const usage: Array<[string[], RegExp]> = [
      [['tap', 'replay'], /^mesh: mesh tap replay needs FILE/],
      [['tap', 'replay', file('mixed.ndjson'), '--line=9'], /^mesh: invalid value "9" for flag --line: .* has no event on line 9\n$/],
      [['tap', 'replay', file('mixed.ndjson'), '--to=ftp://x'], /^mesh: invalid value "ftp:\/\/x" for flag --to: use http:\/\/HOST:PORT/],
    ];
    for (const [args, stderr] of usage) {
      const r = await runCli(args);
      assert.equal(r.code, 2, args.join(' '));
      assert.match(r.stderr, stderr);
    }
    const missing = await runCli(['tap', 'replay', file('nope.ndjson')]);
    assert.equal(missing.code, 1);
    assert.equal(missing.stderr, `mesh tap replay: cannot read ${file('nope.ndjson')}: ENOENT\n`);
  });
});
