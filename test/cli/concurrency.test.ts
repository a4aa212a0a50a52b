/**
 * --concurrency (docs/architecture.md, "Concurrency"), with real processes on loopback: `mesh api
 * --concurrency=2` serves fresh connections from both workers; its one admin interface sums the
 * workers' stats (text, JSON, Prometheus, histograms), merges /clusters and names the workers in
 * /server_info; /healthcheck/fail reaches every worker; a worker killed with SIGKILL is started
 * again and counted; SIGTERM drains every worker and exits 0 with the in-flight request answered.
 * Bad values exit 2 naming the flag.
 */
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { spawnSync } from 'node:child_process';
import { freePort, http, PRINTED, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { parseArgs } from '../../src/cli/flags.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { mergeProcessFamilies, mergeSnapshots, snapshotStore } from '../../src/base/stats/merge.js';
import { mergeClusterViews } from '../../src/admin/aggregate.js';
import { reusePortSupported } from '../../src/base/http/reuse-port.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');

/** A stat's value in the merged text /stats (undefined when absent). */
async function stat(admin: string, name: string): Promise<number | undefined> {
  const res = await http('GET', `${admin}/stats?filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(res.text);
  return m ? Number(m[1]) : undefined;
}

/** The worker pids /server_info lists, by index. */
async function workerPids(admin: string): Promise<Map<number, number>> {
  const line = (await http('GET', `${admin}/server_info`)).text;
  const m = / concurrency=(\d+) workers=([\d:,]*)\n$/.exec(line);
  assert.ok(m, line);
  return new Map(m[2]!.split(',').filter(Boolean).map((w) => w.split(':').map(Number) as [number, number]));
}

/** Whether the workers bind the port themselves (reusePort: Linux, Node 22.12+) on the Node running this test. */
const REUSE_PORT = reusePortSupported();

/** The pids holding a listening TCP socket on the port (`ss -ltnp`), sorted; undefined when ss is absent. */
function listenerPids(port: number): number[] | undefined {
  const ss = spawnSync('ss', ['-Hltnp', `sport = :${port}`], { encoding: 'utf8' });
  if (ss.error) return undefined;
  return [...ss.stdout.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1])).sort((a, b) => a - b);
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('mesh api --concurrency=2', () => {
  const dir = tempDir();
  let who: RunningProcess;
  let gw: RunningProcess;
  let url = '';
  let admin = '';

  before(async () => {
    who = startProcess(['--import', 'tsx', WHO, `--registry_address=${dir.path}`, '--log_level=warning'], {}, '');
    await who.waitForOutput(/go\.mesh\.srv\.who listening/, 15000);
    gw = startProcess([
      'api',
      '--concurrency=2',
      '--address=127.0.0.1:0',
      '--admin_address=127.0.0.1:0',
      `--registry_address=${dir.path}`,
      '--handler=rpc',
      '--namespace=go.mesh.srv',
      '--stats_histograms',
      '--drain_delay=200ms',
      '--log_level=warning',
    ]);
    url = `http://127.0.0.1:${await gw.waitForPort(PRINTED.api, 20000)}`;
    admin = `http://127.0.0.1:${await gw.waitForPort(PRINTED.apiAdmin)}`;
    await gw.waitForOutput(/mesh api concurrency 2 \(worker pids \d+ \d+; /);
    // Both workers know the service (each has its own registry watch).
    for (let i = 0; i < 4; i++) await waitFor(async () => (await http('GET', `${url}/who/am`)).status === 200, 10000);
  });

  after(async () => {
    await gw?.stop('SIGKILL');
    await who?.stop('SIGKILL');
    dir.cleanup();
  });

  test('fresh connections are served by both workers; /stats sums the workers in every format', async () => {
    const before = (await stat(admin, 'http.gateway.downstream_rq_total'))!;
    assert.ok(before >= 4, `warm-up requests counted: ${before}`);
    for (let i = 0; i < 20; i++) {
      const res = await http('GET', `${url}/who/am`);
      assert.equal(res.status, 200, res.text);
    }
    const total = before + 20;
    assert.equal(await stat(admin, 'http.gateway.downstream_rq_total'), total);
    const w0 = (await stat(admin, 'server.worker.0.downstream_rq_total'))!;
    const w1 = (await stat(admin, 'server.worker.1.downstream_rq_total'))!;
    assert.ok(w0 > 0 && w1 > 0, `each worker served some: ${w0} + ${w1}`);
    assert.equal(w0 + w1, total);
    assert.equal(await stat(admin, 'server.concurrency'), 2);
    assert.equal(await stat(admin, 'server.worker_restarts'), 0);
    // A state-like gauge is not summed: the one host is healthy in both workers.
    assert.equal(await stat(admin, 'cluster.go.mesh.srv.who.membership_healthy'), 1);
    assert.equal(await stat(admin, 'cluster.go.mesh.srv.who.upstream_rq_total'), total);

    const json = (await http('GET', `${admin}/stats?format=json&filter=^http\\.gateway\\.downstream_rq_(total|time)$`)).json<{
      stats: Array<{ name?: string; value?: number; histograms?: { computed_quantiles: Array<{ name: string }> } }>;
    }>();
    assert.deepEqual(json.stats.find((s) => s.name === 'http.gateway.downstream_rq_total'), { name: 'http.gateway.downstream_rq_total', value: total });
    assert.equal(json.stats.find((s) => s.histograms)?.histograms?.computed_quantiles[0]?.name, 'http.gateway.downstream_rq_time');

    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    assert.match(prom, new RegExp(`^mesh_http_downstream_rq_total\\{http_conn_manager_prefix="gateway"\\} ${total}$`, 'm'));
    assert.match(prom, new RegExp(`^mesh_server_worker_downstream_rq_total\\{worker_id="0"\\} ${w0}$`, 'm'));
    assert.match(prom, new RegExp(`^mesh_server_worker_downstream_rq_total\\{worker_id="1"\\} ${w1}$`, 'm'));
    // Histograms merged bucket by bucket: the +Inf bucket and the count hold every request.
    assert.match(prom, new RegExp(`^mesh_http_downstream_rq_time_count\\{http_conn_manager_prefix="gateway"\\} ${total}$`, 'm'));
    assert.match(prom, new RegExp(`^mesh_http_downstream_rq_time_bucket\\{http_conn_manager_prefix="gateway",le="\\+Inf"\\} ${total}$`, 'm'));
    // Process metrics cover the primary and both workers: three processes' CPU, one start time.
    assert.match(prom, /^process_cpu_seconds_total [\d.e+-]+$/m);
    assert.equal(prom.match(/^process_start_time_seconds /gm)?.length, 1);

    // usedonly and filter still apply to the merged stats.
    const used = (await http('GET', `${admin}/stats?usedonly`)).text;
    assert.doesNotMatch(used, /^server\.worker_restarts:/m);
    assert.match((await http('GET', `${admin}/stats`)).text, /^server\.worker_restarts: 0$/m);
    assert.equal((await http('GET', `${admin}/stats?filter=^server\\.concurrency$`)).text, 'server.concurrency: 2\n');
  });

  test('/clusters merges the workers: host counters summed, one host listed once', async () => {
    const upstream = (await stat(admin, 'cluster.go.mesh.srv.who.upstream_rq_total'))!;
    const text = (await http('GET', `${admin}/clusters`)).text;
    const hosts = [...text.matchAll(/^go\.mesh\.srv\.who::([\d.]+:\d+)::rq_total::(\d+)$/gm)];
    assert.equal(hosts.length, 1, text);
    assert.equal(Number(hosts[0]![2]), upstream);
    assert.match(text, /^go\.mesh\.srv\.who::[\d.]+:\d+::health_flags::healthy$/m);
    const json = (await http('GET', `${admin}/clusters?format=json`)).json<{
      cluster_statuses: Array<{ name: string; host_statuses: Array<{ stats: Array<{ name: string; value: string }> }> }>;
    }>();
    const cluster = json.cluster_statuses.find((c) => c.name === 'go.mesh.srv.who')!;
    assert.equal(cluster.host_statuses.length, 1);
    assert.equal(cluster.host_statuses[0]!.stats.find((s) => s.name === 'rq_total')?.value, String(upstream));
    assert.equal((await http('GET', `${admin}/clusters?format=yaml`)).status, 400);
  });

  test('/server_info names the concurrency and the workers', async () => {
    const line = (await http('GET', `${admin}/server_info`)).text;
    assert.match(line, /^mesh [0-9a-f]{40}\/[^ ]+ live \d+ \d+ 0 concurrency=2 workers=0:\d+,1:\d+\n$/);
    const pids = await workerPids(admin);
    assert.equal(pids.size, 2);
    assert.notEqual(pids.get(0), pids.get(1));
    assert.ok(![...pids.values()].includes(gw.child.pid!));
  });

  test(`the workers share the port ${REUSE_PORT ? 'each with its own socket (reusePort)' : 'through the primary (no reusePort on this Node)'}`, async (t) => {
    const mode = REUSE_PORT ? 'each worker listens with reusePort' : 'the primary accepts the connections';
    assert.match(gw.output(), new RegExp(`^mesh api concurrency 2 \\(worker pids \\d+ \\d+; ${mode}\\)$`, 'm'));
    assert.equal(await stat(admin, 'server.concurrency_reuse_port'), REUSE_PORT ? 1 : 0);
    const holders = listenerPids(Number(new URL(url).port));
    if (!holders) return t.skip('ss (iproute2) is not installed: who holds the socket is not checked');
    const workers = [...(await workerPids(admin)).values()].sort((a, b) => a - b);
    // With reusePort the port given as :0 is the same for both workers, each holding a socket on it.
    assert.deepEqual(holders, REUSE_PORT ? workers : [gw.child.pid!]);
  });

  test('/healthcheck/fail reaches every worker; /healthcheck/ok brings them back', async () => {
    assert.equal((await http('POST', `${admin}/healthcheck/fail`)).status, 200);
    // Fresh connections go round-robin: several of them reach both workers.
    for (let i = 0; i < 6; i++) assert.equal((await http('GET', `${url}/_mesh/health`)).status, 503, `connection ${i}`);
    assert.equal((await http('GET', `${admin}/ready`)).text, 'DRAINING\n');
    assert.equal(await stat(admin, 'server.live'), 0);
    assert.equal((await http('POST', `${admin}/healthcheck/ok`)).status, 200);
    for (let i = 0; i < 6; i++) assert.equal((await http('GET', `${url}/_mesh/health`)).status, 200, `connection ${i}`);
    assert.equal(await stat(admin, 'server.live'), 1);
  });

  test('/reset_counters resets every worker', async () => {
    assert.equal((await http('POST', `${admin}/reset_counters`)).status, 200);
    assert.equal(await stat(admin, 'http.gateway.downstream_rq_total'), 0);
    for (let i = 0; i < 4; i++) assert.equal((await http('GET', `${url}/who/am`)).status, 200);
    assert.equal(await stat(admin, 'http.gateway.downstream_rq_total'), 4);
  });

  test('a worker killed with SIGKILL is started again and counted; requests keep succeeding', async () => {
    const pids = await workerPids(admin);
    const victim = pids.get(0)!;
    process.kill(victim, 'SIGKILL');
    await waitFor(async () => (await stat(admin, 'server.worker_restarts')) === 1, 10000);
    const after = await waitFor(async () => {
      const now = await workerPids(admin);
      return now.size === 2 && now.get(0) !== victim ? now : undefined;
    }, 15000);
    assert.equal(after.get(1), pids.get(1), 'the other worker kept running');
    assert.ok(!alive(victim));
    // With reusePort the new worker binds the same port (given as :0) again.
    if (REUSE_PORT) assert.deepEqual(listenerPids(Number(new URL(url).port)) ?? [...after.values()].sort((a, b) => a - b), [...after.values()].sort((a, b) => a - b));
    for (let i = 0; i < 10; i++) {
      const res = await http('GET', `${url}/who/am`);
      assert.equal(res.status, 200, res.text);
    }
    assert.ok(((await stat(admin, 'server.worker.0.downstream_rq_total')) ?? 0) > 0, 'the new worker serves');
  });

  test('SIGTERM: every worker drains, the in-flight request is answered, exit 0', async () => {
    const pids = [...(await workerPids(admin)).values()];
    const long = http('POST', `${url}/rpc`, {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Slow', request: { ms: 1500 } }),
    });
    await waitFor(async () => ((await stat(admin, 'http.gateway.downstream_rq_active')) ?? 0) >= 1);
    const code = await gw.stop('SIGTERM');
    const res = await long;
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json(), { done: true });
    assert.equal(code, 0, gw.output());
    for (const pid of pids) await waitFor(() => !alive(pid));
  });
});

