/**
 * The gRPC node of the cost bench (bench/cost.ts): a grpc-js server whose unary method
 * `/bench.Bench/Call` answers every request with the bench's JSON answer as its message bytes
 * (mesh passes gRPC messages through unread, so no .proto is needed on either side).
 * Usage: node --import tsx bench/servers/grpc-node.ts PORT
 */
import * as grpc from '@grpc/grpc-js';
import { ANSWER_BODY } from '../lib/payload.js';

const port = Number(process.argv[2] ?? 0);
const answer = Buffer.from(ANSWER_BODY);
const pass = (b: Buffer) => b;
const server = new grpc.Server();
server.addService(
  { Call: { path: '/bench.Bench/Call', requestStream: false, responseStream: false, requestSerialize: pass, requestDeserialize: pass, responseSerialize: pass, responseDeserialize: pass } },
  { Call: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, answer) },
);
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
  if (err) throw err;
  process.stdout.write(`grpc node listening on 127.0.0.1:${bound}\n`);
});
process.on('SIGTERM', () => server.forceShutdown());
