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

/** The SPIFFE ID a TLS peer presented (its first spiffe:// URI SAN), or undefined (plain, or no certificate). */
export function peerIdentityOf(socket: unknown): string | undefined {
  const tlsSocket = socket as { encrypted?: boolean; getPeerCertificate?: () => PeerCertificate };
  if (!tlsSocket.encrypted || typeof tlsSocket.getPeerCertificate !== 'function') return undefined;
  return spiffeIdOfCertificate(tlsSocket.getPeerCertificate());
}

/** The SPIFFE ID of a peer certificate (its first spiffe:// URI SAN), or undefined (none, or no certificate). */
export function spiffeIdOfCertificate(cert: PeerCertificate | undefined): string | undefined {
  return uriSans(cert).find((uri) => uri.startsWith('spiffe://'));
}
