/**
 * Certificates for the `--acme_hosts` allow-list: loaded from the cache or ordered on start, ordered
 * on the first handshake for a name that has none yet, renewed before expiry, and served by SNI.
 *
 * - A name outside the allow-list never gets a certificate: its handshake fails at once and no
 *   order is placed (`acme.sni_refused` counts them).
 * - Single flight: one order at a time per name; every handshake and the renewal timer wait on it.
 * - Renewal: when less than a third of the certificate's lifetime, or 30 days, is left (whichever is
 *   sooner), checked every `checkIntervalMs` (an unref'd timer). Until the new certificate arrives
 *   the old one keeps serving.
 * - A failed order is not retried for a while (2 minutes, doubling up to an hour), so clients that
 *   keep connecting cannot make the process hammer the CA or burn its rate limits.
 * - A client that sends no SNI (an IP address in the URL) gets the first allowed name's certificate.
 */
import { clientText } from '../../base/util/text.js';
import type { SecureContext } from 'node:tls';
import type { Logger } from 'pino';
import type { Counter, StatsStore } from '../../base/stats/store.js';
import type { CertificateInfo } from '../certificate.js';
import { checkPair } from '../files.js';
import type { AcmeCache } from './cache.js';
import { normalizeHost } from './hosts.js';
import type { CertificateIssuer } from './issuer.js';

const DAY_MS = 86_400_000;

export interface AcmeEntry {
  host: string;
  cert: string;
  key: string;
  context: SecureContext;
  info: CertificateInfo;
}

export interface AcmeManagerOptions {
  /** The allow-list, already normalised (parseAcmeHosts). */
  hosts: readonly string[];
  issuer: CertificateIssuer;
  cache: AcmeCache;
  log: Logger;
  stats: StatsStore;
  /** Clock (tests move it forward to reach the renewal time). */
  now?: () => number;
  /** How often certificates are checked for renewal and failed orders retried (ms). Default 10 min. */
  checkIntervalMs?: number;
  /** First delay before retrying a failed order (ms); doubles up to maxRetryMs. Default 2 min. */
  retryMs?: number;
  maxRetryMs?: number;
  /** Called when the certificate for clients without SNI changes. */
  onDefaultChange?: (entry: AcmeEntry) => void;
}

interface Failure {
  error: Error;
  retryAt: number;
  delay: number;
}

/** When to renew: a third of the lifetime before expiry, but no earlier than 30 days before. */
export function renewalTime(info: Pick<CertificateInfo, 'validFrom' | 'expiration'>): number {
  const from = info.validFrom.getTime();
  const to = info.expiration.getTime();
  return to - Math.min(30 * DAY_MS, Math.max(0, to - from) / 3);
}

export class AcmeManager {
  private readonly hosts: readonly string[];
  private readonly entries = new Map<string, AcmeEntry>();
  private readonly inflight = new Map<string, Promise<AcmeEntry>>();
  private readonly failures = new Map<string, Failure>();
  /** Names refused recently, so a scanner does not flood the log (bounded). */
  private readonly refusedLogged = new Map<string, number>();
  private readonly now: () => number;
  private timer?: NodeJS.Timeout;
  private closed = false;
  private readonly s: Record<'orders' | 'success' | 'failure' | 'cache' | 'renewal' | 'refused', Counter>;

  constructor(private readonly options: AcmeManagerOptions) {
    this.hosts = options.hosts;
    this.now = options.now ?? Date.now;
    const st = options.stats;
    this.s = {
      orders: st.counter('acme.order_started'),
      success: st.counter('acme.order_success'),
      failure: st.counter('acme.order_failure'),
      cache: st.counter('acme.cache_hit'),
      renewal: st.counter('acme.renewal_started'),
      refused: st.counter('acme.sni_refused'),
    };
  }

  allowed(name: string): boolean {
    return this.hosts.includes(normalizeHost(name));
  }

  /** Loads what the cache holds, orders the rest in the background, and starts the renewal timer. */
  start(): void {
    for (const host of this.hosts) this.loadFromCache(host);
    this.check();
    this.timer = setInterval(() => this.check(), this.options.checkIntervalMs ?? 10 * 60_000);
    this.timer.unref();
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
  }

  /** The certificate served now for a host, if any. */
  entry(host: string): AcmeEntry | undefined {
    return this.entries.get(normalizeHost(host));
  }

  /** The certificate for clients that send no SNI: the first allowed name that has one. */
  defaultEntry(): AcmeEntry | undefined {
    for (const host of this.hosts) {
      const e = this.entries.get(host);
      if (e) return e;
    }
    return undefined;
  }

  certificates(): CertificateInfo[] {
    return this.hosts.flatMap((h) => {
      const e = this.entries.get(h);
      return e ? [e.info] : [];
    });
  }

  /** For `https.createServer({SNICallback})`. */
  readonly sniCallback = (servername: string, cb: (err: Error | null, ctx?: SecureContext) => void): void => {
    const host = normalizeHost(servername);
    if (!this.hosts.includes(host)) {
      this.s.refused.inc();
      this.logRefusal(host);
      cb(new Error(`acme: no certificate for "${host}": not in --acme_hosts`));
      return;
    }
    const e = this.entries.get(host);
    if (e) {
      cb(null, e.context);
      return;
    }
    this.obtain(host, 'first handshake').then(
      (entry) => cb(null, entry.context),
      (err: Error) => cb(err),
    );
  };

