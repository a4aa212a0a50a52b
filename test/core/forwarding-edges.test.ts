/**
 * The forwarding hot paths at their edges (src/core/transport/rpc.ts, src/edge/handlers/proxy.ts, the client):
 * protocol headers never doubled, timeouts that run while a request waits for a connection,
 * clients that go away before or during an answer, bodiless answers with a Content-Length, slow
 * uploads and readers, header bytes beyond ASCII, and metadata the HTTP client refuses.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MeshError } from '../../src/base/errors.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { Pool } from 'undici';
import { sendRpc, TransportError } from '../../src/core/transport/rpc.js';
import { Client } from '../../src/core/client/client.js';
import type { UpstreamLease, UpstreamSelector } from '../../src/core/upstream/types.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { PRINTED, sleep, startProcess, tempDir, waitFor, type RunningProcess, readBytes, listenLoopback } from '../helpers.js';
import { http, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

interface Seen {
  url: string;
  headers: IncomingMessage['headers'];
  rawHeaders: string[];
  bodyLength: number;
}

/** A backend whose path decides the answer; records every request. */
async function startBackend(): Promise<{ server: Server; port: number; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer(async (req, res) => {
    const url = req.url ?? '/';
    let body: Buffer;
    try {
      body = await readBytes(req);
    } catch {
      return;
    }
    seen.push({ url, headers: req.headers, rawHeaders: req.rawHeaders, bodyLength: body.length });
    if (url === '/' && req.headers['mesh-service']) {
      if (req.headers['mesh-endpoint'] === 'Never.Answer') return;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: req.headers['mesh-id'] ?? null, ct: req.headers['content-type'] ?? null, endpoint: req.headers['mesh-endpoint'] ?? null }));
      return;
    }
    if (url.endsWith('/slow')) {
      await sleep(1000); // holds the request open (a slow backend), not an ordering sleep
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '4' });
      res.end('slow');
      return;
    }
    if (url.endsWith('/big')) {
      const size = 16 * 1024 * 1024;
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) });
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      let sent = 0;
      const pump = () => {
        while (sent < size) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
      return;
    }
    if (url.endsWith('/cut')) {
      // Promises 1 MB, sends 100 KB, then drops the connection.
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(1024 * 1024) });
      // Cut once the 100 KB are with the kernel: they go out before the FIN.
      res.write(Buffer.alloc(100 * 1024, 0x62), () => res.socket?.destroy());
      return;
    }
    if (url.endsWith('/nm304')) {
      // Node keeps a Content-Length given for a 304 and sends no body.
      res.writeHead(304, { etag: '"v1"', 'content-length': '1234' });
      res.end();
      return;
    }
    if (url.endsWith('/latin1')) {
      // A Buffer body: Node writes the head as latin1 (with a string body it would use UTF-8).
      res.writeHead(200, ['X-Name', 'caf\u00e9 \u00ff', 'Content-Length', '2']);
      res.end(Buffer.from('ok'));
      return;
    }
    const text = JSON.stringify({ length: body.length, name: req.headers['x-name'] ?? null });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  server.keepAliveTimeout = 5000;
  return { server, seen, ...(await listenLoopback(server)) };
}

/** One admin /stats counter or gauge (undefined when absent). */
async function stat(admin: string, name: string): Promise<number | undefined> {
  const text = (await http('GET', `${admin}/stats`)).text;
  for (const line of text.split('\n')) {
    const [k, v] = line.split(': ');
    if (k === name) return Number(v);
  }
  return undefined;
}

/** The gateway's downstream_rq_active gauge (http.<listener>.downstream_rq_active), summed. */
async function downstreamActive(admin: string): Promise<number> {
  const text = (await http('GET', `${admin}/stats?filter=downstream_rq_active$`)).text;
  return text
    .split('\n')
    .filter((l) => l.startsWith('http.'))
    .reduce((sum, l) => sum + Number(l.split(': ')[1]), 0);
}

