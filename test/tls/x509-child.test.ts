/**
 * The X.509 work of a workload done in a child process (src/tls/workload/x509-child.ts), here
 * from src/ under tsx (the lazy-modules test runs it from dist/): a CSR for the parent's key, a
 * certificate from the local mesh CA for a CSR or a key, a CA made in a new directory; the
 * child's errors come back with the message the same work gives in process (a CaError stays
 * one); an unknown request and a child that does not answer in time are errors.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { caExists, CaError, caPaths, initCa } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { generateKeyPair, inspectCsr, privateKeyPem, splitPem } from '../../src/tls/workload/x509.js';
import { runX509Child, type X509ChildRequest } from '../../src/tls/workload/x509-child.js';
import { tempDir } from '../helpers.js';

const tmp = tempDir('mesh-x509-child-');
after(() => tmp.cleanup());

describe('X.509 work in a child process', () => {
  it('makes a CSR for the key it is given', async () => {
    const keys = await generateKeyPair();
    const keyPem = await privateKeyPem(keys.privateKey);
    const csr = await runX509Child({ op: 'csr', keyPem, commonName: 'go.mesh.srv.a' });
    const facts = await inspectCsr(csr);
    assert.deepEqual(facts, { keyKind: 'EC P-256', requestedNames: [], signatureValid: true });
    // Its key is the parent's: a certificate signed for it matches the private key.
    const dir = join(tmp.path, 'ca-csr');
    await initCa(dir, { trustDomain: 'mesh.local' });
    const chain = await new LocalCaSigner(dir, 'mesh.local').sign(csr, 'go.mesh.srv.a', 600_000);
    assert.equal(new X509Certificate(splitPem(chain)[0]!).checkPrivateKey(createPrivateKey(keyPem)), true);
  });

  it('makes a CA, then signs for a key and for a CSR, as the mesh CA in process does', async () => {
    const dir = join(tmp.path, 'ca');
    assert.equal(await runX509Child({ op: 'init', dir, trustDomain: 'mesh.local' }), '');
    assert.equal(caExists(dir), true);
    const keyPem = await privateKeyPem((await generateKeyPair()).privateKey);
    const signer = new LocalCaSigner(dir, 'mesh.local', { outOfProcess: true, altNames: ['ca.example', '127.0.0.1'] });
    const chain = await signer.signKey(keyPem, 'go.mesh.srv.b', 600_000);
    const leaf = new X509Certificate(splitPem(chain)[0]!);
    assert.equal(leaf.subjectAltName, 'URI:spiffe://mesh.local/svc/go.mesh.srv.b, DNS:ca.example, IP Address:127.0.0.1');
    assert.equal(leaf.checkPrivateKey(createPrivateKey(keyPem)), true);
    const signerCert = new X509Certificate(readFileSync(caPaths(dir).signerCert, 'utf8'));
    assert.equal(leaf.checkIssued(signerCert), true);
    const csr = await runX509Child({ op: 'csr', keyPem, commonName: 'go.mesh.srv.b' });
    assert.equal(new X509Certificate(splitPem(await signer.sign(csr, 'go.mesh.srv.b', 600_000))[0]!).subject, 'CN=go.mesh.srv.b');
  });

  it('carries back the error of the work, with the same message and class', async () => {
    const none = join(tmp.path, 'none');
    const inProcess = await new LocalCaSigner(none, 'mesh.local').signKey(await privateKeyPem((await generateKeyPair()).privateKey), 'x', 600_000).then(() => undefined, (err: Error) => err);
    const inChild = await new LocalCaSigner(none, 'mesh.local', { outOfProcess: true }).signKey(await privateKeyPem((await generateKeyPair()).privateKey), 'x', 600_000).then(() => undefined, (err: Error) => err);
    assert.ok(inProcess instanceof CaError && inChild instanceof CaError, `${inProcess} / ${inChild}`);
    assert.match(inChild.message, /^no mesh CA in /);
    assert.equal(inChild.message, inProcess.message);
    // A CA already there.
    await assert.rejects(runX509Child({ op: 'init', dir: join(tmp.path, 'ca'), trustDomain: 'mesh.local' }), (err: Error) => err instanceof CaError && /already/.test(err.message));
    // A CSR that is not one.
    await assert.rejects(runX509Child({ op: 'sign', dir: join(tmp.path, 'ca'), trustDomain: 'mesh.local', service: 'x', ttlMs: 600_000, csrPem: 'nope' }), (err: Error) => !(err instanceof CaError) && err.message.length > 0);
  });

  it('refuses an unknown request, and a child that does not answer in time', async () => {
    await assert.rejects(runX509Child({ op: 'nope' } as unknown as X509ChildRequest), { message: 'unknown X.509 child request "nope"' });
    await assert.rejects(runX509Child({ op: 'init', dir: join(tmp.path, 'late'), trustDomain: 'mesh.local' }, { timeoutMs: 1 }), { message: 'the X.509 child process did not answer within 1 ms' });
  });
});
