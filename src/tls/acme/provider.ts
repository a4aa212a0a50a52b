/**
 * `--enable_acme`: the TLS provider of a process whose certificates come from an ACME CA. It joins
 * the cache, the issuer (acme-client), the manager (allow-list, single flight, renewal) and the
 * HTTP-01 challenge listener, and gives HTTPS listeners an SNICallback.
 */
import type { AddressInfo } from 'node:net';
import type { Server as TlsServer, TlsOptions } from 'node:tls';
import type { Logger } from 'pino';
import type { StatsStore } from '../../base/stats/store.js';
import type { CertificateInfo } from '../certificate.js';
import type { TlsProvider } from '../provider.js';
import { AcmeCache } from './cache.js';
import { ChallengeServer } from './challenge-server.js';
import { AcmeClientIssuer, type CertificateIssuer } from './issuer.js';
import { AcmeManager, type AcmeEntry } from './manager.js';

export interface AcmeProviderOptions {
  hosts: string[];
  directoryUrl: string;
  email?: string;
  cacheDir: string;
  /** `--acme_http_port`. */
  challengeAddress: string;
  log: Logger;
  stats: StatsStore;
  /** Replaces acme-client (tests). */
  issuer?: CertificateIssuer;
  checkIntervalMs?: number;
}

export class AcmeTlsProvider implements TlsProvider {
  readonly cache: AcmeCache;
  readonly manager: AcmeManager;
  readonly challenges = new Map<string, string>();
  private readonly challengeServer: ChallengeServer;
  private readonly servers = new Set<TlsServer>();
  private starting?: Promise<void>;

  constructor(private readonly options: AcmeProviderOptions) {
    this.cache = new AcmeCache(options.cacheDir, options.directoryUrl);
    const issuer =
      options.issuer ??
      new AcmeClientIssuer({ directoryUrl: options.directoryUrl, email: options.email, cache: this.cache, challenges: this.challenges, log: options.log });
    this.manager = new AcmeManager({
      hosts: options.hosts,
      issuer,
      cache: this.cache,
      log: options.log,
      stats: options.stats,
      checkIntervalMs: options.checkIntervalMs,
      onDefaultChange: (entry) => this.setDefault(entry),
    });
    this.challengeServer = new ChallengeServer({
      address: options.challengeAddress,
      challenges: this.challenges,
      allowed: (host) => this.manager.allowed(host),
      httpsPort: () => this.httpsPort(),
      log: options.log,
    });
  }

  serverOptions(): TlsOptions {
    const d = this.manager.defaultEntry();
    return { SNICallback: this.manager.sniCallback, ...(d ? { cert: d.cert, key: d.key } : {}) };
  }

  attach(server: TlsServer): void {
    this.servers.add(server);
  }

  detach(server: TlsServer): void {
    this.servers.delete(server);
  }

  certificates(): CertificateInfo[] {
    return this.manager.certificates();
  }

  /** Creates the cache directory, binds the challenge listener, then loads or orders every name. */
  start(): Promise<void> {
    this.starting ??= (async () => {
      this.cache.ensureDir();
      await this.challengeServer.listen();
      this.options.log.info(
        { hosts: this.options.hosts, directory: this.options.directoryUrl, cache: this.cache.dir },
        `acme: certificates for ${this.options.hosts.join(', ')} from ${this.options.directoryUrl} (cache ${this.cache.dir})`,
      );
      this.manager.start();
    })();
    return this.starting;
  }

  async close(): Promise<void> {
    this.manager.close();
    this.servers.clear();
    await this.challengeServer.close();
  }

  private setDefault(entry: AcmeEntry): void {
    for (const server of this.servers) {
      try {
        server.setSecureContext({ cert: entry.cert, key: entry.key });
      } catch (err) {
        this.options.log.error({ err: (err as Error).message }, 'acme: setSecureContext failed');
      }
    }
  }

  private httpsPort(): number | undefined {
    for (const server of this.servers) {
      const a = server.address() as AddressInfo | null;
      if (a && typeof a === 'object') return a.port;
    }
    return undefined;
  }
}
