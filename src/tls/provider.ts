/**
 * What a front end (src/edge/front-server.ts) needs from whoever supplies its certificates:
 * files (src/tls/file-store.ts) or ACME (src/tls/acme/provider.ts). One provider per process, shared
 * by every HTTPS listener of that process (`mesh dev` has two).
 */
import type { Server as TlsServer, TlsOptions } from 'node:tls';
import type { CertificateInfo } from './certificate.js';

export interface TlsProvider {
  /** Options merged into `https.createServer`: the initial cert/key, or an SNICallback. */
  serverOptions(): TlsOptions;
  /** A listener using this provider: it gets `setSecureContext` when the default certificate changes. */
  attach(server: TlsServer): void;
  detach(server: TlsServer): void;
  /** Every loaded certificate, for admin /certs. */
  certificates(): CertificateInfo[];
  /** Starts watching files / the ACME machinery; idempotent; rejects with a start-up error. */
  start(): Promise<void>;
  close(): Promise<void>;
}
