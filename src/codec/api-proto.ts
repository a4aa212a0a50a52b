/** Loads proto/api.proto (the gateway's Request, Response, Pair and Event) once per process. */
import { readFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

export interface ApiTypes {
  Pair: protobuf.Type;
  Request: protobuf.Type;
  Response: protobuf.Type;
  Event: protobuf.Type;
}

/** The package root, found by walking up from this file (works from src/ and from dist/src/). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'proto'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find the mesh package root (proto/api.proto)');
    dir = parent;
  }
}

let cached: ApiTypes | undefined;

export function apiTypes(): ApiTypes {
  if (!cached) {
    const source = readFileSync(join(packageRoot(), 'proto', 'api.proto'), 'utf8');
    const root = protobuf.parse(source, { keepCase: true }).root;
    cached = {
      Pair: root.lookupType('mesh.api.Pair'),
      Request: root.lookupType('mesh.api.Request'),
      Response: root.lookupType('mesh.api.Response'),
      Event: root.lookupType('mesh.api.Event'),
    };
  }
  return cached;
}
