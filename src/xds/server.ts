/**
 * The Aggregated Discovery Service of `mesh xds` (Envoy xDS v3, state of the world) on
 * @grpc/grpc-js: `envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`.
 *
 * Per stream and per type URL it keeps the names the client subscribed to (none named in the
 * first cluster or listener request, or `*`: every one, the wildcard), the version and nonce last sent and the
 * version last accepted. A version is the content hash of the resources that client gets
 * (protos.ts versionOf), so it is the same in every process and across restarts. A request whose
 * response_nonce is not the last one sent is stale and ignored; one with the last nonce and an
 * error_detail is a NACK: the client keeps its last accepted version, the server logs it once
 * (node id, type, version, error) and counts `xds.nacks`, and sends that type again only when its
 * content changes. A new snapshot (source.ts) is pushed to every stream, only the types whose
 * version for that client changed. An Envoy (node user_agent_name `envoy`) subscribed to every
 * listener gets the listeners it can serve (source.ts envoyListeners), not the API listeners of
 * proxyless gRPC clients.
 *
 * Admission (docs/xds.md, Admitting only your clients): with a token, a stream whose metadata
 * lacks `authorization: Bearer <token>` ends at once with UNAUTHENTICATED; with node ids, a
 * stream whose node id (first request, and any later one) matches none ends with
 * PERMISSION_DENIED. Refusals are counted (`xds.streams_refused`) and logged at most once per
 * REFUSAL_LOG_MS. Client text in log lines goes through clientText (cut, then escaped).
 */
import * as grpc from '@grpc/grpc-js';
import * as http2 from 'node:http2';
import { createHash, timingSafeEqual } from 'node:crypto';
import { clientText } from '../base/util/text.js';
import { globsMatcher } from '../base/util/regex.js';
import type { Http2Stream } from 'node:http2';
import type { Logger } from 'pino';
import { declareStats, type FamilyStats, type StatsScope } from '../base/stats/store.js';
import { RESOURCE_KINDS, SNAPSHOT_FIELD, TYPE_URLS, kindOfTypeUrl, type ResourceKind } from './resources.js';
import { versionOf, type DiscoveryRequest, type EncodedResource, type XdsProtos } from './protos.js';
import type { EncodedSnapshot, XdsSource } from './source.js';

export const ADS_METHOD_PATH = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources';

/** The server's stats, below the `xds.` scope. */
export const XDS_STATS = {
  gauges: {
    clientsConnected: 'clients_connected',
    clusters: 'resources.clusters',
    endpoints: 'resources.endpoints',
    listeners: 'resources.listeners',
    routes: 'resources.routes',
  },
  counters: {
    pushes: 'pushes',
    acks: 'acks',
    nacks: 'nacks',
    streams: 'streams_total',
    pushesCoalesced: 'pushes_coalesced',
    streamsStalled: 'streams_stalled',
    streamsRefused: 'streams_refused',
  },
} as const;

/** Kinds whose empty subscription means every resource (Envoy's wildcard). */
const WILDCARD_KINDS: ReadonlySet<ResourceKind> = new Set(['cluster', 'listener']);

interface TypeState {
  /** undefined: the wildcard (every resource of the kind). */
  names?: Set<string>;
  sentVersion?: string;
  sentNonce?: string;
  ackedVersion?: string;
  /** The version whose NACK was last logged (a NACK is logged once per version). */
  nackLogged?: string;
}

/** A response as written: its head (version, nonce) and its body, shared by the clients of that version. */
interface OutgoingResponse {
  version: string;
  nonce: string;
  body: Buffer;
}

type AdsCall = grpc.ServerDuplexStream<DiscoveryRequest, OutgoingResponse>;

interface Selection {
  version: string;
  resources: EncodedResource[];
}

/** Response bodies and selections kept for reuse, per snapshot; past this many the oldest go. */
const MAX_CACHED_BODIES = 64;

/** The user_agent_name Envoy sends in its node. */
export const ENVOY_USER_AGENT = 'envoy';

/** How long one response may stay unwritten (the client does not read) before its stream is ended. */
const WRITE_STALL_MS = 30_000;
/** The largest request a client may send (a DiscoveryRequest names resources; 1 MiB is thousands of names). */
export const MAX_REQUEST_BYTES = 1024 * 1024;
/** Resource names one stream may subscribe to, per type; more ends the stream with RESOURCE_EXHAUSTED. */
const MAX_NAMES_PER_TYPE = 10_000;
/** Streams served at once; one more is refused with RESOURCE_EXHAUSTED. */
const MAX_STREAMS = 10_000;
/** A NACK's error as logged: at most this many characters of it (node ids and other client text: clientText's 256). */
const MAX_LOGGED_ERROR = 1024;
/** Refused streams are logged at most once in this time (the next line counts those left out). */
const REFUSAL_LOG_MS = 10_000;
/** HTTP/2 pings to an idle client, and how long its answer may take before the connection is dropped. */
const KEEPALIVE_TIME_MS = 60_000;
const KEEPALIVE_TIMEOUT_MS = 20_000;

