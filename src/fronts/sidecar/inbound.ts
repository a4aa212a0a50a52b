/**
 * The sidecar's inbound listener (`--mtls=permissive|strict` with `--server_name`): the app's
 * address in the registry, so other mesh processes reach the app over mutual TLS without the app
 * doing any TLS itself (docs/sidecar.md, "The inbound listener").
 *
 * - Terminates mutual TLS with the sidecar's workload certificate for the app's name
 *   (src/base/mtls/server.ts through the front server): strict refuses plain callers
 *   with the 400 naming the app; permissive serves them too.
 * - Checks --authz_rules (src/edge/auth/authz.ts) before anything is forwarded: the caller is the
 *   SPIFFE ID of its certificate (none: `unauthenticated`), the service the app's name, the
 *   endpoint the `Mesh-Endpoint` of an RPC call (other requests have none). A denied call gets
 *   the 403 error JSON of the framework's servers; the app never sees it.
 * - Removes any `Mesh-Peer-Identity` the request came with and sets the caller's (none for a caller
 *   without a certificate); a `Connection` header cannot name it away (isEdgeSetHeader). Keeps
 *   `Mesh-Auth-Subject` and `Mesh-Auth-Scopes` only from the callers of --inbound_auth_callers (the
 *   gateway's identity by default): the front server's header step removes everyone else's.
 * - Forwards the request as it is (the RPC wire's `POST /` with Mesh-Service and Mesh-Endpoint, or
 *   anything a proxying caller sends, WebSocket upgrades included) to the app on its
 *   --server_address, with the proxy handler (src/edge/handlers/proxy.ts): streamed both ways,
 *   bounded by --max_body_size and --client_request_timeout, through the static cluster
 *   `inbound|<app name>` (its stats are `cluster.inbound|<app name>.*`).
 */
import type { IncomingMessage } from 'node:http';
import { isHttp2Request, type FrontRequest, type FrontResponse } from '../../base/http/front-types.js';
import { NativeGrpc } from '../../edge/handlers/grpc-native.js';
import type { Http2Settings } from '../../edge/front-server.js';
import type { Duplex } from 'node:stream';
import type { AddressInfo } from 'node:net';
import type { Runtime } from '../../process/runtime.js';
import type { CallContext } from '../../base/util/call-context.js';
import { ERROR_IDS, type MeshError } from '../../base/errors.js';
import { FrontServer } from '../../edge/front-server.js';
import { refuseSocket } from '../../base/http/respond.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';
import { handleProxy, handleProxyUpgrade } from '../../edge/handlers/proxy.js';
import { HEADER_ENDPOINT, HEADER_PEER_IDENTITY } from '../../core/transport/headers.js';
import { peerIdentityOf, type WorkloadTls } from '../../base/mtls/workload-tls.js';
import { addHeader, removeHeaders } from '../../edge/auth/edge.js';
import type { ServiceAuthz } from '../../edge/auth/authz.js';
import type { StaticClusterConfig } from '../../core/upstream/config.js';
import type { HostPort } from '../../base/util/address.js';
import { edgeContext } from '../../edge/context.js';

/** `http.sidecar_inbound.*`: the listener's request and `ssl.*` stats. */
export const INBOUND_STAT_PREFIX = 'sidecar_inbound';

/** The canonical spelling of the header the app reads. */
export const PEER_IDENTITY_HEADER = 'Mesh-Peer-Identity';

/** The static cluster the inbound listener forwards through: a name no registry service can have (`|`). */
export function inboundClusterName(app: string): string {
  return `inbound|${app}`;
}

/** The runtime's static cluster of the app (its one host: --server_address). */
export function inboundCluster(app: string, address: HostPort): StaticClusterConfig {
  return { name: inboundClusterName(app), hosts: [{ address: address.host, port: address.port }] };
}

export interface InboundOptions {
  /** The app's name (--server_name): the service the rules see, and the identity the listener presents. */
  app: string;
  /** The sidecar's workload certificate for the app (mode permissive or strict). */
  workload: WorkloadTls;
  /** --authz_rules; undefined: every call is allowed. */
  authz?: ServiceAuthz;
  /**
   * --inbound_auth_callers: the SPIFFE IDs whose `Mesh-Auth-Subject` and `Mesh-Auth-Scopes` reach
   * the app (the gateway's by default); every other caller's, a plain caller's included, are removed.
   */
  authCallers: ReadonlySet<string>;
  /**
   * The sidecar's --enable_http2: the listener serves HTTP/2 too (h2 by ALPN over mutual TLS, h2c
   * in permissive mode), and a native gRPC call is passed through to the app unchanged.
   */
  http2?: boolean | Http2Settings;
}

