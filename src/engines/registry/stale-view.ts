/**
 * A registry reader's view while the registry cannot be reached (etcd unreachable, the local
 * store failing): the last good view is kept. Time stands still for readers at the last moment the
 * registry was known good (`asOf`), so no node expires because nobody could refresh it; only what
 * the registry itself removes goes, once it can be read again.
 *
 * The gauge `registry.stale_seconds` says how old the view is (0 while the registry is reached);
 * it is kept current every second while stale. Logging the start and the end (once each) is the
 * owner's: freeze and thaw say whether they changed anything.
 */
import type { Gauge } from '../../base/stats/store.js';

export const STALE_SECONDS_STAT = 'registry.stale_seconds';

/** How often the gauge is brought up to date while the view is stale. */
const GAUGE_TICK_MS = 1000;

export class StaleView {
  private frozenAt: number | undefined;
  private ticker: NodeJS.Timeout | undefined;

  constructor(private readonly gauge: Gauge | undefined) {
    gauge?.set(0);
  }

  get stale(): boolean {
    return this.frozenAt !== undefined;
  }

  /** The last moment the registry was known good, while stale. */
  get asOf(): number | undefined {
    return this.frozenAt;
  }

  /** The time readers use: now, or while stale the last moment the registry was known good. */
  now(): number {
    return this.frozenAt ?? Date.now();
  }

  /** Whole seconds since the view was last known good (0 when not stale). */
  staleSeconds(): number {
    return this.frozenAt === undefined ? 0 : Math.max(0, Math.floor((Date.now() - this.frozenAt) / 1000));
  }

  /** The registry cannot be reached; its view is as of `asOf`. True when this starts a stale period. */
  freeze(asOf: number): boolean {
    if (this.frozenAt !== undefined) return false;
    this.frozenAt = Math.min(asOf, Date.now());
    this.update();
    this.ticker = setInterval(() => this.update(), GAUGE_TICK_MS);
    this.ticker.unref();
    return true;
  }

  /** While stale: the view is known good only as of `asOf`, if that is earlier. */
  backdate(asOf: number): void {
    if (this.frozenAt === undefined || asOf >= this.frozenAt) return;
    this.frozenAt = asOf;
    this.update();
  }

  /** The registry is reached again. True when this ends a stale period. */
  thaw(): boolean {
    if (this.frozenAt === undefined) return false;
    this.frozenAt = undefined;
    this.stopTicker();
    this.gauge?.set(0);
    return true;
  }

  /** Stops the gauge's timer (the registry closed); the view stays as it is. */
  close(): void {
    this.stopTicker();
  }

  private stopTicker(): void {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = undefined;
  }

  private update(): void {
    this.gauge?.set(this.staleSeconds());
  }
}
