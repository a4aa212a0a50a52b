/**
 * What the CLI's platform commands need, done either directly (this process builds a runtime and
 * talks to the registry, broker and services) or through a sidecar (`--proxy_address`), with the
 * same results either way.
 */
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';
import { servesMtls } from '../base/mtls/connector.js';
import { request } from '../base/http/undici.js';
import WebSocket from 'ws';
import type { Config } from './flags.js';
import { cancelledError, DEFAULT_MAX_MESSAGE_BYTES, type StreamCall, type StreamOpenOptions } from '../core/client/stream.js';
import { SidecarStreamCall } from './sidecar-stream.js';
import { HEADER_ID, HEADER_TIMEOUT } from '../core/transport/headers.js';
import { optionsFromFlags } from './options.js';
import { Runtime } from '../process/runtime.js';
import { mergeVersions, type Service } from '../engines/registry/registry.js';
import { byVersion } from '../engines/registry/records.js';
import { badGateway, badRequest, ERROR_IDS, errorWithStatus, MeshError, parseErrorBody, unsupportedMediaType } from '../base/errors.js';
import { parseJson } from '../base/codec/json.js';
import type { ConsumerInfo } from '../engines/broker/broker.js';

export interface ReceivedMessage {
  header: Record<string, string>;
  body: Buffer;
}

export interface Operations {
  listServices(): Promise<string[]>;
  getService(name: string): Promise<Service | undefined>;
  /**
   * The service's records, one per registry Version, sorted by version: each with its own nodes.
   * Through a sidecar, whose `/registry?service=` merges the versions, the one merged record.
   */
  getServiceVersions(name: string): Promise<Service[]>;
  register(service: Service, ttlMs?: number): Promise<void>;
  deregister(service: Service): Promise<void>;
  /** Calls an endpoint with a JSON request; resolves with the response body text. */
  call(service: string, endpoint: string, requestJson: string, address?: string): Promise<string>;
  /** Opens a streaming call (raw payloads of opts.contentType); resolves once the server accepted it. */
  stream(service: string, endpoint: string, opts: StreamOpenOptions): Promise<StreamCall>;
  publish(topic: string, body: Buffer, header: Record<string, string>): Promise<void>;
  /** `onEnd` is called when the subscription ends without being stopped (e.g. the sidecar closed it). */
  /** With `durable`: at least once under that consumer name, each message acknowledged once onMessage returns. */
  subscribe(topic: string, queue: string | undefined, onMessage: (m: ReceivedMessage) => void, onEnd?: (reason: string) => void, durable?: string): Promise<() => Promise<void>>;
  /** The dead letters of a durable topic (at most DLQ_LIMIT). */
  listDeadLetters(topic: string): Promise<ReceivedMessage[]>;
  /** Publishes a durable topic's dead letters to it again (at most DLQ_LIMIT); resolves with the count. */
  replayDeadLetters(topic: string): Promise<number>;
  /** The durable consumer names of a topic. */
  listConsumers(topic: string): Promise<ConsumerInfo[]>;
  /** Removes a durable consumer name of a topic; false when the topic has none of that name. */
  removeConsumer(topic: string, name: string): Promise<boolean>;
  close(): Promise<void>;
}

/** Dead letters listed or replayed by one `mesh dlq` command. */
export const DLQ_LIMIT = 10_000;

/** 400: a broker without dead letters or durable consumers (the memory broker). */
const brokerLacks = (broker: string, what: 'dead letters' | 'durable consumers') => badRequest(ERROR_IDS.cli, `broker ${broker}: has no ${what} (use --broker=http or nats)`);

/** 400: `mesh dlq` and `mesh consumers` reach the broker itself, not a sidecar. */
const notThroughSidecar = (command: 'dlq' | 'consumers') =>
  badRequest(ERROR_IDS.cli, `mesh ${command}: not available through a sidecar (run it without --proxy_address, with the broker flags)`);

export class DirectOperations implements Operations {
  /** The runtime the commands use (`mesh check` reads its registry and broker). */
  readonly runtime: Runtime;

  constructor(config: Config) {
    this.runtime = new Runtime(optionsFromFlags(config), { role: 'cli' });
  }

  async listServices(): Promise<string[]> {
    const list = await this.runtime.registry.listServices();
    return [...new Set(list.map((s) => s.name))].sort();
  }

  async getService(name: string): Promise<Service | undefined> {
    return mergeVersions(await this.runtime.registry.getService(name));
  }

  async getServiceVersions(name: string): Promise<Service[]> {
    return [...(await this.runtime.registry.getService(name))].sort(byVersion);
  }

  register(service: Service, ttlMs?: number): Promise<void> {
    return this.runtime.registry.register(service, ttlMs ? { ttlMs } : undefined);
  }

  deregister(service: Service): Promise<void> {
    return this.runtime.registry.deregister(service);
  }

