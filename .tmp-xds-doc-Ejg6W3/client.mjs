import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { register } from '@grpc/grpc-js-xds';

register();
const { helloworld } = grpc.loadPackageDefinition(protoLoader.loadSync('protos/greeter.proto'));
const client = new helloworld.Greeter('xds:///go.mesh.srv.greeter', grpc.credentials.createInsecure());
client.SayHello({ name: 'xDS' }, (err, reply) => {
  console.log(err ? `failed: ${err.message}` : reply.message);
  client.close();
});
