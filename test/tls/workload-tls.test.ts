/**
 * Workload certificates in process (src/tls/workload/): the local mesh CA issues each process a
 * certificate for its SPIFFE ID and renews it at two thirds of its lifetime without dropping a
 * connection; a CA rotation reaches a running process through its watch of --ca_dir (the new
 * root trusted at once, the old one until the rotation is finished); certificate files from an
 * outside PKI are reloaded when they change, and a bad new set keeps the old one. Real mutual TLS
 * handshakes on loopback decide what is trusted.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { connect, createServer, type SecureContext, type Server, type TLSSocket } from 'node:tls';
import pino from 'pino';
import { openWorkloadTls, type OpenedWorkloadTls } from '../../src/tls/workload/index.js';
import { caPaths, finishRotation, initCa, rotateCa } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { createCsr, generateKeyPair, privateKeyPem } from '../../src/tls/workload/x509.js';
import { renderCerts, secondsUntilFirstExpiring } from '../../src/admin/certs.js';
import { http, tempDir, waitFor } from '../helpers.js';

/** A logger whose lines the test reads. */
function capturedLog(): { log: pino.Logger; lines: Array<{ msg: string; level: number }> } {
  const lines: Array<{ msg: string; level: number }> = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

/** An mTLS echo server that presents the workload's current context and asks for a client certificate. */
async function echoServer(source: OpenedWorkloadTls): Promise<{ server: Server; port: number; peers: string[] }> {
  const peers: string[] = [];
  const server = createServer({ SNICallback: (_name, cb) => cb(null, source.secureContext()), requestCert: true, rejectUnauthorized: true }, (socket) => {
    peers.push(socket.getPeerCertificate().subjectaltname ?? '');
    socket.on('error', () => {});
    socket.pipe(socket);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as { port: number }).port, peers };
}

/** Connects with a context (the peer's identity is checked by the caller, not by host name). */
async function mtlsConnect(port: number, secureContext: SecureContext): Promise<TLSSocket> {
  const socket = connect({ host: '127.0.0.1', port, servername: 'mesh', secureContext, checkServerIdentity: () => undefined });
  await once(socket, 'secureConnect');
  return socket;
}

/** Resolves with the handshake's error message, or 'ok'. */
async function handshake(port: number, secureContext: SecureContext): Promise<string> {
  try {
    const socket = await mtlsConnect(port, secureContext);
    // A client certificate the server refuses shows after the handshake (TLS 1.3): one round trip.
    socket.write('ping');
    const [data] = (await Promise.race([once(socket, 'data'), once(socket, 'error').then(([e]) => Promise.reject(e)), once(socket, 'close').then(() => Promise.reject(new Error('closed')))])) as [Buffer];
    socket.destroy();
    return String(data) === 'ping' ? 'ok' : `echo ${String(data)}`;
  } catch (err) {
    return (err as Error).message;
  }
}

function serialOf(pem: string | undefined): string {
  return new X509Certificate(pem!).serialNumber.toLowerCase();
}

const cleanups: Array<() => unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe('workload certificates from the local mesh CA', () => {
  it('makes the CA on first use, issues the SPIFFE ID of the service, and two processes talk mutual TLS', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'ca');
    const { log, lines } = capturedLog();
    const a = await openWorkloadTls({ mode: 'strict', trustDomain: 'example.org', caDir, certTtlMs: 3_600_000, service: 'go.mesh.srv.a', log });
    const b = await openWorkloadTls({ mode: 'strict', trustDomain: 'example.org', caDir, certTtlMs: 3_600_000, service: 'go.mesh.srv.b', log });
    cleanups.push(() => a.close(), () => b.close());
    assert.equal(lines.filter((l) => l.msg.startsWith('made a mesh CA')).length, 1);
    assert.ok(lines[0]!.msg.includes(caDir));
    assert.equal(a.spiffeId, 'spiffe://example.org/svc/go.mesh.srv.a');
    const [leaf, ...roots] = a.certificates();
    assert.deepEqual(leaf!.subjectAltNames, [{ uri: 'spiffe://example.org/svc/go.mesh.srv.a' }]);
    assert.equal(leaf!.path, 'workload:spiffe://example.org/svc/go.mesh.srv.a');
    assert.equal(roots.length, 1);
    assert.equal(roots[0]!.ca, true);
    // Lifetime: the ttl, from a minute back.
    const lifetime = leaf!.expiration.getTime() - leaf!.validFrom.getTime();
    assert.ok(Math.abs(lifetime - 3_660_000) <= 2000, `lifetime ${lifetime}`);
    const { server, port, peers } = await echoServer(b);
    cleanups.push(() => server.close());
    const socket = await mtlsConnect(port, a.secureContext());
    assert.equal(socket.getPeerCertificate().subjectaltname, 'URI:spiffe://example.org/svc/go.mesh.srv.b');
    socket.write('hello');
    await once(socket, 'data');
    socket.destroy();
    assert.equal(peers[0], 'URI:spiffe://example.org/svc/go.mesh.srv.a');
  });

  it('renews at two thirds of the lifetime; a connection opened before keeps working, new ones get the new certificate', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'ca');
    const { log, lines } = capturedLog();
    const server = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 3000, service: 'go.mesh.srv.server', log });
    const client = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 3_600_000, service: 'go.mesh.srv.client', log });
    cleanups.push(() => server.close(), () => client.close());
    const echo = await echoServer(server);
    cleanups.push(() => echo.server.close());
    const first = server.certificates()[0]!.serialNumber;
    const before = await mtlsConnect(echo.port, client.secureContext());
    assert.equal(before.getPeerCertificate().serialNumber.toLowerCase(), first);
    let changes = 0;
    server.onChange(() => changes++);
    await waitFor(() => changes >= 1, 10_000);
    const second = server.certificates()[0]!.serialNumber;
    assert.notEqual(second, first);
    assert.ok(lines.some((l) => l.msg === `workload certificate renewed (serial ${second})`));
    // The connection made with the old certificate still carries bytes both ways.
    before.write('still here');
    const [data] = (await once(before, 'data')) as [Buffer];
    assert.equal(String(data), 'still here');
    before.destroy();
    const after = await mtlsConnect(echo.port, client.secureContext());
    assert.equal(after.getPeerCertificate().serialNumber.toLowerCase(), second);
    after.destroy();
  });

  it('a rotation: the running process trusts the new root within seconds, the old root stays trusted until the rotation is finished', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'ca');
    await initCa(caDir, { trustDomain: 'mesh.local' });
    const { log } = capturedLog();
    // A runs from before the rotation; it issues itself again 1.5 s after it sees the new root.
    const a = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 3_600_000, service: 'go.mesh.srv.a', log, pollMs: 200, reissueDelayMs: 1500 });
    cleanups.push(() => a.close());
    const contextBefore = a.secureContext();
    const oldLeaf = a.certificates()[0]!.serialNumber;
    let changes = 0;
    a.onChange(() => changes++);
    const root2 = await rotateCa(caDir, { trustDomain: 'mesh.local' });
    // The bundle reload: both roots trusted, the certificate not yet issued again.
    await waitFor(() => changes >= 1, 10_000);
    assert.equal(a.certificates().filter((c) => c.ca).length, 2);
    assert.equal(a.certificates()[0]!.serialNumber, oldLeaf);
    // B starts after the rotation: its certificate is from the new root.
    const b = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir, certTtlMs: 3_600_000, service: 'go.mesh.srv.b', log, pollMs: 200, reissueDelayMs: 1500 });
    cleanups.push(() => b.close());
    const echo = await echoServer(b);
    cleanups.push(() => echo.server.close());
    // A's context from before the reload does not know the new root, but checks B's certificate
    // through the cross certificate B sends after it (the new root certified by the old); the
    // reloaded one knows the new root, and B (new root) still trusts A's certificate from the old root.
    assert.equal(await handshake(echo.port, contextBefore), 'ok');
    assert.equal(await handshake(echo.port, a.secureContext()), 'ok');
    // A issues itself again from the new root.
    await waitFor(() => a.certificates()[0]!.serialNumber !== oldLeaf, 10_000);
    const reissued = a.certificates()[0]!;
    // Finishing the rotation: only the new root stays; both processes follow and keep talking.
    const removed = finishRotation(caDir);
    assert.equal(removed.length, 1);
    await waitFor(() => a.certificates().filter((c) => c.ca).length === 1 && b.certificates().filter((c) => c.ca).length === 1, 10_000);
    assert.equal(a.certificates().find((c) => c.ca)!.serialNumber, root2.serial);
    assert.equal(a.certificates()[0]!.serialNumber, reissued.serialNumber);
    assert.equal(await handshake(echo.port, a.secureContext()), 'ok');
    // The context from before the rotation (old root only, old certificate) is refused now.
    assert.notEqual(await handshake(echo.port, contextBefore), 'ok');
  });
});

