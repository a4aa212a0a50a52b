/**
 * What the edge of a process hands its front ends, filters and handlers: built once when a front
 * end is built (edgeContext), from the process's Runtime. Nothing at the edge reads the process's
 * options per request: the ones the edge uses are read here, once, under one name each
 * (`EdgeSettings`); the parts (stats, logs, client, clusters, tracer, TLS) are the process's own.
 * `Runtime` builds a process; the edge sees this.
 */
import type { Runtime } from '../process/runtime.js';
import type { StatsStore } from '../base/stats/store.js';
import type { Logging } from '../base/util/log.js';
import type { Tracer } from '../base/tracing/tracer.js';
import type { ContextStore } from '../base/util/call-context.js';
import type { AccessLog } from '../base/http/access-log.js';
import type { TapHub } from '../base/http/tap.js';
import type { CallerCounts } from '../base/http/callers.js';
import { serverLimits, type Drainable, type ServerLimits } from '../base/http/lifecycle.js';
import type { UnderscorePolicy } from './filters/header-names.js';
import type { ReusePortListening } from '../base/http/reuse-port.js';
import type { Client } from '../core/client/client.js';
import type { ClusterManager } from '../core/upstream/cluster-manager.js';
import type { TlsProvider } from '../tls/provider.js';
import { tlsEnabled } from '../tls/index.js';
import type { Registry } from '../engines/registry/registry.js';
import type { Broker, Message } from '../engines/broker/broker.js';
import type { GrpcTransport } from '../core/transport/grpc/transport.js';
import { grpcRetryCodes } from '../core/transport/grpc/retry-on.js';

/** The options the edge reads, each once, under one name. */
export interface EdgeSettings {
  /** --client_request_timeout (ms): the budget of a call the edge sends, and of a proxied request's head. */
  readonly clientRequestTimeoutMs: number;
  /** --client_retries: the retries of an idempotent proxied request, where its route names none. */
  readonly clientRetries: number;
  /** --grpc_retry_on: the gRPC statuses a native gRPC call is tried again for, when safe (src/edge/handlers/grpc-retry.ts). */
  readonly grpcRetryOn: readonly number[];
  /** --stream_idle_timeout (ms): a proxied body or stream that sends nothing for this long is cut; an HTTP/2 answer the client reads nothing of for this long is reset. */
  readonly streamIdleTimeoutMs: number;
  /** --broker_ack_wait (ms): a delivery to a sidecar's subscriber not acknowledged within this is redelivered. */
  readonly brokerAckWaitMs: number;
  /** --max_body_size (bytes). */
  readonly maxBodyBytes: number;
  /** --cors: the browser origins allowed at the public listeners. */
  readonly corsOrigins: readonly string[];
  /** --headers_with_underscores. */
  readonly headersWithUnderscores: UnderscorePolicy;
  /** --enable_tls or --enable_acme: the public listeners serve HTTPS. */
  readonly tls: boolean;
  /** The connection cap and read timeouts of every listener (--max_connections, --request_*_timeout, --drain_timeout). */
  readonly limits: ServerLimits;
  /** A worker of `--concurrency` whose listeners bind with reusePort, each its own socket. */
  readonly reusePort: ReusePortListening | undefined;
}

/** The process as the edge sees it. */
export interface EdgeContext {
  readonly settings: EdgeSettings;
  readonly stats: StatsStore;
  readonly logging: Logging;
  /** The tracer when tracing is on. */
  readonly tracer: Tracer | undefined;
  /** The call context a request runs in (its trace). */
  readonly context: ContextStore;
  /** --access_log, or none. */
  readonly accessLog: AccessLog | undefined;
  /** The process's tap hub (admin /tap): each front end publishes its finished requests there. */
  readonly tap: TapHub;
  /** Who calls the process's front ends (admin /traffic's callers; src/base/http/callers.ts); absent: not counted. */
  readonly callers?: CallerCounts;
  /** The process's TLS provider (built on first use), when `settings.tls`. */
  readonly tls: TlsProvider | undefined;
  readonly client: Client;
  readonly clusters: ClusterManager;
  readonly registry: Registry;
  /** gRPC to nodes with protocol=grpc (a method's kind, for streams at the edge). */
  readonly grpc: GrpcTransport;
  /** The process's broker (built on first use). */
  readonly broker: Broker;
  /**
   * Publishes with the trace and Mesh-Id of the call being served (a producer span when tracing is
   * on); `replaceTrace`: a traceparent in the headers is the caller's and gives way to this hop's.
   */
  publish(topic: string, message: Message, replaceTrace?: boolean): Promise<void>;
  /** True while the process serves (false once it drains or health checks were failed). */
  isLive(): boolean;
  /** A listener the process drains and closes on shutdown. */
  addDrainable(server: Drainable): void;
  /** One of the process's own addresses (a request for it is a loop: the self-guard). */
  addSelfAddress(address: string, port: number, name: string): void;
}

/** The edge context of a process: its options read once, its parts lent. */
export function edgeContext(runtime: Runtime): EdgeContext {
  const o = runtime.options;
  const settings: EdgeSettings = {
    clientRequestTimeoutMs: o.clientRequestTimeout,
    clientRetries: o.clientRetries,
    grpcRetryOn: grpcRetryCodes(o.grpcRetryOn),
    streamIdleTimeoutMs: o.streamIdleTimeout,
    brokerAckWaitMs: o.brokerAckWait,
    maxBodyBytes: o.maxBodySize,
    corsOrigins: o.cors,
    headersWithUnderscores: o.headersWithUnderscores,
    tls: tlsEnabled(o),
    limits: serverLimits(o),
    reusePort: runtime.setup.reusePort,
  };
  return {
    settings,
    stats: runtime.stats,
    logging: runtime.logging,
    tracer: runtime.tracer,
    context: runtime.context,
    accessLog: runtime.accessLog,
    tap: runtime.tap,
    callers: runtime.callers,
    get tls() {
      return runtime.tls;
    },
    client: runtime.client,
    clusters: runtime.clusters,
    registry: runtime.registry,
    grpc: runtime.grpc,
    get broker() {
      return runtime.broker;
    },
    publish: (topic, message, replaceTrace) => runtime.publish(topic, message, replaceTrace),
    isLive: () => runtime.state.state === 'live',
    addDrainable: (server) => runtime.addDrainable(server),
    addSelfAddress: (address, port, name) => runtime.selfAddresses.add(address, port, name),
  };
}
