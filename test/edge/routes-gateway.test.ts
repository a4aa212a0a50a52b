/**
 * `mesh api --routes=FILE` as a real process: a 90/10 split by version, path (exact, prefix,
 * regex), method, header and query matches, the fall-through to the registry router, a per-route
 * timeout (504), a route to a version with no node (503), a bad file at start (exact message), a
 * reload under load (100/0 to 0/100 with zero failed requests), and SIGHUP with a bad file (the old
 * routes stay, counted).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const SERVICE = 'go.mesh.srv.echo';

async function register(registry: Registry, version: string, port: number): Promise<void> {
  await registry.register({ name: SERVICE, version, metadata: {}, endpoints: [], nodes: [{ id: `echo-${version}`, address: '127.0.0.1', port, metadata: {} }] });
}

async function statValue(admin: string, name: string): Promise<number> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value ?? 0;
}

/** The app that answered a request through the rpc handler (the plain app echoes its name). */
async function appOf(pool: Pool, path: string, headers: Record<string, string> = {}, method = 'POST'): Promise<{ status: number; app?: string; endpoint?: string; body: any }> {
  const res = await pool.request({ method: method as 'POST', path, headers: { 'content-type': 'application/json', ...headers }, body: method === 'GET' ? undefined : '{}' });
  const body = (await res.body.json()) as any;
  return { status: res.statusCode, app: body.app, endpoint: body.endpoint, body };
}

