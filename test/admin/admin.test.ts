/** The admin interface against a real AdminServer on 127.0.0.1:0 (exact bytes where they matter). */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { tempDir, waitFor, sleep } from '../helpers.js';
import { startAdmin, get, SHA, STARTED_AT, type Running } from '../admin-fixtures.js';
import { hotRestartVersion } from '../../src/admin/hot-restart.js';
import { AdminServer, parseAdminAddress } from '../../src/admin/server.js';
import { parseQuery } from '../../src/admin/query.js';
import { healthFlags, renderClustersJson, renderClustersText } from '../../src/admin/clusters.js';

/**
 * Proves that refused requests ran no quit: a last, allowed POST /quitquitquit is the marker. Its
 * quit runs once its answer is flushed, after every earlier answer, so once it is counted any quit
 * from a refused request would be counted too.
 */
async function assertQuitOnlyByMarker(a: Running, before: number, headers: Record<string, string> = {}): Promise<void> {
  assert.equal((await get(a.base, '/quitquitquit', { method: 'POST', headers })).status, 200);
  await waitFor(() => a.quitCalls >= before + 1);
  assert.equal(a.quitCalls, before + 1, 'only the marker quit ran');
}

const HELP =
  'admin commands are:\n' +
  '  /: print out list of admin commands\n' +
  '  /certs: print certs on machine\n' +
  '  /clusters: upstream cluster status\n' +
  '  /cpuprofiler: enable/disable the CPU profiler\n' +
  '  /healthcheck/fail: cause the server to fail health checks\n' +
  '  /healthcheck/ok: cause the server to pass health checks\n' +
  '  /help: print out list of admin commands\n' +
  '  /hot_restart_version: print the hot restart compatibility version\n' +
  '  /logging: query/change logging levels\n' +
  '  /quitquitquit: exit the server\n' +
  '  /ready: print server state, return 200 if LIVE, otherwise return 503\n' +
  '  /reset_counters: reset all counters to zero\n' +
  '  /server_info: print server version/status information\n' +
  '  /stats: print server stats\n' +
  '  /stats/prometheus: print server stats in prometheus format\n';

const HELP_WITH_ROUTES = HELP.replace(
  '  /server_info:',
  '  /routes: print out currently loaded dynamic HTTP route tables\n  /server_info:',
);