/** A client-supplied node id as it goes into logs: cut to 256 characters, control characters escaped. */
export function loggedNodeId(id: string): string {
  return clientText(id);
}

class AdsStream {
  nodeId = '';
  /** The node id as the client sent it (first request), checked against the allow-list. */
  private rawNodeId?: string;
  /** The client said it is Envoy (its first request's node). */
  envoy = false;
  private nonce = 0;
  readonly types = new Map<ResourceKind, TypeState>();
  /** A response is being written (its write has not completed): later pushes wait in `pending`. */
  private writing?: NodeJS.Timeout;
  /**
   * The kinds to push once the write in flight completes (true: even at the version last sent),
   * each sent then at the snapshot of that moment: a client that reads slowly gets the latest
   * state, never a queue of the states in between (at most one response per stream is held).
   */
  private readonly pending = new Map<ResourceKind, boolean>();
  private closed = false;

  constructor(
    readonly call: AdsCall,
    private readonly server: XdsServer,
  ) {}

  onRequest(req: DiscoveryRequest): void {
    if (this.closed) return; // refused or ended: what the client still sends is not read
    const id = req.node?.id;
    if (this.server.nodeAllowed) {
      // The first request must name an admitted node; a later one may leave the node out, not change it.
      let why: string | undefined;
      if (this.rawNodeId === undefined) {
        if (!id) why = 'the first request names no node id';
        else if (!this.server.nodeAllowed(id)) why = `node id "${loggedNodeId(id)}" is not in --xds_node_ids`;
      } else if (id && id !== this.rawNodeId) why = `the node id changed from "${this.nodeId}" to "${loggedNodeId(id)}"`;
      if (why !== undefined) {
        if (id) this.nodeId = loggedNodeId(id);
        this.server.deny(this, grpc.status.PERMISSION_DENIED, why);
        return;
      }
    }
    if (id && id !== this.rawNodeId) {
      this.rawNodeId = id;
      this.nodeId = loggedNodeId(id);
    }
    if (req.node?.user_agent_name) this.envoy = req.node.user_agent_name === ENVOY_USER_AGENT;
    const kind = kindOfTypeUrl(req.type_url);
    if (!kind) {
      this.server.log.debug({ node: this.nodeId, type_url: clientText(req.type_url) }, 'xDS: request for a type this server does not serve; ignored');
      return;
    }
    let state = this.types.get(kind);
    if (state && req.response_nonce && req.response_nonce !== state.sentNonce) return; // stale: a newer response is on its way
    if (req.resource_names.length > this.server.maxNamesPerType) {
      this.server.refuse(this, `${req.resource_names.length} ${kind} names in one subscription, more than the limit of ${this.server.maxNamesPerType}`);
      return;
    }
    const first = !state;
    if (!state) this.types.set(kind, (state = {}));
    if (req.response_nonce && req.response_nonce === state.sentNonce) {
      if (req.error_detail) {
        this.server.stats.nacks.inc();
        if (state.nackLogged !== state.sentVersion) {
          state.nackLogged = state.sentVersion;
          const error = clientText(req.error_detail.message ?? '', MAX_LOGGED_ERROR);
          this.server.log.warn(
            { node: this.nodeId, type_url: req.type_url, version: state.sentVersion, accepted_version: clientText(req.version_info), error },
            `xDS client ${this.nodeId} rejected ${kind} version ${state.sentVersion ?? ''}: ${error}`,
          );
        }
      } else {
        this.server.stats.acks.inc();
        state.ackedVersion = req.version_info;
      }
    }
    const names = req.resource_names.filter((n) => n !== '*');
    // The wildcard: `*` named, or (clusters, listeners) no name in the first request of the type
    // or while subscribed to it. A client that named resources and then names none has
    // unsubscribed from all of them.
    const wildcard =
      WILDCARD_KINDS.has(kind) && (req.resource_names.includes('*') || (names.length === 0 && (first || state.names === undefined)));
    const before = state.names;
    state.names = wildcard ? undefined : new Set(names);
    // A first request (no nonce) always gets an answer; later ones when they ask for more than
    // before (a name added, or the wildcard). One that only drops names gets none (the client
    // forgets those itself; a client going away drops all its names before it closes).
    const more = before !== undefined && (state.names === undefined || [...state.names].some((n) => !before.has(n)));
    if (!req.response_nonce || more) this.push(kind, true);
  }

