/**
 * The Envoy v3 bootstrap of `mesh envoy bootstrap`: a pure function from the xDS server's address
 * (and TLS files) to the bootstrap, in the proto3 JSON form Envoy reads (`envoy -c FILE`, YAML or
 * JSON): field names as in Envoy's .proto files, durations as "1s", `typed_config` with "@type".
 *
 * - `node`: the id and cluster Envoy presents to the control plane (mesh xds logs a NACK with the id);
 * - `dynamic_resources`: listeners (LDS) and clusters (CDS) over ADS, gRPC, transport v3; routes
 *   and endpoints then come over the same stream, as the listeners and clusters ask for them
 *   (with listeners of its own, from a route file, only clusters and endpoints);
 * - `static_resources`: the one cluster Envoy needs before it has any, `xds_cluster`, the xDS
 *   server: HTTP/2 (gRPC), STATIC for an IP address, STRICT_DNS for a name, TCP keepalive, and
 *   TLS when a CA is given (the server's certificate checked against it and its name; mutual TLS
 *   with a client certificate and key);
 * - `admin`: Envoy's admin interface on the address given, or none.
 */
import { isIP } from 'node:net';
import type { HostPort } from '../base/util/address.js';
import { ADS_CONFIG_SOURCE } from './resources.js';

/** The name of the static cluster that reaches the xDS server. */
export const XDS_CLUSTER_NAME = 'xds_cluster';
const TLS_CONTEXT_TYPE = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';
const HTTP_OPTIONS_TYPE = 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions';

export interface XdsTlsFiles {
  /** PEM roots the xDS server's certificate must chain to (TLS is on when this is set). */
  caFile: string;
  /** Envoy's own certificate chain and key, PEM, for mutual TLS (both or neither). */
  certFile?: string;
  keyFile?: string;
  /** The name sent as SNI; default the xDS host when it is a name. */
  serverName?: string;
  /**
   * The subject alternative names the server's certificate must carry one of: `spiffe://…` (URI),
   * an IP address, or a DNS name. Default: the server name, else the xDS host.
   */
  subjectAltNames?: readonly string[];
}

export interface EnvoyBootstrapOptions {
  /** Where `mesh xds` listens. */
  xds: HostPort;
  nodeId: string;
  nodeCluster: string;
  /** Envoy's admin interface; undefined: none. */
  admin?: HostPort;
  tls?: XdsTlsFiles;
  /**
   * Listeners of the bootstrap itself (the HTTP listener of a route file, src/xds/envoy-routes.ts).
   * With them, listeners are not taken over ADS (mesh xds serves API listeners, for proxyless gRPC
   * clients, which Envoy does not take).
   */
  listeners?: readonly Record<string, unknown>[];
}

/** The bootstrap, as proto3 JSON (print it as JSON or YAML). */
export function envoyBootstrap(o: EnvoyBootstrapOptions): Record<string, unknown> {
  const ads = ADS_CONFIG_SOURCE;
  const xdsCluster: Record<string, unknown> = {
    name: XDS_CLUSTER_NAME,
    type: isIP(o.xds.host) ? 'STATIC' : 'STRICT_DNS',
    connect_timeout: '5s',
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': { '@type': HTTP_OPTIONS_TYPE, explicit_http_config: { http2_protocol_options: {} } },
    },
    upstream_connection_options: { tcp_keepalive: {} },
    load_assignment: {
      cluster_name: XDS_CLUSTER_NAME,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: socketAddress(o.xds) } }] }],
    },
  };
  if (o.tls) xdsCluster.transport_socket = { name: 'envoy.transport_sockets.tls', typed_config: upstreamTls(o.xds, o.tls) };
  const bootstrap: Record<string, unknown> = {
    node: { id: o.nodeId, cluster: o.nodeCluster },
    dynamic_resources: {
      ads_config: { api_type: 'GRPC', transport_api_version: 'V3', grpc_services: [{ envoy_grpc: { cluster_name: XDS_CLUSTER_NAME } }] },
      cds_config: ads,
      ...(o.listeners ? {} : { lds_config: ads }),
    },
    static_resources: { ...(o.listeners ? { listeners: o.listeners } : {}), clusters: [xdsCluster] },
  };
  if (o.admin) bootstrap.admin = { address: socketAddress(o.admin) };
  return bootstrap;
}

function socketAddress(a: HostPort): Record<string, unknown> {
  return { socket_address: { address: a.host, port_value: a.port } };
}

function upstreamTls(xds: HostPort, tls: XdsTlsFiles): Record<string, unknown> {
  const serverName = tls.serverName ?? (isIP(xds.host) ? undefined : xds.host);
  const names = tls.subjectAltNames && tls.subjectAltNames.length > 0 ? tls.subjectAltNames : [serverName ?? xds.host];
  const common: Record<string, unknown> = {
    alpn_protocols: ['h2'],
    validation_context: {
      trusted_ca: { filename: tls.caFile },
      match_typed_subject_alt_names: names.map((name) => ({ san_type: sanType(name), matcher: { exact: name } })),
    },
  };
  if (tls.certFile && tls.keyFile) common.tls_certificates = [{ certificate_chain: { filename: tls.certFile }, private_key: { filename: tls.keyFile } }];
  return { '@type': TLS_CONTEXT_TYPE, ...(serverName ? { sni: serverName } : {}), common_tls_context: common };
}

function sanType(name: string): string {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(name)) return 'URI';
  return isIP(name) ? 'IP_ADDRESS' : 'DNS';
}
