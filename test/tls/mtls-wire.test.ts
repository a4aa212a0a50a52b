/**
 * Mutual TLS on the wire between mesh processes (docs/security.md, "Mutual TLS"): the RPC server
 * in strict and permissive mode, and the client's identity check of the node it calls. Real
 * servers on loopback, real clients (the mesh client over undici, node:tls, node:net, openssl
 * s_client), certificates from a PKI of the test's own (test/fixtures/pki.ts, made with openssl).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as netConnect, type AddressInfo } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'undici';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { ClusterManager } from '../../src/core/upstream/cluster-manager.js';
import { Client } from '../../src/core/client/client.js';
import { RpcServer } from '../../src/framework/server/rpc-server.js';
import { serveMtls } from '../../src/base/mtls/server.js';
import { MTLS_METADATA_KEY, peerIdentityOf, type MtlsMode, type WorkloadTls } from '../../src/base/mtls/workload-tls.js';
import { MeshError } from '../../src/base/errors.js';
import { makePki, testWorkloadTls, type Leaf, type Pki, type TestCa } from '../fixtures/pki.js';
import { rawHttp, waitFor } from '../helpers.js';

const PAYMENTS = 'go.mesh.srv.payments';
const CALLER = 'go.mesh.srv.caller';
const LIMITS = { maxConnections: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, drainTimeoutMs: 1000 };

let pki: Pki;
let root: TestCa;
let otherRoot: TestCa;
let callerLeaf: Leaf;
let paymentsLeaf: Leaf;

before(() => {
  pki = makePki();
  root = pki.ca('mesh-root');
  otherRoot = pki.ca('other-root');
  callerLeaf = root.leaf(CALLER);
  paymentsLeaf = root.leaf(PAYMENTS);
});
after(() => pki.cleanup());

const closers: Array<() => Promise<unknown> | void> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

/** An RPC server of `service` on loopback whose Say.Hello answers which node it is. */
async function rpcServer(service: string, workload: WorkloadTls | undefined, name = 'node') {
  const stats = new StatsStore();
  const server = new RpcServer({ service, maxBodyBytes: 1 << 20, limits: LIMITS, stats, workloadTls: workload });
  let hits = 0;
  server.handle({
    name: 'Say.Hello',
    handler: () => {
      hits++;
      return { node: name };
    },
  });
  const { port } = await server.listen('127.0.0.1', 0);
  closers.push(() => server.close());
  return { port, stats, hits: () => hits };
}

/** A caller: a cluster manager over `registry` with this workload certificate, and the client over it. */
function caller(registry: MemoryRegistry, workload: WorkloadTls | undefined) {
  const stats = new StatsStore();
  const logs: Array<Record<string, unknown>> = [];
  const logging = new Logging({ level: 'warning', format: 'json', destination: { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) } });
  const cm = new ClusterManager({ registry, stats, logging, lbPolicy: 'round_robin', workloadTls: () => workload });
  const client = new Client({ selector: cm, requestTimeoutMs: 5000, retries: 2, stats });
  closers.push(() => cm.close());
  return { cm, client, stats, logs };
}

async function registerNode(registry: MemoryRegistry, service: string, id: string, port: number, mtls: boolean, metadata: Record<string, string> = {}) {
  await registry.register({
    name: service,
    version: 'v1',
    metadata: {},
    endpoints: [],
    nodes: [{ id, address: '127.0.0.1', port, metadata: { protocol: 'mesh', ...(mtls ? { [MTLS_METADATA_KEY]: 'true' } : {}), ...metadata } }],
  });
}

/** A node:http server behind serveMtls whose answer says who called, on which certificates. */
async function sniffingServer(mode: MtlsMode, leaf: Leaf, onRequest?: (req: IncomingMessage, res: ServerResponse) => void) {
  const workload = testWorkloadTls(mode, leaf, [root.cert]);
  const stats = new StatsStore();
  const server: Server = createServer((req, res) => {
    onRequest?.(req, res);
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ peer: peerIdentityOf(req.socket) ?? null, encrypted: Boolean((req.socket as TLSSocket).encrypted) }));
    });
  });
  const stop = serveMtls(server, { workload, service: PAYMENTS, stats: stats.scope('http.rpc.'), acceptTimeoutMs: 10_000 });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  closers.push(async () => {
    stop();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return { port, stats, workload, server };
}

/** One request over a TLS connection with (or without) a client certificate; resolves with the answer text. */
function tlsRequest(port: number, leaf: Leaf | undefined, ca: string[] = [root.cert]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: '127.0.0.1', port, ca, cert: leaf?.cert, key: leaf?.key, checkServerIdentity: () => undefined }, () => {
      socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    });
    let out = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (out += d));
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
  });
}

