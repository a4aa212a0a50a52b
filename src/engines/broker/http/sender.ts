/**
 * The http broker's sender: delivery requests to subscriber endpoints over a bounded undici pool,
 * broadcast deliveries (failures logged per subscriber) and queue group deliveries (another node
 * of the group when one fails, at most MAX_QUEUE_ATTEMPTS).
 */
import { Agent } from '../../../base/http/undici.js';
import type { Dispatcher } from 'undici';
import type pino from 'pino';
import { decodeMissing, DeliveryError, errorText, HEADER_FIELD, MISSING_FIELD, type Delivery } from './wire.js';
import { SECRET_FIELD } from './secret.js';
import type { WorkloadTls } from '../../../base/mtls/workload-tls.js';
import { MTLS_REFUSED, mtlsClientStats, mtlsConnector, servesMtls, type MtlsClientStats } from '../../../base/mtls/connector.js';
import { StatsStore } from '../../../base/stats/store.js';

/** What the mutual TLS connector reads of an endpoint's node: only such nodes go through it. */
const MTLS_NODE = Object.freeze({ mtls: 'true' });

/** Queue group: nodes tried at most, per message. */
const MAX_QUEUE_ATTEMPTS = 3;

export interface SenderOptions {
  /** Bound on one delivery (connect, send, answer). */
  deliveryTimeoutMs: number;
  logger: pino.Logger;
  /** The mesh's delivery secret, sent with every delivery (secret.ts). */
  secret: string;
  /**
   * Hands a queue group's message to a group of this process directly (no HTTP request to
   * ourselves); false when the node is not one of ours.
   */
  deliverLocally: (nodeId: string, topic: string, headerValue: string, body: Buffer) => boolean;
  /**
   * The process's workload certificate (--mtls), read at each delivery: an endpoint whose node says
   * mtls=true is delivered to over mutual TLS with it, and must present a certificate of the mesh
   * CA for a workload of the trust domain (a subscription's node names no service to check
   * against). With --mtls=strict an endpoint without mtls=true gets nothing.
   */
  workloadTls?: () => WorkloadTls | undefined;
  /** The deliveries' ssl.* and upstream_cx_plain_refused stats (`broker.http.`). */
  tlsStats?: MtlsClientStats;
}

