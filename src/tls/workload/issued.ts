/**
 * A workload certificate issued to this process by a CertificateSigner (the local mesh CA): a
 * fresh P-256 key made in the process (never written to disk; the signer may hand it to the
 * short-lived child process that makes its CSR, ./x509-child.ts), a certificate for
 * `spiffe://<trust_domain>/svc/<service>`, renewed at two thirds of its lifetime with a new key.
 * Each renewal, and each change of the CA's roots (a rotation), builds a new SecureContext (the
 * chain, the key, every trusted root) and tells the onChange listeners; connections already open
 * keep the context they were made with. After the roots change the certificate is issued again,
 * a little later, so that peers have picked up the new roots before it is shown to them.
 */
import { createSecureContext } from 'node:tls';
import type { Logger } from 'pino';
import type { StatsScope } from '../../base/stats/store.js';
import { spiffeIdOf, type MtlsMode, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import { HeldWorkloadTls, type HeldCertificate } from './held.js';
import { certificateInfoFromPem, type CertificateInfo, type RenewalState } from '../certificate.js';
import type { CaRoot } from './ca.js';
import type { CertificateSigner } from './signer.js';
import { generateKeyPair, privateKeyPem } from './x509.js';

export interface IssuedOptions {
  mode: MtlsMode;
  trustDomain: string;
  service: string;
  signer: CertificateSigner;
  certTtlMs: number;
  log: Logger;
  /** The bounded poll of the CA's files behind fs.watch (ms). Default 5000. */
  pollMs?: number;
  /** After the roots change, wait this long before issuing from the (new) signer (ms). Default 2 × pollMs. */
  reissueDelayMs?: number;
  /** Where `mtls.cert_renewed` and `mtls.cert_renewal_failed` are counted. */
  stats?: StatsScope;
}

interface Current extends HeldCertificate {
  /** When the certificate was issued (its notBefore is a minute earlier, for clock skew). */
  issuedAt: number;
}

/** A fresh P-256 private key, PKCS#8 PEM. */
async function newKeyPem(): Promise<string> {
  return privateKeyPem((await generateKeyPair()).privateKey);
}

function rootsKey(roots: CaRoot[]): string {
  return roots.map((r) => r.fingerprint).sort().join(',');
}

export class IssuedWorkloadTls extends HeldWorkloadTls<Current> implements WorkloadTls {
  readonly mode: MtlsMode;
  readonly trustDomain: string;
  readonly spiffeId: string;
  private renewTimer?: NodeJS.Timeout;
  private renewAt = 0;
  private stopWatch?: () => void;
  private closed = false;
  private lastError?: string;
  private renewing?: Promise<void>;
  private expiryTimer?: NodeJS.Timeout;
  /** Failed renewals since the last one that succeeded, and when the first of them failed. */
  private failures = 0;
  private failingSince?: number;
  private lastRenewal?: number;
  /**
   * The key of the next issuance: made (and shown to the signer's `prepare`) after each issuance
   * when the signer prepares, kept while issuing with it fails.
   */
  private nextKey?: Promise<string>;

  private constructor(private readonly o: IssuedOptions) {
    super(o.log);
    this.mode = o.mode;
    this.trustDomain = o.trustDomain;
    this.spiffeId = spiffeIdOf(o.trustDomain, o.service);
  }

  /** Issues the first certificate (errors reject: a CA that cannot be read names --ca_dir) and starts renewing. */
  static async open(o: IssuedOptions): Promise<IssuedWorkloadTls> {
    const source = new IssuedWorkloadTls(o);
    source.current = await source.issue();
    source.prepareNext();
    source.scheduleRenewal();
    source.watchExpiry();
    source.stopWatch = o.signer.watch(() => void source.rootsChanged(), { pollMs: o.pollMs ?? 5000 });
    return source;
  }

  /** Issues a new certificate now (what the renewal timer does). */
  renew(): Promise<void> {
    if (!this.renewing) {
      this.renewing = (async () => {
        try {
          const next = await this.issue();
          if (this.closed) return;
          const previous = this.current.leaf.serialNumber;
          this.install(next);
          this.prepareNext();
          if (this.failures > 0) this.o.log.info({ spiffeId: this.spiffeId, failures: this.failures, since: new Date(this.failingSince!).toISOString() }, `workload certificate renewal succeeded again after ${this.failures} failed attempt(s)`);
          this.lastError = undefined;
          this.failures = 0;
          this.failingSince = undefined;
          this.lastRenewal = Date.now();
          this.o.stats?.counter('mtls.cert_renewed').inc();
          this.o.log.info({ spiffeId: this.spiffeId, serial: next.leaf.serialNumber, previous, expires: next.leaf.expiration.toISOString() }, `workload certificate renewed (serial ${next.leaf.serialNumber})`);
          this.scheduleRenewal();
          this.watchExpiry();
        } catch (err) {
          this.failed(err as Error);
        } finally {
          this.renewing = undefined;
        }
      })();
    }
    return this.renewing;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.expiryTimer);
    this.stopWatch?.();
    this.forgetListeners();
  }

  /** The workload certificate (with the state of its renewal) and the trusted roots, for admin /certs. */
  override certificates(): CertificateInfo[] {
    const [leaf, ...roots] = super.certificates();
    const renewal: RenewalState = {
      state: this.failures > 0 ? 'failing' : 'ok',
      failures: this.failures,
      ...(this.failingSince !== undefined ? { failingSince: new Date(this.failingSince) } : {}),
      ...(this.lastError !== undefined ? { lastError: this.lastError } : {}),
      ...(this.lastRenewal !== undefined ? { lastRenewal: new Date(this.lastRenewal) } : {}),
    };
    return [{ ...leaf!, renewal }, ...roots];
  }

  /**
   * Logs an error when the certificate held expires (no renewal replaced it in time): peers
   * refuse it from then on. Set again for each new certificate.
   */
  private watchExpiry(): void {
    clearTimeout(this.expiryTimer);
    if (this.closed) return;
    const held = this.current;
    const left = held.leaf.expiration.getTime() - Date.now();
    // Past what a timer can wait (24.8 days): looked at again then.
    this.expiryTimer = setTimeout(() => {
      if (this.closed || this.current.leaf.serialNumber !== held.leaf.serialNumber) return;
      if (held.leaf.expiration.getTime() > Date.now()) return this.watchExpiry();
      this.o.log.error(
        { spiffeId: this.spiffeId, serial: held.leaf.serialNumber, expired: held.leaf.expiration.toISOString(), failures: this.failures, err: this.lastError },
        `workload certificate ${this.spiffeId} (serial ${held.leaf.serialNumber}) expired at ${held.leaf.expiration.toISOString()}: peers refuse it until a renewal succeeds${this.lastError ? ` (last renewal error: ${this.lastError})` : ''}`,
      );
    }, Math.min(Math.max(0, left) + 10, 2 ** 31 - 1));
    this.expiryTimer.unref();
  }

  private async issue(): Promise<Current> {
    const keyPem = await (this.nextKey ??= newKeyPem());
    // A renewal shows the certificate it replaces (a remote signer authenticates it with that).
    const current = this.current && { cert: this.current.chainPem, key: this.current.keyPem };
    const chainPem = await this.o.signer.signKey(keyPem, this.o.service, this.o.certTtlMs, current);
    const roots = await this.o.signer.roots();
    return this.build(chainPem, keyPem, roots);
  }

  /** Makes the next renewal's key now and tells the signer, which may start on it (a CSR). */
  private prepareNext(): void {
    this.nextKey = undefined;
    if (this.closed || !this.o.signer.prepare) return;
    const key = newKeyPem();
    this.nextKey = key;
    key.then((pem) => !this.closed && this.nextKey === key && this.o.signer.prepare!(pem, this.o.service)).catch(() => {});
  }

  private build(chainPem: string, keyPem: string, roots: CaRoot[]): Current {
    if (roots.length === 0) throw new Error(`${this.o.signer.description} has no trusted roots`);
    const context = createSecureContext({ cert: chainPem, key: keyPem, ca: roots.map((r) => r.pem) });
    return { chainPem, keyPem, roots, context, leaf: certificateInfoFromPem(chainPem, `workload:${this.spiffeId}`), issuedAt: Date.now() };
  }

  /**
   * Renews at two thirds of the lifetime from issuance (not from notBefore, which is a minute
   * back), or after `delayMs` when that is sooner; at least a second away.
   */
  private scheduleRenewal(delayMs?: number): void {
    if (this.closed) return;
    const { issuedAt, leaf } = this.current;
    const at = delayMs !== undefined ? Date.now() + delayMs : issuedAt + Math.floor(((leaf.expiration.getTime() - issuedAt) * 2) / 3);
    // A sooner renewal already planned stands.
    if (delayMs !== undefined && this.renewTimer && this.renewAt <= at) return;
    this.renewAt = at;
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => {
      this.renewTimer = undefined;
      void this.renew();
    }, Math.max(1000, at - Date.now()));
    this.renewTimer.unref();
  }

  private failed(err: Error): void {
    if (this.closed) return;
    this.failures++;
    this.failingSince ??= Date.now();
    this.o.stats?.counter('mtls.cert_renewal_failed').inc();
    if (this.lastError !== err.message) {
      this.lastError = err.message;
      this.o.log.error({ err: err.message, spiffeId: this.spiffeId, expires: this.current.leaf.expiration.toISOString() }, 'workload certificate renewal failed; keeping the current certificate and trying again');
    }
    // Try again at a tenth of what is left, between 1 s and 1 min.
    const left = this.current.leaf.expiration.getTime() - Date.now();
    this.scheduleRenewal(Math.min(60_000, Math.max(1000, Math.floor(left / 10))));
  }

  /**
   * The CA's files changed: trust the new set of roots at once (when it differs), and issue again
   * a little later, from whichever CA signs by then (a rotation, or a signer replaced by hand).
   */
  private async rootsChanged(): Promise<void> {
    if (this.closed) return;
    try {
      const roots = await this.o.signer.roots();
      if (rootsKey(roots) !== rootsKey(this.current.roots)) {
        const next = { ...this.build(this.current.chainPem, this.current.keyPem, roots), issuedAt: this.current.issuedAt };
        if (this.closed) return;
        this.install(next);
        this.o.log.info({ roots: roots.map((r) => r.serial) }, `workload certificate: the trusted roots changed (${roots.length} now)`);
      }
    } catch (err) {
      this.failed(err as Error);
      return;
    }
    this.scheduleRenewal(this.o.reissueDelayMs ?? 2 * (this.o.pollMs ?? 5000));
  }
}
