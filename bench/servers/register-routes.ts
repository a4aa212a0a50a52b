/**
 * Fills a local registry directory for the route-table scale row: the bench backend as
 * go.mesh.srv.bench with two routed endpoints (exact `/bench/call`, template `/b/{name}`), and
 * SERVICES-1 more services of ENDPOINTS routed endpoints each (6 exact paths, 3 templates, 1
 * regex per 10), all with one node at the backend's address (never called). Prints the number of
 * services and routes as JSON.
 * Usage: node --import tsx bench/servers/register-routes.ts DIR SERVICES ENDPOINTS BACKEND_PORT
 */
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import type { Endpoint, Service } from '../../src/engines/registry/registry.js';

const dir = process.argv[2]!;
const services = Number(process.argv[3] ?? 1);
const endpoints = Number(process.argv[4] ?? 10);
const backendPort = Number(process.argv[5]);

const node = (id: string) => ({ id, address: '127.0.0.1', port: backendPort, metadata: { protocol: 'mesh' } });
const registry = new LocalRegistry(dir);
let routes = 0;
const bench: Service = {
  name: 'go.mesh.srv.bench',
  version: 'latest',
  metadata: {},
  endpoints: [
    { name: 'Bench.Call', metadata: { path: '/bench/call', method: 'POST' } },
    { name: 'Bench.Call', metadata: { path: '/b/{name}', method: 'POST' } },
  ],
  nodes: [node('bench-1')],
};
// Two endpoints of the same name would collide: the template one gets its own name, same backend answer.
bench.endpoints[1]!.name = 'Bench.Template';
await registry.register(bench);
routes += 2;
for (let i = 1; i < services; i++) {
  const s = `r${String(i).padStart(4, '0')}`;
  const eps: Endpoint[] = [];
  for (let e = 0; e < endpoints; e++) {
    const k = e % 10;
    const path = k < 6 ? `/${s}/e${e}` : k < 9 ? `/${s}/e${e}/{id}` : `^/${s}/x${e}/[0-9]+`;
    eps.push({ name: `R.E${e}`, metadata: { path, method: 'POST' } });
  }
  await registry.register({ name: `go.mesh.srv.${s}`, version: 'latest', metadata: {}, endpoints: eps, nodes: [node(`${s}-1`)] });
  routes += endpoints;
}
await registry.close();
process.stdout.write(JSON.stringify({ services, routes }) + '\n');
