/**
 * The schema of a gRPC node from its reflection service (grpc.reflection.v1.ServerReflection,
 * else v1alpha), for calls whose method the --proto_path files do not have: list the services,
 * fetch the files that define them (with their imports), build the types from the descriptors.
 */
import type * as grpc from '@grpc/grpc-js';
import type protobuf from 'protobufjs';
import { protobufjsDescriptors } from '../../../base/util/lazy-packages.js';
import { GrpcSchema } from './protos.js';

const REFLECTION_PROTO = `
syntax = "proto3";
package reflection;
message ServerReflectionRequest {
  string host = 1;
  oneof message_request {
    string file_by_filename = 3;
    string file_containing_symbol = 4;
    string list_services = 7;
  }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ServiceResponse { string name = 1; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
message ServerReflectionResponse {
  string valid_host = 1;
  ServerReflectionRequest original_request = 2;
  oneof message_response {
    FileDescriptorResponse file_descriptor_response = 4;
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
`;

interface ReflectionResponse {
  file_descriptor_response?: { file_descriptor_proto: Uint8Array[] };
  list_services_response?: { service: Array<{ name: string }> };
  error_response?: { error_code: number; error_message: string };
}

/** Files fetched at most from one node (a bound, not a schema anyone writes). */
const MAX_FILES = 1000;

export class ReflectionError extends Error {
  constructor(
    message: string,
    /** The gRPC status of the failed stream, when it failed with one. */
    readonly code?: number,
  ) {
    super(message);
  }
}

/** Builds the message types of the reflection protocol, once per transport. */
export function reflectionTypes(): { request: protobuf.Type; response: protobuf.Type } {
  const root = protobufjsDescriptors().parse(REFLECTION_PROTO, { keepCase: true }).root;
  return { request: root.lookupType('reflection.ServerReflectionRequest'), response: root.lookupType('reflection.ServerReflectionResponse') };
}

/**
 * Asks a node's reflection service for every service it offers and the files that define them.
 * Rejects with ReflectionError (code UNIMPLEMENTED when the node has no reflection service), or
 * with the grpc-js error of a connection that failed.
 */
export async function reflectSchema(lib: typeof grpc, client: grpc.Client, deadline: number, types = reflectionTypes()): Promise<GrpcSchema> {
  let lastErr: unknown;
  for (const version of ['v1', 'v1alpha']) {
    try {
      return await reflectWith(lib, client, `/grpc.reflection.${version}.ServerReflection/ServerReflectionInfo`, deadline, types);
    } catch (err) {
      lastErr = err;
      if (!(err instanceof ReflectionError) || err.code !== lib.status.UNIMPLEMENTED) throw err;
    }
  }
  throw lastErr;
}

function reflectWith(lib: typeof grpc, client: grpc.Client, path: string, deadline: number, types: { request: protobuf.Type; response: protobuf.Type }): Promise<GrpcSchema> {
  return new Promise((resolve, reject) => {
    const call = client.makeBidiStreamRequest<Record<string, string>, ReflectionResponse>(
      path,
      (req) => Buffer.from(types.request.encode(types.request.fromObject(req)).finish()),
      (buf) => types.response.toObject(types.response.decode(buf), { defaults: false, arrays: true }) as ReflectionResponse,
      new lib.Metadata(),
      { deadline },
    );
    const files = new Map<string, Uint8Array>();
    const asked = new Set<string>();
    let pending = 0;
    let done = false;
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      call.cancel();
      reject(err);
    };
    const ask = (req: Record<string, string>) => {
      pending++;
      call.write(req);
    };
    const finish = () => {
      done = true;
      call.end();
      try {
        const set = encodeSet([...files.values()]);
        const root = (protobufjsDescriptors().Root as unknown as { fromDescriptor(b: Uint8Array): protobuf.Root }).fromDescriptor(set);
        root.resolveAll();
        resolve(new GrpcSchema(root));
      } catch (err) {
        reject(new ReflectionError(`the reflection service's descriptors do not build: ${(err as Error).message}`));
      }
    };
    call.on('data', (res: ReflectionResponse) => {
      pending--;
      if (res.error_response) {
        // A symbol or file the node cannot give: the others may still do.
        if (pending === 0) finish();
        return;
      }
      if (res.list_services_response) {
        for (const s of res.list_services_response.service) {
          if (s.name.startsWith('grpc.reflection.')) continue;
          ask({ file_containing_symbol: s.name });
        }
      }
      for (const bytes of res.file_descriptor_response?.file_descriptor_proto ?? []) {
        const fd = (protobufjsDescriptors() as unknown as { descriptor: { FileDescriptorProto: protobuf.Type } }).descriptor?.FileDescriptorProto;
        const name = fd ? String((fd.decode(bytes) as unknown as { name?: string }).name ?? '') : String(files.size);
        if (!files.has(name)) files.set(name, bytes);
        // A node that sends a file without its imports: ask for them by name.
        const deps = fd ? ((fd.decode(bytes) as unknown as { dependency?: string[] }).dependency ?? []) : [];
        for (const d of deps) {
          if (files.has(d) || asked.has(d)) continue;
          asked.add(d);
          ask({ file_by_filename: d });
        }
      }
      if (files.size > MAX_FILES) return fail(new ReflectionError(`the reflection service gave more than ${MAX_FILES} files`));
      if (pending === 0) finish();
    });
    call.on('error', (err: grpc.ServiceError) => {
      if (done) return;
      done = true;
      reject(err.code === lib.status.UNIMPLEMENTED ? new ReflectionError(err.details, err.code) : err);
    });
    call.on('end', () => {
      if (!done) fail(new ReflectionError('the reflection stream ended early'));
    });
    ask({ list_services: '' });
  });
}

/** A FileDescriptorSet (field 1, repeated FileDescriptorProto) from the serialized files. */
function encodeSet(files: Uint8Array[]): Uint8Array {
  const w = protobufjsDescriptors().Writer.create();
  for (const f of files) w.uint32((1 << 3) | 2).bytes(f);
  return w.finish();
}
