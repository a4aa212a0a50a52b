/**
 * The client side of mutual TLS between mesh processes: the connector of a host's pool.
 *
 * - Decided at each new connection, from the node's registry metadata as it is then: a node that
 *   says `mtls=true` is called over TLS with this process's current workload context (its
 *   certificate, and the trusted roots), so a renewal applies to the next connection; another
 *   node is called plain (permissive), or not at all (strict: refused before any connection,
 *   counted in `cluster.<name>.upstream_cx_plain_refused`).
 * - The node's identity is checked against the service the caller meant to call: its certificate
 *   must chain to a trusted root (else `ssl.fail_verify_error`) and carry
 *   `spiffe://<trust_domain>/svc/<service>` in its URI SAN (else `ssl.fail_verify_san`). A node
 *   registered under a service it holds no certificate for receives nothing: the connection is
 *   closed before a byte of the request is sent. No host name or SNI takes part in it.
 * - A refused connection fails with code MTLS_REFUSED, which the transport treats like a refused
 *   connection (nothing was sent: the call tries another node). The first refusal of a host for a
 *   reason is logged at warn.
 * - TLS sessions are resumed (one cache per host, dropped when the context changes).
 */
import type { PeerCertificate, SecureContext } from 'node:tls';
import { buildConnector } from '../http/undici.js';
import type { Logger } from 'pino';
import { declareStats, type FamilyStats, type StatsScope } from '../stats/store.js';
import { MTLS_METADATA_KEY, uriSans, type WorkloadTls } from './workload-tls.js';

/** `cluster.<name>.*`: the client's TLS stats, named after Envoy's. */
export const MTLS_CLIENT_STATS = {
  counters: {
    handshake: 'ssl.handshake',
    sessionReused: 'ssl.session_reused',
    verifyError: 'ssl.fail_verify_error',
    verifySan: 'ssl.fail_verify_san',
    plainRefused: 'upstream_cx_plain_refused',
  },
} as const;

export type MtlsClientStats = FamilyStats<typeof MTLS_CLIENT_STATS>;

export function mtlsClientStats(scope: StatsScope): MtlsClientStats {
  return declareStats(scope, MTLS_CLIENT_STATS);
}

/** The error code of a connection refused by the mutual TLS checks (the transport: a connect failure). */
export const MTLS_REFUSED = 'ERR_MESH_MTLS_REFUSED';

/** The certificate verification errors of node (OpenSSL's X509_V_ERR_* names): the node's chain is not trusted. */
const VERIFY_CODES = new Set([
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_CHAIN_TOO_LONG',
  'CERT_REVOKED',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
]);

/** The code checkServerIdentity's error carries (wrong or missing SPIFFE ID). */
const IDENTITY_CODE = 'ERR_MESH_MTLS_IDENTITY';

export interface MtlsConnectorOptions {
  workload: WorkloadTls;
  /** The SPIFFE ID the node must present: spiffeIdOf(trust domain, the service called). With `accepts`, what messages say it must present. */
  expected: string;
  /** Instead of `expected` exactly: the SPIFFE IDs the node may present (the http broker: any workload of the trust domain). */
  accepts?: (id: string) => boolean;
  /** False: a node without mtls=true is called plain even in strict mode (static clusters: not mesh nodes). */
  strictApplies: boolean;
  /** The node's metadata now (read at each new connection). */
  metadata: () => Readonly<Record<string, string>>;
  /** host:port, in messages. */
  key: string;
  connectTimeoutMs: number;
  stats: MtlsClientStats;
  log: Logger;
}

function refused(message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code: MTLS_REFUSED });
}

/** True when the node says it serves mutual TLS. */
export function servesMtls(metadata: Readonly<Record<string, string>>): boolean {
  return metadata[MTLS_METADATA_KEY] === 'true';
}

export function mtlsConnector(options: MtlsConnectorOptions): buildConnector.connector {
  const { workload, expected, key, stats, log } = options;
  const plain = buildConnector({ timeout: options.connectTimeoutMs });
  let context: SecureContext | undefined;
  let secure: buildConnector.connector | undefined;
  const logged = new Set<string>();
  const warnOnce = (reason: string, message: string) => {
    if (logged.has(reason)) return;
    logged.add(reason);
    log.warn({ host: key, expected, reason }, message);
  };
  const checkServerIdentity = (_host: string, cert: PeerCertificate): Error | undefined => {
    const ids = uriSans(cert).filter((u) => u.startsWith('spiffe://'));
    if (options.accepts ? ids.some(options.accepts) : ids.includes(expected)) return undefined;
    const presented = ids.length > 0 ? ids.join(', ') : 'no SPIFFE ID';
    return Object.assign(new Error(`mutual TLS: node ${key} presented ${presented}, not ${expected}`), { code: IDENTITY_CODE });
  };
  return (opts, callback) => {
    if (!servesMtls(options.metadata())) {
      if (workload.mode === 'strict' && options.strictApplies) {
        stats.plainRefused.inc();
        const message = `mutual TLS: node ${key} does not serve mutual TLS (no ${MTLS_METADATA_KEY}=true in its registry metadata); not called in strict mode`;
        warnOnce('plain', message);
        callback(refused(message), null);
        return;
      }
      plain(opts, callback);
      return;
    }
    const current = workload.secureContext();
    if (current !== context || !secure) {
      context = current;
      secure = buildConnector({ timeout: options.connectTimeoutMs, secureContext: current, rejectUnauthorized: true, checkServerIdentity });
    }
    secure({ ...opts, protocol: 'https:' }, (err, socket) => {
      if (err) {
        const code = (err as { code?: string }).code ?? '';
        if (code === IDENTITY_CODE) {
          stats.verifySan.inc();
          warnOnce('identity', err.message);
          callback(refused(err.message, err), null);
          return;
        }
        if (VERIFY_CODES.has(code)) {
          stats.verifyError.inc();
          const message = `mutual TLS: node ${key}: its certificate is not signed by a trusted mesh root (${code}): ${err.message}`;
          warnOnce('untrusted', message);
          callback(refused(message, err), null);
          return;
        }
        callback(err, null);
        return;
      }
      stats.handshake.inc();
      if ((socket as { isSessionReused?: () => boolean }).isSessionReused?.()) stats.sessionReused.inc();
      callback(null, socket);
    });
  };
}
