/**
 * What both sources of a workload certificate share (issued by a signer: issued.ts; files of an
 * outside PKI: files-source.ts): the certificate held now and the SecureContext made of it, and
 * the listeners told when it is replaced.
 */
import type { SecureContext } from 'node:tls';
import type { Logger } from 'pino';
import type { WorkloadTlsPems } from '../../base/mtls/workload-tls.js';
import { certificateInfoFromPem, type CertificateInfo } from '../certificate.js';
import type { CaRoot } from './ca.js';

export interface HeldCertificate {
  chainPem: string;
  keyPem: string;
  roots: CaRoot[];
  context: SecureContext;
  leaf: CertificateInfo;
}

export abstract class HeldWorkloadTls<C extends HeldCertificate> {
  protected current!: C;
  private readonly listeners = new Set<() => void>();

  constructor(private readonly changeLog: Logger) {}

  secureContext(): SecureContext {
    return this.current.context;
  }

  contextOptions(): WorkloadTlsPems {
    const c = this.current;
    return { cert: c.chainPem, key: c.keyPem, ca: c.roots.map((r) => r.pem) };
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The workload certificate and the trusted roots, as admin /certs lists them. */
  certificates(): CertificateInfo[] {
    return [this.current.leaf, ...this.current.roots.map((r) => ({ ...certificateInfoFromPem(r.pem, r.path), ca: true }))];
  }

  /** Holds `next` and tells the listeners; one that throws is logged and the others still run. */
  protected install(next: C): void {
    this.current = next;
    for (const listener of [...this.listeners]) {
      try {
        listener();
      } catch (err) {
        this.changeLog.error({ err: (err as Error).message }, 'workload certificate: a change listener failed');
      }
    }
  }

  protected forgetListeners(): void {
    this.listeners.clear();
  }
}
