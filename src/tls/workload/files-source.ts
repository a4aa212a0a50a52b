/**
 * A workload certificate from an outside PKI (cert-manager, Vault): `--mtls_cert_file` (the
 * certificate, then any intermediates), `--mtls_key_file` and `--mtls_ca_file` (the roots to
 * trust). The certificate's URI SAN must be a SPIFFE ID of the trust domain. The files are read
 * again when they change (fs.watch on their directories and a bounded poll), once they have
 * settled (readSettled: a certificate written before its key is read again, an empty file is
 * refused); a new set that does not load keeps the previous context serving and is logged once.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { Logger } from 'pino';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { spiffeIdOf, type MtlsMode, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import { HeldWorkloadTls, type HeldCertificate } from './held.js';
import { certificateInfoFromPem, parseSubjectAltNames } from '../certificate.js';
import { caRootOf } from './ca.js';
import { fileSignature, readSettled, serialized, watchFiles, type SettleOptions } from './watch.js';
import { splitPem } from './x509.js';

export interface FilesOptions {
  mode: MtlsMode;
  trustDomain: string;
  service: string;
  certFile?: string;
  keyFile?: string;
  caFile?: string;
  log: Logger;
  pollMs?: number;
  /** The settled read of a reload (settleMs default 150). */
  settle?: SettleOptions;
}

interface Loaded extends HeldCertificate {
  spiffeId: string;
}