/** GET with an overall deadline: resolves with the status or 'no answer'. */
function getWithin(url: string, ms: number): Promise<number | 'no answer'> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve('no answer'));
    req.setTimeout(ms, () => {
      req.destroy();
      resolve('no answer');
    });
    req.end();
  });
}

describe('sendRpc at its edges', () => {
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let pool: Pool;

  before(async () => {
    backend = await startBackend();
    pool = new Pool(`http://127.0.0.1:${backend.port}`, { connections: 1 });
  });
  after(async () => {
    await pool.destroy();
    await backend.close();
  });

  const base = { service: 'go.mesh.srv.t', endpoint: 'Echo.Call', contentType: 'application/json', body: Buffer.from('{}'), timeoutMs: 2000 };

  it('a Mesh-Id also present in the metadata is sent once, the protocol\'s own', async () => {
    // callOptionsFrom() puts Mesh-Id both in `id` and (through endToEndHeaders) in `metadata`.
    const answer = await sendRpc(pool, { ...base, id: 'req-42', metadata: { 'mesh-id': 'req-42', 'x-trace': 't' } });
    assert.equal(JSON.parse(answer.body.toString()).id, 'req-42');
  });

  it("metadata named like a protocol header never wins over the protocol's own", async () => {
    const answer = await sendRpc(pool, { ...base, id: 'i', contentType: 'application/protobuf', body: Buffer.from([8, 1]), metadata: { 'content-type': 'application/json', 'mesh-endpoint': 'Other.Thing' } });
    const got = JSON.parse(answer.body.toString());
    assert.equal(got.ct, 'application/protobuf');
    assert.equal(got.endpoint, 'Echo.Call');
  });

  it('a call waiting for a pool connection times out at timeoutMs', async () => {
    // The only connection is busy with a call that hangs for 3 s.
    let freed = false;
    const hung = sendRpc(pool, { ...base, id: 'h', endpoint: 'Never.Answer', timeoutMs: 3000 })
      .catch((e: unknown) => e)
      .finally(() => (freed = true));
    await waitFor(() => backend.seen.some((s) => s.headers['mesh-id'] === 'h')); // it holds the connection
    await assert.rejects(sendRpc(pool, { ...base, id: 'q', timeoutMs: 300 }), (err: unknown) => err instanceof TransportError && err.outcome.kind === 'timeout');
    // The order of the events: the waiting call timed out while the connection was still held.
    assert.equal(freed, false, 'rejected at its timeoutMs, not when the connection freed');
    await hung;
  });
});

describe('Client with metadata the HTTP client refuses', () => {
  it('a header value undici refuses is a 400, not retried, and not charged to the host', async () => {
    const backend = await startBackend();
    const pool = new Pool(`http://127.0.0.1:${backend.port}`);
    const outcomes: string[] = [];
    const selector: UpstreamSelector = {
      acquire: async () => lease(),
    };
    const lease = (): UpstreamLease => ({
      target: { key: `127.0.0.1:${backend.port}`, address: '127.0.0.1', port: backend.port, dispatcher: pool, metadata: {} } as unknown as UpstreamLease['target'],
      release: (outcome) => void outcomes.push(outcome.kind),
    });
    try {
      const client = new Client({ selector, requestTimeoutMs: 2000, retries: 2 });
      const err = await client.call('go.mesh.srv.t', 'Echo.Call', Buffer.from('{}'), { metadata: { 'x-user': '\u5c71\u7530' } }).catch((e: unknown) => e as Error);
      assert.ok(err instanceof MeshError, String(err));
      assert.equal(err.code, 400, err.message);
      assert.match(err.message, /request not sent: invalid x-user header/);
      // Nothing reached the host: one attempt, released as cancelled (no error, no outlier record), no retry.
      assert.deepEqual(outcomes, ['cancelled']);
    } finally {
      await pool.destroy();
      await backend.close();
    }
  });

  it('dispatch on a closed pool settles the call (sync onError path)', async () => {
    const pool = new Pool('http://127.0.0.1:1');
    await pool.close();
    await assert.rejects(
      sendRpc(pool, { service: 's', endpoint: 'E.M', id: 'i', contentType: 'application/json', body: Buffer.from('{}'), timeoutMs: 500 }),
      (err: unknown) => err instanceof TransportError,
    );
  });
});

