/**
 * --stats_endpoints (statsEndpoints): a framework service's per-endpoint stats, read from a real
 * admin interface (/stats and /stats/prometheus) after real calls on loopback; unknown endpoint
 * names fall into one `_other` family; off by default.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Pool } from 'undici';
import { Mesh, MeshError } from '../../src/index.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { extractTags } from '../../src/base/stats/store.js';
import { http, tempDir, waitFor } from '../helpers.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROTOS } from '../grpc-fixtures.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { Runtime } from '../../src/process/runtime.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';

const quiet = { logLevel: 'off', drainDelay: 0, registry: new MemoryRegistry(), broker: 'memory', adminAddress: '127.0.0.1:0' } as const;
const PREFIX = 'service.shop.orders.endpoint.';

/** The `name: value` lines of admin /stats whose names start with `prefix`, as a map. */
async function statsOf(admin: string, prefix: string): Promise<Map<string, number>> {
  const res = await http('GET', `${admin}/stats`);
  assert.equal(res.status, 200);
  const out = new Map<string, number>();
  for (const line of res.text.split('\n')) {
    const m = /^(\S+): (\d+)$/.exec(line);
    if (m && m[1]!.startsWith(prefix)) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

function shop(mesh: Mesh): void {
  mesh
    .service({ name: 'shop.orders' })
    .handle('Order.Create', () => ({ ok: true }))
    .handle('Order.Conflict', () => {
      throw new MeshError('shop.orders', 409, 'already there');
    })
    .handle('Order.Boom', () => {
      throw new Error('boom');
    });
}

describe('--stats_endpoints on', () => {
  const mesh = new Mesh({ ...quiet, statsEndpoints: true });
  let pool: Pool;
  let admin = '';
  const call = async (endpoint: string) => {
    const res = await pool.request({ method: 'POST', path: '/', headers: { 'content-type': 'application/json', 'mesh-service': 'shop.orders', 'mesh-endpoint': endpoint }, body: '{}' });
    await res.body.dump();
    return res.statusCode;
  };

  before(async () => {
    shop(mesh);
    const started = await mesh.start();
    admin = `http://127.0.0.1:${started.admin!.port}`;
    pool = new Pool(`http://127.0.0.1:${started.services[0]!.nodes[0]!.port}`, { connections: 8 });
  });
  after(async () => {
    await pool.close();
    await mesh.close();
  });

  it('counts each endpoint by status class and code, with a latency histogram, labelled in Prometheus', async () => {
    for (let i = 0; i < 3; i++) assert.equal(await call('Order.Create'), 200);
    for (let i = 0; i < 2; i++) assert.equal(await call('Order.Conflict'), 409);
    assert.equal(await call('Order.Boom'), 500);
    await waitFor(async () => (await statsOf(admin, PREFIX)).get(`${PREFIX}Order.Boom.rq_total`) === 1 || undefined);
    const stats = await statsOf(admin, PREFIX);
    const pick = (endpoint: string) => Object.fromEntries([...stats].filter(([k]) => k.startsWith(`${PREFIX}${endpoint}.`)).map(([k, v]) => [k.slice(PREFIX.length + endpoint.length + 1), v]));
    assert.deepEqual(pick('Order.Create'), { rq_1xx: 0, rq_code_200: 3, rq_2xx: 3, rq_3xx: 0, rq_4xx: 0, rq_5xx: 0, rq_total: 3 });
    assert.deepEqual(pick('Order.Conflict'), { rq_1xx: 0, rq_2xx: 0, rq_3xx: 0, rq_code_409: 2, rq_4xx: 2, rq_5xx: 0, rq_total: 2 });
    assert.deepEqual(pick('Order.Boom'), { rq_1xx: 0, rq_2xx: 0, rq_3xx: 0, rq_4xx: 0, rq_code_500: 1, rq_5xx: 1, rq_total: 1 });
    // declared, never called: at zero
    assert.equal(stats.get(`${PREFIX}Debug.Health.rq_total`), 0);

    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    const lines = prom.split('\n');
    const has = (line: string) => assert.ok(lines.includes(line), `${line}\nnot in:\n${lines.filter((l) => l.includes('service_endpoint')).join('\n')}`);
    has('# TYPE mesh_service_endpoint_rq_total counter');
    has('mesh_service_endpoint_rq_total{endpoint="Order.Create",service="shop.orders"} 3');
    has('mesh_service_endpoint_rq_total{endpoint="Order.Conflict",service="shop.orders"} 2');
    has('mesh_service_endpoint_rq_xx_total{endpoint="Order.Create",service="shop.orders",response_code_class="2"} 3');
    has('mesh_service_endpoint_rq_xx_total{endpoint="Order.Conflict",service="shop.orders",response_code_class="4"} 2');
    has('mesh_service_endpoint_rq_code_total{endpoint="Order.Conflict",service="shop.orders",response_code="409"} 2');
    has('mesh_service_endpoint_rq_code_total{endpoint="Order.Boom",service="shop.orders",response_code="500"} 1');
    // the histogram (printed with --stats_endpoints, as with --stats_histograms)
    has('# TYPE mesh_service_endpoint_rq_time histogram');
    has('mesh_service_endpoint_rq_time_count{endpoint="Order.Create",service="shop.orders"} 3');
    has('mesh_service_endpoint_rq_time_bucket{endpoint="Order.Create",service="shop.orders",le="+Inf"} 3');
    // no metric family per endpoint
    assert.deepEqual(lines.filter((l) => l.startsWith('# TYPE mesh_service')).sort(), [
      '# TYPE mesh_service_endpoint_rq_code_total counter',
      '# TYPE mesh_service_endpoint_rq_time histogram',
      '# TYPE mesh_service_endpoint_rq_total counter',
      '# TYPE mesh_service_endpoint_rq_xx_total counter',
    ]);
  });

  it('1,000 unknown endpoint names make one extra family, `_other`', async () => {
    const endpointsOf = (stats: Map<string, number>) => new Set([...stats.keys()].map((k) => extractTags(k).tags.find(([t]) => t === 'endpoint')?.[1]));
    const before = endpointsOf(await statsOf(admin, PREFIX));
    assert.deepEqual([...before].sort(), ['Debug.Health', 'Order.Boom', 'Order.Conflict', 'Order.Create']);
    const names = Array.from({ length: 1000 }, (_, i) => `Rnd${i}_${Math.random().toString(36).slice(2)}.M${i}`);
    for (let i = 0; i < names.length; i += 50) {
      const statuses = await Promise.all(names.slice(i, i + 50).map(call));
      assert.deepEqual(new Set(statuses), new Set([404]));
    }
    assert.equal(await call(''), 400); // an empty Mesh-Endpoint: the same bucket
    await waitFor(async () => (await statsOf(admin, PREFIX)).get(`${PREFIX}_other.rq_total`) === 1001 || undefined);
    const stats = await statsOf(admin, PREFIX);
    assert.deepEqual([...endpointsOf(stats)].sort(), ['Debug.Health', 'Order.Boom', 'Order.Conflict', 'Order.Create', '_other']);
    assert.equal(stats.get(`${PREFIX}_other.rq_code_404`), 1000);
    assert.equal(stats.get(`${PREFIX}_other.rq_code_400`), 1);
    assert.equal(stats.get(`${PREFIX}_other.rq_4xx`), 1001);
    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    assert.ok(prom.includes('mesh_service_endpoint_rq_total{endpoint="_other",service="shop.orders"} 1001\n'));
  });
});

describe('--stats_endpoints off (the default)', () => {
  const mesh = new Mesh(quiet);
  after(() => mesh.close());

  it('keeps no per-endpoint stats', async () => {
    shop(mesh);
    const started = await mesh.start();
    const admin = `http://127.0.0.1:${started.admin!.port}`;
    const res = await http('POST', `http://127.0.0.1:${started.services[0]!.nodes[0]!.port}/`, { headers: { 'content-type': 'application/json', 'mesh-service': 'shop.orders', 'mesh-endpoint': 'Order.Create' }, body: '{}' });
    assert.equal(res.status, 200);
    const all = (await http('GET', `${admin}/stats`)).text;
    assert.ok(!all.includes('.endpoint.'), all);
    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    assert.ok(!prom.includes('mesh_service_endpoint'));
  });
});

describe('--stats_endpoints on a gateway: the registry router per route', () => {
  let app: PlainApp;
  let runtime: Runtime;
  let pool: Pool;
  let admin = '';
  const GW = 'service.gateway.endpoint.';
  const post = async (path: string) => {
    const res = await pool.request({ method: 'POST', path, headers: { 'content-type': 'application/json' }, body: '{}' });
    await res.body.dump();
    return res.statusCode;
  };

  before(async () => {
    app = await startPlainApp();
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.api.plain', app.port, [
      { name: 'Plain.Hello', metadata: { handler: 'rpc', path: '/hello' } },
      { name: 'Plain.Fail', metadata: { handler: 'rpc', path: '/fail' } },
    ]);
    const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=127.0.0.1:0', '--client_retries=0', '--stats_endpoints'];
    runtime = new Runtime(optionsFromFlags(parseArgs(flags, {}).config, { registry }), { role: 'api' });
    const gw = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api' });
    const bound = await gw.start();
    admin = `http://127.0.0.1:${(await runtime.startAdmin('off'))!.port}`;
    pool = new Pool(`http://127.0.0.1:${bound.port}`, { connections: 8 });
  });
  after(async () => {
    await pool.close();
    await runtime.shutdown();
    await app.close();
  });

  it('counts each route by status with its latency; unmatched paths in one _other family', async () => {
    assert.equal(await post('/hello'), 200);
    assert.equal(await post('/hello'), 200);
    assert.equal(await post('/fail'), 422);
    for (let i = 0; i < 1000; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => post(`/nowhere${i + j}/${Math.random().toString(36).slice(2)}`)));
    await waitFor(async () => (await statsOf(admin, GW)).get(`${GW}_other.rq_total`) === 1000 || undefined);
    const stats = await statsOf(admin, GW);
    assert.equal(stats.get(`${GW}go.mesh.api.plain/Plain.Hello.rq_total`), 2);
    assert.equal(stats.get(`${GW}go.mesh.api.plain/Plain.Hello.rq_code_200`), 2);
    assert.equal(stats.get(`${GW}go.mesh.api.plain/Plain.Fail.rq_4xx`), 1);
    assert.equal(stats.get(`${GW}go.mesh.api.plain/Plain.Fail.rq_code_422`), 1);
    const families = new Set([...stats.keys()].map((k) => extractTags(k).tags.find(([t]) => t === 'endpoint')?.[1]));
    assert.deepEqual([...families].sort(), ['_other', 'go.mesh.api.plain/Plain.Fail', 'go.mesh.api.plain/Plain.Hello']);
    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    assert.ok(prom.includes('mesh_service_endpoint_rq_total{endpoint="go.mesh.api.plain/Plain.Hello",service="gateway"} 2\n'), prom);
    assert.ok(prom.includes('mesh_service_endpoint_rq_time_count{endpoint="go.mesh.api.plain/Plain.Hello",service="gateway"} 2\n'));
  });
});

