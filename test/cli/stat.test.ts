/**
 * `mesh stat services` and `mesh edges` against a real `mesh api` in front of a backend with known
 * latencies and failures: the counts, success rates and percentile buckets exactly (since the
 * process started, --window=0), a window that counts only what happened in it, admin /traffic's
 * shape, and an admin that answers something else left out.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, runCli, startProcess, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

/** A backend: /slow answers after 150 ms (a latency bucket of 250 ms), /fail answers 500, the rest at once. */
async function latencyBackend(): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    const answer = () => {
      res.writeHead(req.url?.endsWith('/fail') ? 500 : 200, { 'content-type': 'text/plain' });
      res.end('ok');
    };
    if (req.url?.endsWith('/slow')) setTimeout(answer, 150); // the latency under test, not an ordering
    else answer();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as AddressInfo).port };
}

describe('mesh stat services and mesh edges', () => {
  const dir = tempDir();
  const reg = () => `--registry_address=${dir.path}`;
  let registry: Registry;
  let backend: { server: Server; port: number };
  let api: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    backend = await latencyBackend();
    await registerPlain(registry, 'go.mesh.api.lat', backend.port);
    await registerPlain(registry, 'go.mesh.api.bad', backend.port);
    api = await startGatewayProcess(dir.path, ['--handler=proxy']);
    for (let i = 0; i < 90; i++) assert.equal((await http('GET', `${api.url}/lat/fast`)).status, 200);
    await Promise.all(Array.from({ length: 10 }, async () => assert.equal((await http('GET', `${api.url}/lat/slow`)).status, 200)));
    for (let i = 0; i < 5; i++) assert.equal((await http('GET', `${api.url}/bad/fail`)).status, 500);
  });

  after(async () => {
    await api?.stop();
    backend?.server.close();
    await registry?.close();
    dir.cleanup();
  });

  it('admin /traffic: per service, the answers by class and the latency buckets', async () => {
    const res = await http('GET', `${api.admin}/traffic`);
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'application/json');
    const report = res.json();
    assert.deepEqual(Object.keys(report), ['process', 'latency_bounds_ms', 'latency_fine', 'clusters', 'routes', 'callers']);
    assert.deepEqual(report.latency_fine, { min_ms: 0.01, ratio: 1.04, buckets: 462 });
    assert.deepEqual(report.callers.map((c: { front: string; identity: string; rq_2xx: number; rq_5xx: number }) => [c.front, c.identity, c.rq_2xx, c.rq_5xx]), [['gateway', 'plain', 100, 5]]);
    assert.deepEqual(report.routes, []);
    assert.equal(report.process.kind, 'api');
    assert.deepEqual(report.latency_bounds_ms, [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000]);
    const lat = report.clusters.find((c: { name: string }) => c.name === 'go.mesh.api.lat');
    assert.deepEqual([lat.rq_2xx, lat.rq_5xx, lat.hosts, lat.hosts_mtls], [100, 0, 1, 0]);
    assert.equal(lat.latency_counts.reduce((a: number, b: number) => a + b, 0), 100);
    // The 10 slow answers (150 ms) are in the 100..250 ms bucket (a fast one delayed by a loaded machine may join them).
    // The 10 slow answers (150 ms) are in the buckets from 100..250 ms up (a loaded machine may delay any answer).
    assert.ok(lat.latency_counts.slice(8).reduce((a: number, b: number) => a + b, 0) >= 10, `${lat.latency_counts}`);
  });

  it('mesh stat services --window=0: requests, success rate and percentile buckets since the process started', async () => {
    const r = await runCli(['stat', 'services', reg(), '--window=0', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const rows = JSON.parse(r.stdout) as Array<Record<string, number | string | null>>;
    assert.deepEqual(rows.map((x) => x.service), ['go.mesh.api.bad', 'go.mesh.api.lat']);
    const [bad, lat] = rows;
    assert.deepEqual([bad!.requests, bad!.success, bad!.mtls], [5, 0, 0]);
    assert.deepEqual([lat!.requests, lat!.success, lat!.mtls], [100, 1, 0]);
    // 10 % of the answers took 150 ms or more: p95 and p99 are among them (within the fine buckets' 2 %), p50 is not.
    assert.ok((lat!.p95_ms as number) >= 147 && (lat!.p99_ms as number) >= (lat!.p95_ms as number), `p95 ${lat!.p95_ms} p99 ${lat!.p99_ms}`);
    assert.ok((lat!.p50_ms as number) < (lat!.p95_ms as number), `p50 ${lat!.p50_ms}`);
    const text = await runCli(['stat', 'services', reg(), '--window=0']);
    const lines = text.stdout.split('\n');
    assert.match(lines[0]!, /^SERVICE +REQUESTS +RPS +SUCCESS +P50 +P95 +P99 +MTLS$/);
    assert.match(lines[1]!, /^go\.mesh\.api\.bad +5 +\d+\.\d +0\.0% +\S+ +\S+ +\S+ +0\.0%$/);
    assert.match(lines[2]!, /^go\.mesh\.api\.lat +100 +\d+\.\d +100\.0% +[\d.]+ms +[\d.]+ms +[\d.]+ms +0\.0%$/);
  });

  it('mesh edges --window=0: caller → service', async () => {
    const r = await runCli(['edges', reg(), '--window=0']);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split('\n');
    assert.match(lines[0]!, /^FROM +TO +REQUESTS +RPS +SUCCESS +P99 +MTLS$/);
    assert.match(lines[1]!, /^api +go\.mesh\.api\.bad +5 +\S+ +0\.0% +\S+ +0\.0%$/);
    assert.match(lines[2]!, /^api +go\.mesh\.api\.lat +100 +\S+ +100\.0% +[\d.]+ms +0\.0%$/);
  });

  it('a window counts only the requests in it', async () => {
    const stat = startProcess(['stat', 'services', reg(), '--window=3s', '-o', 'json']);
    await stat.waitForOutput(/mesh: sampling 1 process\(es\) for 3 s\n/);
    for (let i = 0; i < 20; i++) await http('GET', `${api.url}/lat/fast`);
    // SIGCONT changes nothing: stop() then only waits for the command to finish its window.
    assert.equal(await stat.stop('SIGCONT'), 0);
    const rows = JSON.parse(stat.output().split('\n').find((l) => l.startsWith('['))!) as Array<Record<string, number | string>>;
    const lat = rows.find((x) => x.service === 'go.mesh.api.lat')!;
    assert.equal(lat.requests, 20);
    assert.ok((lat.rps as number) > 4 && (lat.rps as number) <= 20 / 3, `rps ${lat.rps}`);
    assert.equal(rows.find((x) => x.service === 'go.mesh.api.bad')!.requests, 0);
  });

  it('mesh stat routes: per route file rule, with percentiles only when the rule is timed (--stats_endpoints)', async () => {
    const file = join(dir.path, 'routes.yaml');
    writeFileSync(
      file,
      'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web}\nspec:\n  handler: proxy\n  rules:\n' +
        '    - name: slowpath\n      matches: [{path: {value: /r/slow}}]\n      backendRefs: [{name: go.mesh.api.lat}]\n' +
        '    - name: failing\n      matches: [{path: {value: /r/fail}}]\n      backendRefs: [{name: go.mesh.api.bad}]\n',
    );
    for (const extra of [[], ['--stats_endpoints']]) {
      const g = await startGatewayProcess(dir.path, [`--routes=${file}`, ...extra]);
      try {
        for (let i = 0; i < 4; i++) assert.equal((await http('GET', `${g.url}/r/slow`)).status, 200);
        for (let i = 0; i < 2; i++) assert.equal((await http('GET', `${g.url}/r/fail`)).status, 500);
        const r = await runCli(['stat', 'routes', `--admin=${new URL(g.admin).host}`, '--window=0', '-o', 'json']);
        assert.equal(r.code, 0, r.stderr);
        const timed = extra.length > 0;
        assert.deepEqual(JSON.parse(r.stdout), [
          { route: 'failing', host: '*', requests: 2, rps: JSON.parse(r.stdout)[0].rps, success: 0, p50_ms: timed ? JSON.parse(r.stdout)[0].p50_ms : null, p95_ms: timed ? JSON.parse(r.stdout)[0].p95_ms : null, p99_ms: timed ? JSON.parse(r.stdout)[0].p99_ms : null },
          { route: 'slowpath', host: '*', requests: 4, rps: JSON.parse(r.stdout)[1].rps, success: 1, p50_ms: JSON.parse(r.stdout)[1].p50_ms, p95_ms: JSON.parse(r.stdout)[1].p95_ms, p99_ms: JSON.parse(r.stdout)[1].p99_ms },
        ]);
        // Every answer of slowpath took 150 ms or more (within the fine buckets' 2 %) when timed.
        for (const k of ['p50_ms', 'p95_ms', 'p99_ms']) assert.ok(timed ? JSON.parse(r.stdout)[1][k] >= 147 : JSON.parse(r.stdout)[1][k] === null, `${k} ${r.stdout}`);
        const text = await runCli(['stat', 'routes', `--admin=${new URL(g.admin).host}`, '--window=0']);
        assert.match(text.stdout, /^ROUTE +HOST +REQUESTS +RPS +SUCCESS +P50 +P95 +P99\nfailing +\* +2 +\S+ +0\.0% /);
        if (!timed) assert.match(text.stdout, /\nslowpath +\* +4 +\S+ +100\.0% +- +- +-\n$/);
      } finally {
        await g.stop();
      }
    }
  });

  it('attacker: an admin that answers something else, or nothing, is said and left out', async () => {
    const liar = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"process":{"id":"x","kind":"api","name":"\u001b[2J","mtls":"off","started_ms":1},"latency_bounds_ms":[1],"clusters":[]}');
    });
    await new Promise<void>((r) => liar.listen(0, '127.0.0.1', () => r()));
    const liarAddress = `127.0.0.1:${(liar.address() as AddressInfo).port}`;
    try {
      const r = await runCli(['stat', 'services', `--admin=${new URL(api.admin).host},${liarAddress},127.0.0.1:1`, '--window=0', '-o', 'json']);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(r.stderr.includes(`mesh: ${liarAddress}: /traffic did not answer a traffic report: left out\n`), r.stderr);
      assert.match(r.stderr, /mesh: 127\.0\.0\.1:1: cannot read \/traffic \(.*\): left out\n/);
      assert.deepEqual((JSON.parse(r.stdout) as Array<{ service: string }>).map((x) => x.service), ['go.mesh.api.bad', 'go.mesh.api.lat']);
    } finally {
      liar.close();
    }
  });
});

