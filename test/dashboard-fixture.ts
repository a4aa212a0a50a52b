/**
 * Shared by test/fronts/dashboard.test.ts and test/fronts/browser.test.ts: a real `mesh api --enable_stats`
 * process (`--handler=rpc`) in front of a plain node:http backend registered by hand in the same
 * local registry, which answers 200 for Echo.Ok and 500 for Echo.Boom; traffic drivers; and admin
 * /stats read back as numbers.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRegistry } from '../src/engines/registry/create.js';
import type { Registry } from '../src/engines/registry/registry.js';
import { tempDir } from './helpers.js';
import { http, registerPlain, startGatewayProcess, type GatewayProcess } from './fixtures/gateway-helpers.js';

export const SERVICE = 'go.mesh.api.plain';
/** Through the rpc handler: /plain/echo/ok -> go.mesh.api.plain Echo.Ok. */
export const OK_PATH = '/plain/echo/ok';
export const BOOM_PATH = '/plain/echo/boom';
/** A path naming a service nobody registered: the gateway answers 404. */
export const MISSING_PATH = '/nosuch/thing/x';

export interface Backend {
  port: number;
  server: Server;
  calls: { ok: number; boom: number };
  close(): Promise<void>;
}

/** A plain node:http RPC backend (DESIGN 5 by hand): 200 JSON for *.Ok, 500 text for *.Boom, 400 otherwise. */
export async function startBackend(): Promise<Backend> {
  const calls = { ok: 0, boom: 0 };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const endpoint = String(req.headers['mesh-endpoint'] ?? '');
      if (endpoint.endsWith('.Ok')) {
        calls.ok++;
        const body = JSON.stringify({ ok: true });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      } else if (endpoint.endsWith('.Boom')) {
        calls.boom++;
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('boom');
      } else {
        res.writeHead(400, { 'content-type': 'text/plain' });
        res.end(`unknown endpoint ${endpoint}`);
      }
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    server,
    calls,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

export interface StatsSetup {
  gw: GatewayProcess;
  backend: Backend;
  registry: Registry;
  close(): Promise<void>;
}

/** Backend + registry entry + `mesh api --enable_stats --handler=rpc` as a real process. */
export async function startStatsGateway(extra: string[] = []): Promise<StatsSetup> {
  const dir = tempDir('mesh-dashboard-');
  const registry = createRegistry('local', dir.path);
  const backend = await startBackend();
  await registerPlain(registry, SERVICE, backend.port);
  const gw = await startGatewayProcess(dir.path, ['--enable_stats', '--handler=rpc', ...extra]);
  return {
    gw,
    backend,
    registry,
    close: async () => {
      await gw.stop();
      await backend.close();
      await registry.close();
      dir.cleanup();
    },
  };
}

/** Sends n GETs to the path, one after another; returns the statuses seen. */
export async function drive(base: string, path: string, n: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) statuses.push((await http('GET', `${base}${path}?i=${i}`)).status);
  return statuses;
}

/** Admin /stats counters under `http.<prefix>.` as numbers, keyed by the full stat name. */
export async function adminCounters(admin: string, prefix = 'gateway'): Promise<Record<string, number>> {
  const res = await http('GET', `${admin}/stats?filter=${encodeURIComponent(`^http\\.${prefix}\\.`)}`);
  if (res.status !== 200) throw new Error(`admin /stats: ${res.status} ${res.text}`);
  const out: Record<string, number> = {};
  for (const line of res.text.split('\n')) {
    const m = /^(\S+): (-?\d+)$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

/** The admin counters named as DashboardJson.totals names them. */
export function asTotals(counters: Record<string, number>, prefix = 'gateway'): Record<string, number> {
  const p = `http.${prefix}.`;
  return {
    total: counters[`${p}downstream_rq_total`] ?? 0,
    '1xx': counters[`${p}downstream_rq_1xx`] ?? 0,
    '2xx': counters[`${p}downstream_rq_2xx`] ?? 0,
    '3xx': counters[`${p}downstream_rq_3xx`] ?? 0,
    '4xx': counters[`${p}downstream_rq_4xx`] ?? 0,
    '5xx': counters[`${p}downstream_rq_5xx`] ?? 0,
    active: counters[`${p}downstream_rq_active`] ?? 0,
  };
}