describe('workload certificate files from an outside PKI', () => {
  /** A certificate and key for `spiffeId`-less signing through the local CA, written to files. */
  async function issue(caDir: string, service: string, trustDomain = 'mesh.local'): Promise<{ cert: string; key: string }> {
    const keys = await generateKeyPair();
    const cert = await new LocalCaSigner(caDir, trustDomain).sign(await createCsr(keys, service), service, 3_600_000);
    return { cert, key: await privateKeyPem(keys.privateKey) };
  }

  it('loads the files, reloads them when they change, and keeps the old certificate when a new file is bad (logged once)', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'pki');
    await initCa(caDir, { trustDomain: 'mesh.local' });
    const certFile = join(tmp.path, 'tls.crt');
    const keyFile = join(tmp.path, 'tls.key');
    const caFile = caPaths(caDir).signerCert;
    const one = await issue(caDir, 'go.mesh.srv.files');
    writeFileSync(certFile, one.cert);
    writeFileSync(keyFile, one.key);
    const { log, lines } = capturedLog();
    const source = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: join(tmp.path, 'unused'), certTtlMs: 1000, service: 'go.mesh.srv.files', certFile, keyFile, caFile, log, pollMs: 100 });
    cleanups.push(() => source.close());
    assert.equal(source.spiffeId, 'spiffe://mesh.local/svc/go.mesh.srv.files');
    assert.equal(source.certificates()[0]!.serialNumber, serialOf(one.cert));
    assert.equal(source.certificates()[0]!.path, certFile);
    let changes = 0;
    source.onChange(() => changes++);
    const two = await issue(caDir, 'go.mesh.srv.files');
    writeFileSync(keyFile, two.key);
    writeFileSync(certFile, two.cert);
    await waitFor(() => source.certificates()[0]!.serialNumber === serialOf(two.cert), 10_000);
    assert.ok(changes >= 1);
    const good = source.secureContext();
    writeFileSync(certFile, 'not a certificate\n');
    await waitFor(() => lines.some((l) => l.msg.startsWith('workload certificate files did not load')), 10_000);
    // Touch the bad file again: the same problem is not logged twice.
    writeFileSync(certFile, 'not a certificate\n');
    const three = await issue(caDir, 'go.mesh.srv.files');
    assert.equal(source.secureContext(), good);
    assert.equal(source.certificates()[0]!.serialNumber, serialOf(two.cert));
    writeFileSync(keyFile, three.key);
    writeFileSync(certFile, three.cert);
    await waitFor(() => source.certificates()[0]!.serialNumber === serialOf(three.cert), 10_000);
    assert.equal(lines.filter((l) => l.msg.startsWith('workload certificate files did not load')).length, 1);
  });

  it('refuses a certificate whose URI SAN is not a SPIFFE ID of the trust domain, and a missing key or CA file', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'pki');
    await initCa(caDir, { trustDomain: 'other.org' });
    const certFile = join(tmp.path, 'tls.crt');
    const keyFile = join(tmp.path, 'tls.key');
    const pair = await issue(caDir, 'go.mesh.srv.files', 'other.org');
    writeFileSync(certFile, pair.cert);
    writeFileSync(keyFile, pair.key);
    const { log } = capturedLog();
    const base = { mode: 'strict' as const, trustDomain: 'mesh.local', caDir: join(tmp.path, 'unused'), certTtlMs: 1000, service: 'go.mesh.srv.files', log };
    await assert.rejects(openWorkloadTls({ ...base, certFile, keyFile, caFile: caPaths(caDir).signerCert }), {
      message: `the workload certificate ${certFile} has no URI SAN in the trust domain mesh.local (want spiffe://mesh.local/svc/<service>; it has spiffe://other.org/svc/go.mesh.srv.files)`,
    });
    await assert.rejects(openWorkloadTls({ ...base, certFile, caFile: caPaths(caDir).signerCert }), { message: 'mtlsCertFile needs mtlsKeyFile' });
    await assert.rejects(openWorkloadTls({ ...base, certFile, keyFile }), /needs mtlsCaFile/);
  });
});

