/**
 * Contact with etcd while this process watches it. A lost link closes nothing, so a watch stream
 * can stay silent for a long time before anything fails; meanwhile the view would look current.
 * So whenever nothing was heard from etcd for PROBE_MS, it is asked (a read of one key that does
 * not exist). A failed read, or no answer at all for OVERDUE_MS (the read unanswered for the
 * difference; decided after the I/O already received is handled, so a stalled event loop is not
 * taken for a silent etcd), makes the watchers' view stale as of etcd's last answer (store.watchersCutOff: nothing expires, the gauge
 * registry.stale_seconds counts from that answer); the first answer after that makes the
 * watchers read etcd afresh (they then end the stale period).
 */
import type { EtcdStore } from './store.js';

/** Silence after which etcd is asked. */
export const PROBE_MS = 1000;
/** Silence after which the view is stale even though no call has failed yet. */
export const OVERDUE_MS = 3000;

export class EtcdContact {
  private timer: NodeJS.Timeout | undefined;
  /** When the read in flight was sent. */
  private probeSentAt: number | undefined;

  constructor(
    private readonly store: EtcdStore,
    /** Makes every watcher read etcd afresh. */
    private readonly resync: () => void,
  ) {}

  start(): void {
    if (this.timer || this.store.closed) return;
    this.timer = setInterval(() => this.tick(), PROBE_MS / 2);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private tick(): void {
    const store = this.store;
    if (store.closed) return this.stop();
    const now = Date.now();
    if (this.probeSentAt !== undefined) {
      if (now - this.probeSentAt >= OVERDUE_MS - PROBE_MS) setImmediate(() => this.overdue());
      return;
    }
    if (now - store.goodAt < PROBE_MS) return;
    this.probeSentAt = now;
    store.client
      .get(`${store.prefix}\u0000probe`)
      .exec()
      .then(
        (res) => {
          store.noteHeader(res.header);
          if (store.view.stale && !store.closed) this.resync();
        },
        (err: unknown) => store.watchersCutOff(err),
      )
      .finally(() => (this.probeSentAt = undefined));
  }

  /** The read is still unanswered once what has arrived meanwhile was handled: etcd is silent. */
  private overdue(): void {
    if (this.probeSentAt === undefined || this.store.closed) return;
    this.store.watchersCutOff(new Error(`no answer from etcd for ${Math.floor((Date.now() - this.store.goodAt) / 1000)}s`));
  }
}