  /** Sends the kind's resources when their version for this client differs from the last sent (or `force`). */
  push(kind: ResourceKind, force = false): void {
    const state = this.types.get(kind);
    const snapshot = this.server.snapshot();
    if (!state || !snapshot || this.closed) return;
    const { version, resources } =
      this.envoy && kind === 'listener' && state.names === undefined ? snapshot.envoyListeners : this.server.selection(snapshot, kind, state.names);
    if (!force && version === state.sentVersion && !this.pending.has(kind)) return;
    if (this.writing) {
      this.server.stats.pushesCoalesced.inc();
      this.pending.set(kind, force || (this.pending.get(kind) ?? false));
      return;
    }
    if (!force && version === state.sentVersion) return;
    state.sentVersion = version;
    state.sentNonce = String(++this.nonce);
    this.server.stats.pushes.inc();
    this.writing = setTimeout(() => this.server.stalled(this), this.server.writeStallMs);
    this.writing.unref?.();
    this.call.write({ version, nonce: state.sentNonce, body: this.server.responseBody(kind, version, resources) }, () => this.written());
  }

  /** The write in flight completed: the pending kinds go out, one write at a time. */
  private written(): void {
    clearTimeout(this.writing);
    this.writing = undefined;
    for (const [kind, force] of this.pending) {
      this.pending.delete(kind);
      this.push(kind, force);
      if (this.writing) return;
    }
  }

  /** The stream is gone: nothing more is written. */
  close(): void {
    this.closed = true;
    clearTimeout(this.writing);
    this.writing = undefined;
    this.pending.clear();
  }
}

interface XdsServerOptionsBase {
  source: XdsSource;
  protos: XdsProtos;
  stats: StatsScope;
  log: Logger;
  credentials?: grpc.ServerCredentials;
}

/** The server's bounds on what its clients may hold or send (defaults above; tests set them low). */
export interface XdsServerLimits {
  /** Resource names per type per stream. Default 10,000. */
  maxNamesPerType?: number;
  /** Streams at once. Default 10,000. */
  maxStreams?: number;
  /** How long one response may stay unwritten before the stream ends with RESOURCE_EXHAUSTED. Default 30 s. */
  writeStallMs?: number;
}

/** Who may open a stream (docs/xds.md, Admitting only your clients); nothing given: anyone. */
export interface XdsAdmission {
  /** The bearer token every stream's metadata must carry (`authorization: Bearer <token>`). */
  token?: string;
  /** The node ids (globs: `*`, `?`) a stream's node must match. */
  nodeIds?: readonly string[];
}

export type XdsServerOptions = XdsServerOptionsBase & XdsServerLimits & { admission?: XdsAdmission };

export class XdsServer {
  readonly stats: FamilyStats<typeof XDS_STATS>;
  readonly log: Logger;
  private readonly server: grpc.Server;
  private readonly streams = new Set<AdsStream>();
  /** Encoded response bodies of the current snapshot by kind and version (many clients get the same). */
  private readonly bodies = new Map<string, Buffer>();
  /** Subscriptions' resources and versions of the current snapshot, by kind and names. */
  private readonly selections = new Map<string, Selection>();
  private readonly unsubscribe: () => void;
  private closing?: Promise<void>;
  /** New streams are being refused (the limit was said). */
  private atStreamLimit = false;
  /** The node id check of --xds_node_ids; undefined: every node is admitted. */
  readonly nodeAllowed?: (id: string) => boolean;
  private readonly tokenDigest?: Buffer;
  /** When a refusal was last logged, and how many were refused since without a line. */
  private refusalLoggedAt = -Infinity;
  private refusalsUnlogged = 0;

