/**
 * Workload certificates for mutual TLS between mesh processes (the WorkloadTls of
 * src/core/transport/workload-tls.ts): issued by the local mesh CA in `--ca_dir` (made on first
 * use when the directory holds none), or read from the files of an outside PKI
 * (`--mtls_cert_file`, `--mtls_key_file`, `--mtls_ca_file`). See docs/mesh-ca.md.
 */
import type { Logger } from 'pino';
import { OptionError } from '../../base/util/option-error.js';
import type { MtlsMode, WorkloadTls } from '../../core/transport/workload-tls.js';
import type { CertificateInfo } from '../certificate.js';
import { caExists, CaError, initCa, trustDomainProblem } from './ca.js';
import { FileWorkloadTls } from './files-source.js';
import { IssuedWorkloadTls } from './issued.js';
import { LocalCaSigner } from './signer.js';

export type { CertificateSigner } from './signer.js';
export { defaultCaDir } from './ca.js';

/** The shortest --mtls_cert_ttl: a workload certificate renews at two thirds of it. */
export const MIN_CERT_TTL_MS = 1000;

export interface OpenWorkloadTlsOptions {
  mode: MtlsMode;
  trustDomain: string;
  /** The mesh CA directory (defaultCaDir of --ca_dir and --mesh_home). */
  caDir: string;
  certTtlMs: number;
  /** The service name: the identity is spiffe://<trustDomain>/svc/<service>. */
  service: string;
  /** An outside PKI: all three, or none. */
  certFile?: string;
  keyFile?: string;
  caFile?: string;
  log: Logger;
  /** The bounded poll behind fs.watch of the CA directory or files (ms). Default 5000. */
  pollMs?: number;
  /** After the CA's roots change, wait this long before issuing from the new signer (ms). Default 2 × pollMs. */
  reissueDelayMs?: number;
}

export interface OpenedWorkloadTls extends WorkloadTls {
  /** Stops renewing and watching. */
  close(): Promise<void>;
  /** The workload certificate, then the trusted roots (`ca: true`), for admin /certs. */
  certificates(): CertificateInfo[];
}

/** This process's workload certificate source; rejects with an Error naming the flag or file at fault. */
export async function openWorkloadTls(o: OpenWorkloadTlsOptions): Promise<OpenedWorkloadTls> {
  const domainProblem = trustDomainProblem(o.trustDomain);
  if (domainProblem) throw new OptionError('trust_domain', domainProblem, o.trustDomain);
  if (!(o.certTtlMs >= MIN_CERT_TTL_MS)) throw new OptionError('mtls_cert_ttl', 'must be 1s or more (a certificate is renewed at two thirds of it)', `${o.certTtlMs}ms`);
  if (o.certFile || o.keyFile || o.caFile) {
    return FileWorkloadTls.open(o);
  }
  if (!caExists(o.caDir)) {
    try {
      await initCa(o.caDir, { trustDomain: o.trustDomain });
      o.log.info({ caDir: o.caDir }, `made a mesh CA in ${o.caDir} (its key signs the workload certificates of every process that can read it)`);
    } catch (err) {
      // Another process made it first: use theirs.
      if (!(err instanceof CaError) || !caExists(o.caDir)) throw err;
    }
  }
  return IssuedWorkloadTls.open({ ...o, signer: new LocalCaSigner(o.caDir, o.trustDomain) });
}