describe('openWorkloadTls refuses bad options', () => {
  it('a trust domain that is not a SPIFFE trust domain, a ttl under a second', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const { log } = capturedLog();
    const base = { mode: 'strict' as const, trustDomain: 'mesh.local', caDir: join(tmp.path, 'ca'), certTtlMs: 60_000, service: 'go.mesh.srv.a', log };
    await assert.rejects(openWorkloadTls({ ...base, trustDomain: 'Mesh Local' }), { message: 'invalid option trustDomain: must be lower-case letters, digits, ".", "-" and "_" (a SPIFFE trust domain, e.g. mesh.local) (got "Mesh Local")' });
    await assert.rejects(openWorkloadTls({ ...base, certTtlMs: 0 }), { message: 'invalid option mtlsCertTtl: must be 1s or more (a certificate is renewed at two thirds of it) (got "0ms")' });
  });
});

describe('admin /certs of a workload', () => {
  it('lists the workload certificate (SPIFFE ID, serial, expiry, days left) and each root as a CA certificate', async () => {
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const { log } = capturedLog();
    const w = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: join(tmp.path, 'ca'), certTtlMs: 3 * 86_400_000, service: 'go.mesh.srv.a', log });
    cleanups.push(() => w.close());
    const body = JSON.parse(renderCerts(w.certificates(), Date.now())) as { certificates: Array<{ ca_cert: Array<Record<string, unknown>>; cert_chain: Array<Record<string, unknown>> }> };
    const [leaf, root] = body.certificates;
    assert.deepEqual(leaf!.cert_chain[0]!.subject_alt_names, [{ uri: 'spiffe://mesh.local/svc/go.mesh.srv.a' }]);
    assert.equal(leaf!.cert_chain[0]!.serial_number, w.certificates()[0]!.serialNumber);
    assert.equal(leaf!.cert_chain[0]!.days_until_expiration, '2');
    assert.equal(root!.cert_chain.length, 0);
    assert.equal(root!.ca_cert[0]!.days_until_expiration, '3649');
    assert.equal(secondsUntilFirstExpiring(w.certificates(), Date.now())! <= 3 * 86_400, true);
  });
});

