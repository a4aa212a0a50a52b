/**
 * Mesh: the library face of a mesh process. Built from MeshOptions (src/process/options.ts); owns one
 * Runtime (registry, broker, client, stats, admin, drain) and the services added to it.
 * See docs/api.md.
 */
import { Runtime } from '../process/runtime.js';
import { resolveOptions, type Duration, type MeshOptions, type ResolvedOptions } from '../process/options.js';
import { Service, type ServiceOptions } from './server/service.js';
import { badGateway, badRequest, ERROR_IDS, noCodec } from '../base/errors.js';
import { parseDuration } from '../base/util/duration.js';
import { JSON_CODEC } from '../base/codec/codec.js';
import type { Registry, Service as ServiceRecord } from '../engines/registry/registry.js';
import type { Broker, Message, Subscription } from '../engines/broker/broker.js';
import type { Client } from '../core/client/client.js';
import type { DrainResult } from '../base/http/lifecycle.js';
import { messageHeader, messageTrace } from '../engines/broker/context.js';
import { HEADER_ID } from '../core/transport/headers.js';
import { failSpan, SpanKind, traceOf } from '../base/tracing/tracer.js';
import { isStreamKind, type StreamKind } from '../core/transport/frames.js';
import { readAuthzSetup, ServiceAuthz } from '../edge/auth/authz.js';
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';

/** Options of one call (Mesh.call). */
export interface CallOptions {
  /** Shortens the call's budget (never lengthens it past clientRequestTimeout): a duration or ms. Default: inside a handler, what remains of its call's deadline. */
  timeout?: Duration;
  /** Request content type; a codec must exist for it. Default `application/json`. */
  contentType?: string;
  /** End-to-end metadata, sent as headers; inside a handler, merged over its call's metadata (these keys win). */
  metadata?: Record<string, string>;
  /** Request id (Mesh-Id). Default: inside a handler, the id of the call it serves (one id along a chain of calls); else a new one. */
  id?: string;
  /** Call this node (`host:port`) instead of load balancing. */
  address?: string;
  /** Overrides clientRetries for this call. */
  retries?: number;
  /** The call may safely run twice: only such calls are hedged (clientHedgeDelay). Default false. */
  idempotent?: boolean;
}

/** Options of Mesh.stream. */
export interface StreamOptions {
  /**
   * The endpoint's kind: `server` (one request, many answers), `client` (many requests, one
   * answer) or `bidi`. Default: `server` when the request is a value, `bidi` when it is an
   * (async) iterable.
   */
  kind?: StreamKind;
  /** The stream's deadline (a duration or ms); default none. Past it the stream fails with 504. */
  timeout?: Duration;
  /** Aborting it cancels the stream (the server's handler sees its signal abort); iteration throws 499. */
  signal?: AbortSignal;
  /** Message content type; a codec must exist for it. Default `application/json`. */
  contentType?: string;
  /** End-to-end metadata, sent as headers. */
  metadata?: Record<string, string>;
  /** Request id (Mesh-Id). */
  id?: string;
  /** Call this node (`host:port`) instead of load balancing. */
  address?: string;
}

/**
 * The answers of a stream, decoded: iterate it once with `for await`. Breaking out of the loop,
 * cancel() or the signal of the options ends the call on the server too.
 */
export interface MeshStream<T> extends AsyncIterable<T> {
  cancel(): void;
}

/** Options of Mesh.publish. */
export interface PublishOptions {
  /** Message headers. `content-type` defaults to `application/json` for a value that is not bytes. */
  header?: Record<string, string>;
}

/** Options of Mesh.subscribe. */
export interface MeshSubscribeOptions {
  /** Queue group: one member of the group gets each message. Without it every subscriber does. */
  queue?: string;
  /**
   * At-least-once delivery under this consumer name (http and nats brokers): returning acks the
   * message, throwing nacks it (redelivered after a backoff, then dead-lettered). See docs/api.md.
   */
  durable?: string;
  /** Durable: attempts before the message goes to `<topic>.dlq`; default `brokerMaxDeliver`. */
  maxDeliver?: number;
  /** Durable: a delivery neither returned from nor thrown within this (ms) comes again; default `brokerAckWait`. */
  ackWaitMs?: number;
}

