/** Shared fixtures of the admin tests: a fake cluster manager view and a running AdminServer. */
import { http } from './helpers.js';
import { AdminServer } from '../src/admin/server.js';
import { ServerState, type AdminContext } from '../src/admin/context.js';
import { StatsStore } from '../src/base/stats/store.js';
import { Logging } from '../src/base/util/log.js';
import type { ClusterManagerView, ClusterSnapshot } from '../src/core/upstream/types.js';

export const SHA = '0123456789abcdef0123456789abcdef01234567';
export const STARTED_AT = 1_700_000_000_000;

const DEFAULT_CB = { maxConnections: 1024, maxPendingRequests: 1024, maxRequests: 1024, maxRetries: 3 };

export const STATIC_CLUSTER: ClusterSnapshot = {
  name: 'static_backend',
  addedViaApi: false,
  circuitBreakers: { default: DEFAULT_CB, high: DEFAULT_CB },
  hosts: [
    {
      address: '127.0.0.1',
      port: 9000,
      hostname: '',
      stats: { cx_active: 1, cx_connect_fail: 0, cx_total: 3, rq_active: 0, rq_error: 0, rq_success: 7, rq_timeout: 0, rq_total: 7 },
      failedActiveHc: false,
      failedOutlierCheck: false,
      weight: 1,
      region: '',
      zone: '',
      canary: false,
      successRate: -1,
    },
  ],
};

export const REGISTRY_CLUSTER: ClusterSnapshot = {
  name: 'go.mesh.srv.greeter',
  addedViaApi: true,
  outlier: { successRateAverage: 87.5, successRateEjectionThreshold: -1 },
  circuitBreakers: { default: DEFAULT_CB, high: { maxConnections: 2048, maxPendingRequests: 512, maxRequests: 4096, maxRetries: 5 } },
  hosts: [
    {
      address: '10.0.0.1',
      port: 8080,
      hostname: 'node-1',
      stats: { cx_active: 2, cx_connect_fail: 1, cx_total: 5, rq_active: 1, rq_error: 12, rq_success: 30, rq_timeout: 2, rq_total: 44 },
      failedActiveHc: false,
      failedOutlierCheck: true,
      weight: 5,
      region: 'eu-west',
      zone: 'eu-west-1a',
      canary: false,
      successRate: 71.4,
      version: 'v1',
    },
    {
      address: '10.0.0.2',
      port: 8080,
      hostname: 'node-2',
      stats: { cx_active: 0, cx_connect_fail: 4, cx_total: 4, rq_active: 0, rq_error: 0, rq_success: 0, rq_timeout: 0, rq_total: 0 },
      failedActiveHc: true,
      failedOutlierCheck: false,
      weight: 100,
      region: 'eu-west',
      zone: 'eu-west-1b',
      canary: true,
      successRate: -1,
      version: 'v2',
    },
  ],
};

export const FAKE_VIEW: ClusterManagerView = {
  versionInfo: () => '17',
  clusters: () => [REGISTRY_CLUSTER, STATIC_CLUSTER].sort((a, b) => (a.name < b.name ? -1 : 1)),
};

/** pino destination that drops everything. */
export const silent = { write: (_: string) => undefined };

export interface Running {
  admin: AdminServer;
  ctx: AdminContext;
  base: string;
  port: number;
  clock: { now: number };
  quitCalls: number;
  close: () => Promise<void>;
}

export async function startAdmin(overrides: Partial<AdminContext> = {}): Promise<Running> {
  const clock = { now: STARTED_AT + 3_500 };
  const server = new ServerState({
    sha: SHA,
    version: '1.2.3',
    status: 'Clean',
    buildType: 'RELEASE',
    startedAt: STARTED_AT,
    firstStartedAt: STARTED_AT - 10_000,
    now: () => clock.now,
  });
  const running = {} as Running;
  running.quitCalls = 0;
  const ctx: AdminContext = {
    stats: new StatsStore(),
    logging: new Logging({ level: 'info', destination: silent }),
    clusters: FAKE_VIEW,
    server,
    quit: async () => {
      running.quitCalls++;
    },
    ...overrides,
  };
  const admin = new AdminServer(ctx);
  const { port } = await admin.listen('127.0.0.1:0');
  Object.assign(running, { admin, ctx, port, base: `http://127.0.0.1:${port}`, clock, close: () => admin.close() });
  return running;
}

export interface Got {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/** GET (or options.method) base + path with the tests' HTTP client (helpers.ts http). */
export async function get(base: string, path: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<Got> {
  const res = await http(options.method ?? 'GET', base + path, { headers: options.headers });
  return { status: res.status, body: res.text, headers: res.headers };
}
