/**
 * Mutual TLS between mesh processes: what the data-plane core needs from whoever holds this
 * process's workload certificate. A workload's identity is the SPIFFE ID
 * `spiffe://<trust_domain>/svc/<service name>` in its certificate's URI SAN. The implementations
 * live in src/tls/ (a certificate signed by the local mesh CA, or files from an outside PKI);
 * the runtime hands one to the client (it originates mTLS to nodes whose registry metadata says
 * `mtls=true`, and checks the node's identity against the service it meant to call) and to the
 * servers (they terminate mTLS and learn the caller's identity).
 */
import type { PeerCertificate, SecureContext } from 'node:tls';

/** off: plain only. permissive: serve TLS and plain on one port; call mTLS nodes with mTLS. strict: mTLS only, both ways. */
export const MTLS_MODES = ['off', 'permissive', 'strict'] as const;
export type MtlsMode = (typeof MTLS_MODES)[number];

/** The registry metadata key a node sets to `true` when it serves mutual TLS. */
export const MTLS_METADATA_KEY = 'mtls';

export interface WorkloadTls {
  readonly mode: MtlsMode;
  readonly trustDomain: string;
  /** This process's SPIFFE ID. */
  readonly spiffeId: string;
  /**
   * The current context: this process's certificate chain and key, and the trusted roots (every
   * root still trusted during a CA rotation). Replaced when the certificate is renewed or the
   * roots change; connections already open keep theirs.
   */
  secureContext(): SecureContext;
  /**
   * What secureContext() was made of (the chain, the key, the roots), for servers that build
   * their own context from options (gRPC's). Kept in memory only, like the context.
   */
  contextOptions(): WorkloadTlsPems;
  /** Calls `listener` after each replacement; returns what unsubscribes it. */
  onChange(listener: () => void): () => void;
}

export interface WorkloadTlsPems {
  readonly cert: string;
  readonly key: string;
  readonly ca: readonly string[];
}

/** The SPIFFE ID of a service in a trust domain. */
export function spiffeIdOf(trustDomain: string, service: string): string {
  return `spiffe://${trustDomain}/svc/${service}`;
}

/** The URI SANs of a peer certificate (node's `subjectaltname`, "URI:a, DNS:b"). */
export function uriSans(cert: PeerCertificate | undefined): string[] {
  const san = cert?.subjectaltname;
  if (!san) return [];
  const out: string[] = [];
  for (const part of san.split(', ')) if (part.startsWith('URI:')) out.push(part.slice(4));
  return out;
}

/**
 * The identities of mesh's own callers that are not services: rules name them like services
 * (`spiffe://<trust_domain>/svc/mesh.api`). A sidecar calls as the app it fronts (its
 * `--server_name`), or as `mesh.sidecar` when it fronts none.
 */
export const CALLER_NAMES = { gateway: 'mesh.api', proxy: 'mesh.proxy', cli: 'mesh.cli', sidecar: 'mesh.sidecar' } as const;

/** The SPIFFE ID a TLS peer presented (spiffeIdOfCertificate), or undefined (plain, no certificate, or none valid). */
export function peerIdentityOf(socket: unknown): string | undefined {
  const tlsSocket = socket as { encrypted?: boolean; getPeerCertificate?: () => PeerCertificate };
  if (!tlsSocket.encrypted || typeof tlsSocket.getPeerCertificate !== 'function') return undefined;
  return spiffeIdOfCertificate(tlsSocket.getPeerCertificate());
}

/**
 * The SPIFFE ID of a peer certificate: its one URI SAN when that is a valid SPIFFE ID
 * (spiffeIdProblem); undefined otherwise (no certificate, no URI SAN, more than one, or one that
 * is not a SPIFFE ID as the specification writes it). Names no trust domain: a server checks
 * its own with peerIdentityProblem.
 */
export function spiffeIdOfCertificate(cert: PeerCertificate | undefined): string | undefined {
  const uris = uriSans(cert);
  return uris.length === 1 && spiffeIdProblem(uris[0]!) === undefined ? uris[0] : undefined;
}

/** Why a peer certificate's identity is not one of `trustDomain` (no SPIFFE ID, more than one URI SAN, not valid, another trust domain), or undefined. */
export function peerIdentityProblem(cert: PeerCertificate | undefined, trustDomain: string): string | undefined {
  const uris = uriSans(cert);
  if (uris.length === 0) return 'the certificate has no SPIFFE ID (URI SAN)';
  if (uris.length > 1) return `the certificate has ${uris.length} URI SANs (a SPIFFE certificate has one)`;
  return spiffeIdProblem(uris[0]!, trustDomain);
}

/** The longest SPIFFE ID (the specification's bound, in bytes; ours are ASCII). */
const MAX_SPIFFE_ID = 2048;
const TRUST_DOMAIN = /^[a-z0-9._-]+$/;
const PATH_SEGMENT = /^[A-Za-z0-9._-]+$/;

/**
 * Why `id` is not a SPIFFE ID as the SPIFFE ID specification writes it (or not one of
 * `trustDomain`, when given), or undefined: the scheme `spiffe://` in lower case; a trust domain of
 * lower-case letters, digits, `.`, `-` and `_` only; a path of segments of letters, digits, `.`,
 * `-` and `_`, none empty, `.` or `..` (so no percent-encoding, no query, fragment, port or
 * userinfo), no trailing `/`; at most 2048 bytes. Equal IDs are equal strings: nothing is
 * normalized, `SPIFFE://MESH.LOCAL/...`, `.../a/../b` or `mesh.local./...` are refused.
 */
export function spiffeIdProblem(id: string, trustDomain?: string): string | undefined {
  const shown = JSON.stringify(id.length > 128 ? `${id.slice(0, 128)}...` : id);
  if (id.length > MAX_SPIFFE_ID) return `SPIFFE ID longer than ${MAX_SPIFFE_ID} bytes`;
  if (!id.startsWith('spiffe://')) return `${shown} is not a SPIFFE ID (spiffe://, in lower case)`;
  const rest = id.slice('spiffe://'.length);
  const slash = rest.indexOf('/');
  const domain = slash < 0 ? rest : rest.slice(0, slash);
  if (!TRUST_DOMAIN.test(domain)) return `${shown}: the trust domain must be lower-case letters, digits, ".", "-" and "_"`;
  if (trustDomain !== undefined && domain !== trustDomain) return `${shown} is of trust domain ${JSON.stringify(domain)}, not ${trustDomain}`;
  if (slash >= 0) {
    for (const segment of rest.slice(slash + 1).split('/')) {
      if (!PATH_SEGMENT.test(segment) || segment === '.' || segment === '..') return `${shown}: the path must be segments of letters, digits, ".", "-" and "_" (none empty, "." or "..")`;
    }
  }
  return undefined;
}
