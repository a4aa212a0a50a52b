/**
 * `mesh api` as a real process on loopback, default handler (the registry router with the api
 * handler as fallback) and `--handler=api`, against framework services (examples/greeter.ts, in
 * this process) and a plain node:http backend registered by hand, all in one local registry.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import WebSocket from 'ws';
import type { Runtime } from '../../src/process/runtime.js';
import { Mesh } from '../../src/framework/mesh.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry, Service } from '../../src/engines/registry/registry.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { greeterApi, greeterBackend } from '../../examples/greeter.js';
import { tempDir, waitFor } from '../helpers.js';
import {
  http,
  registerPlain,
  startGatewayProcess,
  startPlainApp,
  waitForRoutes,
  type GatewayProcess,
  type PlainApp,
} from '../fixtures/gateway-helpers.js';

const JSON_HEADERS = { 'content-type': 'application/json' };

describe('mesh api, default handler', () => {
  const dir = tempDir('mesh-gateway-');
  let registry: Registry;
  let runtime: Runtime;
  let plain: PlainApp;
  let gw: GatewayProcess;
  let apiGw: GatewayProcess;
  /** --client_request_timeout=300ms and --max_body_size=1KiB, for the limits (kept off the others: a loaded machine can be slow). */
  let tight: GatewayProcess;
  let routed: Service;
  let downPort: number;

  before(async () => {
    registry = createRegistry('local', dir.path);
    const mesh = new Mesh(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, '--admin_address=off', '--log_level=error']).config), 'test');
    runtime = mesh.runtime;
    greeterBackend(mesh);
    greeterApi(mesh);
    await mesh.start();
    plain = await startPlainApp('plain');
    // A port with nothing listening: the backend is down.
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', () => r()));
    downPort = (holder.address() as { port: number }).port;
    await new Promise<void>((r) => holder.close(() => r()));
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    await registerPlain(registry, 'go.mesh.api.counted', plain.port);
    await registerPlain(registry, 'go.mesh.api.down', downPort);
    routed = await registerPlain(registry, 'go.mesh.api.routed', plain.port, [
      { name: 'Routed.Call', metadata: { handler: 'rpc', method: 'POST', path: '/call' } },
      { name: 'Routed.Item', metadata: { handler: 'rpc', method: 'GET', path: '/items/{id}' } },
      { name: 'Routed.Re', metadata: { handler: 'api', path: '^/re/[0-9]+' } },
      { name: 'Routed.Web', metadata: { handler: 'proxy', path: '/web/*' } },
      { name: 'Routed.Hook', metadata: { handler: 'event', method: 'POST', path: '/hooks/{name}' } },
      { name: 'Routed.Hosted', metadata: { handler: 'rpc', path: '/hosted', host: 'api.example.com,*.example.org' } },
      { name: 'Routed.BadRegex', metadata: { handler: 'rpc', path: '^/bad(' } },
      { name: 'Routed.Lookahead', metadata: { handler: 'rpc', path: '^/x(?=y)' } },
      { name: 'Routed.Grpc', metadata: { handler: 'grpc', path: '/grpc' } },
      { name: 'Routed.Plain', metadata: { description: 'no path: not routed' } },
    ]);
    [gw, apiGw, tight] = await Promise.all([
      startGatewayProcess(dir.path, ['--enable_stats', '--cors=http://allowed.example']),
      startGatewayProcess(dir.path, ['--handler=api']),
      startGatewayProcess(dir.path, ['--max_body_size=1KiB', '--client_request_timeout=300ms']),
    ]);
  });

  after(async () => {
    await Promise.all([gw?.stop(), apiGw?.stop(), tight?.stop()]);
    await runtime?.shutdown();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('prints where it listens; GET / answers the version', async () => {
    assert.match(gw.proc.output(), new RegExp(`mesh api listening on http://127\\.0\\.0\\.1:${gw.port} \\(namespace go\\.mesh\\.api, registry router`));
    assert.match(gw.proc.output(), /mesh api admin on http:\/\/127\.0\.0\.1:\d+/);
    const res = await http('GET', `${gw.url}/`);
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.match(res.json().version, /^\d+\.\d+\.\d+/);
    const post = await http('POST', `${gw.url}/`, { body: 'x' });
    assert.equal(post.status, 405);
    assert.equal(post.json().id, 'go.mesh.api');
  });

  it('three tiers: /greeter/say/hello reaches go.mesh.api.greeter, which calls go.mesh.srv.greeter', async () => {
    for (const g of [gw, apiGw]) {
      const res = await http('GET', `${g.url}/greeter/say/hello?name=John`);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['content-type'], 'application/json');
      assert.deepEqual(res.json(), { message: 'Hello John' });
    }
    const posted = await http('POST', `${gw.url}/greeter/say/hello`, { headers: JSON_HEADERS, body: '{"name":"Ann"}' });
    assert.deepEqual(posted.json(), { message: 'Hello Ann' });
    const form = await http('POST', `${apiGw.url}/greeter/say/hello`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=Bob' });
    assert.deepEqual(form.json(), { message: 'Hello Bob' });
  });

  it('/rpc calls the backend directly: JSON, form, request as a string, endpoint, address', async () => {
    const call = { service: 'go.mesh.srv.greeter', method: 'Say.Hello', request: { name: 'John' } };
    const json = await http('POST', `${gw.url}/rpc`, { headers: JSON_HEADERS, body: JSON.stringify(call) });
    assert.equal(json.status, 200);
    assert.equal(json.headers['content-type'], 'application/json');
    assert.deepEqual(json.json(), { msg: 'Hello John' });
    const form = await http('POST', `${apiGw.url}/rpc`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ service: 'go.mesh.srv.greeter', endpoint: 'Say.Hello', request: '{"name":"Form"}' }).toString(),
    });
    assert.deepEqual(form.json(), { msg: 'Hello Form' });
    const [backend] = await registry.getService('go.mesh.srv.greeter');
    const node = backend!.nodes[0]!;
    const direct = await http('POST', `${gw.url}/rpc`, {
      headers: JSON_HEADERS,
      body: JSON.stringify({ ...call, request: '{"name":"Direct"}', address: `${node.address}:${node.port}` }),
    });
    assert.deepEqual(direct.json(), { msg: 'Hello Direct' });
    const get = await http('GET', `${gw.url}/rpc`);
    assert.equal(get.status, 405);
    const missing = await http('POST', `${gw.url}/rpc`, { headers: JSON_HEADERS, body: '{"method":"Say.Hello"}' });
    assert.equal(missing.status, 400);
  });

  it('unknown service: 404 JSON; a path that names no service: 404 JSON', async () => {
    const res = await http('GET', `${gw.url}/foo/bar`);
    assert.equal(res.status, 404);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.text, '{"id":"go.mesh.api","code":404,"detail":"service go.mesh.api.foo: not found","status":"Not Found"}');
    const rpc = await http('POST', `${gw.url}/rpc`, { headers: JSON_HEADERS, body: '{"service":"go.mesh.srv.nope","method":"A.B","request":{}}' });
    assert.equal(rpc.status, 404);
    assert.deepEqual(rpc.json(), { id: 'go.mesh.api', code: 404, detail: 'service go.mesh.srv.nope: not found', status: 'Not Found' });
    for (const path of ['/justone', '/a.b/c', '/stats/x/..', '/favicon.ico']) {
      const r = await http('GET', `${apiGw.url}${path}`);
      assert.equal(r.status, 404, path);
      assert.equal(r.json().id, 'go.mesh.api');
      assert.equal(r.json().code, 404);
    }
  });

  it('backend errors pass through as status and JSON', async () => {
    const noName = await http('GET', `${gw.url}/greeter/say/hello`);
    assert.equal(noName.status, 400);
    assert.equal(noName.headers['content-type'], 'application/json');
    assert.equal(noName.json().id, 'go.mesh.api.greeter');
    const fail = await http('GET', `${gw.url}/plain/echo/fail`);
    assert.equal(fail.status, 422);
    assert.equal(fail.text, '{"id":"plain.app","code":422,"detail":"bad thing","status":"Unprocessable Entity"}');
    const boom = await http('POST', `${gw.url}/rpc`, { headers: JSON_HEADERS, body: '{"service":"go.mesh.api.plain","method":"Echo.Boom"}' });
    assert.equal(boom.status, 500);
    assert.equal(boom.headers['content-type'], 'application/json');
    assert.equal(boom.text, '{"id":"go.mesh.client","code":500,"detail":"boom","status":"Internal Server Error"}');
  });

  it('backend down: 502 (or 503); timeout: 504', async () => {
    const down = await http('GET', `${gw.url}/down/x/y`);
    assert.ok(down.status === 502 || down.status === 503, `${down.status} ${down.text}`);
    assert.equal(down.json().id, 'go.mesh.api');
    // The backend answers after 1.5 s; the gateway gives up at 300 ms.
    const slow = await http('GET', `${tight.url}/plain/echo/slow`);
    assert.equal(slow.status, 504, slow.text);
    assert.equal(slow.json().id, 'go.mesh.api');
    assert.match(slow.json().detail, /timeout after 300ms/);
  });

  it('body over --max_body_size: 413; unsupported content type: 415', async () => {
    const big = 'x'.repeat(2048);
    for (const path of ['/plain/echo/call', '/rpc', '/call']) {
      const res = await http('POST', `${tight.url}${path}`, { headers: JSON_HEADERS, body: big });
      assert.equal(res.status, 413, path);
      assert.equal(res.json().code, 413);
    }
    const rpc = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'text/plain' }, body: 'hi' });
    assert.equal(rpc.status, 415);
    const route = await http('POST', `${gw.url}/call`, { headers: { 'content-type': 'text/xml' }, body: '<a/>' });
    assert.equal(route.status, 415);
    assert.equal(route.headers['content-type'], 'application/json');
  });

  it('api handler with a plain node:http backend: the API Request arrives intact, the API Response is written as it is', async () => {
    const res = await http('GET', `${apiGw.url}/plain/echo/call?x=1&x=2&y=`, { headers: { 'x-custom': 'v' } });
    assert.equal(res.status, 201);
    assert.equal(res.headers['x-plain'], 'yes');
    const seen = res.json();
    assert.equal(seen.endpoint, 'Echo.Call');
    assert.equal(seen.request.method, 'GET');
    assert.equal(seen.request.path, '/plain/echo/call');
    assert.equal(seen.request.url, '/plain/echo/call?x=1&x=2&y=');
    assert.deepEqual(seen.request.get.x, { key: 'x', values: ['1', '2'] });
    assert.deepEqual(seen.request.header['X-Custom'], { key: 'X-Custom', values: ['v'] });
    const text = 'not, json; at all';
    const posted = await http('PUT', `${apiGw.url}/plain/echo/call`, { headers: { 'content-type': 'text/plain' }, body: text });
    assert.equal(posted.json().request.body, text);
    assert.equal(posted.json().request.method, 'PUT');
    const noType = await http('POST', `${apiGw.url}/plain/echo/call`, { body: 'raw=1&kept=yes' });
    assert.equal(noType.json().request.body, 'raw=1&kept=yes');
  });

  it('router: /routes shows the table in order; bad routes are logged and left out', async () => {
    const dump = await waitForRoutes(gw.admin, (t) => t.length > 0);
    assert.equal(dump.length, 1);
    assert.equal(dump[0].route_config_name, 'go.mesh.api');
    assert.match(dump[0].version_info, /^\d+$/);
    const table = dump[0].route_table_dump as Array<{ path: string; kind: string; service: string; endpoint: string; handler: string }>;
    assert.deepEqual(
      table.map((r) => [r.kind, r.path, r.endpoint, r.handler]),
      [
        ['exact', '/hosted', 'Routed.Hosted', 'rpc'],
        ['exact', '/call', 'Routed.Call', 'rpc'],
        ['template', '/hooks/{name}', 'Routed.Hook', 'event'],
        ['template', '/items/{id}', 'Routed.Item', 'rpc'],
        ['template', '/web/*', 'Routed.Web', 'proxy'],
        ['regex', '^/re/[0-9]+', 'Routed.Re', 'api'],
      ],
    );
    assert.ok(table.every((r) => r.service === 'go.mesh.api.routed'));
    const byPath = Object.fromEntries(table.map((r) => [r.path, r]));
    assert.deepEqual((byPath['/hosted'] as any).hosts, ['*.example.org', 'api.example.com']);
    assert.deepEqual((byPath['/call'] as any).methods, ['POST']);
    assert.match(gw.proc.output(), /route ignored/);
    assert.match(gw.proc.output(), /invalid regex/);
    assert.match(gw.proc.output(), /RE2 syntax: no backreferences, lookahead or lookbehind/);
    assert.match(gw.proc.output(), /unknown handler/);
    const res = await http('GET', `${gw.url}/`);
    assert.equal(res.status, 200, 'still running');
  });

  it('router: exact, method filter, and /call does not match /foo/bar/call', async () => {
    const hit = await http('POST', `${gw.url}/call`, { headers: JSON_HEADERS, body: '{"a":1}' });
    assert.equal(hit.status, 200);
    assert.deepEqual(hit.json(), { app: 'plain', service: 'go.mesh.api.routed', endpoint: 'Routed.Call', contentType: 'application/json', body: { a: 1 } });
    const deeper = await http('POST', `${gw.url}/foo/bar/call`, { headers: JSON_HEADERS, body: '{"a":1}' });
    assert.equal(deeper.status, 404);
    assert.equal(deeper.json().detail, 'service go.mesh.api.foo: not found');
    const wrongMethod = await http('GET', `${gw.url}/call`);
    assert.equal(wrongMethod.status, 404);
  });

  it('router: templates, anchored regexes and host filters', async () => {
    const item = await http('GET', `${gw.url}/items/42?x=1`);
    assert.equal(item.status, 200);
    assert.equal(item.json().endpoint, 'Routed.Item');
    assert.deepEqual(item.json().body, { x: '1' });
    assert.equal((await http('GET', `${gw.url}/items/42/more`)).json().detail, 'service go.mesh.api.items: not found');
    const re = await http('GET', `${gw.url}/re/123`);
    assert.equal(re.status, 201);
    assert.equal(re.headers['x-plain'], 'yes');
    assert.equal(re.json().endpoint, 'Routed.Re');
    assert.equal((await http('GET', `${gw.url}/re/123/x`)).status, 404);
    assert.equal((await http('GET', `${gw.url}/re/12x`)).status, 404);
    for (const host of ['api.example.com', 'API.example.com:8080', 'a.b.example.org']) {
      const res = await http('POST', `${gw.url}/hosted`, { headers: { ...JSON_HEADERS, host }, body: '{}' });
      assert.equal(res.status, 200, host);
      assert.equal(res.json().endpoint, 'Routed.Hosted');
    }
    const other = await http('POST', `${gw.url}/hosted`, { headers: { ...JSON_HEADERS, host: 'example.org' }, body: '{}' });
    assert.equal(other.status, 404);
  });

  it('router: proxy route keeps the full path and query, sets X-Forwarded-*, tunnels WebSockets', async () => {
    const res = await http('GET', `${gw.url}/web/a/b?x=1&y=%20z`, { headers: { 'x-forwarded-for': '10.0.0.1' } });
    assert.equal(res.status, 200);
    const seen = res.json();
    assert.equal(seen.url, '/web/a/b?x=1&y=%20z');
    assert.equal(seen.headers['x-forwarded-for'], '10.0.0.1, 127.0.0.1');
    assert.equal(seen.headers['x-forwarded-proto'], 'http');
    assert.equal(seen.headers['x-forwarded-host'], `127.0.0.1:${gw.port}`);
    const posted = await http('POST', `${gw.url}/web`, { headers: { 'content-type': 'text/plain' }, body: 'body kept' });
    assert.equal(posted.json().body, 'body kept');
    assert.equal(posted.json().url, '/web');

    const ws = new WebSocket(`ws://127.0.0.1:${gw.port}/web/socket?q=1`);
    const messages: string[] = [];
    ws.on('message', (d) => messages.push(d.toString()));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    ws.send('ping');
    await waitFor(() => messages.length >= 2);
    assert.deepEqual(JSON.parse(messages[0]!), { hello: 'plain', url: '/web/socket?q=1', forwardedFor: '127.0.0.1' });
    assert.equal(messages[1], 'echo:ping');
    ws.close();

    const refused = new WebSocket(`ws://127.0.0.1:${gw.port}/greeter/say/hello`);
    const status = await new Promise<number>((resolve) => {
      refused.once('unexpected-response', (_req, r) => resolve(r.statusCode ?? 0));
      refused.once('error', () => resolve(-1));
    });
    assert.equal(status, 404);
  });

  it('router: event route publishes the Event to a subscriber (broker API)', async () => {
    const got: Message[] = [];
    const sub = await runtime.broker.subscribe('go.mesh.api.hooks', (m) => {
      got.push(m);
    });
    try {
      const res = await http('POST', `${gw.url}/hooks/github?x=1`, { headers: JSON_HEADERS, body: '{"ref":"main"}' });
      assert.equal(res.status, 200, res.text);
      await waitFor(() => got.length === 1);
      const event = JSON.parse(Buffer.from(got[0]!.body).toString('utf8'));
      assert.equal(event.name, 'github');
      assert.equal(event.data, '{"ref":"main"}');
      assert.equal(typeof event.id, 'string');
      assert.ok(Math.abs(event.timestamp - Date.now() / 1000) < 60);
      assert.deepEqual(event.header['Content-Type'], { key: 'Content-Type', values: ['application/json'] });
    } finally {
      await sub.unsubscribe();
    }
  });

  it('router: rebuilt from the registry on changes', async () => {
    const late = await registerPlain(registry, 'go.mesh.api.late', plain.port, [{ name: 'Late.Arrival', metadata: { path: '/late' } }]);
    const before = await waitForRoutes(gw.admin, (t) => t.some((r) => r.path === '/late'));
    const res = await http('POST', `${gw.url}/late`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(res.status, 200);
    assert.equal(res.json().endpoint, 'Late.Arrival', 'an endpoint without a handler is an rpc route');
    await registry.deregister(late);
    const after = await waitForRoutes(gw.admin, (t) => !t.some((r) => r.path === '/late'));
    assert.ok(Number(after[0].version_info) > Number(before[0].version_info));
    assert.equal((await http('POST', `${gw.url}/late`, { headers: JSON_HEADERS, body: '{}' })).status, 404);
    // Changes outside the namespace do not touch the table.
    assert.ok(routed.endpoints.length > 0);
  });

  it('admin /clusters counts what the gateway sent: rq_total::N on the backend host', async () => {
    const n = 7;
    for (let i = 0; i < n; i++) {
      const res = await http('GET', `${gw.url}/counted/echo/call?i=${i}`);
      assert.equal(res.status, 201);
    }
    const clusters = await http('GET', `${gw.admin}/clusters`);
    assert.equal(clusters.status, 200);
    assert.ok(clusters.text.includes(`go.mesh.api.counted::127.0.0.1:${plain.port}::rq_total::${n}\n`), clusters.text);
    assert.ok(clusters.text.includes(`go.mesh.api.counted::127.0.0.1:${plain.port}::rq_success::${n}\n`), clusters.text);
  });

  it('--enable_stats: /stats JSON (its own requests not counted) and an HTML page', async () => {
    const first = await http('GET', `${gw.url}/stats`, { headers: { accept: 'application/json' } });
    assert.equal(first.status, 200);
    assert.equal(first.headers['content-type'], 'application/json');
    const a = first.json();
    for (const key of ['started', 'uptime', 'memory', 'totals', 'counters', 'latency_ms', 'clusters', 'state', 'version']) assert.ok(key in a, key);
    assert.ok(a.totals.total > 0);
    assert.ok(a.totals['2xx'] > 0 && a.totals['4xx'] > 0 && a.totals['5xx'] > 0);
    await http('GET', `${gw.url}/greeter/say/hello?name=S`);
    await http('GET', `${gw.url}/nosuch/x`);
    const html = await http('GET', `${gw.url}/stats`, { headers: { accept: 'text/html' } });
    assert.equal(html.status, 200);
    assert.match(String(html.headers['content-type']), /^text\/html/);
    assert.match(html.text, /<html/);
    const b = (await http('GET', `${gw.url}/stats`, { headers: { accept: 'application/json' } })).json();
    assert.equal(b.totals.total, a.totals.total + 2);
    assert.equal(b.totals['2xx'], a.totals['2xx'] + 1);
    assert.equal(b.totals['4xx'], a.totals['4xx'] + 1);
    // Without --enable_stats /stats is just a path that names no service.
    assert.equal((await http('GET', `${apiGw.url}/stats`)).status, 404);
  });

  it('CORS for an allowed origin; draining: admin /healthcheck/fail makes the health path 503', async () => {
    const pre = await http('OPTIONS', `${gw.url}/greeter/say/hello`, {
      headers: { origin: 'http://allowed.example', 'access-control-request-method': 'POST' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], 'http://allowed.example');
    const other = await http('GET', `${gw.url}/`, { headers: { origin: 'http://evil.example' } });
    assert.equal(other.headers['access-control-allow-origin'], undefined);

    assert.equal((await http('GET', `${gw.url}/_mesh/health`)).status, 200);
    assert.equal((await http('POST', `${gw.admin}/healthcheck/fail`)).status, 200);
    assert.equal((await http('GET', `${gw.url}/_mesh/health`)).status, 503);
    assert.equal((await http('POST', `${gw.admin}/healthcheck/ok`)).status, 200);
    assert.equal((await http('GET', `${gw.url}/_mesh/health`)).status, 200);
  });
});

