/**
 * Gateway API HTTPRoute conformance (the upstream cases of cases.ts, replayed by runner.ts) against
 * real front ends on loopback: `mesh api --routes`, `mesh sidecar --routes` and `mesh proxy` with a
 * listener's `route_file`, each sending a route's requests by the proxy handler to in-process echo
 * backends registered as the services `infra-backend-v1`, `-v2`, `-v3`. Each front prints a report
 * in the shape of the upstream conformance reports, and the set of failing cases must be exactly
 * KNOWN_FAILING: a fix that makes a case pass, or a regression, fails here until the list follows.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { startProcess, tempDir } from '../helpers.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';
import { BACKENDS, CASES, KNOWN_FAILING, type FrontName } from './cases.js';
import { startEcho, type EchoBackend } from './echo.js';
import { report, runAll, type Front, type GatewayFront } from './runner.js';
import { GATEWAY_CASES } from './gateway-cases.js';
import { makePair } from '../tls-fixtures.js';

const NO_ROUTES = '# no routes\n';

const FRONTS: Record<FrontName, (registryDir: string, routesFile: string) => Promise<Front>> = {
  'mesh api': async (registryDir, routesFile) => {
    const gw = await startGatewayProcess(registryDir, ['--handler=proxy', `--routes=${routesFile}`]);
    return { name: 'mesh api', url: gw.url, admin: gw.admin, stop: () => gw.stop() };
  },
  'mesh sidecar': async (registryDir, routesFile) => {
    const sc = await startSidecar(registryDir, ['--handler=proxy', `--routes=${routesFile}`]);
    return { name: 'mesh sidecar', url: sc.base, admin: sc.admin, stop: () => sc.stop() };
  },
  'mesh proxy': async (registryDir, routesFile) => {
    const config = join(registryDir, 'proxy.yaml');
    writeFileSync(config, `listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    route_file: ${routesFile}\n`);
    const proc = startProcess(['proxy', '-c', config, `--registry_address=${registryDir}`, '--admin_address=127.0.0.1:0', '--log_level=warning']);
    const admin = (await proc.waitForOutput(/mesh proxy admin on \S+/, 15000)).replace('mesh proxy admin on ', '');
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    const url = /mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!;
    return { name: 'mesh proxy', url, admin, stop: () => proc.stop() };
  },
};

/** Where a Gateway case's listener ports (as written) listen: any free port. */
const GATEWAY_PORTS = '--gateway_ports=80=0,443=0,8080=0,8090=0';

/** A Gateway case's own mesh api, its ports read from its start-up lines. */
function gatewayFront(registryDir: string, routesFile: string, pair: { certFile: string; keyFile: string }): GatewayFront {
  return async (text) => {
    writeFileSync(routesFile, text.replaceAll('CERT_FILE', pair.certFile).replaceAll('KEY_FILE', pair.keyFile));
    const gw = await startGatewayProcess(registryDir, ['--handler=proxy', `--routes=${routesFile}`, GATEWAY_PORTS]);
    const ports = new Map<number, string>();
    for (const m of gw.proc.output().matchAll(/mesh api Gateway port ([0-9]+) on (\S+)/g)) ports.set(Number(m[1]), m[2]!);
    return { name: 'mesh api', url: gw.url, admin: gw.admin, ports, stop: () => gw.stop() };
  };
}

const ONLY = process.env.MESH_CONFORMANCE_FRONTS?.split(',').map((s) => s.trim());

describe('Gateway API HTTPRoute conformance', () => {
  const dir = tempDir('mesh-conformance-');
  let registry: Registry;
  let echoes: EchoBackend[] = [];

  before(async () => {
    registry = createRegistry('local', dir.path);
    echoes = await Promise.all(BACKENDS.map((name) => startEcho(name)));
    for (const e of echoes) {
      await registry.register({ name: e.name, version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: e.pod, address: '127.0.0.1', port: e.port, metadata: {} }] });
    }
  });

  after(async () => {
    await Promise.all(echoes.map((e) => e.close()));
    await registry?.close();
    dir.cleanup();
  });

  for (const name of Object.keys(FRONTS) as FrontName[]) {
    if (ONLY && !ONLY.includes(name)) continue;
    it(`${name}: the failing cases are exactly KNOWN_FAILING['${name}']`, async (t) => {
      const routesFile = join(dir.path, `${name.replace(' ', '-')}-routes.yaml`);
      writeFileSync(routesFile, NO_ROUTES);
      const front = await FRONTS[name](dir.path, routesFile);
      try {
        const pair = makePair(dir.path, 'gateway-listeners', { cn: 'example.org', sans: 'DNS:example.org,DNS:second-example.org,DNS:*.wildcard.org' });
        const own = name === 'mesh api' ? gatewayFront(dir.path, join(dir.path, 'gateway-case.yaml'), pair) : undefined;
        const results = await runAll(front, routesFile, [...CASES, ...GATEWAY_CASES], echoes, own);
        for (const line of report(name, results)) {
          t.diagnostic(line);
        }
        const failing = results.filter((r) => r.outcome === 'fail').map((r) => r.name).sort();
        const known = Object.keys(KNOWN_FAILING[name]).sort();
        const fixed = known.filter((n) => !failing.includes(n));
        const broken = failing.filter((n) => !known.includes(n));
        assert.deepEqual(
          { fixed, broken },
          { fixed: [], broken: [] },
          `update KNOWN_FAILING['${name}'] in test/conformance/cases.ts: now passing ${fixed.join(', ') || '(none)'}; newly failing ${broken
            .map((n) => `${n} (${results.find((r) => r.name === n)!.reason})`)
            .join('; ') || '(none)'}`,
        );
      } finally {
        await front.stop();
      }
    });
  }
});