export class SidecarInbound {
  private readonly fe: EdgeHandlerContext;
  private readonly server: FrontServer<undefined, FrontRequest, FrontResponse>;
  /** Native gRPC to the app (--enable_http2). */
  private readonly grpc?: NativeGrpc;
  private readonly cluster: string;
  /** The SPIFFE ID of each TLS connection's caller (undefined: none), read once per connection. */
  private readonly peers = new WeakMap<object, string | undefined>();

  constructor(
    runtime: Runtime,
    private readonly options: InboundOptions,
  ) {
    this.cluster = inboundClusterName(options.app);
    const edge = edgeContext(runtime);
    this.fe = { edge, namespace: '', errorId: ERROR_IDS.sidecar, maxBodyBytes: edge.settings.maxBodyBytes };
    // The app is called plain (h2c): it is on this machine, and the mutual TLS ends here.
    if (options.http2) this.grpc = new NativeGrpc(this.fe, () => undefined, () => this.cluster);
    this.server = new FrontServer<undefined, FrontRequest, FrontResponse>({
      edge,
      http2: options.http2,
      untimed: (req) => this.grpc?.untimed(req) ?? false,
      statPrefix: INBOUND_STAT_PREFIX,
      errorId: ERROR_IDS.sidecar,
      mtls: { workload: options.workload, service: options.app },
      handle: (req, res, ctx) => this.handle(req, res, ctx),
      upgrade: (req, socket, head) => this.upgrade(req, socket, head),
      trustsAuthHeaders: (req) => {
        const peer = this.peerOf(connectionOf(req));
        return peer !== undefined && options.authCallers.has(peer);
      },
      // Nothing before the handler reads the ambient context.
      explicitContext: () => true,
    });
  }

  listen(address: string): Promise<AddressInfo> {
    return this.server.listen(address);
  }

  close(): Promise<unknown> {
    return this.server.close();
  }

  /** The authz verdict, then the caller's identity in place of any the request came with: a denial to answer, or undefined. */
  private admit(req: FrontRequest): { denied?: MeshError; encrypted: boolean } {
    const socket = connectionOf(req);
    const encrypted = (socket as { encrypted?: boolean }).encrypted === true;
    const peer = this.peerOf(socket);
    const endpoint = req.headers[HEADER_ENDPOINT];
    const denied = this.options.authz?.check(peer, this.options.app, typeof endpoint === 'string' ? endpoint : undefined);
    if (denied) return { denied, encrypted };
    removeHeaders(req, (name) => name === HEADER_PEER_IDENTITY);
    if (peer !== undefined) addHeader(req, PEER_IDENTITY_HEADER, peer);
    return { encrypted };
  }

  /** The SPIFFE ID of the connection's caller (undefined: plain, or none), read once per connection. */
  private peerOf(socket: object): string | undefined {
    if ((socket as { encrypted?: boolean }).encrypted !== true) return undefined;
    if (this.peers.has(socket)) return this.peers.get(socket);
    const peer = peerIdentityOf(socket);
    this.peers.set(socket, peer);
    return peer;
  }

  private async handle(req: FrontRequest, res: FrontResponse, ctx: CallContext): Promise<void> {
    const grpc = this.grpc?.route(req, req.url ?? '');
    const { denied, encrypted } = this.admit(req);
    if (denied) {
      req.resume();
      if (grpc) return this.grpc!.refuse(req, denied);
      throw denied;
    }
    if (grpc) return this.grpc!.handle(req, res, grpc, ctx);
    return handleProxy(this.fe, this.cluster, encrypted, req, res, ctx);
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { denied, encrypted } = this.admit(req);
    if (denied) return refuseSocket(socket, denied, this.fe.errorId);
    handleProxyUpgrade(this.fe, this.cluster, encrypted, req, socket, head);
  }
}

/** The connection a request came on (for HTTP/2, its session's socket: the TLS socket with the peer's certificate). */
function connectionOf(req: FrontRequest): object {
  return isHttp2Request(req) ? (req.stream.session?.socket ?? req.socket) : req.socket;
}
