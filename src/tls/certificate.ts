/**
 * Certificates as the TLS layer knows them: the facts of a loaded certificate (CertificateInfo,
 * which TLS providers list and admin /certs shows) and reading them from PEM. The one home of
 * certificate types and PEM parsing; file loading is files.ts, ACME is acme/.
 */
import { X509Certificate } from 'node:crypto';

/** One entry of a certificate's subject alternative names, as Envoy's /certs prints it. */
export interface SubjectAltName {
  dns?: string;
  uri?: string;
  ip_address?: string;
}

/** One loaded certificate, as TLS providers list it (admin /certs shows them). */
export interface CertificateInfo {
  /** The certificate file path, or `acme:<host>` for a certificate obtained by ACME. */
  path: string;
  /** Serial number, lower-case hex without separators. */
  serialNumber: string;
  subjectAltNames: SubjectAltName[];
  validFrom: Date;
  expiration: Date;
  /** Whole days from now until expiration (0 once expired); computed at render time when absent. */
  daysUntilExpiration?: number;
  /** True for a CA certificate (listed under `ca_cert` instead of `cert_chain`). */
  ca?: boolean;
  /** For a workload certificate the process renews itself: how its renewals go. */
  renewal?: RenewalState;
}

/** How the renewals of a workload certificate go (admin /certs `renewal`). */
export interface RenewalState {
  /** `failing` from a failed renewal until one succeeds. */
  state: 'ok' | 'failing';
  /** Failed renewals since the last one that succeeded. */
  failures: number;
  failingSince?: Date;
  lastError?: string;
  lastRenewal?: Date;
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