const CLUSTERS_TEXT = `version_info::17
go.mesh.srv.greeter::outlier::success_rate_average::87.5
go.mesh.srv.greeter::outlier::success_rate_ejection_threshold::-1
go.mesh.srv.greeter::default_priority::max_connections::1024
go.mesh.srv.greeter::default_priority::max_pending_requests::1024
go.mesh.srv.greeter::default_priority::max_requests::1024
go.mesh.srv.greeter::default_priority::max_retries::3
go.mesh.srv.greeter::high_priority::max_connections::2048
go.mesh.srv.greeter::high_priority::max_pending_requests::512
go.mesh.srv.greeter::high_priority::max_requests::4096
go.mesh.srv.greeter::high_priority::max_retries::5
go.mesh.srv.greeter::added_via_api::true
go.mesh.srv.greeter::10.0.0.1:8080::cx_active::2
go.mesh.srv.greeter::10.0.0.1:8080::cx_connect_fail::1
go.mesh.srv.greeter::10.0.0.1:8080::cx_total::5
go.mesh.srv.greeter::10.0.0.1:8080::rq_active::1
go.mesh.srv.greeter::10.0.0.1:8080::rq_error::12
go.mesh.srv.greeter::10.0.0.1:8080::rq_success::30
go.mesh.srv.greeter::10.0.0.1:8080::rq_timeout::2
go.mesh.srv.greeter::10.0.0.1:8080::rq_total::44
go.mesh.srv.greeter::10.0.0.1:8080::hostname::node-1
go.mesh.srv.greeter::10.0.0.1:8080::health_flags::/failed_outlier_check
go.mesh.srv.greeter::10.0.0.1:8080::weight::5
go.mesh.srv.greeter::10.0.0.1:8080::region::eu-west
go.mesh.srv.greeter::10.0.0.1:8080::zone::eu-west-1a
go.mesh.srv.greeter::10.0.0.1:8080::canary::false
go.mesh.srv.greeter::10.0.0.1:8080::success_rate::71.4
go.mesh.srv.greeter::10.0.0.1:8080::version::v1
go.mesh.srv.greeter::10.0.0.2:8080::cx_active::0
go.mesh.srv.greeter::10.0.0.2:8080::cx_connect_fail::4
go.mesh.srv.greeter::10.0.0.2:8080::cx_total::4
go.mesh.srv.greeter::10.0.0.2:8080::rq_active::0
go.mesh.srv.greeter::10.0.0.2:8080::rq_error::0
go.mesh.srv.greeter::10.0.0.2:8080::rq_success::0
go.mesh.srv.greeter::10.0.0.2:8080::rq_timeout::0
go.mesh.srv.greeter::10.0.0.2:8080::rq_total::0
go.mesh.srv.greeter::10.0.0.2:8080::hostname::node-2
go.mesh.srv.greeter::10.0.0.2:8080::health_flags::/failed_active_hc
go.mesh.srv.greeter::10.0.0.2:8080::weight::100
go.mesh.srv.greeter::10.0.0.2:8080::region::eu-west
go.mesh.srv.greeter::10.0.0.2:8080::zone::eu-west-1b
go.mesh.srv.greeter::10.0.0.2:8080::canary::true
go.mesh.srv.greeter::10.0.0.2:8080::success_rate::-1
go.mesh.srv.greeter::10.0.0.2:8080::version::v2
static_backend::default_priority::max_connections::1024
static_backend::default_priority::max_pending_requests::1024
static_backend::default_priority::max_requests::1024
static_backend::default_priority::max_retries::3
static_backend::high_priority::max_connections::1024
static_backend::high_priority::max_pending_requests::1024
static_backend::high_priority::max_requests::1024
static_backend::high_priority::max_retries::3
static_backend::added_via_api::false
static_backend::127.0.0.1:9000::cx_active::1
static_backend::127.0.0.1:9000::cx_connect_fail::0
static_backend::127.0.0.1:9000::cx_total::3
static_backend::127.0.0.1:9000::rq_active::0
static_backend::127.0.0.1:9000::rq_error::0
static_backend::127.0.0.1:9000::rq_success::7
static_backend::127.0.0.1:9000::rq_timeout::0
static_backend::127.0.0.1:9000::rq_total::7
static_backend::127.0.0.1:9000::hostname::
static_backend::127.0.0.1:9000::health_flags::healthy
static_backend::127.0.0.1:9000::weight::1
static_backend::127.0.0.1:9000::region::
static_backend::127.0.0.1:9000::zone::
static_backend::127.0.0.1:9000::canary::false
static_backend::127.0.0.1:9000::success_rate::-1
static_backend::127.0.0.1:9000::version::
`;

const cb = (priority: string, c: number, p: number, r: number, t: number) => ({
  priority,
  max_connections: c,
  max_pending_requests: p,
  max_requests: r,
  max_retries: t,
});
const stats = (cf: number, ct: number, re: number, rs: number, rt: number, rtot: number, ca: number, ra: number) => [
  { name: 'cx_connect_fail', value: String(cf), type: 'COUNTER' },
  { name: 'cx_total', value: String(ct), type: 'COUNTER' },
  { name: 'rq_error', value: String(re), type: 'COUNTER' },
  { name: 'rq_success', value: String(rs), type: 'COUNTER' },
  { name: 'rq_timeout', value: String(rt), type: 'COUNTER' },
  { name: 'rq_total', value: String(rtot), type: 'COUNTER' },
  { name: 'cx_active', value: String(ca), type: 'GAUGE' },
  { name: 'rq_active', value: String(ra), type: 'GAUGE' },
];
const CLUSTERS_JSON = {
  version_info: '17',
  cluster_statuses: [
    {
      name: 'go.mesh.srv.greeter',
      added_via_api: true,
      success_rate_average: { value: 87.5 },
      success_rate_ejection_threshold: { value: -1 },
      circuit_breakers: { thresholds: [cb('DEFAULT', 1024, 1024, 1024, 3), cb('HIGH', 2048, 512, 4096, 5)] },
      host_statuses: [
        {
          address: { socket_address: { protocol: 'TCP', address: '10.0.0.1', port_value: 8080 } },
          stats: stats(1, 5, 12, 30, 2, 44, 2, 1),
          health_status: { failed_active_health_check: false, failed_outlier_check: true, eds_health_status: 'HEALTHY' },
          success_rate: { value: 71.4 },
          weight: 5,
          hostname: 'node-1',
          locality: { region: 'eu-west', zone: 'eu-west-1a' },
          canary: false,
          version: 'v1',
        },
        {
          address: { socket_address: { protocol: 'TCP', address: '10.0.0.2', port_value: 8080 } },
          stats: stats(4, 4, 0, 0, 0, 0, 0, 0),
          health_status: { failed_active_health_check: true, failed_outlier_check: false, eds_health_status: 'HEALTHY' },
          success_rate: { value: -1 },
          weight: 100,
          hostname: 'node-2',
          locality: { region: 'eu-west', zone: 'eu-west-1b' },
          canary: true,
          version: 'v2',
        },
      ],
    },
    {
      name: 'static_backend',
      added_via_api: false,
      circuit_breakers: { thresholds: [cb('DEFAULT', 1024, 1024, 1024, 3), cb('HIGH', 1024, 1024, 1024, 3)] },
      host_statuses: [
        {
          address: { socket_address: { protocol: 'TCP', address: '127.0.0.1', port_value: 9000 } },
          stats: stats(0, 3, 0, 7, 0, 7, 1, 0),
          health_status: { failed_active_health_check: false, failed_outlier_check: false, eds_health_status: 'HEALTHY' },
          success_rate: { value: -1 },
          weight: 1,
          hostname: '',
          locality: { region: '', zone: '' },
          canary: false,
          version: '',
        },
      ],
    },
  ],
};