  constructor(private readonly o: XdsServerOptions) {
    this.log = o.log;
    this.stats = declareStats(o.stats.scope('xds.'), XDS_STATS);
    const admission = o.admission ?? {};
    if (admission.nodeIds && admission.nodeIds.length > 0) this.nodeAllowed = globsMatcher(admission.nodeIds);
    if (admission.token !== undefined) this.tokenDigest = digest(admission.token);
    this.server = new grpc.Server({
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.keepalive_time_ms': KEEPALIVE_TIME_MS,
      'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
      'grpc.max_receive_message_length': MAX_REQUEST_BYTES,
    });
    const protos = o.protos;
    const definition: grpc.ServiceDefinition = {
      StreamAggregatedResources: {
        path: ADS_METHOD_PATH,
        requestStream: true,
        responseStream: true,
        requestSerialize: (r: DiscoveryRequest) => Buffer.from(protos.encodeRequest(r)),
        requestDeserialize: (b: Buffer) => protos.decodeRequest(b),
        responseSerialize: (r: OutgoingResponse) => Buffer.concat([protos.encodeResponseHead(r.version, r.nonce), r.body]),
        responseDeserialize: (b: Buffer) => protos.decodeResponse(b),
      },
    };
    this.server.addService(definition, { StreamAggregatedResources: (call: AdsCall) => this.onStream(call) });
    this.unsubscribe = o.source.onSnapshot((s) => this.onSnapshot(s));
    const first = o.source.snapshot;
    if (first) this.countResources(first);
  }

  get maxNamesPerType(): number {
    return this.o.maxNamesPerType ?? MAX_NAMES_PER_TYPE;
  }

