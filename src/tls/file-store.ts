/**
 * `--enable_tls`: the certificate and key files, reloaded when they change, without a restart.
 *
 * Changes are noticed two ways (watchFiles, src/tls/workload/watch.ts): `fs.watch` on the
 * directories holding the files (which also sees a file replaced by rename, or a Kubernetes-style
 * symlink swap), and a periodic `stat` of both files as a fallback where watching is unreliable
 * (network filesystems, some containers). A change
 * reloads the pair: if the new pair is valid, every listener gets it with `setSecureContext` and new
 * connections see the new certificate; if it is not (a half-written file, a key that does not match),
 * the previous pair keeps serving and the problem is logged. Both files are read once they have
 * settled (readSettled, src/tls/workload/watch.ts: two reads in a row agree, neither is empty), so
 * a pair caught half-way through being rewritten (the certificate written, the key not yet) is read
 * again; a pair that still does not match is checked again shortly before it is reported.
 */
import { dirname, resolve } from 'node:path';
import type { Server as TlsServer, TlsOptions } from 'node:tls';
import type { Logger } from 'pino';
import type { CertificateInfo } from './certificate.js';
import type { StatsStore } from '../base/stats/store.js';
import { checkPair, loadPair, type LoadedPair } from './files.js';
import { fileSignature, readSettled, serialized, watchFiles, type SettleOptions } from './workload/watch.js';
import type { TlsProvider } from './provider.js';

export interface FileStoreOptions {
  certFile: string;
  keyFile: string;
  log: Logger;
  stats: StatsStore;
  /** Period of the stat fallback (ms). Default 2000. */
  pollMs?: number;
  /** Wait after a change event before reading, and between the reads that must agree (ms). Default 150. */
  settleMs?: number;
  /** Most reads of one settled read (default 10); `onRead` is told of each (tests). */
  maxReads?: SettleOptions['maxReads'];
  onRead?: SettleOptions['onRead'];
  /** Second look at an invalid pair before reporting it (ms). Default 1000. */
  retryMs?: number;
}

export class FileCertificateStore implements TlsProvider {
  readonly certFile: string;
  readonly keyFile: string;
  private current: LoadedPair;
  private readonly servers = new Set<TlsServer>();
  private stopWatch?: () => void;
  private retryTimer?: NodeJS.Timeout;
  private lastSignature: string;
  /** The bytes of the last invalid pair reported, so one bad pair is logged once. */
  private lastFailure?: string;
  private started = false;
  private closed = false;
  private readonly reloadOk;
  private readonly reloadFailed;
  /** Reloads one at a time (serialized); the next run is a second look when a call since the last start asked for one. */
  private second = false;
  private readonly reloadSerial = serialized(() => {
    const second = this.second;
    this.second = false;
    return this.reloadOnce(second);
  });

  /** Loads the pair at once: a missing, unreadable or mismatched file throws an Error naming it. */
  constructor(private readonly options: FileStoreOptions) {
    this.current = loadPair(options.certFile, options.keyFile);
    this.certFile = resolve(options.certFile);
    this.keyFile = resolve(options.keyFile);
    this.lastSignature = this.signature();
    this.reloadOk = options.stats.counter('tls.file_reload_success');
    this.reloadFailed = options.stats.counter('tls.file_reload_failure');
    const expiry = this.current.info.expiration.getTime();
    if (expiry < Date.now()) {
      options.log.warn({ file: options.certFile, expired: this.current.info.expiration.toISOString() }, 'TLS certificate has expired');
    }
  }

  /** The pair being served now. */
  get pair(): LoadedPair {
    return this.current;
  }

  serverOptions(): TlsOptions {
    return { cert: this.current.cert, key: this.current.key };
  }

  attach(server: TlsServer): void {
    this.servers.add(server);
  }

  detach(server: TlsServer): void {
    this.servers.delete(server);
  }

  certificates(): CertificateInfo[] {
    return [{ ...this.current.info, path: this.options.certFile }];
  }

  async start(): Promise<void> {
    if (this.started || this.closed) return;
    this.started = true;
    this.stopWatch = watchFiles({
      dirs: [...new Set([dirname(this.certFile), dirname(this.keyFile)])],
      signature: () => this.signature(),
      onChange: () => void this.reload(false),
      pollMs: this.options.pollMs ?? 2000,
      settleMs: this.options.settleMs ?? 150,
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stopWatch?.();
    clearTimeout(this.retryTimer);
    this.servers.clear();
  }

  private signature(): string {
    return `${fileSignature(this.certFile)}|${fileSignature(this.keyFile)}`;
  }

  /**
   * Reads the pair once settled (reloads run one at a time); installs it when valid and new.
   * `second` is the delayed second look at a bad pair.
   */
  reload(second: boolean): Promise<boolean> {
    this.second ||= second;
    return this.reloadSerial();
  }

  private async reloadOnce(second: boolean): Promise<boolean> {
    if (this.closed) return false;
    this.lastSignature = this.signature();
    const { certFile, keyFile } = this.options;
    let next: LoadedPair;
    try {
      const [cert, key] = await readSettled([certFile, keyFile], { settleMs: this.options.settleMs ?? 150, maxReads: this.options.maxReads, onRead: this.options.onRead });
      if (this.closed) return false;
      next = checkPair(cert!, key!, { certFile, keyFile });
    } catch (err) {
      const message = (err as Error).message;
      if (!second) {
        // Perhaps caught half-way through a replacement: look again before complaining.
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => void this.reload(true), this.options.retryMs ?? 1000);
        this.retryTimer.unref();
        return false;
      }
      const id = this.lastSignature + message;
      if (this.lastFailure !== id) {
        this.lastFailure = id;
        this.reloadFailed.inc();
        this.options.log.error(
          { err: message, serving: this.current.info.serialNumber },
          `TLS certificate reload failed, keeping the previous certificate (serial ${this.current.info.serialNumber})`,
        );
      }
      return false;
    }
    this.lastFailure = undefined;
    if (next.cert.equals(this.current.cert) && next.key.equals(this.current.key)) return false;
    const previous = this.current.info.serialNumber;
    this.current = next;
    for (const server of this.servers) {
      try {
        server.setSecureContext({ cert: next.cert, key: next.key });
      } catch (err) {
        this.options.log.error({ err: (err as Error).message }, 'TLS certificate reload: setSecureContext failed');
      }
    }
    this.reloadOk.inc();
    this.options.log.info(
      { file: this.options.certFile, serial: next.info.serialNumber, previous, expires: next.info.expiration.toISOString() },
      `TLS certificate reloaded from ${this.options.certFile} (serial ${next.info.serialNumber})`,
    );
    return true;
  }
}