describe('admin server', () => {
  let r: Running;
  before(async () => {
    r = await startAdmin();
  });
  after(async () => {
    await r.close();
  });

  test('/help and / list the commands, sorted by byte order', async () => {
    for (const path of ['/help', '/']) {
      const res = await get(r.base, path);
      assert.equal(res.status, 200);
      assert.equal(res.body, HELP);
    }
  });

  test('unknown path: 404 with the command list; the match is exact', async () => {
    for (const path of ['/nope', '/statsfoo', '/stats/', '/help/', '/routes']) {
      const res = await get(r.base, path);
      assert.equal(res.status, 404, path);
      assert.equal(res.body, 'invalid path. ' + HELP);
    }
  });

  test('headers on every response', async () => {
    for (const [path, type] of [
      ['/help', 'text/plain; charset=UTF-8'],
      ['/nope', 'text/plain; charset=UTF-8'],
      ['/stats', 'text/plain; charset=UTF-8'],
      ['/stats?format=json', 'application/json'],
      ['/clusters?format=json', 'application/json'],
      ['/certs', 'application/json'],
      ['/stats?format=prometheus', 'text/plain; version=0.0.4; charset=UTF-8'],
      ['/ready', 'text/plain; charset=UTF-8'],
    ] as const) {
      const res = await get(r.base, path);
      assert.equal(res.headers['content-type'], type, path);
      assert.equal(res.headers['cache-control'], 'no-cache, max-age=0', path);
      assert.equal(res.headers['x-content-type-options'], 'nosniff', path);
    }
  });

  test('/server_info: one line with sha, version, state, uptimes and epoch', async () => {
    const res = await get(r.base, '/server_info');
    assert.equal(res.status, 200);
    assert.equal(res.body, `mesh ${SHA}/1.2.3/Clean/RELEASE live 3 13 0\n`);
    r.clock.now = STARTED_AT + 61_999;
    assert.equal((await get(r.base, '/server_info')).body, `mesh ${SHA}/1.2.3/Clean/RELEASE live 61 71 0\n`);
    r.clock.now = STARTED_AT + 3_500;
  });

  test('/clusters: exact text', async () => {
    const res = await get(r.base, '/clusters');
    assert.equal(res.status, 200);
    assert.equal(res.body, CLUSTERS_TEXT);
    assert.equal((await get(r.base, '/clusters?format=text')).body, CLUSTERS_TEXT);
  });

  test('/clusters?format=json', async () => {
    const res = await get(r.base, '/clusters?format=json');
    assert.equal(res.status, 200);
    assert.ok(res.body.startsWith('{\n "version_info": "17",\n "cluster_statuses": [\n'), res.body.slice(0, 60));
    assert.ok(res.body.endsWith('}\n'));
    assert.deepEqual(JSON.parse(res.body), CLUSTERS_JSON);
    // byte for byte the layout of JSON.stringify(document, null, 1), as Envoy's protobuf JSON
    assert.equal(res.body, JSON.stringify(CLUSTERS_JSON, null, 1) + '\n');
    const bad = await get(r.base, '/clusters?format=yaml');
    assert.equal(bad.status, 400);
    assert.equal(bad.body, 'usage: /clusters?format=(json|text)\n\n');
  });

  test('/hot_restart_version: the CLI string, no trailing newline', async () => {
    const res = await get(r.base, '/hot_restart_version');
    assert.equal(res.status, 200);
    assert.equal(res.body, hotRestartVersion());
    assert.ok(!res.body.endsWith('\n'));
  });

  test('/logging: list, set all, set one, bad level, bad name, two parameters', async () => {
    const list = (levels: Record<string, string> = {}) =>
      'active loggers:\n' +
      ['admin', 'broker', 'client', 'config', 'gateway', 'hc', 'http', 'main', 'registry', 'router', 'server', 'sidecar', 'upstream']
        .map((s) => `  ${s}: ${levels[s] ?? levels['*'] ?? 'info'}\n`)
        .join('') +
      '\n';
    const usage =
      'usage: /logging?<name>=<level> (change single level)\n' +
      'usage: /logging?level=<level> (change all levels)\n' +
      'levels: trace debug info warning error critical off \n';

    let res = await get(r.base, '/logging');
    assert.equal(res.status, 200);
    assert.equal(res.body, list());

    res = await get(r.base, '/logging?level=warning', { method: 'POST' });
    assert.equal(res.status, 200);
    assert.equal(res.body, list({ '*': 'warning' }));
    assert.equal(r.ctx.logging.level('registry'), 'warning');

    res = await get(r.base, '/logging?upstream=trace');
    assert.equal(res.status, 200);
    assert.equal(res.body, list({ '*': 'warning', upstream: 'trace' }));
    assert.equal(r.ctx.logging.level('upstream'), 'trace');

    res = await get(r.base, '/logging?upstream=loud');
    assert.equal(res.status, 400);
    assert.equal(res.body, usage + list({ '*': 'warning', upstream: 'trace' }));

    res = await get(r.base, '/logging?nosuch=debug');
    assert.equal(res.status, 400);
    assert.equal(res.body, usage + list({ '*': 'warning', upstream: 'trace' }));

    res = await get(r.base, '/logging?admin=debug&http=debug');
    assert.equal(res.status, 400);
    assert.equal(r.ctx.logging.level('admin'), 'warning');

    res = await get(r.base, '/logging?level=info');
    assert.equal(res.body, list());
  });

  test('/cpuprofiler: bare is 400; y then n writes a .cpuprofile', async () => {
    const dir = tempDir('mesh-prof-');
    const p = await startAdmin({ profileDir: dir.path });
    try {
      for (const q of ['', '?enable', '?enable=yes', '?enable=y&x=1', '?x=y']) {
        const res = await get(p.base, '/cpuprofiler' + q);
        assert.equal(res.status, 400, q);
        assert.equal(res.body, '?enable=<y|n>\n');
      }
      let res = await get(p.base, '/cpuprofiler?enable=y', { method: 'POST' });
      assert.equal(res.status, 200);
      assert.equal(res.body, 'OK\n');
      // a second y while running is a no-op
      assert.equal((await get(p.base, '/cpuprofiler?enable=y')).body, 'OK\n');
      let x = 0;
      for (let i = 0; i < 2e5; i++) x += Math.sqrt(i);
      assert.ok(x > 0);
      res = await get(p.base, '/cpuprofiler?enable=n', { method: 'POST' });
      assert.equal(res.status, 200);
      const m = /^OK\n(.+\.cpuprofile)\n$/.exec(res.body);
      assert.ok(m, res.body);
      const file = m[1]!;
      assert.equal(dirname(file), dir.path);
      assert.ok(existsSync(file));
      const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: unknown[]; samples: unknown[] };
      assert.ok(Array.isArray(profile.nodes) && profile.nodes.length > 0);
      // n while stopped: nothing to write
      assert.equal((await get(p.base, '/cpuprofiler?enable=n')).body, 'OK\n');
    } finally {
      await p.close();
      dir.cleanup();
    }
  });

  test('/reset_counters zeroes counters, leaves gauges', async () => {
    const c = r.ctx.stats.counter('cluster.x.upstream_rq_total');
    c.inc(5);
    const g = r.ctx.stats.gauge('cluster.x.upstream_cx_active');
    g.set(3);
    const res = await get(r.base, '/reset_counters', { method: 'POST' });
    assert.equal(res.status, 200);
    assert.equal(res.body, 'OK\n');
    assert.equal(c.value, 0);
    assert.equal(g.value, 3);
    const text = (await get(r.base, '/stats?filter=^cluster\\.x\\.')).body;
    assert.equal(text, 'cluster.x.upstream_cx_active: 3\ncluster.x.upstream_rq_total: 0\n');
  });

  test('/healthcheck/fail drains; /healthcheck/ok restores', async () => {
    const events: string[] = [];
    const offFail = r.ctx.server.onFail(async () => {
      await sleep(5); // a hook that takes a while: the answer must wait for it (not an ordering sleep)
      events.push('withdrawn');
    });
    const offOk = r.ctx.server.onOk(() => {
      events.push('restored');
    });
    try {
      assert.equal((await get(r.base, '/ready')).body, 'LIVE\n');
      let res = await get(r.base, '/healthcheck/fail', { method: 'POST' });
      assert.equal(res.status, 200);
      assert.equal(res.body, 'OK\n');
      assert.deepEqual(events, ['withdrawn']); // hooks ran before the answer
      assert.equal((await get(r.base, '/server_info')).body, `mesh ${SHA}/1.2.3/Clean/RELEASE draining 3 13 0\n`);
      res = await get(r.base, '/ready');
      assert.equal(res.status, 503);
      assert.equal(res.body, 'DRAINING\n');
      assert.equal((await get(r.base, '/stats?filter=^server\\.live$')).body, 'server.live: 0\n');
      // failing twice does not run the hooks again
      await get(r.base, '/healthcheck/fail');
      assert.deepEqual(events, ['withdrawn']);

      res = await get(r.base, '/healthcheck/ok');
      assert.equal(res.status, 200);
      assert.equal(res.body, 'OK\n');
      assert.deepEqual(events, ['withdrawn', 'restored']);
      assert.equal((await get(r.base, '/server_info')).body, `mesh ${SHA}/1.2.3/Clean/RELEASE live 3 13 0\n`);
      res = await get(r.base, '/ready');
      assert.equal(res.status, 200);
      assert.equal(res.body, 'LIVE\n');
    } finally {
      offFail();
      offOk();
    }
  });

  test('cross-site requests to mutating endpoints get 403 and nothing runs', async () => {
    const quitsBefore = r.quitCalls;
    const refused: Array<Record<string, string>> = [
      { 'Sec-Fetch-Site': 'cross-site' },
      { 'Sec-Fetch-Site': 'same-site' },
      { Origin: 'http://evil.example' },
      { Origin: 'null' },
      { Origin: `http://127.0.0.1:${r.port + 1}` },
      { Origin: `https://127.0.0.1:${r.port}` },
    ];
    for (const headers of refused) {
      for (const method of ['GET', 'POST']) {
        const res = await get(r.base, '/quitquitquit', { method, headers });
        assert.equal(res.status, 403, JSON.stringify(headers));
        assert.equal(res.body, 'Forbidden: /quitquitquit changes state and refuses cross-site requests.\n');
      }
    }
    await assertQuitOnlyByMarker(r, quitsBefore);
    r.ctx.stats.counter('cross.site').inc(4);
    assert.equal((await get(r.base, '/reset_counters', { headers: { 'Sec-Fetch-Site': 'cross-site' } })).status, 403);
    assert.equal(r.ctx.stats.counter('cross.site').value, 4);
    assert.equal((await get(r.base, '/healthcheck/fail', { headers: { Origin: 'http://evil.example' } })).status, 403);
    assert.equal(r.ctx.server.state, 'live');
    assert.equal((await get(r.base, '/logging?level=off', { headers: { Origin: 'http://evil.example' } })).status, 403);
    assert.equal(r.ctx.logging.level('main'), 'info');
    // reading is allowed from anywhere; /logging without parameters only reads
    assert.equal((await get(r.base, '/stats', { headers: { 'Sec-Fetch-Site': 'cross-site' } })).status, 200);
    assert.equal((await get(r.base, '/logging', { headers: { 'Sec-Fetch-Site': 'cross-site' } })).status, 200);
    // the admin's own origin (with X-Mesh-Admin: see admin-host.test.ts), a direct navigation and a plain client are fine
    for (const headers of [
      { Origin: `http://127.0.0.1:${r.port}`, 'X-Mesh-Admin': '1' } as Record<string, string>,
      { Origin: `http://localhost:${r.port}`, 'X-Mesh-Admin': '1' },
      { 'Sec-Fetch-Site': 'same-origin', 'X-Mesh-Admin': '1' },
      { 'Sec-Fetch-Site': 'none' },
      {},
    ]) {
      assert.equal((await get(r.base, '/reset_counters', { headers })).status, 200, JSON.stringify(headers));
    }
  });

  test('PUT, DELETE and HEAD get 405 and nothing runs', async () => {
    const quitsBefore = r.quitCalls;
    for (const method of ['PUT', 'DELETE', 'PATCH']) {
      const res = await get(r.base, '/quitquitquit', { method });
      assert.equal(res.status, 405);
      assert.equal(res.body, `Method ${method} not allowed, GET or POST required.`);
      assert.equal(res.headers.allow, 'GET, POST');
    }
    assert.equal((await get(r.base, '/stats', { method: 'HEAD' })).status, 405);
    await assertQuitOnlyByMarker(r, quitsBefore);
  });

  test('/certs without certificates', async () => {
    const res = await get(r.base, '/certs');
    assert.equal(res.status, 200);
    assert.equal(res.body, '{\n "certificates": []\n}\n');
  });

  test('/quitquitquit answers OK then calls quit', async () => {
    const q = await startAdmin();
    try {
      const res = await get(q.base, '/quitquitquit', { method: 'POST' });
      assert.equal(res.status, 200);
      assert.equal(res.body, 'OK\n');
      await waitFor(() => q.quitCalls === 1);
    } finally {
      await q.close();
    }
  });

  test('/quitquitquit?process=ID quits only when ID is this process (mesh stop and a stale record)', async () => {
    const q = await startAdmin({ processId: 'vm-42-abcdef' });
    try {
      const other = await get(q.base, '/quitquitquit?process=vm-7-000000', { method: 'POST' });
      assert.equal(other.status, 409);
      assert.equal(other.body, 'this is process vm-42-abcdef, not vm-7-000000: not quitting\n');
      const forged = await get(q.base, '/quitquitquit?process=%1B%5B2J', { method: 'POST' });
      assert.equal(forged.body, 'this is process vm-42-abcdef, not \\x1b[2J: not quitting\n');
      assert.equal(q.quitCalls, 0);
      const own = await get(q.base, '/quitquitquit?process=vm-42-abcdef', { method: 'POST' });
      assert.equal(own.status, 200);
      assert.equal(own.body, 'OK\n');
      await waitFor(() => q.quitCalls === 1);
    } finally {
      await q.close();
    }
  });
});

