/**
 * Transport security of a server process (SPEC 5, DESIGN 6): `--enable_tls` with certificate files
 * (reloaded when they change) or `--enable_acme` (certificates from an ACME CA for the
 * `--acme_hosts` allow-list). One provider per process (a Runtime), shared by all of its HTTPS
 * listeners and listed by admin /certs. See docs/tls.md.
 */
import type { ResolvedOptions } from '../options.js';
import type { Runtime } from '../runtime.js';
import { parseAcmeHosts } from './acme/hosts.js';
import { defaultAcmeCacheDir } from './acme/cache.js';
import { AcmeTlsProvider } from './acme/provider.js';
import { FileCertificateStore } from './file-store.js';
import type { TlsProvider } from './provider.js';

export type { TlsProvider } from './provider.js';
export { loadTlsFiles, loadPair, checkPair } from './files.js';

/** True when the process serves HTTPS (files or ACME). */
export function tlsEnabled(options: Pick<ResolvedOptions, 'enableTls' | 'enableAcme'>): boolean {
  return options.enableTls || options.enableAcme;
}

const providers = new WeakMap<Runtime, TlsProvider | null>();

/**
 * The process's TLS provider, built on first use from its options (undefined without TLS; the
 * options were checked by resolveOptions). Building it
 * reads and checks the certificate files: a missing, unreadable or mismatched file throws an Error
 * naming it. It also makes admin /certs list its certificates and closes it on shutdown.
 */
export function tlsFor(runtime: Runtime): TlsProvider | undefined {
  const known = providers.get(runtime);
  if (known !== undefined) return known ?? undefined;
  const options = runtime.options;
  let provider: TlsProvider | null = null;
  const log = runtime.logging.get('http');
  if (options.enableAcme) {
    provider = new AcmeTlsProvider({
      hosts: parseAcmeHosts(options.acmeHosts),
      directoryUrl: options.acmeDirectory,
      email: options.acmeEmail,
      cacheDir: defaultAcmeCacheDir(options.acmeCache, options.meshHome),
      challengeAddress: options.acmeHttpPort,
      log,
      stats: runtime.stats,
    });
  } else if (options.enableTls) {
    provider = new FileCertificateStore({ certFile: options.tlsCertFile!, keyFile: options.tlsKeyFile!, log, stats: runtime.stats });
  }
  providers.set(runtime, provider);
  if (provider) {
    const p = provider;
    const previous = runtime.certificates;
    runtime.certificates = () => [...(previous?.() ?? []), ...p.certificates()];
    runtime.onShutdown(() => p.close());
  }
  return provider ?? undefined;
}

/** Builds and starts the process's TLS provider (a start-up error names the file, flag or port). */
export async function startTls(runtime: Runtime): Promise<TlsProvider | undefined> {
  const provider = tlsFor(runtime);
  await provider?.start();
  return provider;
}
