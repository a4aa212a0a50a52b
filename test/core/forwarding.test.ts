/**
 * The two forwarding hot paths at the byte level: the RPC transport (src/core/transport/rpc.ts, what
 * every gateway and sidecar call goes through) against a real node:http server, and the proxy
 * handler (src/edge/handlers/proxy.ts) in a real gateway process: buffered and streamed request bodies,
 * retries, and response headers passed through as they came.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { Pool } from 'undici';
import { sendRpc, TransportError } from '../../src/core/transport/rpc.js';
import { endToEndHeaders, requestConnectionNamed } from '../../src/core/transport/headers.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { freePort, tempDir, readBytes, listenLoopback, rawHttp, waitFor } from '../helpers.js';
import { http, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  rawHeaders: string[];
  bodyLength: number;
  bodyText: string;
}

/** A backend that records each request; the path decides the answer. */
async function startBackend(): Promise<{ server: Server; port: number; seen: Seen[]; arrived: string[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  /** The URL of each request as its head arrives (before its body is read). */
  const arrived: string[] = [];
  const server = createServer(async (req, res) => {
    arrived.push(req.url ?? '');
    const body = await readBytes(req);
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders, bodyLength: body.length, bodyText: body.length <= 1024 ? body.toString('utf8') : '' });
    const url = req.url ?? '/';
    if (url === '/' && req.headers['mesh-service']) {
      if (req.headers['mesh-endpoint'] === 'Big.Answer') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(Buffer.alloc(4096, 0x61));
        return;
      }
      if (req.headers['mesh-endpoint'] === 'Never.Answer') return; // leaves the call hanging
      res.writeHead(200, { 'CONTENT-TYPE': 'application/x-test; charset=utf-8' });
      res.end(body);
      return;
    }
    if (url.endsWith('/dated')) {
      res.writeHead(200, ['Date', 'Tue, 01 Jan 2030 00:00:00 GMT', 'Content-Type', 'text/plain', 'Content-Length', '5']);
      res.end(req.method === 'HEAD' ? undefined : 'dated');
      return;
    }
    if (url.endsWith('/not-modified')) {
      res.writeHead(304, ['ETag', '"v1"']);
      res.end();
      return;
    }
    if (url.endsWith('/cookies')) {
      res.writeHead(201, ['Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'X-Mixed-Case', 'kept', 'Proxy-Authenticate', 'Basic', 'Content-Type', 'text/plain', 'Content-Length', '2']);
      res.end('ok');
      return;
    }
    const text = JSON.stringify({ length: body.length, te: req.headers['transfer-encoding'] ?? null, cl: req.headers['content-length'] ?? null, head: body.subarray(0, 16).toString('utf8') });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  server.keepAliveTimeout = 1000;
  return { server, seen, arrived, ...(await listenLoopback(server)) };
}

describe('RPC transport (sendRpc) against a real server', () => {
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let pool: Pool;

  before(async () => {
    backend = await startBackend();
    pool = new Pool(`http://127.0.0.1:${backend.port}`, { connections: 4 });
  });
  after(async () => {
    await pool.destroy();
    await backend.close();
  });

  const base = { service: 'go.mesh.srv.t', id: 'id-1', contentType: 'application/json', timeoutMs: 2000 };

  it('sends metadata and the protocol headers; reads Content-Type whatever its case; body untouched', async () => {
    const answer = await sendRpc(pool, { ...base, endpoint: 'Echo.Call', body: Buffer.from('{"a":1}'), metadata: { 'x-trace': 't1', authorization: 'Bearer x' } });
    assert.equal(answer.status, 200);
    assert.equal(answer.contentType, 'application/x-test; charset=utf-8');
    assert.equal(answer.body.toString(), '{"a":1}');
    const got = backend.seen.at(-1)!;
    assert.equal(got.method, 'POST');
    assert.equal(got.url, '/');
    assert.equal(got.headers['mesh-service'], 'go.mesh.srv.t');
    assert.equal(got.headers['mesh-endpoint'], 'Echo.Call');
    assert.equal(got.headers['mesh-id'], 'id-1');
    assert.equal(got.headers['mesh-timeout'], '2000');
    assert.equal(got.headers['content-type'], 'application/json');
    assert.equal(got.headers['content-length'], '7');
    assert.equal(got.headers['x-trace'], 't1');
    assert.equal(got.headers['authorization'], 'Bearer x');
  });

  it('a body given as a Uint8Array view is sent as exactly its bytes', async () => {
    const whole = Buffer.from('xx{"view":true}yy');
    const view = new Uint8Array(whole.buffer, whole.byteOffset + 2, whole.length - 4);
    const answer = await sendRpc(pool, { ...base, endpoint: 'Echo.Call', body: view });
    assert.equal(answer.body.toString(), '{"view":true}');
  });

  it('an answer larger than maxResponseBytes fails the attempt as a reset', async () => {
    await assert.rejects(
      sendRpc(pool, { ...base, endpoint: 'Big.Answer', body: Buffer.from('{}'), maxResponseBytes: 1000 }),
      (err: unknown) => err instanceof TransportError && err.outcome.kind === 'reset' && /larger than 1000 bytes/.test(err.message),
    );
    const ok = await sendRpc(pool, { ...base, endpoint: 'Big.Answer', body: Buffer.from('{}'), maxResponseBytes: 4096 });
    assert.equal(ok.body.length, 4096);
  });

  it('a backend that never answers is a timeout after timeoutMs', async () => {
    const started = Date.now();
    await assert.rejects(
      sendRpc(pool, { ...base, endpoint: 'Never.Answer', body: Buffer.from('{}'), timeoutMs: 300 }),
      (err: unknown) => err instanceof TransportError && err.outcome.kind === 'timeout',
    );
    const took = Date.now() - started;
    assert.ok(took >= 290 && took < 2000, `took ${took} ms`);
  });

  it('a refused connection is a connect failure', async () => {
    const dead = new Pool(`http://127.0.0.1:${await freePort()}`);
    try {
      await assert.rejects(
        sendRpc(dead, { ...base, endpoint: 'Echo.Call', body: Buffer.from('{}') }),
        (err: unknown) => err instanceof TransportError && err.outcome.kind === 'connect_failure',
      );
    } finally {
      await dead.destroy();
    }
  });
});

describe('endToEndHeaders', () => {
  it('leaves out hop-by-hop headers, those Connection names, and the protocol headers; joins repeated values', () => {
    const out = endToEndHeaders({
      connection: 'keep-alive, X-Hop',
      'x-hop': 'dropped',
      'keep-alive': 'timeout=5',
      host: 'h',
      'content-length': '3',
      'content-type': 'application/json',
      'mesh-service': 's',
      'mesh-endpoint': 'e',
      'mesh-timeout': '5',
      'mesh-id': 'kept',
      'x-list': ['a', 'b'],
      'x-one': '1',
    });
    assert.deepEqual(out, { 'mesh-id': 'kept', 'x-list': 'a, b', 'x-one': '1' });
  });

  it('a plain Connection: keep-alive names nothing else', () => {
    assert.deepEqual(endToEndHeaders({ connection: 'Keep-Alive', 'x-a': '1' }), { 'x-a': '1' });
  });

  it('Connection never names the edge\'s own headers away: Mesh-Auth-* and Mesh-Peer-Identity', () => {
    const headers = { connection: 'keep-alive, Mesh-Peer-Identity, Mesh-Auth-Subject, X-Hop', 'mesh-peer-identity': 'spiffe://mesh.local/svc/a', 'mesh-auth-subject': 'bob', 'x-hop': 'dropped' };
    assert.deepEqual(endToEndHeaders(headers), { 'mesh-peer-identity': 'spiffe://mesh.local/svc/a', 'mesh-auth-subject': 'bob' });
    assert.deepEqual([...requestConnectionNamed(headers.connection)!], ['keep-alive', 'x-hop']);
  });
});

describe('proxy handler through a gateway process', () => {
  const dir = tempDir('mesh-forwarding-');
  let registry: Registry;
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await startBackend();
    const dead = await freePort();
    await registry.register({ name: 'go.mesh.srv.files', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'files-1', address: '127.0.0.1', port: backend.port, metadata: {} }] });
    // Two nodes, one of which refuses connections: a request with a small body is retried on the other.
    await registry.register({
      name: 'go.mesh.srv.half',
      version: 'v1',
      metadata: {},
      endpoints: [],
      nodes: [
        { id: 'half-dead', address: '127.0.0.1', port: dead, metadata: {} },
        { id: 'half-live', address: '127.0.0.1', port: backend.port, metadata: {} },
      ],
    });
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--namespace=go.mesh.srv', '--client_retries=1', '--lb_policy=round_robin']);
  });

  after(async () => {
    await gw?.stop();
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('a small body is sent whole with its length; a refused node is retried on another', async () => {
    for (let i = 0; i < 6; i++) {
      const res = await http('POST', `${gw.url}/half/upload?i=${i}`, { headers: { 'content-type': 'application/json' }, body: `{"i":${i}}` });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.json(), { length: 7, te: null, cl: '7', head: `{"i":${i}}` });
    }
  });

  it('a body over 64 KiB is streamed with its Content-Length; a chunked one stays chunked', async () => {
    const big = Buffer.alloc(200 * 1024, 0x62);
    const res = await http('PUT', `${gw.url}/files/big`, { body: big });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json(), { length: big.length, te: null, cl: String(big.length), head: 'b'.repeat(16) });

    const chunked = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest(`${gw.url}/files/chunked`, { method: 'POST', agent: false }, (r) => {
        const parts: Buffer[] = [];
        r.on('data', (c: Buffer) => parts.push(c));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, text: Buffer.concat(parts).toString() }));
      });
      req.on('error', reject);
      req.write('first,');
      // the rest only once the request is upstream: its body is still coming, so it goes chunked
      waitFor(() => backend.arrived.some((u) => u.endsWith('/chunked'))).then(() => req.end('second'), reject);
    });
    assert.equal(chunked.status, 200, chunked.text);
    assert.deepEqual(JSON.parse(chunked.text), { length: 12, te: 'chunked', cl: null, head: 'first,second' });
  });

  it('response headers pass as they came: repeated Set-Cookie, case, length; hop-by-hop ones dropped', async () => {
    const raw = await http('GET', `${gw.url}/files/cookies`);
    assert.equal(raw.status, 201);
    assert.equal(raw.text, 'ok');
    const pairs: string[] = [];
    for (let i = 0; i < raw.rawHeaders.length; i += 2) pairs.push(`${raw.rawHeaders[i]}: ${raw.rawHeaders[i + 1]}`);
    assert.deepEqual(
      pairs.filter((p) => !/^(date|connection|keep-alive):/i.test(p)),
      ['Set-Cookie: a=1', 'Set-Cookie: b=2', 'X-Mixed-Case: kept', 'Content-Type: text/plain', 'Content-Length: 2'],
    );
  });

  it("HEAD gets the headers and no body; an upstream Date is not doubled; 304 passes with its ETag", async () => {
    const head = (await rawHttp(gw.port, 'HEAD /files/dated HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).raw;
    assert.match(head, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(head, /\r\nContent-Length: 5\r\n/);
    assert.equal(head.match(/^date:/gim)?.length, 1, head);
    assert.match(head, /\r\nDate: Tue, 01 Jan 2030 00:00:00 GMT\r\n/);
    assert.ok(head.endsWith('\r\n\r\n'), 'no body after the head');

    const notModified = (await rawHttp(gw.port, 'GET /files/not-modified HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).raw;
    assert.match(notModified, /^HTTP\/1\.1 304 Not Modified\r\n/);
    assert.match(notModified, /\r\nETag: "v1"\r\n/);
    assert.ok(notModified.endsWith('\r\n\r\n'), 'no body');
  });

  it('the upstream sees the original path, Host and X-Forwarded-*; not the client hop-by-hop headers', async () => {
    await http('GET', `${gw.url}/files/a/b?c=d`, { headers: { host: 'public.example', connection: 'keep-alive, x-secret', 'x-secret': 's', 'x-kept': 'k' } });
    const got = backend.seen.at(-1)!;
    assert.equal(got.url, '/files/a/b?c=d');
    assert.equal(got.headers['host'], 'public.example');
    assert.equal(got.headers['x-forwarded-host'], 'public.example');
    assert.equal(got.headers['x-forwarded-proto'], 'http');
    assert.equal(got.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(got.headers['x-kept'], 'k');
    assert.equal(got.headers['x-secret'], undefined);
  });
});