describe('admin server options', () => {
  test('attacker: /traffic and /quitquitquit?process= need the token, and a foreign Host is refused before either', async () => {
    const report = { process: { id: 'vm-1-aaaaaa', kind: 'api', name: '', mtls: 'off', started_ms: 1 }, latency_bounds_ms: [], clusters: [], routes: [], callers: [] };
    const t = await startAdmin({ token: 's3cret-token', processId: 'vm-1-aaaaaa', traffic: () => report });
    try {
      for (const headers of [{} as Record<string, string>, { Authorization: 'Bearer wrong' }]) {
        assert.equal((await get(t.base, '/traffic', { headers })).status, 401);
        assert.equal((await get(t.base, '/quitquitquit?process=vm-1-aaaaaa', { method: 'POST', headers })).status, 401);
      }
      const foreign = await get(t.base, '/traffic', { headers: { Authorization: 'Bearer s3cret-token', Host: 'evil.example' } });
      assert.notEqual(foreign.status, 200);
      assert.ok(!foreign.body.includes('vm-1-aaaaaa'), foreign.body);
      const ok = await get(t.base, '/traffic', { headers: { Authorization: 'Bearer s3cret-token' } });
      assert.equal(ok.status, 200);
      assert.equal(ok.body, `${JSON.stringify(report)}\n`);
      assert.equal(t.quitCalls, 0);
    } finally {
      await t.close();
    }
  });

  test('token: every request needs Authorization: Bearer <token>', async () => {
    const t = await startAdmin({ token: 's3cret-token' });
    try {
      for (const headers of [{} as Record<string, string>, { Authorization: 'Bearer wrong' }, { Authorization: 'Basic czNjcmV0LXRva2Vu' }, { Authorization: 'Bearer s3cret-token-and-more' }]) {
        const res = await get(t.base, '/stats', { headers });
        assert.equal(res.status, 401, JSON.stringify(headers));
        assert.equal(res.headers['www-authenticate'], 'Bearer realm="mesh admin"');
        assert.equal(res.body, 'Unauthorized: this admin interface needs "Authorization: Bearer <token>"\n');
      }
      // also before the 404 (no command list without the token), and nothing runs
      assert.equal((await get(t.base, '/nope')).status, 401);
      assert.equal((await get(t.base, '/quitquitquit')).status, 401);
      await assertQuitOnlyByMarker(t, 0, { Authorization: 'Bearer s3cret-token' });
      const res = await get(t.base, '/ready', { headers: { Authorization: 'Bearer s3cret-token' } });
      assert.equal(res.status, 200);
      assert.equal(res.body, 'LIVE\n');
      assert.equal((await get(t.base, '/help', { headers: { authorization: 'bearer s3cret-token' } })).status, 200);
    } finally {
      await t.close();
    }
  });

  test('listen fails cleanly on a port in use', async () => {
    const t = await startAdmin();
    const other = new AdminServer(t.ctx);
    try {
      await assert.rejects(other.listen(`127.0.0.1:${t.port}`), /EADDRINUSE/);
    } finally {
      await other.close();
      await t.close();
    }
  });

  test('/routes exists only with a routes provider', async () => {
    const tables = [
      { routeConfigName: 'gateway', versionInfo: '12', table: [{ path: '/greeter/say', service: 'go.mesh.api.greeter' }] },
      { routeConfigName: 'proxy', versionInfo: '3', table: { routes: [] } },
    ];
    const t = await startAdmin({ routes: () => tables });
    try {
      assert.equal((await get(t.base, '/help')).body, HELP_WITH_ROUTES);
      let res = await get(t.base, '/routes');
      assert.equal(res.status, 200);
      assert.equal(res.headers['content-type'], 'application/json');
      assert.equal(
        res.body,
        '[\n' +
          '{\n"version_info": "12",\n"route_config_name": "gateway",\n"route_table_dump": [{"path":"/greeter/say","service":"go.mesh.api.greeter"}]\n}\n' +
          ',{\n"version_info": "3",\n"route_config_name": "proxy",\n"route_table_dump": {"routes":[]}\n}\n' +
          ']\n',
      );
      assert.deepEqual(JSON.parse(res.body), [
        { version_info: '12', route_config_name: 'gateway', route_table_dump: tables[0]!.table },
        { version_info: '3', route_config_name: 'proxy', route_table_dump: tables[1]!.table },
      ]);
      res = await get(t.base, '/routes?route_config_name=proxy');
      assert.equal(res.body, '[\n{\n"version_info": "3",\n"route_config_name": "proxy",\n"route_table_dump": {"routes":[]}\n}\n]\n');
      assert.equal((await get(t.base, '/routes?route_config_name=none')).body, '[\n]\n');
      res = await get(t.base, '/routes?name=proxy');
      assert.equal(res.status, 400);
      assert.match(res.body, /"general_usage": "\/routes \(dump all dynamic HTTP route tables\)\."/);
    } finally {
      await t.close();
    }
  });

  test('/certs lists certificates with days until expiration', async () => {
    const t = await startAdmin({
      certs: () => [
        {
          path: '/etc/mesh/tls/server.crt',
          serialNumber: '7d6d5bdf430762049f53980908a16367255627ca',
          subjectAltNames: [{ dns: 'api.example.com' }, { ip_address: '127.0.0.1' }],
          validFrom: new Date('2023-11-01T00:00:00Z'),
          expiration: new Date('2023-11-24T22:13:30Z'), // now + 10 days + 6.5 s
        },
        {
          path: 'acme:api.example.com',
          serialNumber: '03',
          subjectAltNames: [],
          validFrom: new Date('2023-11-01T00:00:00Z'),
          expiration: new Date('2023-10-01T00:00:00Z'),
        },
      ],
    });
    try {
      const res = await get(t.base, '/certs');
      assert.equal(res.status, 200);
      assert.equal(
        res.body,
        `{
 "certificates": [
  {
   "ca_cert": [],
   "cert_chain": [
    {
     "path": "/etc/mesh/tls/server.crt",
     "serial_number": "7d6d5bdf430762049f53980908a16367255627ca",
     "subject_alt_names": [
      {
       "dns": "api.example.com"
      },
      {
       "ip_address": "127.0.0.1"
      }
     ],
     "days_until_expiration": "10",
     "valid_from": "2023-11-01T00:00:00Z",
     "expiration_time": "2023-11-24T22:13:30Z"
    }
   ]
  },
  {
   "ca_cert": [],
   "cert_chain": [
    {
     "path": "acme:api.example.com",
     "serial_number": "03",
     "subject_alt_names": [],
     "days_until_expiration": "0",
     "valid_from": "2023-11-01T00:00:00Z",
     "expiration_time": "2023-10-01T00:00:00Z"
    }
   ]
  }
 ]
}
`,
      );
      assert.equal((await get(t.base, '/stats?filter=until_first')).body, 'server.seconds_until_first_cert_expiring: 0\n');
    } finally {
      await t.close();
    }
  });

  test('no cluster manager: version_info::static', async () => {
    const t = await startAdmin({ clusters: undefined });
    try {
      assert.equal((await get(t.base, '/clusters')).body, 'version_info::static\n');
      assert.deepEqual(JSON.parse((await get(t.base, '/clusters?format=json')).body), { version_info: 'static', cluster_statuses: [] });
    } finally {
      await t.close();
    }
  });
});

