/**
 * The xDS wire: the reduced Envoy .proto set of proto/xds (Envoy's packages, names and field
 * numbers, only the fields mesh sets), loaded with protobufjs. Encodes resources (their Any
 * fields packed by `@type`), discovery requests and responses, and the content hash that is a
 * resource set's version.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type protobuf from 'protobufjs';
import { protobufjs } from '../base/util/lazy-packages.js';
import { packageRoot } from '../base/util/package-root.js';
import { TYPE_URLS, type Message, type ResourceKind } from './resources.js';

/** The directory of the reduced Envoy protos. */
export function xdsProtoDir(): string {
  return join(packageRoot(), 'proto', 'xds');
}

const FILES = [
  'envoy/service/discovery/v3/discovery.proto',
  'envoy/config/cluster/v3/cluster.proto',
  'envoy/config/endpoint/v3/endpoint.proto',
  'envoy/config/listener/v3/listener.proto',
  'envoy/config/route/v3/route.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/fault/v3/fault.proto',
];

/** A decoded DiscoveryRequest (the fields mesh reads). */
export interface DiscoveryRequest {
  version_info: string;
  node?: { id?: string; cluster?: string; user_agent_name?: string };
  resource_names: string[];
  type_url: string;
  response_nonce: string;
  error_detail?: { code?: number; message?: string };
}

export interface DiscoveryResponse {
  version_info: string;
  resources: { type_url: string; value: Uint8Array }[];
  type_url: string;
  nonce: string;
  control_plane?: { identifier: string };
}

/** One resource, encoded once: its Any, and a digest of its bytes for the versions. */
export interface EncodedResource {
  name: string;
  any: { type_url: string; value: Uint8Array };
  digest: Buffer;
}

export class XdsProtos {
  readonly root: protobuf.Root;
  readonly request: protobuf.Type;
  readonly response: protobuf.Type;
  private readonly types: Record<ResourceKind, protobuf.Type>;

  constructor(dir = xdsProtoDir()) {
    const root = new (protobufjs().Root)();
    root.resolvePath = (_origin, target) => {
      const local = join(dir, target);
      return existsSync(local) ? local : target; // google/protobuf/*: protobufjs's own copies
    };
    root.loadSync(FILES, { keepCase: true });
    root.resolveAll();
    this.root = root;
    this.request = root.lookupType('envoy.service.discovery.v3.DiscoveryRequest');
    this.response = root.lookupType('envoy.service.discovery.v3.DiscoveryResponse');
    const type = (url: string) => root.lookupType(url.slice(url.indexOf('/') + 1));
    this.types = { cluster: type(TYPE_URLS.cluster), endpoint: type(TYPE_URLS.endpoint), listener: type(TYPE_URLS.listener), route: type(TYPE_URLS.route) };
  }

  /**
   * The bytes of one resource. A field the reduced protos lack would be dropped silently:
   * test/xds/xds-protos.test.ts decodes every resource with the full Envoy protos and compares.
   */
  encode(kind: ResourceKind, message: Message): Uint8Array {
    const type = this.types[kind];
    return type.encode(type.fromObject(message)).finish();
  }

  encodeResource(kind: ResourceKind, name: string, message: Message): EncodedResource {
    const value = this.encode(kind, message);
    return { name, any: { type_url: TYPE_URLS[kind], value }, digest: createHash('sha256').update(value).digest() };
  }

  decodeRequest(bytes: Uint8Array): DiscoveryRequest {
    const m = this.request.decode(bytes);
    return this.request.toObject(m, { defaults: true, arrays: true, enums: String }) as DiscoveryRequest;
  }

  encodeRequest(request: Partial<DiscoveryRequest>): Uint8Array {
    return this.request.encode(this.request.fromObject(request)).finish();
  }

  encodeResponse(response: DiscoveryResponse): Uint8Array {
    return this.response.encode(this.response.fromObject(response)).finish();
  }

  /**
   * A response in two parts, concatenated on the wire (protobuf merges them): the body (the
   * resources, their type, the control plane), the same for every client that gets this version,
   * so encoded once; and the head (version and nonce), per response.
   */
  encodeResponseBody(typeUrl: string, resources: readonly EncodedResource[]): Buffer {
    // Only the fields of the part: a field of the other, even empty, would be written and override it.
    const body = { type_url: typeUrl, resources: resources.map((r) => r.any), control_plane: { identifier: 'mesh' } };
    return Buffer.from(this.response.encode(this.response.fromObject(body)).finish());
  }

  encodeResponseHead(version: string, nonce: string): Buffer {
    return Buffer.from(this.response.encode(this.response.fromObject({ version_info: version, nonce })).finish());
  }

  decodeResponse(bytes: Uint8Array): DiscoveryResponse {
    return this.response.toObject(this.response.decode(bytes), { defaults: true, arrays: true }) as DiscoveryResponse;
  }
}

/**
 * The version of a set of resources: sha256 over their names and the digests of their bytes, in
 * name order, as 16 hex digits. The same content gives the same version in every process.
 */
export function versionOf(resources: readonly EncodedResource[]): string {
  const hash = createHash('sha256');
  for (const r of [...resources].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    hash.update(r.name).update('\0').update(r.digest);
  }
  return hash.digest('hex').slice(0, 16);
}