describe('gateway rpc handler: request ids', () => {
  const dir = tempDir('mesh-edges-rpc-');
  let registry: Registry;
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await startBackend();
    await registry.register({ name: 'go.mesh.api.echo', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'e1', address: '127.0.0.1', port: backend.port, metadata: {} }] });
    gw = await startGatewayProcess(dir.path, ['--handler=rpc']);
  });
  after(async () => {
    await gw?.stop();
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('a client Mesh-Id reaches the backend once', async () => {
    const res = await http('POST', `${gw.url}/echo/call`, { headers: { 'content-type': 'application/json', 'mesh-id': 'abc' }, body: '{}' });
    assert.equal(res.status, 200, res.text);
    assert.equal(backend.seen.at(-1)!.headers['mesh-id'], 'abc');
  });
});

describe('mesh proxy with max_connections 1', () => {
  const dir = tempDir('mesh-edges-proxy-');
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let proc: RunningProcess;
  let url: string;
  let admin: string;

  before(async () => {
    backend = await startBackend();
    const file = join(dir.path, 'proxy.yaml');
    writeFileSync(
      file,
      `admin: { address: 127.0.0.1:0 }
listeners:
  - name: in
    address: 127.0.0.1:0
    routes:
      - match: { prefix: / }
        cluster: one
clusters:
  - name: one
    hosts: [127.0.0.1:${backend.port}]
    circuit_breakers: { default: { max_connections: 1 } }
`,
    );
    proc = startProcess(['proxy', '-c', file, '--log_level=warning', '--client_request_timeout=3s']);
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    url = `http://127.0.0.1:${await proc.waitForPort(PRINTED.proxy)}`;
    admin = `http://127.0.0.1:${await proc.waitForPort(PRINTED.proxyAdmin)}`;
  });
  after(async () => {
    await proc?.stop();
    await backend?.close();
    dir.cleanup();
  });

  it('a request waiting for a pool connection gets a 504 at client_request_timeout', async () => {
    // A download whose client does not read holds the only connection (no timeout once the head came).
    const hog = httpRequest(`${url}/big`, { agent: false });
    hog.on('error', () => {});
    const holding = new Promise<void>((resolve) => hog.on('response', (r) => (r.pause(), resolve())));
    hog.end();
    await holding;
    try {
      const started = Date.now();
      const status = await getWithin(`${url}/small`, 6000);
      assert.equal(status, 504, `after ${Date.now() - started} ms: ${status}`);
    } finally {
      hog.destroy();
    }
    await waitFor(async () => (await stat(admin, 'cluster.one.upstream_rq_active')) === 0, 5000);
  });

  it('a client that leaves while its request waits for a connection frees the lease and the pool', async () => {
    const slow = getWithin(`${url}/slow`, 10000);
    await waitFor(() => backend.seen.some((s) => s.url === '/slow')); // it holds the only connection
    // This request queues behind /slow; its client leaves before it is sent upstream.
    const socket: Socket = connect(Number(new URL(url).port), '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write('GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(async () => (await stat(admin, 'cluster.one.upstream_rq_pending_active')) === 1);
    socket.destroy();
    assert.equal(await slow, 200);
    // /big is then sent and answered, but its answer is written to a destroyed response: onData
    // returns false and waits for a 'drain' that never comes; the head timer was already cleared.
    await waitFor(() => backend.seen.some((s) => s.url === '/big'), 5000);
    await waitFor(async () => (await stat(admin, 'cluster.one.upstream_rq_active')) === 0, 5000).catch(() => undefined);
    const active = await stat(admin, 'cluster.one.upstream_rq_active');
    // The pool's only connection is stuck: the next request gets neither an answer nor its 504.
    const next = await getWithin(`${url}/small`, 6000);
    assert.deepEqual({ active, next }, { active: 0, next: 200 });
  });
});

describe('gateway --handler=proxy at its edges', () => {
  const dir = tempDir('mesh-edges-gw-');
  let registry: Registry;
  let backend: Awaited<ReturnType<typeof startBackend>>;
  let rawUpstream: { port: number; heads: Buffer[]; close(): void };
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await startBackend();
    const heads: Buffer[] = [];
    const srv = createNetServer((sock) => {
      sock.once('data', (d: Buffer) => {
        heads.push(d);
        sock.end('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
      });
      sock.on('error', () => {});
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    rawUpstream = { port: (srv.address() as AddressInfo).port, heads, close: () => srv.close() };
    await registry.register({ name: 'go.mesh.srv.files', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'f1', address: '127.0.0.1', port: backend.port, metadata: {} }] });
    await registry.register({ name: 'go.mesh.srv.dl', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'd1', address: '127.0.0.1', port: backend.port, metadata: {} }] });
    await registry.register({ name: 'go.mesh.srv.raw', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'r1', address: '127.0.0.1', port: rawUpstream.port, metadata: {} }] });
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--namespace=go.mesh.srv', '--client_request_timeout=1s', '--stream_idle_timeout=3s']);
  });
  after(async () => {
    await gw?.stop();
    await backend?.close();
    rawUpstream?.close();
    await registry?.close();
    dir.cleanup();
  });

  const active = (service: string) => stat(gw.admin, `cluster.go.mesh.srv.${service}.upstream_rq_active`);

  it('a 304 with a Content-Length (RFC 9110 8.6 allows it) is passed on', async () => {
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(gw.port, '127.0.0.1', () => socket.write('GET /files/nm304 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
      const parts: Buffer[] = [];
      socket.on('data', (c: Buffer) => parts.push(c));
      socket.on('error', () => {});
      socket.on('close', () => resolve(Buffer.concat(parts).toString('latin1')));
    });
    assert.match(answer, /^HTTP\/1\.1 304 /, JSON.stringify(answer));
  });

  it('a streamed upload that lasts longer than client_request_timeout is not cut off', async () => {
    const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest(`${gw.url}/files/upload`, { method: 'POST', agent: false }, (r) => {
        const parts: Buffer[] = [];
        r.on('data', (c: Buffer) => parts.push(c));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, text: Buffer.concat(parts).toString() }));
      });
      req.on('error', reject);
      let n = 0;
      const tick = () => {
        if (req.destroyed) return;
        if (++n > 4) return void req.end();
        req.write(Buffer.alloc(1024, 0x63));
        setTimeout(tick, 400); // pacing a slow upload, not an ordering sleep
      };
      tick();
    });
    // The backend was healthy and answers as soon as it has the body (1.6 s of upload).
    assert.equal(res.status, 200, res.text);
  });

  it('clients that stop downloads early do not get a healthy host ejected', async () => {
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const req = httpRequest(`${gw.url}/dl/big`, { agent: false }, (r) => {
          r.once('data', () => {
            req.destroy();
            resolve();
          });
        });
        req.on('error', () => {});
        req.end();
      });
      await waitFor(async () => (await active('dl')) === 0, 5000); // that download is over before the next
    }
    await waitFor(async () => (await active('dl')) === 0, 5000);
    const resets = await stat(gw.admin, 'cluster.go.mesh.srv.dl.upstream_rq_rx_reset');
    const clusters = (await http('GET', `${gw.admin}/clusters`)).text;
    const flags = clusters.split('\n').find((l) => l.startsWith(`go.mesh.srv.dl::127.0.0.1:${backend.port}::health_flags::`));
    assert.deepEqual({ resets, flags }, { resets: 0, flags: `go.mesh.srv.dl::127.0.0.1:${backend.port}::health_flags::healthy` });
  });

  it('an Upgrade request keeps header bytes 0x80-0xff as they came', async () => {
    const socket = connect(gw.port, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.on('error', () => {});
    socket.write(Buffer.from('GET /raw/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Name: caf\u00e9\r\n\r\n', 'latin1'));
    await waitFor(() => rawUpstream.heads.length > 0, 5000);
    socket.destroy();
    const head = rawUpstream.heads[0]!;
    const line = head.toString('latin1').split('\r\n').find((l) => l.toLowerCase().startsWith('x-name:'))!;
    assert.equal(Buffer.from(line, 'latin1').toString('hex'), Buffer.from('x-name: caf\u00e9', 'latin1').toString('hex'));
  });

  it('a client that reads nothing is cut off after --stream_idle_timeout; the lease is released, not charged to the host', async () => {
    const cancelledBefore = await stat(gw.admin, 'cluster.go.mesh.srv.files.upstream_rq_cancelled');
    const started = Date.now();
    const socket = connect(gw.port, '127.0.0.1', () => socket.write('GET /files/big HTTP/1.1\r\nHost: x\r\n\r\n'));
    socket.pause(); // never reads: the gateway's writes back up
    socket.on('error', () => {});
    await waitFor(async () => (await active('files')) === 1, 5000);
    await waitFor(async () => (await active('files')) === 0, 10000, 100);
    const took = Date.now() - started;
    assert.ok(took >= 2500 && took < 9000, `cut off after ${took} ms (stream_idle_timeout 3s)`);
    assert.equal(await stat(gw.admin, 'cluster.go.mesh.srv.files.upstream_rq_cancelled'), (cancelledBefore ?? 0) + 1);
    socket.destroy();
  });

  it('a slow reader of a 16 MB answer gets every byte; the lease is released', async () => {
    const got = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${gw.url}/files/big`, { agent: false }, (r) => {
        let n = 0;
        r.pause();
        // A reader that starts late (the gateway must hold the answer back, not buffer it): pacing, not ordering.
        setTimeout(() => {
          r.on('data', (c: Buffer) => (n += c.length));
          r.resume();
        }, 1500);
        r.on('end', () => resolve(n));
        r.on('error', reject);
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(got, 16 * 1024 * 1024);
    await waitFor(async () => (await active('files')) === 0, 5000);
  });

  it('an upstream that drops the connection mid-body cuts the client off; the lease is released', async () => {
    const outcome = await new Promise<string>((resolve) => {
      const req = httpRequest(`${gw.url}/files/cut`, { agent: false }, (r) => {
        let n = 0;
        r.on('data', (c: Buffer) => (n += c.length));
        r.on('end', () => resolve(`end after ${n}`));
        r.on('error', () => resolve(`cut after ${n}`));
      });
      req.on('error', () => resolve('request error'));
      req.end();
    });
    assert.match(outcome, /^cut after \d+$/);
    await waitFor(async () => (await active('files')) === 0, 5000);
  });

  it('a client that leaves during the read of a small body: no lease, the gateway keeps serving', async () => {
    const socket = connect(gw.port, '127.0.0.1');
    await new Promise<void>((r) => socket.once('connect', () => r()));
    socket.write('POST /files/partial HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc');
    await waitFor(async () => (await downstreamActive(gw.admin)) === 1); // the gateway is reading its body
    socket.destroy();
    await waitFor(async () => (await downstreamActive(gw.admin)) === 0); // and is done with it
    assert.equal(backend.seen.filter((s) => s.url === '/files/partial').length, 0);
    const res = await http('POST', `${gw.url}/files/after`, { body: 'x'.repeat(10) });
    assert.equal(res.status, 200);
    await waitFor(async () => (await active('files')) === 0, 5000);
  });

  it('header bytes 0x80-0xff pass byte for byte both ways (latin1)', async () => {
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(gw.port, '127.0.0.1', () => socket.write(Buffer.from('GET /files/latin1 HTTP/1.1\r\nHost: x\r\nX-Name: caf\u00e9\r\nConnection: close\r\n\r\n', 'latin1')));
      const parts: Buffer[] = [];
      socket.on('data', (c: Buffer) => parts.push(c));
      socket.on('close', () => resolve(Buffer.concat(parts).toString('latin1')));
    });
    assert.match(answer, /\r\nX-Name: caf\u00e9 \u00ff\r\n/);
    const seen = backend.seen.at(-1)!;
    assert.equal(Buffer.from(seen.headers['x-name'] as string, 'latin1').toString('hex'), '636166e9');
  });
});
