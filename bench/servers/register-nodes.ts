/**
 * Fills a local registry directory for the idle memory bench's registry rows (bench/idle-rss.ts):
 * SERVICES services go.mesh.srv.s0, s1, ... of NODES nodes each. The first CALLED services' nodes
 * are the bench backend at BACKEND_PORT (distinct node ids, one address); the others' nodes are
 * addresses nothing listens on (never called). Prints the number of services and nodes as JSON.
 * Usage: node --import tsx bench/servers/register-nodes.ts DIR SERVICES NODES CALLED BACKEND_PORT
 */
import { LocalRegistry } from '../../src/engines/registry/local/index.js';

const [dir, services, nodes, called, backendPort] = [process.argv[2]!, ...process.argv.slice(3, 7).map(Number)] as [string, number, number, number, number];
const registry = new LocalRegistry(dir);
for (let i = 0; i < services; i++) {
  await registry.register({
    name: `go.mesh.srv.s${i}`,
    version: 'v1',
    metadata: {},
    endpoints: [{ name: 'Svc.Call', metadata: {} }],
    nodes: Array.from({ length: nodes }, (_, j) => ({ id: `s${i}-${j}`, address: i < called ? '127.0.0.1' : `10.${(i >> 8) & 255}.${i & 255}.${j + 1}`, port: i < called ? backendPort : 8080, metadata: { version: 'v1' } })),
  });
}
await registry.close();
console.log(JSON.stringify({ services, nodes: services * nodes }));
