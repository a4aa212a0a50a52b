/**
 * Workload certificates for mutual TLS between mesh processes (the WorkloadTls of
 * src/base/mtls/workload-tls.ts): issued by the local mesh CA in `--ca_dir` (made on first
 * use when the directory holds none), or read from the files of an outside PKI
 * (`--mtls_cert_file`, `--mtls_key_file`, `--mtls_ca_file`), or asked of the CA's signing service
 * on another machine (`--ca_server`, src/tls/workload/remote-signer.ts). See docs/mesh-ca.md and
 * docs/mesh-ca-multi-host.md.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { SchemaOptionError } from '../../base/util/option-error.js';
import type { MtlsMode, WorkloadTls } from '../../base/mtls/workload-tls.js';
import type { CertificateInfo } from '../certificate.js';
import type { StatsScope } from '../../base/stats/store.js';
import { caExists, CaError, trustDomainProblem } from './ca.js';
import { FileWorkloadTls } from './files-source.js';
import { IssuedWorkloadTls } from './issued.js';
import { splitPem } from './x509.js';
import { LocalCaSigner } from './signer.js';
import { runX509Child } from './x509-child.js';
import { DEFAULT_BUNDLE_POLL_MS, normalizeFingerprint, RemoteCaSigner } from './remote-signer.js';

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
  /** The signing service (`mesh ca serve`), `https://HOST:PORT`: certificates come from it, not from --ca_dir. */
  caServer?: string;
  /** Its join token, or a file that holds it (read at each use). */
  caToken?: string;
  caTokenFile?: string;
  /** The pinned root of the signing service: its SHA-256 fingerprint, or a PEM file. */
  caRootFingerprint?: string;
  caRootFile?: string;
  /** How often the trust bundle is fetched from the signing service (ms). Default 60000. */
  bundlePollMs?: number;
  log: Logger;
  /** The bounded poll behind fs.watch of the CA directory or files (ms). Default 5000. */
  pollMs?: number;
  /** After the CA's roots change, wait this long before issuing from the new signer (ms). Default 2 × pollMs. */
  reissueDelayMs?: number;
  /** Where the renewals are counted (mtls.cert_renewed, mtls.cert_renewal_failed). */
  stats?: StatsScope;
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
  if (domainProblem) throw new SchemaOptionError('trust_domain', domainProblem, o.trustDomain);
  if (!(o.certTtlMs >= MIN_CERT_TTL_MS)) throw new SchemaOptionError('mtls_cert_ttl', 'must be 1s or more (a certificate is renewed at two thirds of it)', `${o.certTtlMs}ms`);
  if (o.certFile || o.keyFile || o.caFile) {
    if (o.caServer) throw new SchemaOptionError('ca_server', '{ca_server} takes certificates from mesh ca serve: give it, or {mtls_cert_file}, {mtls_key_file} and {mtls_ca_file}, not both');
    return FileWorkloadTls.open(o);
  }
  if (o.caServer) return openRemote(o, o.caServer);
  for (const key of ['caToken', 'caTokenFile', 'caRootFingerprint', 'caRootFile'] as const) {
    if (o[key]) throw new SchemaOptionError(key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), `{${key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}} is for certificates from mesh ca serve: give {ca_server} too`);
  }
  if (!caExists(o.caDir)) {
    try {
      // Made in a child process, as the certificates are (./x509-child.ts).
      await runX509Child({ op: 'init', dir: o.caDir, trustDomain: o.trustDomain });
      o.log.info({ caDir: o.caDir }, `made a mesh CA in ${o.caDir} (its key signs the workload certificates of every process that can read it)`);
    } catch (err) {
      // Another process made it first: use theirs.
      if (!(err instanceof CaError) || !caExists(o.caDir)) throw err;
    }
  }
  return IssuedWorkloadTls.open({ ...o, signer: new LocalCaSigner(o.caDir, o.trustDomain, { outOfProcess: true }) });
}

/** A workload certificate from `mesh ca serve` at `server`, the root pinned. */
async function openRemote(o: OpenWorkloadTlsOptions, server: string): Promise<OpenedWorkloadTls> {
  let url: URL | undefined;
  try {
    url = new URL(server);
  } catch {
    url = undefined;
  }
  if (!url || url.protocol !== 'https:' || url.pathname !== '/' || url.search || url.username) throw new SchemaOptionError('ca_server', 'must be https://HOST:PORT (the address of mesh ca serve)', server);
  let rootFingerprint: string | undefined;
  let rootPem: string | undefined;
  if (o.caRootFingerprint) {
    rootFingerprint = normalizeFingerprint(o.caRootFingerprint);
    if (!rootFingerprint) throw new SchemaOptionError('ca_root_fingerprint', 'must be sha256: and the 64 hex digits of the root (as mesh ca show prints it, with or without colons)', o.caRootFingerprint);
  }
  if (o.caRootFile) {
    let text: string;
    try {
      text = readFileSync(o.caRootFile, 'utf8');
    } catch (err) {
      throw new SchemaOptionError('ca_root_file', `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, o.caRootFile);
    }
    rootPem = splitPem(text)[0];
    if (!rootPem || splitPem(text).length !== 1) throw new SchemaOptionError('ca_root_file', 'must hold one PEM certificate: the root of the mesh CA', o.caRootFile);
    if (rootFingerprint && new X509Certificate(rootPem).fingerprint256.replace(/:/g, '').toLowerCase() !== rootFingerprint) {
      throw new SchemaOptionError('ca_root_file', 'is not the root of {ca_root_fingerprint}', o.caRootFile);
    }
  }
  if (!rootFingerprint && !rootPem) throw new SchemaOptionError('ca_server', '{ca_server} needs the CA\'s root pinned: {ca_root_fingerprint}=sha256:… (mesh ca show on the CA\'s machine prints it) or {ca_root_file}');
  if (o.caToken && o.caTokenFile) throw new SchemaOptionError('ca_token', 'give {ca_token} or {ca_token_file}, not both');
  if (!o.caToken && !o.caTokenFile) throw new SchemaOptionError('ca_server', '{ca_server} needs a join token for the first certificate: {ca_token} or {ca_token_file} (mesh ca token on the CA\'s machine makes one)');
  const tokenFile = o.caTokenFile;
  const token = (): string | undefined => {
    if (!tokenFile) return o.caToken;
    try {
      return readFileSync(tokenFile, 'utf8').trim() || undefined;
    } catch {
      return undefined;
    }
  };
  if (tokenFile && token() === undefined) throw new SchemaOptionError('ca_token_file', 'cannot be read, or is empty', tokenFile);
  const pollMs = o.bundlePollMs ?? DEFAULT_BUNDLE_POLL_MS;
  if (!(pollMs >= 100)) throw new SchemaOptionError('ca_bundle_poll', 'must be 100ms or more (how often the trust bundle is fetched from mesh ca serve)', `${pollMs}ms`);
  const signer = new RemoteCaSigner({ server: url.origin, trustDomain: o.trustDomain, token, rootFingerprint, rootPem, log: o.log });
  return IssuedWorkloadTls.open({ ...o, signer, pollMs, reissueDelayMs: o.reissueDelayMs ?? 2 * pollMs });
}