  /**
   * With --mtls, the CLI calls with a certificate of its own identity (mesh.cli): in strict mode
   * always; in permissive mode (the default of `mesh call` and `mesh health`) when a node of
   * `service` serves mutual TLS, so that calling a plain mesh neither needs nor makes a mesh CA.
   */
  async callerIdentity(service: string): Promise<void> {
    const mode = this.runtime.options.mtls;
    if (mode === 'off') return;
    if (mode === 'permissive') {
      const records = await this.runtime.registry.getService(service);
      if (!records.some((r) => r.nodes.some((n) => servesMtls(n.metadata)))) return;
    }
    await this.runtime.workloadTls(CALLER_NAMES.cli);
  }

  async call(service: string, endpoint: string, requestJson: string, address?: string): Promise<string> {
    await this.callerIdentity(service);
    const res = await this.runtime.client.call(service, endpoint, Buffer.from(requestJson), {
      contentType: 'application/json',
      address,
    });
    return res.body.toString('utf8');
  }

  async stream(service: string, endpoint: string, opts: StreamOpenOptions): Promise<StreamCall> {
    await this.callerIdentity(service);
    return this.runtime.client.stream(service, endpoint, opts);
  }

  async publish(topic: string, body: Buffer, header: Record<string, string>): Promise<void> {
    // With --mtls, the http broker's deliveries go over mutual TLS with the CLI's certificate.
    await this.runtime.workloadTls(CALLER_NAMES.cli);
    await this.runtime.publish(topic, { header, body });
  }

  async subscribe(topic: string, queue: string | undefined, onMessage: (m: ReceivedMessage) => void, _onEnd?: (reason: string) => void, durable?: string): Promise<() => Promise<void>> {
    // With --mtls, the http broker's endpoint serves mutual TLS with the CLI's certificate.
    await this.runtime.workloadTls(CALLER_NAMES.cli);
    const sub = await this.runtime.broker.subscribe(topic, (m) => onMessage({ header: m.header, body: Buffer.from(m.body) }), durable ? { queue, durable } : { queue });
    return () => sub.unsubscribe();
  }

  async listDeadLetters(topic: string): Promise<ReceivedMessage[]> {
    const broker = this.runtime.broker;
    if (!broker.listDeadLetters) throw brokerLacks(broker.name, 'dead letters');
    return (await broker.listDeadLetters(topic, DLQ_LIMIT)).map((m) => ({ header: m.header, body: Buffer.from(m.body) }));
  }

  async replayDeadLetters(topic: string): Promise<number> {
    const broker = this.runtime.broker;
    if (!broker.replayDeadLetters) throw brokerLacks(broker.name, 'dead letters');
    return broker.replayDeadLetters(topic, DLQ_LIMIT);
  }

  async listConsumers(topic: string): Promise<ConsumerInfo[]> {
    const broker = this.runtime.broker;
    if (!broker.listConsumers) throw brokerLacks(broker.name, 'durable consumers');
    return broker.listConsumers(topic);
  }

  async removeConsumer(topic: string, name: string): Promise<boolean> {
    const broker = this.runtime.broker;
    if (!broker.removeConsumer) throw brokerLacks(broker.name, 'durable consumers');
    return broker.removeConsumer(topic, name);
  }

  async close(): Promise<void> {
    await this.runtime.shutdown();
  }
}

/** Talks to a sidecar's HTTP API (SPEC 4.2). */
export class SidecarOperations implements Operations {
  private readonly base: string;

  /** `Mesh-Sidecar-Token` on every request and subscription (--sidecar_token / MESH_SIDECAR_TOKEN). */
  private readonly tokenHeader: Record<string, string>;

  constructor(
    proxyAddress: string,
    private readonly timeoutMs: number,
    sidecarToken?: string,
  ) {
    this.tokenHeader = sidecarToken ? { 'mesh-sidecar-token': sidecarToken } : {};
    this.base = /^https?:\/\//.test(proxyAddress) ? proxyAddress.replace(/\/$/, '') : `http://${proxyAddress}`;
  }

