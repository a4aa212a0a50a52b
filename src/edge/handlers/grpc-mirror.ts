/**
 * A GRPCRoute's RequestMirror (docs/routing.md, "GRPCRoute: native gRPC calls"): a copy of a native gRPC call sent
 * to a node of another service, fire and forget. Only a call whose request is one message is
 * copied (unary and server-streaming calls), once the client has sent all of it, with the headers
 * the primary got; the copy's answer is read and dropped, and never delays or changes the
 * primary's. Bounded: a request longer than MAX_MIRROR_BYTES is not copied, at most
 * MAX_MIRRORS_IN_FLIGHT copies (per front end) are in flight, each cancelled after `timeoutMs`; a
 * copy over the bounds is dropped and counted, never queued.
 *
 * Stats: `grpc_mirror.sent`, `grpc_mirror.failed` (no node, a reset, a timeout or a status other
 * than OK), `grpc_mirror.dropped` (over the bounds, or a request of several messages).
 */
import * as http2 from 'node:http2';
import type { IncomingHttpHeaders } from 'node:http2';
import type { ClusterManager } from '../../core/upstream/cluster-manager.js';
import { declareStats, type FamilyStats, type StatsStore } from '../../base/stats/store.js';
import { leaseWithin } from '../../core/client/budget.js';
import type { MirrorSpec } from '../routes/file.js';
import { GRPC_CODES, requestHeaders, type GrpcConnections } from './grpc-pass.js';
import { MAX_MIRRORS_IN_FLIGHT } from './mirror.js';

/** The longest request copied (bytes, its message's prefix included). */
export const MAX_MIRROR_BYTES = 64 * 1024;

export const GRPC_MIRROR_STATS = {
  counters: { sent: 'grpc_mirror.sent', failed: 'grpc_mirror.failed', dropped: 'grpc_mirror.dropped' },
} as const;

export class GrpcMirror {
  private inFlight = 0;
  private readonly stats: FamilyStats<typeof GRPC_MIRROR_STATS>;

  constructor(
    private readonly clusters: Pick<ClusterManager, 'acquire'>,
    private readonly connections: GrpcConnections,
    stats: StatsStore,
    private readonly timeoutMs: number,
    private readonly random: () => number = Math.random,
  ) {
    this.stats = declareStats(stats, GRPC_MIRROR_STATS);
  }

  /**
   * A tap for passGrpcCall (./grpc-pass.ts) that copies the call to each mirror (its share of
   * calls drawn now); undefined when none is drawn.
   */
  tap(mirrors: readonly MirrorSpec[], headers: IncomingHttpHeaders): ((chunk: Buffer | undefined) => void) | undefined {
    const services = mirrors.filter((m) => !m.fraction || this.random() * m.fraction.denominator < m.fraction.numerator).map((m) => m.service);
    if (services.length === 0) return undefined;
    const chunks: Buffer[] = [];
    let size = 0;
    return (chunk) => {
      if (chunk) {
        size += chunk.length;
        if (size <= MAX_MIRROR_BYTES) chunks.push(chunk);
        return;
      }
      const body = Buffer.concat(chunks);
      // One message: its 5-byte prefix says the rest is its whole length.
      const one = size <= MAX_MIRROR_BYTES && body.length >= 5 && body.readUInt32BE(1) + 5 === body.length;
      for (const service of services) {
        if (!one || this.inFlight >= MAX_MIRRORS_IN_FLIGHT) {
          this.stats.dropped.inc();
          continue;
        }
        this.inFlight++;
        this.stats.sent.inc();
        void this.copy(service, headers, body).then((ok) => {
          this.inFlight--;
          if (!ok) this.stats.failed.inc();
        });
      }
    };
  }

  /** One copy: true when the node answered OK. */
  private async copy(service: string, headers: IncomingHttpHeaders, body: Buffer): Promise<boolean> {
    const lease = await leaseWithin(this.clusters.acquire(service, {}), Date.now() + this.timeoutMs).catch(() => undefined);
    if (!lease) return false;
    const started = Date.now();
    return new Promise<boolean>((resolve) => {
      let status: number | undefined;
      let timedOut = false;
      let up: http2.ClientHttp2Stream;
      try {
        const session = this.connections.session(lease.target, service);
        up = session.request(requestHeaders(headers, String(headers[':path']), String(headers[':authority'] ?? service), this.timeoutMs), { endStream: false });
      } catch {
        lease.release({ kind: 'cancelled' }, 0);
        return resolve(false);
      }
      const timer = setTimeout(() => {
        timedOut = true;
        up.close(http2.constants.NGHTTP2_CANCEL);
      }, this.timeoutMs);
      up.on('response', (h) => {
        if (h['grpc-status'] !== undefined) status = Number(h['grpc-status']);
      });
      up.on('trailers', (t) => (status = Number(t['grpc-status'] ?? GRPC_CODES.unknown)));
      up.on('error', () => {});
      up.resume();
      up.once('close', () => {
        clearTimeout(timer);
        const ms = Date.now() - started;
        if (timedOut) lease.release({ kind: 'timeout' }, ms);
        else if (status === undefined) lease.release({ kind: 'reset' }, ms);
        else lease.release({ kind: 'response', status: status === GRPC_CODES.unavailable ? 503 : 200 }, ms);
        resolve(status === GRPC_CODES.ok);
      });
      up.end(body);
    });
  }
}
