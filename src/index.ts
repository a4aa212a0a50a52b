/**
 * The public API of mesh (`@mesh-platform/mesh`): the one entry point. Everything a service, a
 * tool or a custom backend needs is exported here; nothing else is importable. See docs/api.md.
 */
export { Mesh } from './mesh.js';
export type { CallOptions, StreamOptions, MeshStream, PublishOptions, MeshSubscribeOptions as SubscribeOptions, EventHandler, StartResult } from './mesh.js';
export { runService } from './cli/serve.js';
export { resolveOptions, OptionsError, DEFAULT_OPTIONS } from './options.js';
export type { MeshOptions, ResolvedOptions, Duration, Size, RegistryKind, BrokerKind, LbPolicy, LogLevel } from './options.js';
export { MeshError } from './errors.js';
export type { Service, ServiceOptions, TypedHandler, StreamHandler } from './server/service.js';
export type { StreamContext } from './server/stream-server.js';
export type { StreamKind } from './transport/frames.js';
export type { HandlerContext, Handler, EndpointDefinition } from './server/rpc-server.js';
export type {
  Registry,
  Service as ServiceRecord,
  Node,
  Endpoint,
  Metadata,
  RegisterOptions,
  WatchAction,
  WatchEvent,
  Watcher,
  WatchOptions,
} from './registry/registry.js';
export type { Broker, Message, MessageHandler, Subscription, SubscribeOptions as BrokerSubscribeOptions } from './broker/broker.js';
export { BrokerUnavailableError } from './broker/broker.js';
export { DurableLimitError } from './broker/durable.js';
export type { Codec } from './codec/codec.js';
export { apiTypes } from './codec/api-proto.js';
export type { DrainResult } from './http/lifecycle.js';
export type { Client, CallResult } from './client/client.js';
