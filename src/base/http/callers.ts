/**
 * Who calls this process: per front end and caller identity (the SPIFFE ID of the client
 * certificate, over mutual TLS; `plain` for a connection without one), the answers by class and
 * a latency histogram. Counted by each front server when a request ends (src/edge/front-server.ts),
 * read by admin /traffic (src/admin/traffic.ts) for `mesh stat identities`. Bounded: at most
 * MAX_CALLERS identities a front end; any past them is counted as `other`.
 */
import { Histogram } from '../stats/store.js';
import { peerIdentityOf } from '../mtls/workload-tls.js';

export const MAX_CALLERS = 1000;
/** The caller of a connection without a client certificate (or one that names no identity). */
export const PLAIN_CALLER = 'plain';
/** The callers past MAX_CALLERS. */
export const OTHER_CALLERS = 'other';

export interface CallerCount {
  front: string;
  identity: string;
  /** Answers of class 1xx..5xx (a response never started counts as a 5xx). */
  classes: number[];
  latency: Histogram;
}

export class CallerCounts {
  private readonly fronts = new Map<string, Map<string, CallerCount>>();
  /** The identity of each TLS socket, read once (getPeerCertificate builds an object each call). */
  private readonly identities = new WeakMap<object, string>();

  constructor(private readonly maxCallers = MAX_CALLERS) {}

  /** The caller of a connection: its SPIFFE ID, or PLAIN_CALLER. */
  identityOf(socket: object | undefined): string {
    if (!socket) return PLAIN_CALLER;
    let id = this.identities.get(socket);
    if (id === undefined) {
      id = peerIdentityOf(socket) ?? PLAIN_CALLER;
      this.identities.set(socket, id);
    }
    return id;
  }

  /** Counts one answered request of `front` from the caller on `socket`. */
  record(front: string, socket: object | undefined, status: number, ms: number): void {
    let callers = this.fronts.get(front);
    if (!callers) this.fronts.set(front, (callers = new Map()));
    let identity = this.identityOf(socket);
    let count = callers.get(identity);
    if (!count && callers.size >= this.maxCallers) count = callers.get((identity = OTHER_CALLERS));
    if (!count) callers.set(identity, (count = { front, identity, classes: [0, 0, 0, 0, 0], latency: new Histogram(`${front}.${identity}`, true) }));
    count.classes[Math.min(4, Math.max(0, Math.floor(status / 100) - 1))]!++;
    count.latency.record(ms);
  }

  /** Every count, by front end then identity. */
  list(): CallerCount[] {
    const out: CallerCount[] = [];
    for (const front of [...this.fronts.keys()].sort()) {
      const callers = this.fronts.get(front)!;
      for (const id of [...callers.keys()].sort()) out.push(callers.get(id)!);
    }
    return out;
  }
}
