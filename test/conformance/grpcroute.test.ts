/**
 * Gateway API GRPCRoute conformance (the upstream cases of grpc-cases.ts, replayed by
 * grpc-runner.ts) against real front ends on loopback that pass native gRPC: `mesh api
 * --enable_http2 --routes`, `mesh sidecar --enable_http2 --routes` and a `mesh proxy` listener with
 * `http2: true` and a `route_file`, each sending the calls to in-process gRPC echo backends
 * registered as the services `grpc-infra-backend-v1`, `-v2`, `-v3`. The case with Gateway
 * listeners runs on a `mesh api` of its own. Each front prints a report in the shape of the
 * upstream conformance reports (profile GATEWAY-GRPC), and the set of failing cases must be
 * exactly GRPC_KNOWN_FAILING.
 *
 * The echo nodes are registered with `protocol: grpc` and without `grpc_service`: a call no
 * GRPCRoute takes then finds no service by its gRPC service name and is answered UNIMPLEMENTED,
 * which is what the upstream cases expect of a call no route matches.
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
import { GRPC_BACKENDS, GRPC_CASES, GRPC_KNOWN_FAILING, type GrpcFrontName } from './grpc-cases.js';
import { startGrpcEcho, type GrpcEchoBackend } from './grpc-echo.js';
import { runGrpcAll } from './grpc-runner.js';
import { report, type Front, type GatewayFront } from './runner.js';

const NO_ROUTES = '# no routes\n';

const FRONTS: Record<GrpcFrontName, (registryDir: string, routesFile: string) => Promise<Front>> = {
  'mesh api': async (registryDir, routesFile) => {
    const gw = await startGatewayProcess(registryDir, ['--enable_http2', `--routes=${routesFile}`]);
    return { name: 'mesh api', url: gw.url, admin: gw.admin, stop: () => gw.stop() };
  },
  'mesh sidecar': async (registryDir, routesFile) => {
    const sc = await startSidecar(registryDir, ['--enable_http2', `--routes=${routesFile}`]);
    return { name: 'mesh sidecar', url: sc.base, admin: sc.admin, stop: () => sc.stop() };
  },
  'mesh proxy': async (registryDir, routesFile) => {
    const config = join(registryDir, 'grpc-proxy.yaml');
    writeFileSync(config, `listeners:\n  - {name: ingress, address: 127.0.0.1:0, http2: true, route_file: ${routesFile}}\n`);
    const proc = startProcess(['proxy', '-c', config, `--registry_address=${registryDir}`, '--admin_address=127.0.0.1:0', '--log_level=warning']);
    const admin = (await proc.waitForOutput(/mesh proxy admin on \S+/, 15000)).replace('mesh proxy admin on ', '');
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    const url = /mesh proxy listener ingress on (\S+)/.exec(proc.output())![1]!;
    return { name: 'mesh proxy', url, admin, stop: () => proc.stop() };
  },
};

/** The case with Gateway listeners: its own mesh api, listener port 80 on a free port. */
function gatewayFront(registryDir: string, routesFile: string): GatewayFront {
  return async (text) => {
    writeFileSync(routesFile, text);
    const gw = await startGatewayProcess(registryDir, ['--enable_http2', `--routes=${routesFile}`, '--gateway_ports=80=0']);
    const ports = new Map<number, string>();
    for (const m of gw.proc.output().matchAll(/mesh api Gateway port ([0-9]+) on (\S+)/g)) ports.set(Number(m[1]), m[2]!);
    return { name: 'mesh api', url: gw.url, admin: gw.admin, ports, stop: () => gw.stop() };
  };
}

const ONLY = process.env.MESH_CONFORMANCE_FRONTS?.split(',').map((s) => s.trim());

describe('Gateway API GRPCRoute conformance', () => {
  const dir = tempDir('mesh-grpc-conformance-');
  let registry: Registry;
  let echoes: GrpcEchoBackend[] = [];

  before(async () => {
    registry = createRegistry('local', dir.path);
    echoes = await Promise.all(GRPC_BACKENDS.map((name) => startGrpcEcho(name)));
    for (const e of echoes) {
      await registry.register({ name: e.name, version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: e.pod, address: '127.0.0.1', port: e.port, metadata: { protocol: 'grpc' } }] });
    }
  });

  after(async () => {
    await Promise.all(echoes.map((e) => e.close()));
    await registry?.close();
    dir.cleanup();
  });

  for (const name of Object.keys(FRONTS) as GrpcFrontName[]) {
    if (ONLY && !ONLY.includes(name)) continue;
    it(`${name}: the failing cases are exactly GRPC_KNOWN_FAILING['${name}']`, async (t) => {
      const routesFile = join(dir.path, `${name.replace(' ', '-')}-grpc-routes.yaml`);
      writeFileSync(routesFile, NO_ROUTES);
      const front = await FRONTS[name](dir.path, routesFile);
      try {
        const own = name === 'mesh api' ? gatewayFront(dir.path, join(dir.path, 'grpc-gateway-case.yaml')) : undefined;
        const results = await runGrpcAll(front, routesFile, GRPC_CASES, own);
        for (const line of report(name, results, 'GATEWAY-GRPC')) t.diagnostic(line);
        const failing = results.filter((r) => r.outcome === 'fail').map((r) => r.name).sort();
        const known = Object.keys(GRPC_KNOWN_FAILING[name]).sort();
        const fixed = known.filter((n) => !failing.includes(n));
        const broken = failing.filter((n) => !known.includes(n));
        assert.deepEqual(
          { fixed, broken },
          { fixed: [], broken: [] },
          `update GRPC_KNOWN_FAILING['${name}'] in test/conformance/grpc-cases.ts: now passing ${fixed.join(', ') || '(none)'}; newly failing ${broken
            .map((n) => `${n} (${results.find((r) => r.name === n)!.reason})`)
            .join('; ') || '(none)'}`,
        );
      } finally {
        await front.stop();
      }
    });
  }
});
