/**
 * RequestMirror: a copy of a proxied request sent to a node of another service, fire and forget.
 * The copy's answer is read and dropped; it never reaches the client and never delays the
 * primary's answer. Mirrors are bounded: at most `maxInFlight` copies are in flight at once (per
 * front end), each waits for its answer at most `timeoutMs`; a copy over the cap is dropped and
 * counted, never queued. A request whose body is streamed (not held in memory) is not copied
 * (counted as dropped).
 */
import type { Dispatcher } from 'undici';
import type { ClusterManager } from '../../core/upstream/cluster-manager.js';
import type { RouteStats } from '../routes/effects.js';

/** Copies in flight at once, per front end. */
export const MAX_MIRRORS_IN_FLIGHT = 64;

export interface MirrorRequest {
  method: string;
  /** The path and query sent (the primary's, after any rewrite). */
  path: string;
  /** The headers sent to the primary (undici's flat list). */
  headers: string[];
  /** undefined: no body. */
  body: Uint8Array | undefined;
}

export class MirrorSender {
  private inFlight = 0;

  constructor(
    private readonly clusters: Pick<ClusterManager, 'acquire'>,
    private readonly timeoutMs: number,
    private readonly maxInFlight: number = MAX_MIRRORS_IN_FLIGHT,
  ) {}

  /** Copies in flight now. */
  get active(): number {
    return this.inFlight;
  }

  /** Sends a copy to a node of each service; returns at once. */
  send(services: readonly string[], request: MirrorRequest, stats: RouteStats): void {
    for (const service of services) {
      if (this.inFlight >= this.maxInFlight) {
        stats.mirrorDropped.inc();
        continue;
      }
      this.inFlight++;
      stats.mirrorSent.inc();
      this.copy(service, request).then(
        (ok) => {
          this.inFlight--;
          if (!ok) stats.mirrorFailed.inc();
        },
        () => {
          this.inFlight--;
          stats.mirrorFailed.inc();
        },
      );
    }
  }

  /** One copy: true when a node answered (any status below 500). */
  private async copy(service: string, request: MirrorRequest): Promise<boolean> {
    const lease = await this.clusters.acquire(service, {});
    const started = Date.now();
    const signal = AbortSignal.timeout(this.timeoutMs);
    try {
      const res = await lease.target.dispatcher.request({
        path: request.path,
        method: request.method as Dispatcher.HttpMethod,
        headers: request.headers,
        body: request.body,
        signal,
      });
      await res.body.dump();
      lease.release({ kind: 'response', status: res.statusCode }, Date.now() - started);
      return res.statusCode < 500;
    } catch {
      lease.release(signal.aborted ? { kind: 'timeout' } : { kind: 'reset' }, Date.now() - started);
      return false;
    }
  }
}
