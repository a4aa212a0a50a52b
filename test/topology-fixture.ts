/**
 * Shared by test/fronts/topology.test.ts and test/fronts/topology-browser.test.ts: a small real
 * mesh in one local registry — a plain RPC backend (dashboard-fixture's), `mesh api --enable_stats
 * --handler=rpc` and `mesh sidecar --server_name=go.mesh.srv.web` in front of a second backend,
 * both calling the backend — and fake processes: a node:http server answering /traffic with what
 * the test says, recorded in the registry as a process.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRegistry } from '../src/engines/registry/create.js';
import type { Registry } from '../src/engines/registry/registry.js';
import { processService, type ProcessRecord } from '../src/engines/registry/processes.js';
import type { TrafficReport } from '../src/admin/traffic.js';
import { Histogram } from '../src/base/stats/store.js';
import { tempDir } from './helpers.js';
import { startBackend, SERVICE, OK_PATH, BOOM_PATH, type Backend } from './dashboard-fixture.js';
import { registerPlain, startGatewayProcess, type GatewayProcess } from './fixtures/gateway-helpers.js';
import { startSidecar, postJson, type SidecarProcess } from './fixtures/sidecar-common.js';

export { SERVICE, OK_PATH, BOOM_PATH };
export const WEB = 'go.mesh.srv.web';

export interface TopologyMesh {
  dir: string;
  registry: Registry;
  backend: Backend;
  gw: GatewayProcess;
  sidecar: SidecarProcess;
  /** n calls from the sidecar (as go.mesh.srv.web) to the backend: Echo.Ok, or Echo.Boom when `fail`. */
  callFromWeb(n: number, fail?: boolean): Promise<number[]>;
  close(): Promise<void>;
}

export async function startTopologyMesh(gatewayFlags: string[] = [], sidecarFlags: string[] = []): Promise<TopologyMesh> {
  const dir = tempDir('mesh-topology-');
  const registry = createRegistry('local', dir.path);
  const backend = await startBackend();
  const app = await startBackend();
  await registerPlain(registry, SERVICE, backend.port);
  const started: Array<{ stop(): Promise<unknown> }> = [];
  try {
    const [gw, sidecar] = await Promise.all([
      startGatewayProcess(dir.path, ['--enable_stats', '--handler=rpc', ...gatewayFlags]).then((p) => (started.push(p), p)),
      startSidecar(dir.path, [`--server_name=${WEB}`, `--server_address=127.0.0.1:${app.port}`, ...sidecarFlags]).then((p) => (started.push(p), p)),
    ]);
    return {
      dir: dir.path,
      registry,
      backend,
      gw,
      sidecar,
      callFromWeb: async (n, fail = false) => {
        const statuses: number[] = [];
        for (let i = 0; i < n; i++) statuses.push((await postJson(`${sidecar.base}/rpc`, { service: SERVICE, method: fail ? 'Echo.Boom' : 'Echo.Ok', request: {} })).status);
        return statuses;
      },
      close: async () => {
        await Promise.all(started.map((p) => p.stop()));
        await Promise.all([backend.close(), app.close()]);
        await registry.close();
        dir.cleanup();
      },
    };
  } catch (err) {
    await Promise.all(started.map((p) => p.stop()));
    await Promise.all([backend.close(), app.close()]);
    await registry.close();
    dir.cleanup();
    throw err;
  }
}

/** A /traffic report of a process `name` calling each of `to` (2xx answers, all in the 10..25 ms bucket). */
export function trafficReport(id: string, name: string, to: Record<string, number>): TrafficReport {
  return {
    process: { id, kind: 'sidecar', name, mtls: 'strict', started_ms: Date.now() - 60_000 },
    latency_bounds_ms: Histogram.BOUNDS,
    clusters: Object.entries(to).map(([cluster, n]) => ({
      name: cluster,
      rq_2xx: n,
      rq_3xx: 0,
      rq_4xx: 0,
      rq_5xx: 0,
      hosts: 1,
      hosts_mtls: 1,
      latency_counts: Histogram.BOUNDS.map((_, i) => (i === 5 ? n : 0)).concat([0]),
    })),
    routes: [],
    callers: [],
  };
}

export interface FakeAdmin {
  port: number;
  /** /traffic requests answered so far. */
  hits: number;
  /** What /traffic answers next (a string is sent as is). */
  answer: () => unknown;
  /** The process record naming this admin (registered by record()). */
  record: ProcessRecord;
  close(): Promise<void>;
}

/**
 * A fake admin: /traffic answers `answer()` as JSON (`hang`: never answers), recorded in the
 * registry as process `id` named `name` (TTL 60 s; deregistered by close()).
 */
export async function fakeAdmin(registry: Registry, id: string, name: string, answer: () => unknown, options: { hang?: boolean } = {}): Promise<FakeAdmin> {
  const server: Server = createServer((req, res) => {
    if (req.url !== '/traffic') {
      res.writeHead(404).end();
      return;
    }
    fake.hits++;
    if (options.hang) return;
    const v = fake.answer();
    const body = typeof v === 'string' ? v : JSON.stringify(v);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  const record: ProcessRecord = {
    id,
    kind: 'sidecar',
    name,
    pid: 4242,
    host: 'fake',
    admin: { address: '127.0.0.1', port },
    startedMs: Date.now() - 60_000,
    mtls: 'strict',
    listeners: [],
    version: '0.1.0',
  };
  await registry.register(processService(record), { ttlMs: 60_000 });
  const fake: FakeAdmin = {
    port,
    hits: 0,
    answer,
    record,
    close: async () => {
      await registry.deregister(processService(record));
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  return fake;
}