describe('mesh api: flags', () => {
  it('--enable_tls serves HTTPS with the given files; bad flags exit 2', async (t) => {
    const dir = tempDir('mesh-gateway-tls-');
    try {
      const { spawnSync } = await import('node:child_process');
      const gen = spawnSync('openssl', [
        'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
        '-subj', '/CN=localhost', '-keyout', `${dir.path}/key.pem`, '-out', `${dir.path}/cert.pem`,
      ]);
      if (gen.status !== 0) {
        // CI installs openssl; there a missing openssl is a failure, not a skip.
        if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('openssl not available (MESH_TEST_REQUIRE_ENGINES=1)');
        t.skip('openssl not available: install it (Debian package openssl) to test HTTPS');
        return;
      }
      const g = await startGatewayProcess(dir.path, ['--enable_tls', `--tls_cert_file=${dir.path}/cert.pem`, `--tls_key_file=${dir.path}/key.pem`]);
      try {
        assert.match(g.proc.output(), /listening on https:\/\//);
        const { request } = await import('node:https');
        const body = await new Promise<string>((resolve, reject) => {
          request(`${g.url}/`, { rejectUnauthorized: false }, (res) => {
            let text = '';
            res.on('data', (d: Buffer) => (text += d.toString()));
            res.on('end', () => resolve(text));
          })
            .on('error', reject)
            .end();
        });
        assert.match(body, /"version"/);
      } finally {
        await g.stop();
      }
      const { runCli } = await import('../helpers.js');
      const bad = await runCli(['api', '--handler=web', `--registry_address=${dir.path}`]);
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /--handler/);
      const missing = await runCli(['api', '--enable_tls', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`]);
      assert.equal(missing.code, 1);
      assert.match(missing.stderr, /tls_cert_file/);
    } finally {
      dir.cleanup();
    }
  });
});
