/** Loads proto/api.proto (the gateway's Request, Response, Pair and Event) once per process. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../util/package-root.js';
import type protobuf from 'protobufjs';
import { protobufjs } from '../util/lazy-packages.js';

export interface ApiTypes {
  Pair: protobuf.Type;
  Request: protobuf.Type;
  Response: protobuf.Type;
  Event: protobuf.Type;
}

let cached: ApiTypes | undefined;

export function apiTypes(): ApiTypes {
  if (!cached) {
    const source = readFileSync(join(packageRoot(), 'proto', 'api.proto'), 'utf8');
    const root = protobufjs().parse(source, { keepCase: true }).root;
    cached = {
      Pair: root.lookupType('mesh.api.Pair'),
      Request: root.lookupType('mesh.api.Request'),
      Response: root.lookupType('mesh.api.Response'),
      Event: root.lookupType('mesh.api.Event'),
    };
  }
  return cached;
}
