/**
 * The public API of mesh (`@mesh-platform/mesh`): the one entry point. Everything a service, a
 * tool or a custom backend needs is exported here; nothing else is importable. See docs/api.md.
 */
export { Mesh } from './framework/mesh.js';
export type { CallOptions, StreamOptions, MeshStream, PublishOptions, MeshSubscribeOptions as SubscribeOptions, EventHandler, StartResult } from './framework/mesh.js';
export { runService } from './cli/serve.js';
export { resolveOptions, OptionsError, DEFAULT_OPTIONS } from './process/options.js';
export type { MeshOptions, ResolvedOptions, Duration, Size, RegistryKind, BrokerKind, LbPolicy, LogLevel } from './process/options.js';
export { MeshError } from './base/errors.js';
export type { Service, ServiceOptions, TypedHandler, StreamHandler } from './framework/server/service.js';
export type { StreamContext } from './framework/server/stream-server.js';
export type { StreamKind } from './core/transport/frames.js';
export type { HandlerContext, Handler, EndpointDefinition } from './framework/server/endpoint.js';
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
} from './engines/registry/registry.js';
export type { Broker, Message, MessageHandler, Subscription, SubscribeOptions as BrokerSubscribeOptions } from './engines/broker/broker.js';
export { BrokerUnavailableError } from './engines/broker/broker.js';
export { DurableLimitError } from './engines/broker/durable.js';
export type { Codec } from './base/codec/codec.js';
export { apiTypes } from './base/codec/api-proto.js';
export type { DrainResult } from './base/http/lifecycle.js';
export type { Client, CallResult } from './core/client/client.js';