describe('--stats_endpoints on a gateway with a route file', () => {
  it("a rule's stats stay its vhost stats, with an rq_time histogram labelled route_name", async () => {
    const app = await startPlainApp();
    const dir = tempDir();
    const file = join(dir.path, 'routes.yaml');
    writeFileSync(
      file,
      `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: shop}\nspec:\n  handler: proxy\n  rules:\n    - name: hello\n      matches: [{path: {type: Exact, value: /hi}}]\n      backendRefs: [{name: go.mesh.srv.plain}]\n`,
    );
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.srv.plain', app.port);
    const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=127.0.0.1:0', '--client_retries=0', '--stats_endpoints'];
    const runtime = new Runtime(optionsFromFlags(parseArgs(flags, {}).config, { registry }), { role: 'api' });
    try {
      const gw = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', routesFile: file });
      const bound = await gw.start();
      const admin = `http://127.0.0.1:${(await runtime.startAdmin('off'))!.port}`;
      const hit = await http('POST', `http://127.0.0.1:${bound.port}/hi`, { headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(hit.status, 200, hit.text);
      await waitFor(async () => (await http('GET', `${admin}/stats/prometheus`)).text.includes('mesh_vhost_route_rq_time_count{route_name="hello",virtual_host_name="*"} 1\n') || undefined);
      const stats = await statsOf(admin, 'vhost.*.route.hello.');
      assert.equal(stats.get('vhost.*.route.hello.rq_total'), 1);
      // nothing duplicated below service.gateway for a rule's request
      assert.equal([...(await statsOf(admin, 'service.gateway.endpoint.')).keys()].filter((k) => k.includes('hello')).length, 0);
    } finally {
      await runtime.shutdown();
      await app.close();
      dir.cleanup();
    }
  });
});

describe('--stats_endpoints on a framework service serving gRPC', () => {
  it('counts each method by the HTTP status of its outcome', async () => {
    const registry = new MemoryRegistry();
    const grpcOpts = { logLevel: 'off', drainDelay: 0, registry, broker: 'memory', protoPath: [PROTOS], clientRetries: 0 } as const;
    const server = new Mesh({ ...grpcOpts, adminAddress: '127.0.0.1:0', serverProtocol: 'grpc', statsEndpoints: true });
    const client = new Mesh(grpcOpts);
    const svc = server.service({ name: 'go.mesh.srv.fwgreeter' });
    svc.handle('Greeter.SayHello', (req: { name: string }) => ({ message: `Hello ${req.name}` }));
    svc.handle('Greeter.Fail', (req: { code: number; details: string }) => {
      throw new MeshError('go.mesh.srv.fwgreeter', req.code, req.details);
    });
    try {
      const started = await server.start();
      const admin = `http://127.0.0.1:${started.admin!.port}`;
      const prefix = 'service.go.mesh.srv.fwgreeter.endpoint.';
      assert.equal((await client.call<{ message: string }>('go.mesh.srv.fwgreeter', 'Greeter.SayHello', { name: 'a' })).message, 'Hello a');
      await assert.rejects(client.call('go.mesh.srv.fwgreeter', 'Greeter.Fail', { code: 404, details: 'no' }), (err: MeshError) => err.code === 404);
      await waitFor(async () => (await statsOf(admin, prefix)).get(`${prefix}Greeter.Fail.rq_total`) === 1 || undefined);
      const stats = await statsOf(admin, prefix);
      assert.equal(stats.get(`${prefix}Greeter.SayHello.rq_code_200`), 1);
      assert.equal(stats.get(`${prefix}Greeter.Fail.rq_code_404`), 1);
      assert.equal(stats.get(`${prefix}Greeter.Fail.rq_4xx`), 1);
    } finally {
      await client.close();
      await server.close();
    }
  });
});