function writeAtomically(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

const split = (v1: number, v2: number) => `${HEAD}metadata: {name: split}
spec:
  handler: rpc
  rules:
    - matches: [{path: {type: PathPrefix, value: /split}}]
      backendRefs:
        - {name: ${SERVICE}, version: v1, weight: ${v1}}
        - {name: ${SERVICE}, version: v2, weight: ${v2}}
`;

const ROUTES = `${split(90, 10)}---
${HEAD}metadata: {name: matches}
spec:
  handler: rpc
  rules:
    - name: exact
      matches: [{path: {type: Exact, value: /m/echo/exact}}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: regex
      matches: [{path: {type: RegularExpression, value: "/m/echo/n[0-9]+"}}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: tester
      matches: [{path: {value: /m}, headers: [{name: X-Tester, value: ann}]}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: post
      matches: [{path: {value: /m}, method: PUT}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: query
      matches: [{path: {value: /m}, queryParams: [{name: canary, value: "1"}]}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: rest
      matches: [{path: {value: /m}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
---
${HEAD}metadata: {name: web}
spec:
  handler: proxy
  hostnames: [web.example.com]
  rules:
    - backendRefs: [{name: ${SERVICE}, version: v2}]
---
${HEAD}metadata: {name: api}
spec:
  rules:
    - matches: [{path: {value: /shop}}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
---
${HEAD}metadata: {name: limits}
spec:
  handler: rpc
  rules:
    - name: slow
      matches: [{path: {value: /slow}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
      timeouts: {request: 200ms}
    - name: nowhere
      matches: [{path: {value: /v3}}]
      backendRefs: [{name: ${SERVICE}, version: v3}]
    - name: zero
      matches: [{path: {value: /zero}}]
      backendRefs: [{name: ${SERVICE}, weight: 0}]
`;

describe('mesh api --routes', () => {
  const dir = tempDir('mesh-routes-');
  const routesFile = join(dir.path, 'routes.yaml');
  const reloadFile = join(dir.path, 'reload.yaml');
  let registry: Registry;
  let one: PlainApp;
  let two: PlainApp;
  let plain: PlainApp;
  let gw: GatewayProcess;
  let pool: Pool;

  before(async () => {
    registry = createRegistry('local', dir.path);
    [one, two, plain] = await Promise.all([startPlainApp('one'), startPlainApp('two'), startPlainApp('plain')]);
    await register(registry, 'v1', one.port);
    await register(registry, 'v2', two.port);
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    writeFileSync(routesFile, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routesFile}`]);
    pool = new Pool(gw.url, { connections: 16 });
  });

  after(async () => {
    await pool?.close();
    await gw?.stop();
    await Promise.all([one?.close(), two?.close(), plain?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  it('a 90/10 split by version lands within 3 points over 2,000 requests', async () => {
    const counts: Record<string, number> = {};
    let next = 0;
    const worker = async () => {
      while (next < 2000) {
        next++;
        const r = await appOf(pool, '/split/echo/call');
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.endpoint, 'Echo.Call');
        counts[r.app!] = (counts[r.app!] ?? 0) + 1;
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    const total = (counts.one ?? 0) + (counts.two ?? 0);
    assert.equal(total, 2000);
    const share = (100 * (counts.two ?? 0)) / total;
    assert.ok(Math.abs(share - 10) <= 3, `v2 got ${share.toFixed(1)} % (${JSON.stringify(counts)})`);
  });

  it('path (exact, regex, prefix), method, header and query matches', async () => {
    assert.equal((await appOf(pool, '/m/echo/exact')).app, 'two');
    assert.equal((await appOf(pool, '/m/echo/n42')).app, 'two');
    assert.equal((await appOf(pool, '/m/echo/nx')).app, 'one');
    assert.equal((await appOf(pool, '/m/echo/x', { 'x-tester': 'ann' })).app, 'two');
    assert.equal((await appOf(pool, '/m/echo/x', { 'x-tester': 'bob' })).app, 'one');
    assert.equal((await appOf(pool, '/m/echo/x', {}, 'PUT')).app, 'two');
    assert.equal((await appOf(pool, '/m/echo/x?canary=1')).app, 'two');
    assert.equal((await appOf(pool, '/m/echo/x?canary=2')).app, 'one');
  });

  it("a route's handler: proxy (by host) and api (the default without --handler), to the route's version", async () => {
    const web = await http('GET', `${gw.url}/any/path?q=1`, { headers: { host: 'web.example.com' } });
    assert.equal(web.status, 200);
    assert.equal(web.json().app, 'two');
    assert.equal(web.json().url, '/any/path?q=1');
    assert.equal(two.received.at(-1)?.kind, 'http');
    const shop = await http('GET', `${gw.url}/shop/cart/list?item=3`);
    assert.equal(shop.status, 201);
    assert.equal(shop.headers['x-plain'], 'yes');
    assert.equal(shop.json().app, 'two');
    assert.equal(shop.json().endpoint, 'Cart.List');
    assert.equal(shop.json().request.path, '/shop/cart/list');
  });

  it('a request no route matches goes to the registry router and handlers as without the file', async () => {
    const res = await http('POST', `${gw.url}/plain/hello`, { body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 201);
    assert.equal(res.json().app, 'plain');
    assert.equal(res.json().endpoint, 'Plain.Hello');
    assert.ok(gw.proc.output().includes(`(namespace go.mesh.api, registry router, api handler fallback, 5 routes from ${routesFile})\n`), gw.proc.output());
  });

  it('timeouts.request: 504 error JSON; a version without a node: 503; every weight 0: 500', async () => {
    const slow = await http('POST', `${gw.url}/slow/echo/slow`, { body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(slow.status, 504);
    assert.deepEqual(slow.json(), { id: 'go.mesh.api', code: 504, detail: `call ${SERVICE} on 127.0.0.1:${one.port}: timeout after 200ms`, status: 'Gateway Timeout' });
    const none = await http('POST', `${gw.url}/v3/echo/call`, { body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(none.status, 503);
    assert.deepEqual(none.json(), { id: 'go.mesh.api', code: 503, detail: `service ${SERVICE}: no host of version v3`, status: 'Service Unavailable' });
    const zero = await http('POST', `${gw.url}/zero/echo/call`, { body: '{}', headers: { 'content-type': 'application/json' } });
    assert.deepEqual(zero.json(), { id: 'go.mesh.api', code: 500, detail: 'route limits: every backend has weight 0', status: 'Internal Server Error' });
  });

  it('admin /routes, /listeners (text and JSON) and /config_dump (the options without secrets, the routes with their file and version)', async () => {
    const token = 'admin-token-0123456789';
    const secret = 'broker-secret-0123456789';
    const g = await startGatewayProcess(dir.path, [`--routes=${routesFile}`, `--admin_token=${token}`, `--broker_secret=${secret}`, '--broker_address=127.0.0.1:0', '--client_request_timeout=7s']);
    try {
      const auth = { headers: { authorization: `Bearer ${token}` } };
      const listeners = await http('GET', `${g.admin}/listeners`, auth);
      assert.equal(listeners.status, 200);
      assert.equal(listeners.text, `gateway::127.0.0.1:${g.port}\n`);
      const json = await http('GET', `${g.admin}/listeners?format=json`, auth);
      assert.deepEqual(json.json(), { listener_statuses: [{ name: 'gateway', local_address: { socket_address: { address: '127.0.0.1', port_value: g.port } } }] });
      assert.equal((await http('GET', `${g.admin}/listeners?format=yaml`, auth)).text, 'usage: /listeners?format=(json|text)\n\n');

      const routes = (await http('GET', `${g.admin}/routes?route_config_name=${encodeURIComponent(`file:${routesFile}`)}`, auth)).json<any[]>();
      assert.equal(routes.length, 1);
      assert.match(routes[0].version_info, /^[0-9a-f]{16}$/);
      assert.deepEqual(routes[0].route_table_dump.routes.map((r: { name: string }) => r.name), ['split', 'matches', 'web', 'api', 'limits']);

      const dump = await http('GET', `${g.admin}/config_dump`, auth);
      assert.equal(dump.status, 200);
      assert.equal(dump.headers['content-type'], 'application/json');
      assert.ok(!dump.text.includes(token) && !dump.text.includes(secret), dump.text);
      const configs = dump.json<{ configs: any[] }>().configs;
      assert.deepEqual(configs.map((c) => c['@type']), ['mesh.options', 'mesh.routes', 'mesh.clusters', 'mesh.listeners']);
      const options = configs[0].options;
      assert.ok(!('admin_token' in options) && !('broker_secret' in options) && !('sidecar_token' in options));
      assert.equal(options.routes, routesFile);
      assert.equal(options.client_request_timeout, 7000);
      assert.equal(options.address, '127.0.0.1:0');
      const tables = configs[1].route_tables;
      assert.equal(tables.find((t: any) => t.route_config_name === `file:${routesFile}`).version_info, routes[0].version_info);
      assert.deepEqual(configs[3].listeners, [{ name: 'gateway', address: `127.0.0.1:${g.port}` }]);
    } finally {
      await g.stop();
    }
  });

  it('a bad file at start: exit 1 naming the file, the line, the route and the rule', async () => {
    const bad = join(dir.path, 'bad.yaml');
    writeFileSync(bad, `${HEAD}metadata: {name: r}\nspec:\n  rules:\n    - backendRefs: [{name: a}]\n      sessionPersistence: {sessionName: s, type: Sticky}\n`);
    const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', '--registry=memory', `--routes=${bad}`]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, `mesh: ${bad} line 7: HTTPRoute r spec.rules[0].sessionPersistence.type: must be Cookie or Header, not "Sticky"\n`);
  });

  it('reload under load: 100/0 to 0/100 with zero failed requests; then only v2 answers; SIGHUP with a bad file keeps the routes', async () => {
    writeFileSync(reloadFile, split(100, 0));
    const g = await startGatewayProcess(dir.path, [`--routes=${reloadFile}`]);
    const p = new Pool(g.url, { connections: 8 });
    try {
      const failures: string[] = [];
      const answers: Array<{ startedAfterReload: boolean; app?: string }> = [];
      let reloaded = false;
      let stop = false;
      // About 200 requests a second: one every 5 ms (a pace, not an order).
      const load = (async () => {
        const inflight = new Set<Promise<void>>();
        while (!stop) {
          const startedAfterReload = reloaded;
          const one = appOf(p, '/split/echo/call').then(
            (r) => {
              if (r.status !== 200) failures.push(`${r.status} ${JSON.stringify(r.body)}`);
              answers.push({ startedAfterReload, app: r.app });
            },
            (err: Error) => void failures.push(err.message),
          );
          inflight.add(one);
          void one.finally(() => inflight.delete(one));
          await new Promise((r) => setTimeout(r, 5)); // pacing: about 200 requests a second, not an ordering
        }
        await Promise.all(inflight);
      })();
      await waitFor(() => answers.length >= 100, 10_000);
      writeAtomically(reloadFile, split(0, 100));
      await waitFor(async () => (await statValue(g.admin, 'routes.update_success')) >= 1, 10_000);
      reloaded = true;
      await waitFor(() => answers.filter((a) => a.startedAfterReload).length >= 200, 10_000);
      stop = true;
      await load;
      assert.deepEqual(failures, []);
      assert.ok(answers.some((a) => a.app === 'one'));
      const after = answers.filter((a) => a.startedAfterReload);
      assert.deepEqual([...new Set(after.map((a) => a.app))], ['two']);

      // SIGHUP with a bad file: counted, the routes stay.
      const failedBefore = await statValue(g.admin, 'routes.update_failure');
      writeFileSync(reloadFile, `${HEAD}metadata: {name: split}\nspec: {rules: [{backendRefs: [{name: ${SERVICE}, weight: -5}]}]}\n`);
      g.proc.child.kill('SIGHUP');
      await waitFor(async () => (await statValue(g.admin, 'routes.update_failure')) > failedBefore, 10_000);
      assert.equal((await appOf(p, '/split/echo/call')).app, 'two');
      // The log line comes down its own pipe: it may arrive after the stat was read.
      await g.proc.waitForOutput(/route file reload failed: the previous routes stay/);
      assert.equal(g.proc.output().match(/route file reload failed/g)?.length, 1);
    } finally {
      await p.close();
      await g.stop();
    }
  });
});