function read(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the ${what} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/**
 * Reads and checks the three files (or checks their `texts`, read already: certificate, key, CA);
 * every failure is an Error naming the file at fault.
 */
export function loadWorkloadFiles(files: { certFile: string; keyFile: string; caFile: string }, trustDomain: string, texts?: readonly string[]): Loaded {
  const { certFile, keyFile, caFile } = files;
  const chainPem = texts?.[0] ?? read(certFile, 'workload certificate file');
  const keyPem = texts?.[1] ?? read(keyFile, 'workload key file');
  const caPem = texts?.[2] ?? read(caFile, 'workload CA file');
  const pems = splitPem(chainPem);
  if (pems.length === 0) throw new Error(`the workload certificate file ${certFile} holds no PEM certificate`);
  const leaf = new X509Certificate(pems[0]!);
  let matches: boolean;
  try {
    matches = leaf.checkPrivateKey(createPrivateKey(keyPem));
  } catch (err) {
    throw new Error(`the workload key file ${keyFile} holds no usable PEM private key: ${(err as Error).message}`);
  }
  if (!matches) throw new Error(`the workload key file ${keyFile} does not match the certificate in ${certFile} (mismatched pair)`);
  const prefix = `spiffe://${trustDomain}/`;
  const uris = parseSubjectAltNames(leaf.subjectAltName).flatMap((san) => (san.uri ? [san.uri] : []));
  const spiffeId = uris.find((uri) => uri.startsWith(prefix));
  if (!spiffeId) {
    throw new Error(`the workload certificate ${certFile} has no URI SAN in the trust domain ${trustDomain} (want ${prefix}svc/<service>; it has ${uris.length ? uris.join(', ') : 'no URI SAN'})`);
  }
  const caPems = splitPem(caPem);
  if (caPems.length === 0) throw new Error(`the workload CA file ${caFile} holds no PEM certificate`);
  const roots = caPems.map((pem) => caRootOf(pem, caFile));
  let context: SecureContext;
  try {
    context = createSecureContext({ cert: pems.join(''), key: keyPem, ca: caPems });
  } catch (err) {
    throw new Error(`the workload certificate ${certFile}, key ${keyFile} and CA ${caFile} do not load together: ${(err as Error).message}`);
  }
  return { spiffeId, chainPem, keyPem, context, roots, leaf: certificateInfoFromPem(pems[0]!, certFile) };
}

export class FileWorkloadTls extends HeldWorkloadTls<Loaded> implements WorkloadTls {
  readonly mode: MtlsMode;
  readonly trustDomain: string;
  private readonly files: { certFile: string; keyFile: string; caFile: string };
  private stopWatch?: () => void;
  /** The files' signature and error of the last bad set reported, so one bad set is logged once. */
  private lastFailure?: string;
  /** Reloads one at a time (serialized). */
  private readonly reloadSerial = serialized(() => this.reloadOnce());

  private constructor(private readonly o: FilesOptions) {
    super(o.log);
    if (!o.certFile) throw new SchemaOptionError('mtls_cert_file', '{mtls_key_file} and {mtls_ca_file} need {mtls_cert_file}');
    if (!o.keyFile) throw new SchemaOptionError('mtls_key_file', '{mtls_cert_file} needs {mtls_key_file}');
    if (!o.caFile) throw new SchemaOptionError('mtls_ca_file', '{mtls_cert_file} needs {mtls_ca_file} (the roots that sign the other workloads\' certificates)');
    this.files = { certFile: o.certFile, keyFile: o.keyFile, caFile: o.caFile };
    this.mode = o.mode;
    this.trustDomain = o.trustDomain;
    this.current = loadWorkloadFiles(this.files, o.trustDomain);
    const expected = spiffeIdOf(o.trustDomain, o.service);
    if (this.current.spiffeId !== expected) {
      o.log.warn({ spiffeId: this.current.spiffeId, expected }, `the workload certificate ${o.certFile} names ${this.current.spiffeId}, not ${expected}: callers that check the identity of ${o.service} will refuse it`);
    }
  }

  /** Loads the files (a bad one rejects with an Error naming it) and starts watching them. */
  static async open(o: FilesOptions): Promise<FileWorkloadTls> {
    const source = new FileWorkloadTls(o);
    const { certFile, keyFile, caFile } = source.files;
    source.stopWatch = watchFiles({
      dirs: [...new Set([dirname(certFile), dirname(keyFile), dirname(caFile)])],
      signature: () => source.signature(),
      onChange: () => void source.reload(),
      pollMs: o.pollMs ?? 5000,
      settleMs: o.settle?.settleMs ?? 150,
    });
    return source;
  }

  get spiffeId(): string {
    return this.current.spiffeId;
  }


  async close(): Promise<void> {
    this.stopWatch?.();
    this.forgetListeners();
  }

  private signature(): string {
    return [this.files.certFile, this.files.keyFile, this.files.caFile].map(fileSignature).join('|');
  }

  /**
   * Reads the files again once settled (reloads run one at a time); installs them when they load
   * and differ, else keeps the current ones. Returns whether it installed.
   */
  reload(): Promise<boolean> {
    return this.reloadSerial();
  }

  private async reloadOnce(): Promise<boolean> {
    let next: Loaded;
    try {
      const { certFile, keyFile, caFile } = this.files;
      const texts = await readSettled([certFile, keyFile, caFile], { settleMs: 150, ...this.o.settle });
      next = loadWorkloadFiles(this.files, this.o.trustDomain, texts.map((b) => b.toString('utf8')));
    } catch (err) {
      const message = (err as Error).message;
      const id = `${this.signature()}|${message}`;
      if (this.lastFailure !== id) {
        this.lastFailure = id;
        this.o.log.error({ err: message, serving: this.current.leaf.serialNumber }, `workload certificate files did not load; keeping the current certificate (serial ${this.current.leaf.serialNumber})`);
      }
      return false;
    }
    this.lastFailure = undefined;
    const same = next.chainPem === this.current.chainPem && next.roots.map((r) => r.fingerprint).join() === this.current.roots.map((r) => r.fingerprint).join();
    if (same) return false;
    this.o.log.info({ spiffeId: next.spiffeId, serial: next.leaf.serialNumber, expires: next.leaf.expiration.toISOString() }, `workload certificate reloaded from ${this.files.certFile} (serial ${next.leaf.serialNumber})`);
    this.install(next);
    return true;
  }
}