describe("mesh stat's percentiles against what the callers measured", () => {
  const dir = tempDir();
  let registry: Registry;
  let server: Server;
  let api: GatewayProcess;
  /** What the test's clients measured, and how long the backend held each request, ms. */
  const measured: number[] = [];
  const served: number[] = [];

  before(async () => {
    registry = createRegistry('local', dir.path);
    // /d/<ms> answers after that many milliseconds: the known latencies under test.
    server = createServer((req, res) => {
      const at = performance.now();
      res.once('finish', () => served.push(performance.now() - at));
      setTimeout(() => res.end('ok'), Number(req.url!.split('/').pop()));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    await registerPlain(registry, 'go.mesh.api.known', (server.address() as AddressInfo).port);
    api = await startGatewayProcess(dir.path, ['--handler=proxy']);
    // 30 calls of 1 s and 10 of 3 s, 10 at a time: long enough that a loaded machine's scheduling
    // delays stay small beside them.
    const delays = [...Array<number>(30).fill(1000), ...Array<number>(10).fill(3000)];
    for (let i = 0; i < delays.length; i += 10) {
      await Promise.all(
        delays.slice(i, i + 10).map(async (d) => {
          const started = performance.now();
          assert.equal((await http('GET', `${api.url}/known/d/${d}`)).status, 200);
          measured.push(performance.now() - started);
        }),
      );
    }
  });

  after(async () => {
    await api?.stop();
    server?.close();
    await registry?.close();
    dir.cleanup();
  });

  it("p50, p95 and p99 per service (the gateway as the caller) within 5 % of the latencies served; per caller identity between those and what the clients measured", async () => {
    const rank = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.ceil(q * values.length) - 1]!;
    const services = await runCli(['stat', 'services', `--registry_address=${dir.path}`, '--window=0', '-o', 'json']);
    assert.equal(services.code, 0, services.stderr);
    const [known] = JSON.parse(services.stdout) as Array<Record<string, number>>;
    assert.equal(known!.requests, 40);
    const identities = await runCli(['stat', 'identities', `--registry_address=${dir.path}`, '--window=0', '-o', 'json']);
    const [plain] = JSON.parse(identities.stdout) as Array<Record<string, number>>;
    for (const [q, key] of [[0.5, 'p50_ms'], [0.95, 'p95_ms'], [0.99, 'p99_ms']] as const) {
      const truth = rank(served, q);
      const client = rank(measured, q);
      for (const [what, got] of [['service', known![key]!], ['identity', plain![key]!]] as const) {
        const shown = `${what} ${key}: mesh stat ${got} ms, served ${truth.toFixed(3)} ms, the clients ${client.toFixed(3)} ms`;
        // The gateway measures its call to the node: within 5 % of what the node served. At its front it
        // measures a little more (its own work), never less than served nor more than the clients saw
        // end to end (within the fine buckets' 2 %).
        if (what === 'service') assert.ok(Math.abs(got - truth) / truth <= 0.05, shown);
        assert.ok(got >= truth * 0.98 && got <= client * 1.02, shown);
      }
    }
  });
});