function shuffle<T>(items: T[]): T[] {
  const a = items.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

export class Sender {
  private readonly agent: Agent;
  /** The pool of mutual TLS deliveries, made on first use for the workload of the time. */
  private mtls?: { workload: WorkloadTls; agent: Agent };

  constructor(private readonly options: SenderOptions) {
    this.agent = new Agent({
      connect: { timeout: options.deliveryTimeoutMs },
      headersTimeout: options.deliveryTimeoutMs,
      bodyTimeout: options.deliveryTimeoutMs,
      keepAliveTimeout: 4_000,
      connections: 64,
    });
  }

  /** A broadcast delivery: failures are logged per subscriber, never thrown. */
  async deliverBroadcast(delivery: Delivery, topic: string, headerValue: string, body: Buffer): Promise<void> {
    try {
      await this.post(delivery, headerValue, body);
    } catch (err) {
      const error = errorText(err);
      const missing = delivery.nodes.length > 1 ? (err as DeliveryError).missing : undefined;
      for (const node of delivery.nodes) {
        if (missing && !missing.has(node.id)) continue; // the endpoint took it for this one
        this.options.logger.warn({ topic, node: node.id, address: `${node.address}:${node.port}`, error }, 'http broker: delivery to a subscriber failed');
      }
    }
  }

  async deliverToGroup(queue: string, targets: Delivery[], topic: string, headerValue: string, body: Buffer): Promise<void> {
    const errors: string[] = [];
    for (const target of shuffle(targets).slice(0, MAX_QUEUE_ATTEMPTS)) {
      const node = target.nodes[0]!;
      try {
        await this.deliver(target, topic, headerValue, body);
        return;
      } catch (err) {
        errors.push(`${node.id} (${node.address}:${node.port}): ${errorText(err)}`);
        this.options.logger.debug({ topic, queue, node: node.id, error: errorText(err) }, 'http broker: queue delivery failed, trying another node');
      }
    }
    this.options.logger.warn({ topic, queue, errors }, 'http broker: no subscriber of the queue group took the message');
  }

  /** Closes the pool. */
  async close(): Promise<void> {
    await this.agent.close().catch(() => undefined);
    await this.mtls?.agent.close().catch(() => undefined);
  }

  /**
   * The pool a delivery goes through: the mutual TLS one for an endpoint that serves it (when this
   * process has a workload certificate), else the plain one; with --mtls=strict a plain endpoint
   * is refused (an Error with code MTLS_REFUSED, counted).
   */
  private dispatcherFor(delivery: Delivery): Agent {
    const workload = this.options.workloadTls?.();
    if (!workload || workload.mode === 'off') return this.agent;
    const stats = this.options.tlsStats;
    if (!servesMtls(delivery.nodes[0]!.metadata ?? {})) {
      if (workload.mode !== 'strict') return this.agent;
      stats?.plainRefused.inc();
      throw Object.assign(new Error('mutual TLS: the subscriber endpoint does not serve mutual TLS (no mtls=true in its registry metadata); not delivered to in strict mode'), { code: MTLS_REFUSED });
    }
    if (this.mtls?.workload !== workload) {
      void this.mtls?.agent.close().catch(() => undefined);
      const timeout = this.options.deliveryTimeoutMs;
      const domain = `spiffe://${workload.trustDomain}/`;
      const connect = mtlsConnector({
        workload,
        expected: `a workload of ${domain}`,
        accepts: (id) => id.startsWith(domain),
        strictApplies: true,
        metadata: () => MTLS_NODE,
        key: 'subscriber endpoint',
        connectTimeoutMs: timeout,
        stats: stats ?? mtlsClientStats(new StatsStore()),
        log: this.options.logger,
      });
      this.mtls = { workload, agent: new Agent({ connect, headersTimeout: timeout, bodyTimeout: timeout, keepAliveTimeout: 4_000, connections: 64 }) };
    }
    return this.mtls.agent;
  }

  /** Delivers to one node: directly when it is a subscription of this process, else over HTTP. */
  private async deliver(target: Delivery, topic: string, headerValue: string, body: Buffer): Promise<void> {
    // A subscription of this very process (a sidecar's WebSocket subscribers, say) is handed the
    // message directly: no HTTP request to ourselves.
    if (this.options.deliverLocally(target.nodes[0]!.id, topic, headerValue, body)) return;
    await this.post(target, headerValue, body);
  }

  /**
   * One delivery request; resolves on 2xx, else rejects (a DeliveryError for an answer). Bounded
   * by deliveryTimeoutMs from the call, time waiting for a connection included. undici's dispatch
   * API with a plain handler: no response stream, no AbortSignal per request.
   */
  private post(delivery: Delivery, headerValue: string, body: Buffer): Promise<void> {
    const timeoutMs = this.options.deliveryTimeoutMs;
    return new Promise<void>((resolve, reject) => {
      let controller: Dispatcher.DispatchController | undefined;
      let settled = false;
      let timedOut = false;
      let status = 0;
      let missing: string | undefined;
      let errorBody: Buffer[] | undefined;
      let errorBytes = 0;
      const finish = (err?: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => {
        timedOut = true;
        const err = new Error(`no answer within ${timeoutMs} ms`);
        controller?.abort(err);
        finish(err);
      }, timeoutMs);
      try {
        this.dispatcherFor(delivery).dispatch(
          {
            origin: delivery.origin,
            path: delivery.path,
            method: 'POST',
            headers: { 'content-type': 'application/octet-stream', [HEADER_FIELD]: headerValue, [SECRET_FIELD]: this.options.secret },
            body,
          },
          {
            onRequestStart(c) {
              controller = c;
              if (timedOut) c.abort(new Error(`no answer within ${timeoutMs} ms`));
            },
            onResponseStart(_c, statusCode, headers) {
              status = statusCode;
              const m = headers[MISSING_FIELD];
              missing = typeof m === 'string' ? m : undefined;
              if (statusCode < 200 || statusCode >= 300) errorBody = [];
            },
            onResponseData(_c, chunk) {
              // An error's text (the start of it) goes into the log; a 202 has no body.
              if (errorBody && errorBytes < 300) {
                errorBody.push(chunk);
                errorBytes += chunk.length;
              }
            },
            onResponseEnd() {
              if (!errorBody) return finish();
              const text = Buffer.concat(errorBody).toString('utf8').slice(0, 300);
              finish(new DeliveryError(`status ${status}${text ? `: ${text}` : ''}`, missing !== undefined ? decodeMissing(missing) : undefined));
            },
            onResponseError(_c, err) {
              finish(err);
            },
          },
        );
      } catch (err) {
        finish(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }
}
