/**
 * The route file contract (test/routes-contract.ts) against the three front ends that take one,
 * each a real process on port 0: `mesh api --routes`, `mesh sidecar --routes` and `mesh proxy -c`
 * with a listener's `route_file`. Each sends what no route matches by the proxy handler.
 */
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { startProcess } from '../helpers.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { routesContract } from '../routes-contract.js';

routesContract('mesh api', async (registryDir, routesFile) => {
  const gw = await startGatewayProcess(registryDir, ['--handler=proxy', `--routes=${routesFile}`]);
  return { url: gw.url, admin: gw.admin, hup: () => gw.proc.child.kill('SIGHUP'), stop: () => gw.stop() };
});

routesContract('mesh sidecar', async (registryDir, routesFile) => {
  const sc = await startSidecar(registryDir, ['--handler=proxy', `--routes=${routesFile}`]);
  return { url: sc.base, admin: sc.admin, hup: () => sc.proc.child.kill('SIGHUP'), stop: () => sc.stop() };
});

routesContract('mesh proxy', async (registryDir, routesFile) => {
  const config = join(dirname(routesFile), 'proxy.yaml');
  // The route file named relative to the configuration's directory; the old route form for the fall-through.
  writeFileSync(
    config,
    `listeners:
  - name: ingress
    address: 127.0.0.1:0
    route_file: routes.yaml
    routes:
      - {match: {prefix: /plain}, service: go.mesh.srv.plain}
      - {match: {prefix: /cx}, service: go.mesh.srv.cx}
`,
  );
  const proc = startProcess(['proxy', '-c', config, `--registry_address=${registryDir}`, '--admin_address=127.0.0.1:0', '--log_level=warning']);
  const admin = (await proc.waitForOutput(/mesh proxy admin on \S+/, 15000)).replace('mesh proxy admin on ', '');
  await proc.waitForOutput(/mesh proxy ready/, 15000);
  const url = /mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!;
  return { url, admin, hup: () => proc.child.kill('SIGHUP'), stop: () => proc.stop() };
});