describe('mesh api --concurrency=2: reload signals reach the workers', () => {
  const dir = tempDir();
  let who: RunningProcess;
  let gw: RunningProcess;

  after(async () => {
    await gw?.stop('SIGKILL');
    await who?.stop('SIGKILL');
    dir.cleanup();
  });

  test('SIGUSR1 reopens every worker\'s access log; SIGHUP reloads their rules; admin /auth_rules shows them', async () => {
    who = startProcess(['--import', 'tsx', WHO, `--registry_address=${dir.path}`, '--log_level=warning'], {}, '');
    await who.waitForOutput(/go\.mesh\.srv\.who listening/, 15000);
    const log = join(dir.path, 'access.log');
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, 'rules:\n  - service: go.mesh.srv.who\n    access: public\n');
    gw = startProcess([
      'api', '--concurrency=2', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', `--registry_address=${dir.path}`,
      '--handler=rpc', '--namespace=go.mesh.srv', '--log_level=warning', `--access_log=${log}`, '--access_log_format=%REQ(:PATH)%',
      `--auth_rules=${rules}`,
    ]);
    const url = `http://127.0.0.1:${await gw.waitForPort(PRINTED.api, 20000)}`;
    const admin = `http://127.0.0.1:${await gw.waitForPort(PRINTED.apiAdmin)}`;
    await gw.waitForOutput(/mesh api concurrency 2/);
    // Fresh connections until both workers have served (and so opened the file) at least once.
    await waitFor(async () => {
      assert.equal((await http('GET', `${url}/who/am?before`, { headers: { connection: 'close' } })).status, 200);
      const per = await Promise.all([0, 1].map((i) => stat(admin, `server.worker.${i}.downstream_rq_total`)));
      return per.every((n) => (n ?? 0) > 0);
    }, 20000);
    const shown = (await http('GET', `${admin}/auth_rules`)).text;
    assert.match(shown, /go\.mesh\.srv\.who/);

    renameSync(log, `${log}.1`);
    gw.child.kill('SIGUSR1');
    await waitFor(async () => (await stat(admin, 'access_log.reopened')) === 2, 10000);
    for (let i = 0; i < 6; i++) assert.equal((await http('GET', `${url}/who/am?after`, { headers: { connection: 'close' } })).status, 200);
    await waitFor(() => existsSync(log) && readFileSync(log, 'utf8').split('\n').filter((l) => l === '/who/am?after').length === 6, 10000);
    assert.ok(!readFileSync(`${log}.1`, 'utf8').includes('/who/am?after'));

    writeFileSync(rules, 'rules:\n  - service: go.mesh.srv.who\n    access: deny\n');
    gw.child.kill('SIGHUP');
    await waitFor(async () => (await stat(admin, 'auth.rules.update_success')) === 2, 10000);
    assert.match((await http('GET', `${admin}/auth_rules`)).text, /deny/);
    for (let i = 0; i < 4; i++) assert.equal((await http('GET', `${url}/who/am`, { headers: { connection: 'close' } })).status, 403);
  });
});

