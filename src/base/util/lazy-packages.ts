/**
 * Libraries a process loads at their first use, not at start: a sidecar or gateway that never
 * reads a YAML file, never encodes protobuf and never upgrades a WebSocket does not pay their
 * memory (docs/sidecar.md, "Memory"). Each is loaded synchronously (they are CommonJS packages),
 * so callers keep their synchronous shape, two first uses at once cannot race, and an error
 * (a bad file) is the one the library always gave. Node caches each after its first load.
 * jose is an ES module only, so it cannot be required: its loader is a promise (the same module
 * for every caller, two first uses at once included), awaited where a process sets up JWT auth or
 * checks a join token. The types are imported at compile time only.
 */
import { createRequire } from 'node:module';
import type * as Yaml from 'yaml';
import type * as Protobuf from 'protobufjs';
import type * as Ws from 'ws';
import type * as Jose from 'jose';
import type * as Re2js from 're2js';

const load = createRequire(import.meta.url);

/** The yaml library (route, rule and config files). */
export function yaml(): typeof Yaml {
  return load('yaml') as typeof Yaml;
}

/** protobufjs (.proto schemas, the protobuf codec, gRPC transcoding, xDS). */
export function protobufjs(): typeof Protobuf {
  return load('protobufjs') as typeof Protobuf;
}

/** protobufjs with its descriptor extension (`Root.fromDescriptor`, server reflection). */
export function protobufjsDescriptors(): typeof Protobuf {
  load('protobufjs/ext/descriptor/index.js');
  return protobufjs();
}

/** ws (WebSocket streams and broker subscriptions). */
export function wsLibrary(): typeof Ws {
  return load('ws') as typeof Ws;
}

/** re2js (regexes from outside: route metadata, rule files, `/stats?filter=`; its CommonJS build). */
export function re2js(): typeof Re2js {
  return load('re2js') as typeof Re2js;
}

/** jose (bearer JWTs with --auth=jwt, the mesh CA's join tokens): ES module only, so a promise. */
export function jose(): Promise<typeof Jose> {
  return import('jose');
}

// The node tests of yaml, under their own names: a YAML node exists only once yaml parsed a file.
export function isMap<K = unknown, V = unknown>(node: unknown): node is Yaml.YAMLMap<K, V> {
  return yaml().isMap(node);
}
export function isSeq<T = unknown>(node: unknown): node is Yaml.YAMLSeq<T> {
  return yaml().isSeq(node);
}
export function isScalar<T = unknown>(node: unknown): node is Yaml.Scalar<T> {
  return yaml().isScalar(node);
}
export function isPair<K = unknown, V = unknown>(node: unknown): node is Yaml.Pair<K, V> {
  return yaml().isPair(node);
}
export function isAlias(node: unknown): node is Yaml.Alias {
  return yaml().isAlias(node);
}
