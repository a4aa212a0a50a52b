/**
 * Transport security of a server process (SPEC 5, DESIGN 6): `--enable_tls` with certificate files
 * (reloaded when they change) or `--enable_acme` (certificates from an ACME CA for the
 * `--acme_hosts` allow-list). One provider per process (a Runtime), shared by all of its HTTPS
 * listeners and listed by admin /certs. See docs/tls.md.
 */
import type { Config } from '../cli/flags.js';
import { FlagError } from '../cli/flags.js';
import type { Runtime } from '../runtime.js';
import { parseAcmeHosts } from '../acme/hosts.js';
import { parseChallengeAddress } from '../acme/challenge-server.js';
import { defaultAcmeCacheDir } from '../acme/cache.js';
import { AcmeTlsProvider } from '../acme/provider.js';
import { FileCertificateStore } from './file-store.js';
import type { TlsProvider } from './provider.js';

export type { TlsProvider } from './provider.js';
export { loadTlsFiles, loadPair, checkPair } from './files.js';

/** True when the process serves HTTPS (files or ACME). */
export function tlsEnabled(config: Pick<Config, 'enable_tls' | 'enable_acme'>): boolean {
  return config.enable_tls || config.enable_acme;
}

/**
 * Flag checks done before anything starts (exit 2 naming the flag). File problems are found when
 * the provider is built (exit 1 naming the file).
 */
export function checkTlsFlags(config: Config): void {
  if (!config.enable_acme) return;
  if (config.enable_tls) {
    throw new FlagError('--enable_acme and --enable_tls are exclusive: use certificate files or ACME, not both');
  }
  if (config.acme_hosts.length === 0) {
    throw new FlagError(
      '--enable_acme needs --acme_hosts=host[,host...]: the names this server may get certificates for ' +
        '(without an allow-list any client could make it order certificates for any name)',
    );
  }
  try {
    parseAcmeHosts(config.acme_hosts);
    parseChallengeAddress(config.acme_http_port);
  } catch (err) {
    throw new FlagError((err as Error).message);
  }
  let url: URL;
  try {
    url = new URL(config.acme_directory);
  } catch {
    throw new FlagError(`invalid value "${config.acme_directory}" for flag --acme_directory: not a URL`);
  }
  if (url.protocol !== 'https:') {
    throw new FlagError(`invalid value "${config.acme_directory}" for flag --acme_directory: an ACME directory is served over https (RFC 8555)`);
  }
  if (config.acme_email !== undefined && !/^[^@\s]+@[^@\s]+$/.test(config.acme_email)) {
    throw new FlagError(`invalid value "${config.acme_email}" for flag --acme_email: not an e-mail address`);
  }
}

const providers = new WeakMap<Runtime, TlsProvider | null>();

/**
 * The process's TLS provider, built on first use from its flags (undefined without TLS). Building it
 * reads and checks the certificate files: a missing, unreadable or mismatched file throws an Error
 * naming it. It also makes admin /certs list its certificates and closes it on shutdown.
 */
export function tlsFor(runtime: Runtime): TlsProvider | undefined {
  const known = providers.get(runtime);
  if (known !== undefined) return known ?? undefined;
  const config = runtime.config;
  let provider: TlsProvider | null = null;
  const log = runtime.logging.get('http');
  if (config.enable_acme) {
    checkTlsFlags(config);
    provider = new AcmeTlsProvider({
      hosts: parseAcmeHosts(config.acme_hosts),
      directoryUrl: config.acme_directory,
      email: config.acme_email,
      cacheDir: defaultAcmeCacheDir(config.acme_cache, config.mesh_home),
      challengeAddress: config.acme_http_port,
      log,
      stats: runtime.stats,
    });
  } else if (config.enable_tls) {
    provider = new FileCertificateStore({ certFile: config.tls_cert_file!, keyFile: config.tls_key_file!, log, stats: runtime.stats });
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
