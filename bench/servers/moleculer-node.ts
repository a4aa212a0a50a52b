/**
 * Moleculer 0.14 over its TCP transporter (static node list, no UDP discovery), two roles:
 *   service  PORT_SVC PORT_GW           the "bench" service: action bench.call answers the same
 *                                       small JSON as the node:http backend
 *   gateway  PORT_SVC PORT_GW HTTP_PORT moleculer-web: POST /bench/call → bench.call
 * Logs at warn (no per-request logging), metrics and tracing off (Moleculer's defaults).
 * Usage: node --import tsx bench/servers/moleculer-node.ts service|gateway ...
 */
import Moleculer from 'moleculer';
import ApiGateway from 'moleculer-web';
import { ANSWER } from '../lib/payload.js';

const [role, svcPort, gwPort, httpPort] = process.argv.slice(2);
const nodeID = role === 'service' ? 'bench-svc' : 'bench-gw';
const broker = new Moleculer.ServiceBroker({
  nodeID,
  logLevel: 'warn',
  transporter: {
    type: 'TCP',
    options: {
      udpDiscovery: false,
      port: Number(role === 'service' ? svcPort : gwPort),
      urls: [`127.0.0.1:${svcPort}/bench-svc`, `127.0.0.1:${gwPort}/bench-gw`],
    },
  },
});

if (role === 'service') {
  broker.createService({
    name: 'bench',
    actions: {
      call() {
        return ANSWER;
      },
    },
  });
} else {
  broker.createService({
    name: 'api',
    mixins: [ApiGateway],
    settings: {
      ip: '127.0.0.1',
      port: Number(httpPort),
      logRequest: null,
      logResponse: null,
      routes: [
        {
          path: '/',
          mappingPolicy: 'restrict',
          aliases: { 'POST /bench/call': 'bench.call' },
          bodyParsers: { json: true },
        },
      ],
    },
  });
}

await broker.start();
if (role === 'gateway') await broker.waitForServices(['bench']);
const stop = () => void broker.stop().finally(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