describe('admin helpers', () => {
  test('query parsing: first duplicate wins, bare key is "", percent-decoding, + stays', () => {
    const q = parseQuery('a=1&a=2&usedonly&filter=%5Ecluster%5C.a+b%24&&bad=%zz&=x');
    assert.equal(q.get('a'), '1');
    assert.equal(q.get('usedonly'), '');
    assert.equal(q.get('filter'), '^cluster\\.a+b$');
    assert.equal(q.get('bad'), '%zz');
    assert.equal(q.get(''), 'x');
    assert.equal(parseQuery('').size, 0);
  });

  test('health flags concatenate with no separator', () => {
    assert.equal(healthFlags({ failedActiveHc: true, failedOutlierCheck: true }), '/failed_active_hc/failed_outlier_check');
    assert.equal(healthFlags({ failedActiveHc: false, failedOutlierCheck: false }), 'healthy');
  });

  test('IPv6 host keys are bracketed', () => {
    const view = {
      versionInfo: () => 'static',
      clusters: () => [
        {
          name: 'c',
          addedViaApi: false,
          circuitBreakers: {
            default: { maxConnections: 1, maxPendingRequests: 2, maxRequests: 3, maxRetries: 4 },
            high: { maxConnections: 1, maxPendingRequests: 2, maxRequests: 3, maxRetries: 4 },
          },
          hosts: [
            {
              address: '::1',
              port: 80,
              hostname: 'h',
              stats: { cx_active: 0, cx_connect_fail: 0, cx_total: 0, rq_active: 0, rq_error: 0, rq_success: 0, rq_timeout: 0, rq_total: 0 },
              failedActiveHc: false,
              failedOutlierCheck: false,
              weight: 1,
              region: '',
              zone: '',
              canary: false,
              successRate: NaN,
            },
          ],
        },
      ],
    };
    const text = renderClustersText(view).toString();
    assert.match(text, /^c::\[::1\]:80::cx_active::0$/m);
    assert.match(text, /^c::\[::1\]:80::success_rate::-1$/m);
    // JSON: odd strings escaped, a cluster without hosts, the same layout as JSON.stringify
    const odd = { ...view.clusters()[0]!, name: 'we"ird\\name\n', hosts: [] };
    const json = renderClustersJson({ versionInfo: () => 'v"1', clusters: () => [view.clusters()[0]!, odd] }).toString();
    const parsed = JSON.parse(json) as { version_info: string; cluster_statuses: Array<{ name: string; host_statuses: unknown[] }> };
    assert.equal(json, JSON.stringify(parsed, null, 1) + '\n');
    assert.equal(parsed.version_info, 'v"1');
    assert.equal(parsed.cluster_statuses[1]!.name, 'we"ird\\name\n');
    assert.deepEqual(parsed.cluster_statuses[1]!.host_statuses, []);
  });

  test('admin address parsing', () => {
    assert.deepEqual(parseAdminAddress('127.0.0.1:9901'), { host: '127.0.0.1', port: 9901 });
    // `:PORT` means every interface, as for every address; a bare port is refused (docs/admin.md).
    assert.deepEqual(parseAdminAddress(':9901'), { host: '0.0.0.0', port: 9901 });
    assert.throws(() => parseAdminAddress('9902'), /invalid admin address "9902": use host:port \(or :port for every interface\)/);
    assert.throws(() => parseAdminAddress('::1:9901'), /use \[::1\]:9901/);
    assert.deepEqual(parseAdminAddress('0.0.0.0:9901'), { host: '0.0.0.0', port: 9901 });
    assert.deepEqual(parseAdminAddress('[::1]:9901'), { host: '::1', port: 9901 });
    assert.throws(() => parseAdminAddress('localhost:http'), /invalid admin address/);
    assert.throws(() => parseAdminAddress('localhost:70000'), /invalid admin address/);
  });
});
