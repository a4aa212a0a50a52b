/**
 * admin /certs: loaded TLS certificates in the JSON shape of Envoy ≈1.9+ (`Certificates` proto):
 * `{"certificates":[{"ca_cert":[],"cert_chain":[{path, serial_number, subject_alt_names,
 * days_until_expiration (a string: int64), valid_from, expiration_time}]}]}`, 1-space indent.
 */
import type { CertificateInfo } from '../tls/certificate.js';

const DAY_MS = 86_400_000;

/** `2031-03-15T12:32:14Z` (RFC 3339, whole seconds, as protobuf Timestamps print). */
function timestamp(d: Date): string {
  return Number.isNaN(d.getTime()) ? '' : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function daysUntil(expiration: Date, now: number): number {
  return Math.max(0, Math.floor((expiration.getTime() - now) / DAY_MS));
}

function details(cert: CertificateInfo, now: number) {
  return {
    path: cert.path,
    serial_number: cert.serialNumber,
    subject_alt_names: cert.subjectAltNames,
    days_until_expiration: String(cert.daysUntilExpiration ?? daysUntil(cert.expiration, now)),
    valid_from: timestamp(cert.validFrom),
    expiration_time: timestamp(cert.expiration),
    ...(cert.renewal ? { renewal: renewalDetails(cert.renewal) } : {}),
  };
}

/** A workload certificate's renewal: `state` ok or failing, since when, the last error, the failures since the last success. */
function renewalDetails(r: NonNullable<CertificateInfo['renewal']>) {
  // Dates may arrive as strings from a worker (IPC).
  const at = (d: Date | string | undefined) => (d === undefined ? undefined : timestamp(new Date(d)));
  return {
    state: r.state,
    failures: r.failures,
    ...(r.failingSince !== undefined ? { failing_since: at(r.failingSince) } : {}),
    ...(r.lastError !== undefined ? { last_error: r.lastError } : {}),
    ...(r.lastRenewal !== undefined ? { last_renewal: at(r.lastRenewal) } : {}),
  };
}

export function renderCerts(certs: readonly CertificateInfo[], now: number): string {
  const certificates = certs.map((c) => (c.ca ? { ca_cert: [details(c, now)], cert_chain: [] } : { ca_cert: [], cert_chain: [details(c, now)] }));
  return JSON.stringify({ certificates }, null, 1) + '\n';
}

/** Whole seconds until the first of the certificates expires, 0 once one has (server.seconds_until_first_cert_expiring). */
export function secondsUntilFirstExpiring(certs: readonly CertificateInfo[], now: number): number | undefined {
  let min: number | undefined;
  for (const c of certs) {
    const t = c.expiration.getTime();
    if (Number.isNaN(t)) continue;
    const s = Math.max(0, Math.floor((t - now) / 1000));
    if (min === undefined || s < min) min = s;
  }
  return min;
}