  /** Ends a stream that asked for more than the server holds for one client: RESOURCE_EXHAUSTED, logged. */
  refuse(stream: AdsStream, why: string): void {
    this.log.warn({ node: stream.nodeId }, `xDS client ${stream.nodeId}: ${why}; its stream is ended (RESOURCE_EXHAUSTED)`);
    this.streams.delete(stream);
    stream.close();
    this.stats.clientsConnected.set(this.streams.size);
    stream.call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details: why });
  }

  /**
   * Ends a stream the admission refuses (UNAUTHENTICATED: no or another token; PERMISSION_DENIED:
   * a node id not admitted): counted, and logged unless a refusal was logged within REFUSAL_LOG_MS.
   */
  deny(stream: AdsStream | undefined, code: grpc.status, why: string, call = stream?.call): void {
    this.stats.streamsRefused.inc();
    const now = performance.now();
    if (now - this.refusalLoggedAt >= REFUSAL_LOG_MS) {
      const more = this.refusalsUnlogged;
      this.refusalLoggedAt = now;
      this.refusalsUnlogged = 0;
      const status = code === grpc.status.UNAUTHENTICATED ? 'UNAUTHENTICATED' : 'PERMISSION_DENIED';
      this.log.warn(
        { node: stream?.nodeId || undefined, reason: why, ...(more > 0 ? { refused_unlogged: more } : {}) },
        `xDS: a stream was refused (${status}): ${why}${more > 0 ? ` (and ${more} more since the last line)` : ''}`,
      );
    } else this.refusalsUnlogged++;
    if (stream) {
      this.streams.delete(stream);
      stream.close();
      this.stats.clientsConnected.set(this.streams.size);
    }
    call?.emit('error', { code, details: code === grpc.status.UNAUTHENTICATED ? 'this control plane needs a bearer token (authorization metadata)' : 'this control plane does not admit this node' });
  }

  get writeStallMs(): number {
    return this.o.writeStallMs ?? WRITE_STALL_MS;
  }

  /**
   * A response stayed unwritten for writeStallMs (the client stopped reading): the stream ends
   * with RESOURCE_EXHAUSTED (an HTTP/2 reset, ENHANCE_YOUR_CALM, as the status could only follow the
   * unread data), and what it held is freed. The client may reconnect.
   */
  stalled(stream: AdsStream): void {
    if (!this.streams.delete(stream)) return;
    stream.close();
    this.stats.streamsStalled.inc();
    this.stats.clientsConnected.set(this.streams.size);
    this.log.warn({ node: stream.nodeId }, `xDS client ${stream.nodeId} read no response for ${this.writeStallMs} ms; its stream is ended (RESOURCE_EXHAUSTED)`);
    resetStream(stream.call, `the client read no response for ${this.writeStallMs} ms`);
  }

  snapshot(): EncodedSnapshot | undefined {
    return this.o.source.snapshot;
  }

  /** Streams open now. */
  get clients(): number {
    return this.streams.size;
  }

  listen(host: string, port: number): Promise<number> {
    const target = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
    const credentials = this.o.credentials ?? grpc.ServerCredentials.createInsecure();
    return new Promise((resolve, reject) => this.server.bindAsync(target, credentials, (err, bound) => (err ? reject(err) : resolve(bound))));
  }

  /** Ends every stream (clients reconnect elsewhere), then stops the server. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.unsubscribe();
      for (const s of this.streams) s.call.end();
      const timer = setTimeout(() => this.server.forceShutdown(), 2_000);
      timer.unref?.();
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    return this.closing;
  }

  private onStream(call: AdsCall): void {
    const maxStreams = this.o.maxStreams ?? MAX_STREAMS;
    if (this.streams.size >= maxStreams) {
      // Said once each time the limit is reached (clients retry: not once per refused stream).
      if (!this.atStreamLimit) this.log.warn(`xDS: ${maxStreams} streams open, the limit; new ones are refused (RESOURCE_EXHAUSTED)`);
      this.atStreamLimit = true;
      call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details: `this control plane serves ${maxStreams} streams at most` });
      return;
    }
    this.atStreamLimit = false;
    if (this.tokenDigest) {
      const given = call.metadata.get('authorization');
      const m = given.length === 1 && typeof given[0] === 'string' ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(given[0]) : null;
      if (!m || !timingSafeEqual(digest(m[1]!), this.tokenDigest)) {
        this.deny(undefined, grpc.status.UNAUTHENTICATED, given.length === 0 ? 'no bearer token in its metadata' : 'its bearer token is not this control plane\'s', call);
        return;
      }
    }
    const stream = new AdsStream(call, this);
    this.streams.add(stream);
    this.stats.streams.inc();
    this.stats.clientsConnected.set(this.streams.size);
    const done = () => {
      stream.close();
      if (!this.streams.delete(stream)) return;
      this.stats.clientsConnected.set(this.streams.size);
    };
    call.on('data', (req: DiscoveryRequest) => {
      try {
        stream.onRequest(req);
      } catch (err) {
        this.log.error({ err: (err as Error).message, node: stream.nodeId }, 'xDS: a request failed');
        call.emit('error', { code: grpc.status.INTERNAL, details: (err as Error).message });
      }
    });
    call.on('end', () => {
      done();
      call.end();
    });
    call.on('cancelled', done);
    call.on('error', done);
    call.on('close', done);
  }

  /**
   * What a client subscribed to `names` (undefined: the wildcard) gets of `kind` now, and its
   * version. Computed once per snapshot for each set of names (clients of one kind ask alike).
   */
  selection(snapshot: EncodedSnapshot, kind: ResourceKind, names: ReadonlySet<string> | undefined): Selection {
    const all = snapshot.resources[kind];
    if (names === undefined) return { version: snapshot.versions[kind], resources: [...all.values()] };
    const sorted = [...names].sort();
    // Keyed by a hash of the names: a cache entry is small however many names a client sends.
    const key = `${kind}\n${createHash('sha256').update(sorted.join('\n')).digest('base64')}`;
    let found = this.selections.get(key);
    if (!found) {
      const resources: EncodedResource[] = [];
      for (const name of sorted) {
        const r = all.get(name);
        if (r) resources.push(r);
      }
      found = { version: versionOf(resources), resources };
      if (this.selections.size >= MAX_CACHED_BODIES) this.selections.delete(this.selections.keys().next().value!);
      this.selections.set(key, found);
    }
    return found;
  }

  /** The body of a response of `kind` at `version` (the resources of that version), encoded once. */
  responseBody(kind: ResourceKind, version: string, resources: readonly EncodedResource[]): Buffer {
    const key = `${kind}\n${version}`;
    let body = this.bodies.get(key);
    if (!body) {
      if (this.bodies.size >= MAX_CACHED_BODIES) this.bodies.delete(this.bodies.keys().next().value!);
      body = this.o.protos.encodeResponseBody(TYPE_URLS[kind], resources);
      this.bodies.set(key, body);
    }
    return body;
  }

  private onSnapshot(snapshot: EncodedSnapshot): void {
    this.bodies.clear();
    this.selections.clear();
    this.countResources(snapshot);
    for (const stream of this.streams) for (const kind of RESOURCE_KINDS) stream.push(kind);
  }

  private countResources(snapshot: EncodedSnapshot): void {
    for (const kind of RESOURCE_KINDS) this.stats[SNAPSHOT_FIELD[kind]].set(snapshot.resources[kind].size);
  }
}

/**
 * Ends a stream whose client does not read: its status as RESOURCE_EXHAUSTED for a client that
 * reads again, and the HTTP/2 stream reset with ENHANCE_YOUR_CALM (what gRPC clients read as
 * RESOURCE_EXHAUSTED), as trailers would wait behind the unread data. grpc-js has no public way to
 * reset a server stream: its HTTP/2 stream is reached through the call's internals when they are there.
 */
function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

function resetStream(call: AdsCall, details: string): void {
  call.emit('error', { code: grpc.status.RESOURCE_EXHAUSTED, details });
  const h2 = (call as unknown as { call?: { stream?: Http2Stream } }).call?.stream;
  if (h2 && typeof h2.close === 'function' && !h2.closed) h2.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
}