/**
 * A subscriber: `event` is the body decoded by the codec of its content-type (JSON when absent),
 * or the raw bytes when no codec knows the content type; `message` is the message as received.
 */
export type EventHandler<T> = (event: T, message: Message, topic: string) => void | Promise<void>;

/** What Mesh.start() started. */
export interface StartResult {
  /** The records registered, one per service started by this call. */
  services: ServiceRecord[];
  /** The admin interface's address, when adminAddress is not off. */
  admin?: { host: string; port: number };
}

/** A call's `timeout` option in ms (undefined when absent); a bad value is a 400. */
function timeoutOption(timeout: Duration | undefined): number | undefined {
  if (timeout === undefined) return undefined;
  let ms: number;
  try {
    ms = typeof timeout === 'number' ? timeout : parseDuration(timeout);
  } catch (err) {
    throw badRequest(ERROR_IDS.client, `timeout: ${(err as Error).message}`);
  }
  if (!(ms >= 0)) throw badRequest(ERROR_IDS.client, `timeout: must be a non-negative number of ms or a duration (got ${String(timeout)})`);
  return ms;
}

export class Mesh {
  readonly #runtime: Runtime;
  readonly #services: Service[] = [];
  readonly #started = new Set<Service>();
  /** Who may call the services (authzRules); undefined without a rules file. */
  readonly #authz?: ServiceAuthz;
  #admin?: Promise<{ host: string; port: number } | undefined>;
  #closing = false;

  /**
   * Throws OptionsError naming the first bad option. Builds the registry (and a nats broker)
   * at once, so a bad engine address or TLS file fails here; nothing listens before start().
   */
  constructor(options: MeshOptions = {}, /** @internal who runs: names the process in logs and admin /server_info */ role = 'library') {
    const resolved = resolveOptions(options);
    // The rules file is read before anything is built: a bad one fails here, naming its line.
    const authz = readAuthzSetup({ authz_rules: resolved.authzRules, authz_default: resolved.authzDefault, trust_domain: resolved.trustDomain });
    const runtime = new Runtime(resolved, { role });
    this.#runtime = runtime;
    if (authz) {
      const engine = new ServiceAuthz(authz, { stats: runtime.stats, log: runtime.logging.get('config') });
      this.#authz = engine;
      runtime.onShutdown(runtime.addAuthRulesSource(() => [engine.dump()]));
      runtime.onShutdown(engine.reloadOnSighup());
    }
  }

  /** @internal the process's authorization (authzRules), for the parts that take calls besides the services (a sidecar's inbound listener). */
  get authz(): ServiceAuthz | undefined {
    return this.#authz;
  }

  /** The resolved options (defaults filled in, durations in ms, sizes in bytes). */
  get options(): ResolvedOptions {
    return this.#runtime.options;
  }

  /** The registry in use (built in, or the instance given in the options). */
  get registry(): Registry {
    return this.#runtime.registry;
  }

  /** The broker in use; a built-in broker is created on first use. */
  get broker(): Broker {
    return this.#runtime.broker;
  }

  /** The RPC client (raw bytes: call(); values: callValue()). */
  get client(): Client {
    return this.#runtime.client;
  }

  /** @internal the process's runtime (the CLI's front ends share it). */
  get runtime(): Runtime {
    return this.#runtime;
  }

  /** The services added so far. */
  get services(): readonly Service[] {
    return this.#services;
  }

