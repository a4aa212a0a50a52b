/**
 * ADS clients for the xds-scale row: STREAMS streams (state of the world, one gRPC channel per
 * stream, as separate clients have) to `mesh xds`, each as Envoy asks: every cluster (CDS
 * wildcard), ACKed, then the endpoints of each cluster (EDS, by name), ACKed. Prints one line per
 * stream when it holds the full set, `full <ms from opening the stream>`, and then one line per
 * endpoint push it gets, `push <epoch ms>` (the parent compares with the time of its registry
 * change: same machine, same clock).
 * Usage: node --import tsx bench/servers/xds-clients.ts HOST:PORT STREAMS SERVICES
 */
import * as grpc from '@grpc/grpc-js';
import { XdsProtos, type DiscoveryResponse } from '../../src/xds/protos.js';
import { ADS_METHOD_PATH } from '../../src/xds/server.js';
import { TYPE_URLS } from '../../src/xds/resources.js';

const [address, streamsArg, servicesArg] = process.argv.slice(2);
const streams = Number(streamsArg);
const services = Number(servicesArg);
const protos = new XdsProtos();
const clusterType = protos.root.lookupType('envoy.config.cluster.v3.Cluster');
const now = () => performance.timeOrigin + performance.now();
const out = (line: string) => process.stdout.write(line + '\n');

function open(i: number): grpc.Client {
  const client = new grpc.Client(address!, grpc.credentials.createInsecure());
  const started = performance.now();
  const call = client.makeBidiStreamRequest(ADS_METHOD_PATH, (b: Uint8Array) => Buffer.from(b), (b: Buffer) => protos.decodeResponse(b));
  const node = { id: `bench-${process.pid}-${i}`, user_agent_name: 'envoy' };
  const send = (typeUrl: string, names: string[], prev?: DiscoveryResponse) =>
    call.write(protos.encodeRequest({ node, type_url: typeUrl, resource_names: names, version_info: prev?.version_info ?? '', response_nonce: prev?.nonce ?? '' }));
  let edsNames: string[] | undefined;
  let full = false;
  call.on('data', (r: DiscoveryResponse) => {
    if (r.type_url === TYPE_URLS.cluster) {
      const names = r.resources.map((a) => (clusterType.decode(a.value) as unknown as { name: string }).name);
      send(TYPE_URLS.cluster, [], r);
      if (!edsNames) {
        edsNames = names;
        send(TYPE_URLS.endpoint, names);
      }
    } else if (r.type_url === TYPE_URLS.endpoint) {
      const at = now();
      send(TYPE_URLS.endpoint, edsNames!, r);
      if (!full && r.resources.length >= services) {
        full = true;
        out(`full ${(performance.now() - started).toFixed(1)}`);
      } else if (full) out(`push ${at.toFixed(1)}`);
    }
  });
  call.on('error', (err) => out(`error ${err.message}`));
  send(TYPE_URLS.cluster, []);
  return client;
}

const clients = Array.from({ length: streams }, (_, i) => open(i));
process.stdin.on('end', () => {
  for (const c of clients) c.close();
  process.exit(0);
});
process.stdin.resume();
