/**
 * Orders one certificate from an RFC 8555 directory with `acme-client` (loaded only when ACME is
 * on). The account key lives in the cache; the account itself is looked up (or created, agreeing to
 * the CA's terms of service) on the first order of each process, so a CA that forgot the account
 * (a restarted test CA, a deactivated account) costs nothing but one request. Challenges: HTTP-01,
 * answered from `challenges` (token -> key authorization) by the challenge listener.
 */
import type { Logger } from 'pino';
import type { AcmeCache } from './cache.js';

type AcmeModule = typeof import('acme-client');
type AcmeClient = InstanceType<AcmeModule['Client']>;

/** Orders certificates; the manager never calls it for a name outside the allow-list. */
export interface CertificateIssuer {
  /** Orders a certificate for one host: resolves with the PEM chain (leaf first) and its PEM key. */
  issue(host: string): Promise<{ cert: string; key: string }>;
}

export interface AcmeClientIssuerOptions {
  directoryUrl: string;
  email?: string;
  cache: AcmeCache;
  /** HTTP-01 tokens being validated: token -> key authorization. */
  challenges: Map<string, string>;
  log: Logger;
}

let acmeModule: Promise<AcmeModule> | undefined;

function loadAcme(log: Logger): Promise<AcmeModule> {
  acmeModule ??= import('acme-client').then((m) => {
    const acme = ((m as unknown as { default?: AcmeModule }).default ?? m) as AcmeModule;
    acme.setLogger((message: string) => log.debug({ acme_client: message }, 'acme-client'));
    return acme;
  });
  return acmeModule;
}

export class AcmeClientIssuer implements CertificateIssuer {
  private client?: Promise<AcmeClient>;

  constructor(private readonly options: AcmeClientIssuerOptions) {}

  private getClient(): Promise<AcmeClient> {
    this.client ??= (async () => {
      const acme = await loadAcme(this.options.log);
      const { key, created } = await this.options.cache.accountKey(() => acme.crypto.createPrivateEcdsaKey('P-256'));
      this.options.log.info(
        { key: this.options.cache.accountKeyPath, directory: this.options.directoryUrl },
        created ? 'acme: new account key created' : 'acme: account key loaded from cache',
      );
      return new acme.Client({
        directoryUrl: this.options.directoryUrl,
        accountKey: key,
        // Poll order and challenge status from 1 s up to 10 s, about a minute and a half in all.
        backoffAttempts: 12,
        backoffMin: 1000,
        backoffMax: 10_000,
      });
    })();
    this.client.catch(() => (this.client = undefined));
    return this.client;
  }

  async issue(host: string): Promise<{ cert: string; key: string }> {
    const acme = await loadAcme(this.options.log);
    const client = await this.getClient();
    const [key, csr] = await acme.crypto.createCsr({ commonName: host, altNames: [host] }, await acme.crypto.createPrivateEcdsaKey('P-256'));
    const challenges = this.options.challenges;
    const cert = await client.auto({
      csr,
      email: this.options.email,
      termsOfServiceAgreed: true,
      // The CA validates for real; acme-client's own pre-check would dial port 80 of the name,
      // which is wrong whenever --acme_http_port is not 80 behind a port mapping.
      skipChallengeVerification: true,
      challengePriority: ['http-01'],
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
        if (challenge.type !== 'http-01') throw new Error(`acme: challenge ${challenge.type} is not supported (HTTP-01 only)`);
        challenges.set(challenge.token, keyAuthorization);
        this.options.log.debug({ host, token: challenge.token }, 'acme: HTTP-01 challenge ready');
      },
      challengeRemoveFn: async (_authz, challenge) => {
        challenges.delete(challenge.token);
      },
    });
    return { cert, key: key.toString() };
  }
}