  /**
   * The certificate for an allowed host: the current one, or the in-flight order, or a new order
   * (unless the last one failed recently). Never more than one order per host at a time.
   */
  obtain(host: string, reason: string): Promise<AcmeEntry> {
    host = normalizeHost(host);
    if (!this.hosts.includes(host)) return Promise.reject(new Error(`acme: "${host}" is not in --acme_hosts`));
    const existing = this.entries.get(host);
    const renewing = existing !== undefined && this.now() >= renewalTime(existing.info);
    if (existing && !renewing) return Promise.resolve(existing);
    return this.order(host, reason, existing);
  }

  private order(host: string, reason: string, existing: AcmeEntry | undefined): Promise<AcmeEntry> {
    const running = this.inflight.get(host);
    if (running) return running;
    const failure = this.failures.get(host);
    if (failure && this.now() < failure.retryAt) {
      if (existing) return Promise.resolve(existing);
      return Promise.reject(new Error(`acme: no certificate for ${host} yet (last order failed: ${failure.error.message}; retrying after ${new Date(failure.retryAt).toISOString()})`));
    }
    const log = this.options.log;
    this.s.orders.inc();
    if (existing) this.s.renewal.inc();
    log.info(
      { host, reason, renewing: existing?.info.serialNumber },
      existing ? `acme: renewing certificate for ${host} (serial ${existing.info.serialNumber}, ${reason})` : `acme: ordering certificate for ${host} (${reason})`,
    );
    const started = this.now();
    const p = (async () => {
      try {
        const { cert, key } = await this.options.issuer.issue(host);
        const entry = this.build(host, cert, key);
        if (!entry) throw new Error(`acme: the certificate issued for ${host} does not cover it`);
        this.put(entry);
        try {
          this.options.cache.save(host, { cert, key });
        } catch (err) {
          log.error({ host, err: (err as Error).message, dir: this.options.cache.dir }, `acme: cannot cache the certificate for ${host}`);
        }
        this.failures.delete(host);
        this.s.success.inc();
        log.info(
          { host, serial: entry.info.serialNumber, expires: entry.info.expiration.toISOString(), ms: this.now() - started },
          `acme: certificate for ${host} obtained (serial ${entry.info.serialNumber}, expires ${entry.info.expiration.toISOString()})`,
        );
        return entry;
      } catch (err) {
        const error = err instanceof Error ? err : new Error(String(err));
        const prev = this.failures.get(host);
        const first = this.options.retryMs ?? 2 * 60_000;
        const delay = prev ? Math.min(prev.delay * 2, this.options.maxRetryMs ?? 60 * 60_000) : first;
        this.failures.set(host, { error, retryAt: this.now() + delay, delay });
        this.s.failure.inc();
        log.error(
          { host, err: error.message, retryInMs: delay, serving: existing?.info.serialNumber },
          `acme: order for ${host} failed: ${error.message}`,
        );
        if (existing) return existing;
        throw error;
      } finally {
        this.inflight.delete(host);
      }
    })();
    this.inflight.set(host, p);
    return p;
  }

  /** Renews what is due and retries failed orders; every allowed name without a certificate is ordered. */
  check(): void {
    if (this.closed) return;
    for (const host of this.hosts) {
      const e = this.entries.get(host);
      if (e && this.now() < renewalTime(e.info)) continue;
      const failure = this.failures.get(host);
      if (failure && this.now() < failure.retryAt) continue;
      this.order(host, e ? 'due for renewal' : 'start', e).catch(() => undefined);
    }
  }

  /** Checks a pair (throws when invalid); undefined when it does not name the host. */
  private build(host: string, cert: string, key: string): AcmeEntry | undefined {
    const pair = checkPair(cert, key, { certFile: `acme:${host} certificate`, keyFile: `acme:${host} key`, label: `acme:${host}` });
    if (!pair.info.subjectAltNames.some((n) => n.dns !== undefined && normalizeHost(n.dns) === host)) return undefined;
    return { host, cert, key, context: pair.context, info: pair.info };
  }

  /** Serves an entry from now on (and for clients without SNI when it is the first name's). */
  private put(entry: AcmeEntry): void {
    this.entries.set(entry.host, entry);
    if (this.defaultEntry() === entry) this.options.onDefaultChange?.(entry);
  }

  private loadFromCache(host: string): void {
    const log = this.options.log;
    const cached = this.options.cache.read(host);
    if (!cached) return;
    let entry: AcmeEntry | undefined;
    try {
      entry = this.build(host, cached.cert, cached.key);
    } catch (err) {
      log.warn({ host, err: (err as Error).message, file: this.options.cache.certPath(host) }, `acme: ignoring the cached certificate for ${host}`);
      return;
    }
    if (!entry) {
      log.warn({ host, file: this.options.cache.certPath(host) }, `acme: ignoring the cached certificate for ${host}: it does not name the host`);
      return;
    }
    if (entry.info.expiration.getTime() <= this.now()) {
      log.warn({ host, expired: entry.info.expiration.toISOString() }, `acme: the cached certificate for ${host} has expired`);
      return;
    }
    this.put(entry);
    this.s.cache.inc();
    log.info(
      { host, serial: entry.info.serialNumber, expires: entry.info.expiration.toISOString(), file: this.options.cache.certPath(host) },
      `acme: certificate for ${host} loaded from cache (serial ${entry.info.serialNumber})`,
    );
  }

  private logRefusal(host: string): void {
    const now = this.now();
    const last = this.refusedLogged.get(host);
    if (last !== undefined && now - last < 60_000) return;
    if (this.refusedLogged.size >= 1000) this.refusedLogged.clear();
    this.refusedLogged.set(host, now);
    this.options.log.warn({ host: clientText(host) }, `acme: refused TLS handshake for "${clientText(host) || '(no name)'}": not in --acme_hosts, no certificate ordered`);
  }
}