  /** Adds a service; start() (or service.start()) makes it listen and register. */
  service(options: ServiceOptions): Service {
    if (this.#closing) throw new Error('mesh is closed');
    if (!options || typeof options.name !== 'string' || options.name === '') throw new TypeError('service: a name is required, e.g. { name: "go.mesh.srv.greeter" }');
    const service = new Service(this.#runtime, options, this.#authz);
    this.#services.push(service);
    return service;
  }

  /**
   * Starts the admin interface (when adminAddress is set and not `off`) and every service not
   * started yet: each listens, registers and keeps its registration alive.
   */
  async start(): Promise<StartResult> {
    if (this.#closing) throw new Error('mesh is closed');
    this.#admin ??= this.#runtime.startAdmin('off');
    const admin = await this.#admin;
    const services: ServiceRecord[] = [];
    for (const service of this.#services) {
      if (this.#started.has(service)) continue;
      this.#started.add(service);
      services.push(await service.start());
    }
    return { services, admin };
  }

  /**
   * Calls `service`'s `endpoint` with `request` (encoded by the codec of opts.contentType, JSON by
   * default) and resolves with the decoded answer. Rejects with a MeshError on an error answer,
   * a timeout or no reachable node.
   */
  async call<TRes = unknown, TReq = unknown>(service: string, endpoint: string, request: TReq, opts: CallOptions = {}): Promise<TRes> {
    const timeoutMs = timeoutOption(opts.timeout);
    const contentType = opts.contentType ?? JSON_CODEC.contentType;
    if (!this.#runtime.codecs.for(contentType)) throw noCodec(ERROR_IDS.client, contentType);
    const identity = this.#callerIdentity();
    if (identity) await identity;
    return this.#runtime.client.callValue<TRes>(service, endpoint, request, {
      contentType,
      timeoutMs,
      metadata: opts.metadata,
      id: opts.id,
      address: opts.address,
      retries: opts.retries,
      idempotent: opts.idempotent,
    });
  }

  /**
   * Opens a stream to a streaming endpoint (see StreamOptions for the kinds) and returns its
   * answers as an async iterable. `request` is the one request of a server stream, or an
   * (async) iterable of requests for client and bidi streams, sent as the server reads them.
   * Iteration throws a MeshError: the server's error, 504 past the deadline, 499 when cancelled.
   * Bad options throw at once.
   */
  stream<TRes = unknown, TReq = unknown>(service: string, endpoint: string, request: TReq | AsyncIterable<TReq> | Iterable<TReq>, opts: StreamOptions = {}): MeshStream<TRes> {
    const timeoutMs = timeoutOption(opts.timeout);
    const iterable = request !== null && typeof request === 'object' && (Symbol.asyncIterator in request || Symbol.iterator in request);
    const kind = opts.kind ?? (iterable ? 'bidi' : 'server');
    if (!isStreamKind(kind)) throw badRequest(ERROR_IDS.client, `kind: must be server, client or bidi (got ${String(kind)})`);
    if (kind !== 'server' && !iterable) throw badRequest(ERROR_IDS.client, `a ${kind} stream takes an iterable of requests`);
    const contentType = opts.contentType ?? JSON_CODEC.contentType;
    const codec = this.#runtime.codecs.for(contentType);
    if (!codec) throw noCodec(ERROR_IDS.client, contentType);
    const client = this.#runtime.client;
    const identity = this.#callerIdentity();
    const cancel = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, cancel.signal]) : cancel.signal;
    const encode = (value: unknown): Uint8Array => {
      try {
        return codec.encode(value);
      } catch (err) {
        throw badRequest(ERROR_IDS.client, `encoding request: ${(err as Error).message}`);
      }
    };
    async function* run(): AsyncGenerator<TRes> {
      if (identity) await identity;
      const call = await client.stream(service, endpoint, {
        kind,
        contentType,
        request: kind === 'server' ? encode(request) : undefined,
        metadata: opts.metadata,
        timeoutMs,
        id: opts.id,
        address: opts.address,
        signal,
      });
      let requests: AsyncIterator<TReq> | Iterator<TReq> | undefined;
      if (kind !== 'server') {
        const source = request as AsyncIterable<TReq> | Iterable<TReq>;
        const it = Symbol.asyncIterator in source ? source[Symbol.asyncIterator]() : (source as Iterable<TReq>)[Symbol.iterator]();
        requests = it;
        void (async () => {
          try {
            for (;;) {
              const next = await it.next();
              if (next.done) break;
              await call.send(encode(next.value));
            }
            call.end();
          } catch (err) {
            call.cancel(`the requests failed: ${(err as Error)?.message ?? String(err)}`);
          }
        })();
      }
      try {
        for await (const payload of call) {
          let value: TRes;
          try {
            value = codec!.decode(payload) as TRes;
          } catch (err) {
            throw badGateway(ERROR_IDS.client, `decoding stream message: ${(err as Error).message}`);
          }
          yield value;
        }
      } finally {
        void Promise.resolve(requests?.return?.()).catch(() => {});
      }
    }
    const gen = run();
    return { cancel: () => cancel.abort(), [Symbol.asyncIterator]: () => gen };
  }

  /**
   * With --mtls, before the first call, publish or subscription: the workload certificate the calls (and the http broker) present, opened when
   * no service of this Mesh opened one yet: the first service's identity, or, for a Mesh without
   * services, the CLI's (`mesh.cli`, as `mesh call`). Undefined when there is nothing to wait for.
   */
  #callerIdentity(): Promise<unknown> | undefined {
    const runtime = this.#runtime;
    if (runtime.options.mtls === 'off' || runtime.callerWorkloadTls) return undefined;
    return runtime.workloadTls(this.#services[0]?.name ?? CALLER_NAMES.cli);
  }

  /** Publishes a value (encoded as JSON unless it is bytes, sent as they are) to a topic. */
  async publish(topic: string, value: unknown, opts: PublishOptions = {}): Promise<void> {
    const header: Record<string, string> = { ...opts.header };
    let body: Uint8Array;
    if (value instanceof Uint8Array) {
      body = value;
      if (!Object.keys(header).some((k) => k.toLowerCase() === 'content-type')) header['content-type'] = 'application/octet-stream';
    } else {
      const type = Object.entries(header).find(([k]) => k.toLowerCase() === 'content-type')?.[1];
      if (type === undefined) header['content-type'] = JSON_CODEC.contentType;
      const codec = this.#runtime.codecs.for(type);
      if (!codec) throw noCodec(ERROR_IDS.broker, type);
      body = codec.encode(value);
    }
    // With --mtls, the http broker delivers over mutual TLS with this process's certificate.
    await this.#callerIdentity();
    await this.#runtime.publish(topic, { header, body });
  }

  /**
   * Subscribes to a topic; `handler` gets each message's decoded body (see EventHandler). A body
   * its codec cannot decode is logged and not delivered.
   */
  async subscribe<T = unknown>(topic: string, handler: EventHandler<T>, opts: MeshSubscribeOptions = {}): Promise<Subscription> {
    const log = this.#runtime.logging.get('broker');
    // With --mtls, the http broker's endpoint (started by the first subscription) serves mutual TLS with this process's certificate.
    await this.#callerIdentity();
    return this.#runtime.broker.subscribe(
      topic,
      async (message, received) => {
        const type = Object.entries(message.header).find(([k]) => k.toLowerCase() === 'content-type')?.[1];
        const codec = this.#runtime.codecs.for(type);
        let event: unknown = message.body;
        if (codec) {
          try {
            event = codec.decode(message.body);
          } catch (err) {
            log.warn({ topic: received, err: (err as Error).message }, 'message body not decodable: not delivered');
            // At least once: a nack, so that the message ends in the dead-letter topic, not lost.
            if (opts.durable !== undefined) throw new Error(`message body not decodable: ${(err as Error).message}`);
            return;
          }
        }
        // The handler runs in the message's context: its calls continue the publisher's trace.
        const runtime = this.#runtime;
        const parent = messageTrace(message.header);
        const span = runtime.tracer?.startSpan(`${received} process`, SpanKind.CONSUMER, parent, { 'messaging.system': 'mesh', 'messaging.destination.name': received, 'messaging.operation.type': 'process' });
        const id = messageHeader(message.header, HEADER_ID);
        try {
          await runtime.context.run({ id, trace: span ? traceOf(span) : runtime.context.hop(parent) }, () => handler(event as T, message, received));
        } catch (err) {
          if (span) failSpan(span, (err as Error)?.message ?? String(err));
          throw err;
        } finally {
          span?.end();
        }
      },
      { queue: opts.queue, durable: opts.durable, maxDeliver: opts.maxDeliver, ackWaitMs: opts.ackWaitMs },
    );
  }

  /**
   * Drains and closes: services deregister, keep serving for drainDelay, in-flight calls get up
   * to drainTimeout; then the admin, broker and registry close. Safe to call many times.
   */
  close(): Promise<DrainResult> {
    this.#closing = true;
    return this.#runtime.shutdown();
  }

  /** SIGINT/SIGTERM: close() then exit (0, or 1 when the drain cut calls off); a second signal exits at once. */
  installSignalHandlers(): void {
    this.#runtime.installSignalHandlers();
  }
}
