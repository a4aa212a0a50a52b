/**
 * Transport security of a server process (SPEC 5, DESIGN 6): `--enable_tls` with certificate files
 * (reloaded when they change, src/tls/file-store.ts) or `--enable_acme` (certificates from an ACME
 * CA for the `--acme_hosts` allow-list, src/tls/acme/). The runtime builds one provider per process
 * (Runtime.tls), shared by all of its HTTPS listeners and listed by admin /certs. See docs/tls.md.
 */
export type { TlsProvider } from './provider.js';
export { loadTlsFiles, loadPair, checkPair } from './files.js';

/** True when the process serves HTTPS (files or ACME). */
export function tlsEnabled(options: { enableTls: boolean; enableAcme: boolean }): boolean {
  return options.enableTls || options.enableAcme;
}
