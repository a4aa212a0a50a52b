/**
 * Where a workload certificate is signed. `CertificateSigner` is the seam: the local mesh CA
 * (`LocalCaSigner`, for processes that can read `--ca_dir`) implements it here; a signing service
 * reached over the network can implement it too, without the key ever leaving the CA's machine.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { spiffeIdOf } from '../../base/mtls/workload-tls.js';
import { caPaths, readCross, readRoots, readSigner, type CaRoot } from './ca.js';
import { createCsr, keyPairFromPem, signWorkload, splitPem } from './x509.js';
import { runX509Child } from './x509-child.js';
import { fileSignature, watchFiles } from './watch.js';

export interface CertificateSigner {
  /** Where the certificates come from, for logs and errors (`mesh CA /home/u/.mesh/ca`). */
  readonly description: string;
  /**
   * Signs a certificate for the CSR's key with the identity of `service` in `trustDomain`, valid
   * for `ttlMs` (or less); resolves with the chain in PEM: the leaf, then any intermediates.
   * `current` is the certificate (chain) and key the process holds now, when it renews: a remote
   * signer authenticates the renewal with it (a local one has no use for it).
   */
  sign(csrPem: string, service: string, ttlMs: number, current?: CurrentCertificate): Promise<string>;
  /**
   * `sign` for the key of `keyPem` (a PKCS#8 PEM private key, held by the process): the signer
   * makes the CSR too, where it does its X.509 work.
   */
  signKey(keyPem: string, service: string, ttlMs: number, current?: CurrentCertificate): Promise<string>;
  /**
   * Told the key of the next `signKey` ahead of time (right after an issuance): a signer may start
   * its slow part then (a remote signer makes the CSR), so the renewal waits only for the rest.
   */
  prepare?(keyPem: string, service: string): void;
  /** The roots to trust now (every root during a rotation). */
  roots(): Promise<CaRoot[]>;
  /** Calls `onChange` soon after the roots or the signer change; returns what stops it. */
  watch(onChange: () => void, o: { pollMs: number }): () => void;
}

/** A workload's certificate chain and private key, in PEM. */
export interface CurrentCertificate {
  cert: string;
  key: string;
}

/** Signs with the key in the CA directory (read at each signature, so a rotation takes effect at once). */
export class LocalCaSigner implements CertificateSigner {
  readonly description: string;

  /**
   * `altNames`: DNS names and IP addresses added to every certificate it signs (a server's, reached
   * by name). `outOfProcess`: `sign` and `signKey` do their X.509 work in a short-lived child
   * process (./x509-child.ts), so this process never loads the X.509 library (a workload's
   * memory); `signJoined` always signs here.
   */
  constructor(
    readonly dir: string,
    readonly trustDomain: string,
    private readonly o: { altNames?: readonly string[]; outOfProcess?: boolean } = {},
  ) {
    this.description = `mesh CA ${dir}`;
  }

  async sign(csrPem: string, service: string, ttlMs: number): Promise<string> {
    if (this.o.outOfProcess) return runX509Child({ op: 'sign', dir: this.dir, trustDomain: this.trustDomain, altNames: this.o.altNames, service, ttlMs, csrPem });
    return this.signJoined(csrPem, service, ttlMs);
  }

  async signKey(keyPem: string, service: string, ttlMs: number): Promise<string> {
    if (this.o.outOfProcess) return runX509Child({ op: 'sign', dir: this.dir, trustDomain: this.trustDomain, altNames: this.o.altNames, service, ttlMs, keyPem });
    return this.signJoined(await createCsr(await keyPairFromPem(keyPem), service), service, ttlMs);
  }

  /** `sign`, recording the join (the signing service's certificates: src/tls/workload/x509.ts JoinFacts). */
  async signJoined(csrPem: string, service: string, ttlMs: number, join?: { joinedAt: number; token: string; chain?: string }): Promise<string> {
    const signer = await readSigner(this.dir);
    const leaf = await signWorkload({ csrPem, spiffeId: spiffeIdOf(this.trustDomain, service), commonName: service, ttlMs, signerCert: signer.cert, signer: signer.key, altNames: this.o.altNames, join });
    // The leaf and the intermediates; the root is what the peer already trusts. During a rotation,
    // the cross certificates too: a peer that trusts only the old root checks the leaf with them.
    const intermediates = splitPem(signer.chainPem).filter((pem) => {
      const cert = new X509Certificate(pem);
      return !(cert.checkIssued(cert) && cert.verify(cert.publicKey));
    });
    return leaf + intermediates.join('') + readCross(this.dir).filter((pem) => !intermediates.includes(pem)).join('');
  }

  async roots(): Promise<CaRoot[]> {
    return readRoots(this.dir);
  }

  watch(onChange: () => void, o: { pollMs: number }): () => void {
    const p = caPaths(this.dir);
    const signature = () => {
      // The roots' names and files, and the signer's files.
      let names: string;
      try {
        names = readdirSync(p.roots).filter((n) => n.endsWith('.pem')).sort().map((n) => `${n}=${fileSignature(join(p.roots, n))}`).join(',');
      } catch (err) {
        names = `error:${(err as NodeJS.ErrnoException).code}`;
      }
      return `${names}|${fileSignature(p.signerCert)}|${fileSignature(p.signerKey)}|${fileSignature(p.cross)}`;
    };
    return watchFiles({ dirs: [p.dir, p.roots], signature, onChange, pollMs: o.pollMs, settleMs: 100 });
  }
}

