/**
 * Transport security of gRPC, both ways (the serving side's credentials are in
 * ./server-credentials.ts):
 *
 * - Calling a gRPC node: a node whose registry metadata says `mtls=true` (a mesh process, or
 *   anything holding a mesh certificate) is called with mutual TLS: this process's workload
 *   certificate, the mesh roots, and the node's SPIFFE ID checked against the service the call
 *   was for. A node with `tls=true` (a gRPC server outside the mesh with a certificate of its
 *   own) is called over TLS verified against `--grpc_tls_ca_file` (or the system roots) and its
 *   host name (`tls_server_name` in its metadata, else its address). Any other node is called in
 *   plaintext h2c, except under `--mtls=strict`, which calls no plain node. grpc-js is given
 *   (`lib`), not imported: a process loads it with its first gRPC call (./transport.ts).
 * - Serving gRPC (`--server_protocol=grpc`) with `--mtls=strict`: mutual TLS with the workload
 *   certificate, a client certificate required and verified against the mesh roots; a renewed
 *   certificate or a new root applies to the next connection. gRPC cannot share one port between
 *   TLS and plaintext, so under `--mtls=permissive` a gRPC service serves plaintext and does not
 *   say `mtls=true`: its callers call it plain.
 */
import type * as grpc from '@grpc/grpc-js';
import type { PeerCertificate } from 'node:tls';
import { MTLS_METADATA_KEY, uriSans, type WorkloadTls } from '../../../base/mtls/workload-tls.js';

/** Node metadata: a gRPC node outside the mesh that serves TLS with a certificate of its own. */
export const GRPC_TLS_KEY = 'tls';
/** Node metadata: the name its certificate is checked against (default: the node's address). */
export const GRPC_TLS_SERVER_NAME_KEY = 'tls_server_name';

/** How a gRPC node is called: the credentials, and the channel options they need. */
export interface ChannelSecurity {
  credentials: grpc.ChannelCredentials;
  options: grpc.ChannelOptions;
  /** 'mtls' when the channel uses the workload certificate (renewals replace the channel). */
  kind: 'plain' | 'tls' | 'mtls';
}

export interface ChannelSecurityOptions {
  workload?: WorkloadTls;
  /** `--grpc_tls_ca_file`'s contents: the roots for nodes with `tls=true` (none: the system's). */
  tlsRoots?: Buffer;
}

/** Thrown for a node the security settings do not allow to call: nothing is sent to it. */
export class ChannelRefused extends Error {
  readonly code = 'ERR_MESH_MTLS_REFUSED';
}

/** The SPIFFE ID check of a node's certificate: undefined when it carries `expected`. */
export function spiffeIdentityError(cert: PeerCertificate | undefined, expected: string, key: string): Error | undefined {
  const ids = uriSans(cert).filter((u) => u.startsWith('spiffe://'));
  if (ids.includes(expected)) return undefined;
  return new Error(`mutual TLS: node ${key} presented ${ids.length > 0 ? ids.join(', ') : 'no SPIFFE ID'}, not ${expected}`);
}

/**
 * The credentials of a channel to `key` (host:port) with `metadata`, for calls to the service
 * whose SPIFFE ID is `expected`. Throws ChannelRefused under strict mode for a node that serves
 * no mutual TLS.
 */
export function channelSecurity(lib: typeof grpc, key: string, metadata: Readonly<Record<string, string>>, expected: string, o: ChannelSecurityOptions): ChannelSecurity {
  const workload = o.workload && o.workload.mode !== 'off' ? o.workload : undefined;
  if (workload && metadata[MTLS_METADATA_KEY] === 'true') {
    const credentials = lib.credentials.createFromSecureContext(workload.secureContext(), {
      checkServerIdentity: (_host, cert) => spiffeIdentityError(cert, expected, key),
    });
    // The SPIFFE ID is the identity checked; the TLS host name is not (no SNI meaning in the mesh).
    return { credentials, options: { 'grpc.ssl_target_name_override': 'mesh', 'grpc.default_authority': key }, kind: 'mtls' };
  }
  if (workload?.mode === 'strict') {
    throw new ChannelRefused(`mutual TLS: node ${key} does not serve mutual TLS (no ${MTLS_METADATA_KEY}=true in its registry metadata); not called in strict mode`);
  }
  if (metadata[GRPC_TLS_KEY] === 'true') {
    const name = metadata[GRPC_TLS_SERVER_NAME_KEY];
    const options: grpc.ChannelOptions = name ? { 'grpc.ssl_target_name_override': name, 'grpc.default_authority': name } : {};
    return { credentials: lib.credentials.createSsl(o.tlsRoots ?? null), options, kind: 'tls' };
  }
  return { credentials: lib.credentials.createInsecure(), options: {}, kind: 'plain' };
}