describe('runtime.openWorkloadTls', () => {
  it('registers the workload certificate with admin /certs and server.seconds_until_first_cert_expiring, and removes it on shutdown', async () => {
    const { Runtime } = await import('../../src/process/runtime.js');
    const { parseArgs } = await import('../../src/cli/flags.js');
    const { optionsFromFlags } = await import('../../src/cli/options.js');
    const tmp = tempDir();
    cleanups.push(tmp.cleanup);
    const runtime = new Runtime(
      optionsFromFlags(parseArgs(['api', '--registry=memory', '--admin_address=127.0.0.1:0', '--log_level=off', '--mtls=strict', '--mtls_cert_ttl=2h', `--ca_dir=${join(tmp.path, 'ca')}`]).config),
      { role: 'test' },
    );
    try {
      const admin = (await runtime.startAdmin('127.0.0.1:0'))!;
      const workload = await runtime.openWorkloadTls('go.mesh.srv.a');
      assert.equal(workload.mode, 'strict');
      const certs = await http('GET', `http://127.0.0.1:${admin.port}/certs`);
      const body = certs.json() as { certificates: Array<{ ca_cert: Array<Record<string, unknown>>; cert_chain: Array<Record<string, unknown>> }> };
      assert.equal(body.certificates.length, 2);
      assert.equal(body.certificates[0]!.cert_chain[0]!.path, 'workload:spiffe://mesh.local/svc/go.mesh.srv.a');
      assert.equal(body.certificates[1]!.ca_cert.length, 1);
      const stats = await http('GET', `http://127.0.0.1:${admin.port}/stats?filter=seconds_until_first_cert_expiring`);
      const seconds = Number(/server\.seconds_until_first_cert_expiring: (\d+)/.exec(stats.text)![1]);
      assert.ok(seconds > 7000 && seconds <= 7200, stats.text);
    } finally {
      await runtime.shutdown();
    }
    assert.deepEqual(runtime.certificates(), []);
  });
});