  private async send(method: string, path: string, body?: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
    let res;
    try {
      res = await request(this.base + path, {
        method: method as 'GET',
        body,
        headers: { ...headers, ...this.tokenHeader },
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
    } catch (err) {
      throw badGateway(ERROR_IDS.cli, `sidecar at ${this.base} not reachable: ${(err as Error).message}`);
    }
    const text = await res.body.text();
    if (res.statusCode < 200 || res.statusCode >= 300) throw parseErrorBody(res.statusCode, text);
    return { status: res.statusCode, text };
  }

  async listServices(): Promise<string[]> {
    const { text } = await this.send('GET', '/registry');
    const list = JSON.parse(text) as Array<{ name: string }>;
    return [...new Set(list.map((s) => s.name))].sort();
  }

  async getService(name: string): Promise<Service | undefined> {
    try {
      const { text } = await this.send('GET', `/registry?service=${encodeURIComponent(name)}`);
      return JSON.parse(text) as Service;
    } catch (err) {
      if (err instanceof MeshError && err.code === 404) return undefined;
      throw err;
    }
  }

  async getServiceVersions(name: string): Promise<Service[]> {
    try {
      const { text } = await this.send('GET', `/registry?service=${encodeURIComponent(name)}&versions=true`);
      return JSON.parse(text) as Service[];
    } catch (err) {
      if (err instanceof MeshError && err.code === 404) return [];
      throw err;
    }
  }

  async register(service: Service, ttlMs?: number): Promise<void> {
    const q = ttlMs ? `?ttl=${ttlMs}ms` : '';
    await this.send('POST', `/registry${q}`, JSON.stringify(service), { 'content-type': 'application/json' });
  }

  async deregister(service: Service): Promise<void> {
    await this.send('DELETE', '/registry', JSON.stringify(service), { 'content-type': 'application/json' });
  }

  async call(service: string, endpoint: string, requestJson: string, address?: string): Promise<string> {
    const payload: Record<string, string> = { service, endpoint, request: requestJson };
    if (address) payload.address = address;
    const { text } = await this.send('POST', '/rpc', JSON.stringify(payload), { 'content-type': 'application/json' });
    return text;
  }

  /** A WebSocket at the sidecar's `/rpc?service=S&endpoint=E`; the deadline goes as `Mesh-Timeout`. */
  async stream(service: string, endpoint: string, opts: StreamOpenOptions): Promise<StreamCall> {
    const type = opts.contentType ?? 'application/json';
    if (type !== 'application/json') throw unsupportedMediaType(ERROR_IDS.cli, `stream ${service}.${endpoint}: through a sidecar the messages are JSON, not ${type}`);
    if (opts.signal?.aborted) throw cancelledError(ERROR_IDS.cli);
    const url = new URL(`${this.base.replace(/^http/, 'ws')}/rpc`);
    url.searchParams.set('service', service);
    url.searchParams.set('endpoint', endpoint);
    const headers: Record<string, string> = {};
    if (opts.timeoutMs && opts.timeoutMs > 0) headers[HEADER_TIMEOUT] = String(Math.max(1, Math.floor(opts.timeoutMs)));
    if (opts.id) headers[HEADER_ID] = opts.id;
    for (const [name, value] of Object.entries(opts.metadata ?? {})) headers[name] = value;
    const ws = await this.openSocket(url, `stream ${service}.${endpoint}`, headers, opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES);
    return new SidecarStreamCall(ws, service, endpoint, opts.kind, opts.request, opts.signal);
  }

  /**
   * An open WebSocket to the sidecar with the token (and `headers`); a refused handshake rejects
   * with the sidecar's error JSON, an unreachable sidecar with 502.
   */
  private async openSocket(url: URL, what: string, headers: Record<string, string> = {}, maxPayload?: number): Promise<WebSocket> {
    const ws = new WebSocket(url, { headers: { ...headers, ...this.tokenHeader }, handshakeTimeout: this.timeoutMs || undefined, maxPayload, perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', (err) => reject(badGateway(ERROR_IDS.cli, `sidecar at ${this.base} not reachable: ${err.message}`)));
      ws.once('unexpected-response', (_req, res) => {
        // The sidecar's refusal is an error JSON body: keep its detail.
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => reject(parseErrorBody(res.statusCode ?? 502, text || `${what} refused: ${res.statusCode}`)));
        res.on('error', () => reject(errorWithStatus(ERROR_IDS.cli, res.statusCode ?? 502, `${what} refused: ${res.statusCode}`)));
      });
    });
    return ws;
  }

  async publish(topic: string, body: Buffer, header: Record<string, string>): Promise<void> {
    await this.send('POST', `/broker?topic=${encodeURIComponent(topic)}`, body, header);
  }

  async subscribe(
    topic: string,
    queue: string | undefined,
    onMessage: (m: ReceivedMessage) => void,
    onEnd?: (reason: string) => void,
    durable?: string,
  ): Promise<() => Promise<void>> {
    const url = new URL(`${this.base.replace(/^http/, 'ws')}/broker`);
    url.searchParams.set('topic', topic);
    if (queue) url.searchParams.set('queue', queue);
    if (durable) {
      url.searchParams.set('ack', '1');
      url.searchParams.set('durable', durable);
    }
    const ws = await this.openSocket(url, 'subscribe');
    let stopped = false;
    ws.on('error', () => undefined); // 'close' follows and reports it
    ws.on('close', (code, reason) => {
      if (!stopped) onEnd?.(`WebSocket closed with ${code}${reason.length ? `: ${reason.toString()}` : ''}`);
    });
    ws.on('message', (data) => {
      const frame = parseJson(data.toString()) as { Id?: number; Header?: Record<string, string>; Body?: string };
      onMessage({ header: frame.Header ?? {}, body: Buffer.from(frame.Body ?? '', 'base64') });
      if (durable && typeof frame.Id === 'number') ws.send(JSON.stringify({ ack: frame.Id }));
    });
    return async () => {
      stopped = true;
      ws.close();
    };
  }

  async listDeadLetters(): Promise<ReceivedMessage[]> {
    throw notThroughSidecar('dlq');
  }

  async replayDeadLetters(): Promise<number> {
    throw notThroughSidecar('dlq');
  }

  async listConsumers(): Promise<ConsumerInfo[]> {
    throw notThroughSidecar('consumers');
  }

  async removeConsumer(): Promise<boolean> {
    throw notThroughSidecar('consumers');
  }

  async close(): Promise<void> {}
}