/** openssl s_client against 127.0.0.1:port, sending one request (it exits when the server closes). */
function sClient(port: number, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-ign_eof', ...args], { timeout: 30_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  });
}

describe('the server: strict', () => {
  test('a plain client is refused with a 400 naming the service; a TLS client without a certificate is refused in the handshake', async () => {
    const s = await rpcServer(PAYMENTS, testWorkloadTls('strict', paymentsLeaf, [root.cert]));
    // What a plain HTTP client sees: an error answer, then the connection closes.
    const res = await request(`http://127.0.0.1:${s.port}/`, { method: 'POST', body: '{}', headers: { 'mesh-endpoint': 'Say.Hello' } });
    assert.equal(res.statusCode, 400);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(
      await res.body.text(),
      JSON.stringify({ id: PAYMENTS, code: 400, detail: `service ${PAYMENTS} accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate`, status: 'Bad Request' }),
    );
    assert.equal(s.stats.counter('http.rpc.downstream_cx_plain_refused').value, 1);
    // The bytes, then the close (a pipelined second request is read and dropped, never served).
    const body = JSON.stringify({ id: PAYMENTS, code: 400, detail: `service ${PAYMENTS} accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate`, status: 'Bad Request' });
    const raw = await rawHttp(s.port, 'POST / HTTP/1.1\r\nHost: x\r\nMesh-Endpoint: Say.Hello\r\nContent-Length: 2\r\n\r\n{}GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(raw.raw, `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
    assert.equal(s.hits(), 0);
    // A TLS client that trusts the server but has no certificate of its own.
    await assert.rejects(tlsRequest(s.port, undefined), (err: Error & { code?: string }) => {
      assert.match(`${err.code} ${err.message}`, /certificate required|ECONNRESET|socket hang up/i);
      return true;
    });
    await waitFor(() => s.stats.counter('http.rpc.ssl.fail_verify_no_cert').value === 1);
    // A client certificate from another CA: with TLS 1.3 the client finishes its side of the
    // handshake first; the server then closes the connection without an answer.
    assert.equal(await tlsRequest(s.port, otherRoot.leaf(CALLER)), '');
    await waitFor(() => s.stats.counter('http.rpc.ssl.fail_verify_error').value === 1);
    assert.equal(s.hits(), 0);
  });

  test('the mesh client with its certificate calls a strict node; a plain mesh client is refused with the 400', async () => {
    const registry = new MemoryRegistry();
    const s = await rpcServer(PAYMENTS, testWorkloadTls('strict', paymentsLeaf, [root.cert]));
    await registerNode(registry, PAYMENTS, 'p1', s.port, true);
    const mtls = caller(registry, testWorkloadTls('permissive', callerLeaf, [root.cert]));
    assert.deepEqual(await mtls.client.callValue(PAYMENTS, 'Say.Hello', {}), { node: 'node' });
    assert.equal(mtls.stats.counter(`cluster.${PAYMENTS}.ssl.handshake`).value, 1);
    const plain = caller(registry, undefined);
    await assert.rejects(plain.client.callValue(PAYMENTS, 'Say.Hello', {}), (err: MeshError) => {
      assert.equal(err.code, 400);
      assert.equal(err.id, PAYMENTS);
      return true;
    });
    assert.equal(s.hits(), 1);
  });

  test('openssl s_client shows the SPIFFE ID with a client certificate, and fails without one', async () => {
    const s = await rpcServer(PAYMENTS, testWorkloadTls('strict', paymentsLeaf, [root.cert]));
    const ok = await sClient(s.port, ['-CAfile', root.certFile, '-cert', callerLeaf.certFile, '-key', callerLeaf.keyFile, '-verify_return_error']);
    const pem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(ok.stdout)?.[0];
    assert.ok(pem, ok.stdout + ok.stderr);
    assert.equal(new X509Certificate(pem).subjectAltName, `URI:spiffe://mesh.local/svc/${PAYMENTS}`);
    assert.match(ok.stdout, /Verify return code: 0 \(ok\)/);
    assert.match(ok.stdout, /HTTP\/1\.1 200 OK[\s\S]*\{"status":"ok"\}/);
    const refused = await sClient(s.port, ['-CAfile', root.certFile, '-verify_return_error']);
    assert.match(refused.stderr, /tlsv13 alert certificate required/);
    assert.doesNotMatch(refused.stdout, /HTTP\/1\.1/);
    await waitFor(() => s.stats.counter('http.rpc.ssl.fail_verify_no_cert').value >= 1);
  });
});

describe('the server: permissive', () => {
  test('one port serves plain HTTP and mutual TLS; the handler learns the TLS caller identity', async () => {
    const s = await sniffingServer('permissive', paymentsLeaf);
    const plain = await request(`http://127.0.0.1:${s.port}/`);
    assert.deepEqual(await plain.body.json(), { peer: null, encrypted: false });
    const secure = await tlsRequest(s.port, callerLeaf);
    assert.match(secure, /^HTTP\/1\.1 200 OK\r\n/);
    assert.ok(secure.endsWith(JSON.stringify({ peer: callerLeaf.spiffeId, encrypted: true })), secure);
    assert.equal(s.stats.counter('http.rpc.ssl.handshake').value, 1);
    // A TLS caller must still present a trusted certificate.
    await assert.rejects(tlsRequest(s.port, undefined));
    await waitFor(() => s.stats.counter('http.rpc.ssl.fail_verify_no_cert').value === 1);
  });

  test('a connection that sends nothing is closed after the header timeout, plain or half a handshake', async () => {
    const workload = testWorkloadTls('permissive', paymentsLeaf, [root.cert]);
    const server = createServer((_req, res) => res.end());
    const stop = serveMtls(server, { workload, service: PAYMENTS, stats: new StatsStore().scope('http.rpc.'), acceptTimeoutMs: 200 });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    closers.push(async () => {
      stop();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    });
    const port = (server.address() as AddressInfo).port;
    const silent = netConnect(port, '127.0.0.1');
    const halfHandshake = netConnect(port, '127.0.0.1', () => halfHandshake.write(Buffer.from([0x16, 0x03, 0x01])));
    await Promise.all([once(silent, 'close'), once(halfHandshake, 'close')]);
    // A client that resets before its first byte: the server goes on (no unhandled socket error).
    const reset = netConnect(port, '127.0.0.1', () => reset.resetAndDestroy());
    await once(reset, 'close');
    const after = await request(`http://127.0.0.1:${port}/`);
    assert.equal(after.statusCode, 200);
    await after.body.dump();
  });
});

describe('the caller checks the node identity', () => {
  test('a node whose certificate comes from another CA is refused and counted; nothing reaches it', async () => {
    const registry = new MemoryRegistry();
    const impostor = await rpcServer(PAYMENTS, testWorkloadTls('permissive', otherRoot.leaf(PAYMENTS), [otherRoot.cert, root.cert]));
    await registerNode(registry, PAYMENTS, 'evil', impostor.port, true);
    const c = caller(registry, testWorkloadTls('permissive', callerLeaf, [root.cert]));
    await assert.rejects(c.client.callValue(PAYMENTS, 'Say.Hello', {}), (err: MeshError) => {
      assert.equal(err.code, 502);
      assert.match(err.message, new RegExp(`node 127\\.0\\.0\\.1:${impostor.port}: its certificate is not signed by a trusted mesh root`));
      return true;
    });
    assert.ok(c.stats.counter(`cluster.${PAYMENTS}.ssl.fail_verify_error`).value >= 1);
    assert.equal(impostor.hits(), 0);
  });

  test('a node registered as payments with the certificate of another service is refused and counted; the right node gets the calls', async () => {
    const registry = new MemoryRegistry();
    const wrong = await rpcServer(PAYMENTS, testWorkloadTls('permissive', root.leaf('go.mesh.srv.orders'), [root.cert]), 'wrong');
    const right = await rpcServer(PAYMENTS, testWorkloadTls('permissive', paymentsLeaf, [root.cert]), 'right');
    await registerNode(registry, PAYMENTS, 'wrong', wrong.port, true);
    const c = caller(registry, testWorkloadTls('permissive', callerLeaf, [root.cert]));
    await assert.rejects(c.client.callValue(PAYMENTS, 'Say.Hello', {}), (err: MeshError) => {
      assert.equal(err.code, 502);
      assert.ok(err.message.includes(`mutual TLS: node 127.0.0.1:${wrong.port} presented spiffe://mesh.local/svc/go.mesh.srv.orders, not spiffe://mesh.local/svc/${PAYMENTS}`), err.message);
      return true;
    });
    const san = c.stats.counter(`cluster.${PAYMENTS}.ssl.fail_verify_san`);
    assert.equal(san.value, 3, 'each try was refused (retries: 2)');
    // Logged once for the node, not once per try.
    const warned = c.logs.filter((l) => l.reason === 'identity');
    assert.equal(warned.length, 1);
    assert.equal(warned[0]!.msg, `mutual TLS: node 127.0.0.1:${wrong.port} presented spiffe://mesh.local/svc/go.mesh.srv.orders, not spiffe://mesh.local/svc/${PAYMENTS}`);
    assert.equal(warned[0]!.expected, `spiffe://mesh.local/svc/${PAYMENTS}`);
    await registerNode(registry, PAYMENTS, 'right', right.port, true);
    await waitFor(() => c.cm.clusters().find((x) => x.name === PAYMENTS)?.hosts.length === 2);
    for (let i = 0; i < 6; i++) assert.deepEqual(await c.client.callValue(PAYMENTS, 'Say.Hello', {}), { node: 'right' });
    assert.equal(wrong.hits(), 0);
    assert.equal(right.hits(), 6);
  });

  test('strict: a node that does not serve mutual TLS is not called, and counted', async () => {
    const registry = new MemoryRegistry();
    const plainNode = await rpcServer(PAYMENTS, undefined);
    await registerNode(registry, PAYMENTS, 'plain', plainNode.port, false);
    const c = caller(registry, testWorkloadTls('strict', callerLeaf, [root.cert]));
    await assert.rejects(c.client.callValue(PAYMENTS, 'Say.Hello', {}), (err: MeshError) => {
      assert.equal(err.code, 502);
      assert.ok(err.message.includes(`mutual TLS: node 127.0.0.1:${plainNode.port} does not serve mutual TLS (no mtls=true in its registry metadata); not called in strict mode`), err.message);
      return true;
    });
    assert.equal(c.stats.counter(`cluster.${PAYMENTS}.upstream_cx_plain_refused`).value, 3);
    assert.equal(c.stats.counter(`cluster.${PAYMENTS}.upstream_cx_total`).value, 0, 'no connection was opened');
    assert.equal(plainNode.hits(), 0);
  });

  test('a health-checked node that serves mutual TLS is checked over mutual TLS (a plain check would get the 400)', async () => {
    const registry = new MemoryRegistry();
    const s = await rpcServer(PAYMENTS, testWorkloadTls('strict', paymentsLeaf, [root.cert]));
    await registerNode(registry, PAYMENTS, 'p1', s.port, true, { health_check_path: '/health' });
    const c = caller(registry, testWorkloadTls('strict', callerLeaf, [root.cert]));
    assert.deepEqual(await c.client.callValue(PAYMENTS, 'Say.Hello', {}), { node: 'node' });
    assert.equal(c.stats.counter(`cluster.${PAYMENTS}.health_check.success`).value, 1);
    assert.equal(c.stats.counter(`cluster.${PAYMENTS}.health_check.failure`).value, 0);
    assert.equal(s.stats.counter('http.rpc.downstream_cx_plain_refused').value, 0);
  });

  test('permissive: a node without mtls=true is called plain', async () => {
    const registry = new MemoryRegistry();
    const plainNode = await rpcServer(PAYMENTS, undefined);
    await registerNode(registry, PAYMENTS, 'plain', plainNode.port, false);
    const c = caller(registry, testWorkloadTls('permissive', callerLeaf, [root.cert]));
    assert.deepEqual(await c.client.callValue(PAYMENTS, 'Say.Hello', {}), { node: 'node' });
    assert.equal(c.stats.counter(`cluster.${PAYMENTS}.ssl.handshake`).value, 0);
  });
});

describe('renewal', () => {
  test('certificates renewed on both sides under load: zero failed calls, new connections use the new certificates, sessions are resumed', async () => {
    let calls = 0;
    const callerSerials = new Set<string>();
    const serverSerials = new Set<string>();
    // Every 4th answer closes its connection, so that connections keep being made.
    const s = await sniffingServer('strict', paymentsLeaf, (req, res) => {
      const socket = req.socket as TLSSocket;
      callerSerials.add(socket.getPeerCertificate().serialNumber);
      serverSerials.add((socket.getCertificate() as { serialNumber: string }).serialNumber);
      if (++calls % 4 === 0) res.shouldKeepAlive = false;
    });
    const registry = new MemoryRegistry();
    await registerNode(registry, PAYMENTS, 'p1', s.port, true);
    const callerTls = testWorkloadTls('permissive', callerLeaf, [root.cert]);
    const c = caller(registry, callerTls);
    let failures = 0;
    let done = 0;
    let stop = false;
    const worker = async () => {
      while (!stop) {
        try {
          await c.client.call(PAYMENTS, 'Say.Hello', Buffer.from('{}'));
        } catch (err) {
          failures++;
          console.error(err);
        }
        done++;
      }
    };
    const workers = Array.from({ length: 4 }, worker);
    await waitFor(() => done >= 50);
    const nextPayments = root.leaf(PAYMENTS);
    const nextCaller = root.leaf(CALLER);
    s.workload.use(nextPayments);
    callerTls.use(nextCaller);
    await waitFor(() => serverSerials.has(nextPayments.serial) && callerSerials.has(nextCaller.serial), 20_000);
    const after = done;
    await waitFor(() => done >= after + 50);
    stop = true;
    await Promise.all(workers);
    assert.equal(failures, 0);
    assert.ok(c.stats.counter(`cluster.${PAYMENTS}.ssl.session_reused`).value > 0, 'sessions are resumed');
    assert.ok(s.stats.counter('http.rpc.ssl.session_reused').value > 0);
  });
});
