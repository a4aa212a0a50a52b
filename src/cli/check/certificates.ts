/** `mesh check`: the mesh CA's roots and signer, and a --tls_cert_file, close to expiry. */
import { readFileSync } from 'node:fs';
import { caExists } from '../../tls/workload/ca.js';
import { certificateInfoFromPem, type CertificateInfo } from '../../tls/certificate.js';
import { caExpiryWarnings, expiryWarning } from '../../tls/workload/ca-expiry.js';
import type { Finding } from './finding.js';

/** Warnings for the CA in `dir`; nothing when there is no CA there. An expired root is an error. */
export function checkCa(dir: string, now: number): Finding[] {
  if (!caExists(dir)) return [];
  try {
    return caExpiryWarnings(dir, now).map((w) => ({ level: / has expired /.test(w) ? 'error' : 'warning', check: 'certificates', message: `mesh CA ${dir}: ${w}` }));
  } catch (err) {
    return [{ level: 'error', check: 'certificates', message: `mesh CA ${dir}: ${(err as Error).message}` }];
  }
}

/** The first certificate of a PEM file (a served chain starts with the leaf). */
export function checkCertFile(file: string, now: number): Finding[] {
  let cert: CertificateInfo;
  try {
    cert = certificateInfoFromPem(readFileSync(file), file);
  } catch (err) {
    return [{ level: 'error', check: 'certificates', message: `--tls_cert_file ${file}: cannot read a certificate: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }];
  }
  const notAfter = cert.expiration;
  const w = expiryWarning(`--tls_cert_file ${file}`, notAfter, now, 'renew it');
  if (!w) return [];
  return [{ level: notAfter.getTime() <= now ? 'error' : 'warning', check: 'certificates', message: w }];
}
