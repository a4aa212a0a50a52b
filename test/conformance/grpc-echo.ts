/**
 * The GRPCRoute conformance echo backend: a @grpc/grpc-js server of the upstream echo service
 * (grpcecho.proto, `gateway_api_conformance.echo_basic.grpcecho.GrpcEcho`) that answers `Echo` and
 * `EchoTwo` as the upstream echo server does, with assertions about the call it received: the
 * fully qualified method it served, the call's metadata (one `Header` per value, `:authority`
 * among them), the `:authority`, and its context (namespace, service name, pod). `EchoThree` is
 * left unimplemented, as upstream (`UNIMPLEMENTED`). The pod is `<name>-<port>`, so a pod name
 * starts with its backend's name as upstream.
 */
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ROOT } from '../helpers.js';
import { ECHO_NAMESPACE } from './echo.js';

export const ECHO_PACKAGE = 'gateway_api_conformance.echo_basic.grpcecho';
/** The gRPC service the cases call (its full name, as a call's path has it). */
export const ECHO_SERVICE = `${ECHO_PACKAGE}.GrpcEcho`;
export type EchoMethod = 'Echo' | 'EchoTwo' | 'EchoThree';

export interface GrpcAssertions {
  fully_qualified_method: string;
  headers: Array<{ key: string; value: string }>;
  authority: string;
  context: { namespace: string; ingress: string; service_name: string; pod: string };
}
export interface GrpcEchoResponse {
  assertions: GrpcAssertions;
}

export interface GrpcEchoBackend {
  name: string;
  pod: string;
  port: number;
  close(): Promise<void>;
}

const definition = protoLoader.loadSync(join(ROOT, 'test/conformance/grpcecho.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
/** The GrpcEcho client and service definition (grpc-js's generated constructor). */
export const GrpcEcho = (grpc.loadPackageDefinition(definition) as any).gateway_api_conformance.echo_basic.grpcecho.GrpcEcho as grpc.ServiceClientConstructor;

export async function startGrpcEcho(name: string): Promise<GrpcEchoBackend> {
  const server = new grpc.Server();
  let pod = name;
  const echo = (method: EchoMethod) => (call: grpc.ServerUnaryCall<object, GrpcEchoResponse>, done: grpc.sendUnaryData<GrpcEchoResponse>) => {
    const authority = call.getHost();
    const headers = [{ key: ':authority', value: authority }];
    for (const [key, values] of Object.entries(call.metadata.toJSON())) for (const value of values) headers.push({ key, value: String(value) });
    done(null, {
      assertions: {
        fully_qualified_method: `/${ECHO_SERVICE}/${method}`,
        headers,
        authority,
        context: { namespace: ECHO_NAMESPACE, ingress: '', service_name: name, pod },
      },
    });
  };
  // EchoThree is left out: grpc-js answers it UNIMPLEMENTED, as the upstream server does.
  server.addService(GrpcEcho.service, { Echo: echo('Echo'), EchoTwo: echo('EchoTwo') });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  pod = `${name}-${port}`;
  return {
    name,
    pod,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.tryShutdown(() => resolve());
      }),
  };
}
