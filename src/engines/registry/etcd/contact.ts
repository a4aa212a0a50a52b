/**
 * Contact with etcd while this process watches it. A lost link closes nothing, so a watch stream
 * can stay silent for a long time before anything fails; meanwhile the view would look current.
 * So whenever nothing was heard from etcd for PROBE_MS, it is asked (a read of one key that does
 * not exist). A failed read, or no answer at all for OVERDUE_MS, makes the watchers' view stale
 * as of etcd's last answer (store.watchersCutOff: nothing expires, the gauge
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
  private probing = false;

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
    const silent = Date.now() - store.goodAt;
    if (silent >= OVERDUE_MS) store.watchersCutOff(new Error(`no answer from etcd for ${Math.floor(silent / 1000)}s`));
    if (silent < PROBE_MS || this.probing) return;
    this.probing = true;
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
      .finally(() => (this.probing = false));
  }
}
