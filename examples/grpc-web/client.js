// The page's script (bundled for the browser by page.ts with esbuild): calls helloworld.Greeter
// through the gateway with the grpc-web client library (application/grpc-web-text), its messages
// encoded by protobufjs from greeter.proto, and shows what comes back.
import { GrpcWebClientBase, MethodDescriptor, MethodType } from 'grpc-web';
import protobuf from 'protobufjs';
import PROTO from './greeter.proto';

const { root } = protobuf.parse(PROTO);
const HelloRequest = root.lookupType('helloworld.HelloRequest');
const CountRequest = root.lookupType('helloworld.CountRequest');
const HelloReply = root.lookupType('helloworld.HelloReply');

/** A method of helloworld.Greeter: its path, kind and (de)serializers. */
const method = (name, kind, request) =>
  new MethodDescriptor(`/helloworld.Greeter/${name}`, kind, Object, Object, (req) => request.encode(request.create(req)).finish(), (bytes) => HelloReply.toObject(HelloReply.decode(bytes)));
const SayHello = method('SayHello', MethodType.UNARY, HelloRequest);
const Count = method('Count', MethodType.SERVER_STREAMING, CountRequest);

const gateway = document.querySelector('meta[name="gateway"]').content;
const client = new GrpcWebClientBase({ format: 'text' });
const show = (id, text) => (document.getElementById(id).textContent = text);

function sayHello(name, id) {
  return new Promise((resolve) => {
    client.rpcCall(`${gateway}/helloworld.Greeter/SayHello`, { name }, {}, SayHello, (err, reply) => {
      show(id, err ? `error ${err.code}: ${err.message}` : reply.message);
      resolve();
    });
  });
}

function count(name, n) {
  return new Promise((resolve) => {
    const list = document.getElementById('count');
    const stream = client.serverStreaming(`${gateway}/helloworld.Greeter/Count`, { name, n }, {}, Count);
    stream.on('data', (reply) => list.appendChild(document.createElement('li')).append(reply.message));
    stream.on('error', (err) => {
      show('count-status', `error ${err.code}: ${err.message}`);
      resolve();
    });
    stream.on('end', () => {
      show('count-status', 'done');
      resolve();
    });
  });
}

const name = new URLSearchParams(location.search).get('name') ?? 'Ann';
await Promise.all([sayHello(name, 'hello'), sayHello('', 'hello-error'), count(name, 3)]);
document.body.dataset.done = 'true';
