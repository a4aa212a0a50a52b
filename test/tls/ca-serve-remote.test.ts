/**
 * The signing service and its client in process (src/tls/workload/ca-server.ts, remote-signer.ts):
 * a CA rotation reaches a process that gets its certificate from `mesh ca serve` through the trust
 * bundle it polls (the new root trusted, then a certificate from it, then the old root dropped
 * after `rotate --finish`); a renewal with a client certificate of another identity is refused;
 * the root pinned by file works as by fingerprint. Real HTTPS on loopback.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createServer, request } from 'node:https';
import { join } from 'node:path';
import pino from 'pino';
import { CaServer } from '../../src/tls/workload/ca-server.js';
import { caPaths, finishRotation, initCa, rotateCa } from '../../src/tls/workload/ca.js';
import { openWorkloadTls } from '../../src/tls/workload/index.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { makeToken } from '../../src/tls/workload/token.js';
import { createCsr, generateKeyPair, privateKeyPem } from '../../src/tls/workload/x509.js';
import { tempDir, waitFor } from '../helpers.js';

const log = pino({ level: 'silent' });
const cleanups: Array<() => unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function startCa() {
  const tmp = tempDir('ca-serve-remote-');
  cleanups.push(tmp.cleanup);
  const caDir = join(tmp.path, 'ca');
  await initCa(caDir, { trustDomain: 'mesh.local' });
  const server = await CaServer.start({ caDir, trustDomain: 'mesh.local', host: '127.0.0.1', port: 0, names: ['127.0.0.1'], certTtlMs: 3_600_000, log, pollMs: 100 });
  cleanups.push(() => server.close());
  const token = (await makeToken(caDir, { services: ['go.mesh.srv.*'], trustDomain: 'mesh.local', ttlMs: 600_000 })).token;
  return { tmp, caDir, server, token };
}

const issuerOf = (pem: string) => new X509Certificate(pem).issuer;

describe('a process with --ca_server', () => {
  it('a CA rotation reaches it through the trust bundle: the new root trusted, a certificate from it, the old root dropped after --finish', async () => {
    const { tmp, caDir, server, token } = await startCa();
    const workload = await openWorkloadTls({
      mode: 'strict',
      trustDomain: 'mesh.local',
      caDir: join(tmp.path, 'none'),
      certTtlMs: 3_600_000,
      service: 'go.mesh.srv.r',
      caServer: `https://127.0.0.1:${server.port}`,
      caToken: token,
      caRootFile: caPaths(caDir).signerCert,
      bundlePollMs: 100,
      reissueDelayMs: 300,
      log,
    });
    cleanups.push(() => workload.close());
    const oldRoot = readFileSync(caPaths(caDir).signerCert, 'utf8');
    assert.deepEqual(workload.contextOptions().ca, [oldRoot]);
    assert.equal(issuerOf(workload.contextOptions().cert), new X509Certificate(oldRoot).subject);

    const newRoot = await rotateCa(caDir, { trustDomain: 'mesh.local' });
    await waitFor(() => workload.contextOptions().ca.length === 2);
    // Issued again from the new root: a renewal with the old root's certificate, trusted during the rotation.
    await waitFor(() => issuerOf(workload.contextOptions().cert) === newRoot.cert.subject);
    finishRotation(caDir);
    await waitFor(() => workload.contextOptions().ca.length === 1);
    assert.deepEqual(workload.contextOptions().ca, [newRoot.pem]);
    // Renewals keep working against the service, whose certificate is from the new root now.
    const before = workload.certificates()[0]!.serialNumber;
    await (workload as unknown as { renew(): Promise<void> }).renew();
    assert.notEqual(workload.certificates()[0]!.serialNumber, before);
  });

  it('refuses a server of the same CA that is not the signing service (another workload\'s certificate), before sending the token', async () => {
    const { tmp, caDir, token } = await startCa();
    const keys = await generateKeyPair();
    const cert = await new LocalCaSigner(caDir, 'mesh.local').sign(await createCsr(keys, 'go.mesh.srv.x'), 'go.mesh.srv.x', 600_000);
    const seen: Array<string | undefined> = [];
    const impostor = createServer({ cert, key: await privateKeyPem(keys.privateKey) }, (req, res) => {
      seen.push(req.headers.authorization);
      res.end('{}');
    });
    impostor.listen(0, '127.0.0.1');
    await once(impostor, 'listening');
    cleanups.push(() => impostor.close());
    const port = (impostor.address() as { port: number }).port;
    await assert.rejects(
      openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: join(tmp.path, 'none'), certTtlMs: 3_600_000, service: 'go.mesh.srv.r', caServer: `https://127.0.0.1:${port}`, caToken: token, caRootFile: caPaths(caDir).signerCert, log }),
      { message: `mesh ca serve https://127.0.0.1:${port}: the server presents spiffe://mesh.local/svc/go.mesh.srv.x, not spiffe://mesh.local/svc/mesh.ca: it is not the signing service` },
    );
    assert.deepEqual(seen, []);
  });

  it('refuses a renewal whose client certificate names another identity (exact error JSON)', async () => {
    const { caDir, server } = await startCa();
    const keys = await generateKeyPair();
    const cert = await new LocalCaSigner(caDir, 'mesh.local').sign(await createCsr(keys, 'go.mesh.srv.a'), 'go.mesh.srv.a', 600_000);
    const key = await privateKeyPem(keys.privateKey);
    const body = JSON.stringify({ service: 'go.mesh.srv.b', csr: await createCsr(await generateKeyPair(), 'go.mesh.srv.b') });
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: server.port, path: '/v1/certificate', method: 'POST', ca: readFileSync(caPaths(caDir).signerCert), cert, key, agent: false }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      });
      req.on('error', reject);
      req.end(body);
    });
    assert.deepEqual(answer, {
      status: 403,
      text: '{"id":"go.mesh.ca","code":403,"detail":"the TLS client certificate is spiffe://mesh.local/svc/go.mesh.srv.a: it renews that identity only, not spiffe://mesh.local/svc/go.mesh.srv.b","status":"Forbidden"}',
    });
  });
});