describe('mesh api --concurrency=2 on a port another mesh api --concurrency=2 holds', () => {
  test('the second exits 1 with the start-up error, instead of sharing the port (reusePort)', async () => {
    const port = await freePort();
    const flags = ['api', '--concurrency=2', `--address=127.0.0.1:${port}`, '--admin_address=off', '--registry=memory', '--log_level=warning'];
    const first = startProcess(flags);
    try {
      await first.waitForOutput(/mesh api concurrency 2 \(worker pids/, 20000);
      const second = await runCli(flags);
      assert.equal(second.code, 1, second.stdout + second.stderr);
      // The first gateway (its primary or a worker) holds the port: named, with the flag to change.
      assert.match(second.stderr, new RegExp(`^mesh: gateway cannot listen on 127\\.0\\.0\\.1:${port}: address already in use: mesh api \\(pid \\d+\\) listens on port ${port}; stop it, or give another --address$`, 'm'));
      assert.equal(second.stdout, '');
    } finally {
      await first.stop('SIGKILL');
    }
  });
});

describe('--concurrency values', () => {
  test('auto is one worker per CPU; a number is taken as it is; the default is 1', () => {
    assert.equal(parseArgs(['api', '--concurrency=auto'], {}).config.concurrency, Math.min(256, availableParallelism()));
    assert.equal(parseArgs(['api', '--concurrency=3'], {}).config.concurrency, 3);
    assert.equal(parseArgs(['api'], {}).config.concurrency, 1);
  });

  for (const bad of ['0', 'abc', '-1', '257', '1.5']) {
    test(`--concurrency=${bad}: exit 2 naming the flag`, async () => {
      const r = await runCli(['api', `--concurrency=${bad}`, '--admin_address=off', '--address=127.0.0.1:0', '--registry=memory']);
      assert.equal(r.code, 2, r.stderr);
      assert.equal(r.stderr, `mesh: invalid value "${bad}" for flag --concurrency: use a number of worker processes from 1 to 256, or auto\n`);
    });
  }

  test('--concurrency with --enable_acme: exit 2 naming the flag', async () => {
    const r = await runCli(['api', '--concurrency=2', '--enable_acme', '--acme_hosts=a.example', '--registry=memory', '--admin_address=off']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^mesh: invalid value "2" for flag --concurrency: --enable_acme needs a single process/);
  });
});

describe('mesh proxy --concurrency=2', () => {
  const dir = tempDir('mesh-proxy-cc-');
  let backend: import('node:http').Server;
  let proxy: RunningProcess;

  before(async () => {
    const { createServer } = await import('node:http');
    backend = createServer((req, res) => res.end(`pid ${process.pid} ${req.url}`));
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', () => r()));
    const port = (backend.address() as import('node:net').AddressInfo).port;
    const file = join(dir.path, 'proxy.yaml');
    writeFileSync(
      file,
      `admin: { address: 127.0.0.1:0 }
listeners:
  - name: one
    address: 127.0.0.1:0
    routes:
      - match: { prefix: / }
        cluster: app
  - name: two
    address: 127.0.0.1:0
    routes:
      - match: { prefix: / }
        cluster: app
clusters:
  - name: app
    hosts: [127.0.0.1:${port}]
`,
    );
    proxy = startProcess(['proxy', '-c', file, '--concurrency=2', '--drain_delay=0', '--log_level=warning']);
    await proxy.waitForOutput(/mesh proxy concurrency 2 /, 20000);
  });

  after(async () => {
    await proxy?.stop('SIGKILL');
    backend?.close();
    dir.cleanup();
  });

  test('both listeners (each on its own port 0) are served by the workers; one admin sums them, lists the routes', async () => {
    const out = proxy.output();
    const url = (name: string) => new RegExp(`mesh proxy listener ${name} on (\\S+)`).exec(out)![1]!;
    const admin = /mesh proxy admin on (\S+)/.exec(out)![1]!;
    assert.notEqual(url('one'), url('two'));
    for (let i = 0; i < 6; i++) {
      for (const name of ['one', 'two']) {
        const res = await http('GET', `${url(name)}/x${i}`);
        assert.equal(res.status, 200);
        assert.match(res.text, new RegExp(`/x${i}$`));
      }
    }
    assert.equal(await stat(admin, 'http.one.downstream_rq_total'), 6);
    assert.equal(await stat(admin, 'http.two.downstream_rq_total'), 6);
    const w0 = (await stat(admin, 'server.worker.0.downstream_rq_total'))!;
    const w1 = (await stat(admin, 'server.worker.1.downstream_rq_total'))!;
    assert.ok(w0 > 0 && w1 > 0, `${w0} + ${w1}`);
    assert.equal(w0 + w1, 12);
    assert.equal(await stat(admin, 'cluster.app.upstream_rq_total'), 12);
    const routes = (await http('GET', `${admin}/routes`)).json<Array<{ route_config_name: string }>>();
    assert.deepEqual(routes.map((r) => r.route_config_name).sort(), ['one', 'two']);
    assert.match((await http('GET', `${admin}/server_info`)).text, / concurrency=2 workers=0:\d+,1:\d+\n$/);
    assert.equal(await proxy.stop('SIGTERM'), 0);
  });
});

describe('merge rules (src/base/stats/merge.ts, src/admin/aggregate.ts)', () => {
  test('counters sum; activity gauges sum; state gauges take the largest; histograms merge bucket by bucket', () => {
    const a = new StatsStore();
    const b = new StatsStore();
    a.counter('http.gateway.downstream_rq_total').inc(3);
    b.counter('http.gateway.downstream_rq_total').inc(4);
    a.gauge('http.gateway.downstream_cx_active').set(2);
    b.gauge('http.gateway.downstream_cx_active').set(5);
    a.gauge('cluster.go.mesh.srv.x.membership_healthy').set(3);
    b.gauge('cluster.go.mesh.srv.x.membership_healthy').set(2);
    a.gauge('cluster.go.mesh.srv.x.circuit_breakers.default.rq_open').set(0);
    b.gauge('cluster.go.mesh.srv.x.circuit_breakers.default.rq_open').set(1);
    a.gauge('server.uptime').set(100);
    b.gauge('server.uptime').set(7);
    a.gauge('server.memory_allocated').set(10);
    b.gauge('server.memory_allocated').set(20);
    a.histogram('http.gateway.downstream_rq_time').record(0.3);
    a.histogram('http.gateway.downstream_rq_time').record(7);
    b.histogram('http.gateway.downstream_rq_time').record(7);
    b.counter('only.in.b');
    const m = mergeSnapshots([snapshotStore(a), snapshotStore(b)]);
    const value = (name: string) => m.list().find((s) => s.name === name)?.value;
    assert.equal(value('http.gateway.downstream_rq_total'), 7);
    assert.equal(value('http.gateway.downstream_cx_active'), 7);
    assert.equal(value('cluster.go.mesh.srv.x.membership_healthy'), 3);
    assert.equal(value('cluster.go.mesh.srv.x.circuit_breakers.default.rq_open'), 1);
    assert.equal(value('server.uptime'), 100);
    assert.equal(value('server.memory_allocated'), 30);
    assert.equal(value('only.in.b'), 0);
    assert.equal(m.list({ usedOnly: true }).some((s) => s.name === 'only.in.b'), false);
    const h = m.listHistograms()[0]!;
    assert.equal(h.count, 3);
    assert.equal(h.sum, 14.3);
    assert.deepEqual(h.counts.slice(0, 6), [1, 0, 0, 0, 2, 0]);
  });

  test('process metrics: sizes and CPU summed, the earliest start, the largest lag', () => {
    const fam = (metric: string, value: number) => ({ metric, kind: 'gauge' as const, help: '', value });
    const merged = mergeProcessFamilies([
      [fam('process_cpu_seconds_total', 1), fam('process_start_time_seconds', 50), fam('nodejs_eventloop_lag_seconds', 0.01), fam('process_resident_memory_bytes', 100)],
      [fam('process_cpu_seconds_total', 2), fam('process_start_time_seconds', 60), fam('nodejs_eventloop_lag_seconds', 0.03), fam('process_resident_memory_bytes', 200)],
    ]);
    assert.deepEqual(
      merged.map((f) => [f.metric, f.value]),
      [
        ['process_cpu_seconds_total', 3],
        ['process_start_time_seconds', 50],
        ['nodejs_eventloop_lag_seconds', 0.03],
        ['process_resident_memory_bytes', 300],
      ],
    );
  });

  test('/clusters: host stats summed, a flag set in any worker is set, success rates averaged', () => {
    const host = (rq: number, failed: boolean, rate: number) => ({
      address: '127.0.0.1',
      port: 9,
      hostname: '',
      stats: { cx_active: 1, cx_connect_fail: 0, cx_total: 1, rq_active: 0, rq_error: 0, rq_success: rq, rq_timeout: 0, rq_total: rq },
      failedActiveHc: false,
      failedOutlierCheck: failed,
      weight: 1,
      region: '',
      zone: '',
      canary: false,
      successRate: rate,
    });
    const cb = { maxConnections: 1, maxPendingRequests: 1, maxRequests: 1, maxRetries: 1 };
    const cluster = (h: ReturnType<typeof host>) => ({ name: 'c', addedViaApi: true, circuitBreakers: { default: cb, high: cb }, hosts: [h] });
    const merged = mergeClusterViews([
      { versionInfo: '7', clusters: [cluster(host(3, false, 90))] },
      { versionInfo: '7', clusters: [cluster(host(4, true, -1))] },
      { versionInfo: '7', clusters: [cluster(host(5, false, 100))] },
    ]);
    assert.equal(merged.clusters.length, 1);
    const h = merged.clusters[0]!.hosts[0]!;
    assert.equal(merged.clusters[0]!.hosts.length, 1);
    assert.equal(h.stats.rq_total, 12);
    assert.equal(h.stats.cx_active, 3);
    assert.equal(h.failedOutlierCheck, true);
    assert.equal(h.successRate, 95);
  });
});
