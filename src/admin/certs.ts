/**
 * admin /certs: loaded TLS certificates in the JSON shape of Envoy ≈1.9+ (`Certificates` proto):
 * `{"certificates":[{"ca_cert":[],"cert_chain":[{path, serial_number, subject_alt_names,
 * days_until_expiration (a string: int64), valid_from, expiration_time}]}]}`, 1-space indent.
 */
import { X509Certificate } from 'node:crypto';
import type { CertificateInfo, SubjectAltName } from './context.js';

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

/** Parses node's `subjectAltName` text (`DNS:a.example, IP Address:127.0.0.1, URI:spiffe://x`). */
export function parseSubjectAltNames(text: string | undefined): SubjectAltName[] {
  if (!text) return [];
  const out: SubjectAltName[] = [];
  for (const raw of text.split(/,\s*/)) {
    const colon = raw.indexOf(':');
    if (colon < 0) continue;
    const kind = raw.slice(0, colon).trim();
    const value = raw.slice(colon + 1).trim();
    if (kind === 'DNS') out.push({ dns: value });
    else if (kind === 'URI') out.push({ uri: value });
    else if (kind === 'IP Address') out.push({ ip_address: value });
  }
  return out;
}

/**
 * A CertificateInfo for the first (leaf) certificate of a PEM file. `path` is the file path or
 * `acme:<host>` for an ACME certificate.
 */
export function certificateInfoFromPem(pem: string | Buffer, path: string): CertificateInfo {
  const cert = new X509Certificate(pem);
  return {
    path,
    serialNumber: cert.serialNumber.toLowerCase(),
    subjectAltNames: parseSubjectAltNames(cert.subjectAltName),
    validFrom: new Date(cert.validFrom),
    expiration: new Date(cert.validTo),
  };
}
