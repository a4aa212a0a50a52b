/**
 * A route file's filters, retries, faults and stats on `mesh api --routes=FILE` as a real process:
 * a 50 % abort fault measured over 2,000 requests, a mirror that gets copies while the client sees
 * only the primary's answers, header modifiers and URL rewrites as the backend receives them,
 * redirects answered exactly, a retry storm stopped by the route's retry budget (counted), and the
 * per-route stats in admin /stats.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

const ROUTES = `${HEAD}metadata: {name: shop}
spec:
  handler: proxy
  rules:
    - name: fault
      matches: [{path: {value: /fault}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      fault: {abort: {httpStatus: 418, percentage: 50}}
    - name: headers
      matches: [{path: {value: /hdr}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      filters:
        - type: RequestHeaderModifier
          requestHeaderModifier:
            set: [{name: X-Set, value: one}]
            add: [{name: X-Add, value: two}]
            remove: [X-Drop]
        - type: ResponseHeaderModifier
          responseHeaderModifier:
            set: [{name: X-Resp, value: yes}]
            remove: [Content-Type]
    - name: rewrite
      matches: [{path: {value: /old}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      filters:
        - type: URLRewrite
          urlRewrite: {hostname: backend.internal, path: {type: ReplacePrefixMatch, replacePrefixMatch: /new}}
    - name: full
      matches: [{path: {value: /full}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      filters:
        - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /exact}}}
    - name: moved
      matches: [{path: {value: /moved}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {scheme: https, hostname: shop.example.com, statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /here}}
    - name: mirror
      matches: [{path: {value: /mirror}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      filters:
        - {type: RequestMirror, requestMirror: {backendRef: {name: go.mesh.srv.shadow}}}
    - name: delayed
      matches: [{path: {value: /delayed}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      fault: {delay: {fixedDelay: 1ms, percentage: 100}}
    - name: storm
      matches: [{path: {value: /storm}}]
      backendRefs: [{name: go.mesh.srv.down}]
      retry: {attempts: 3, codes: [503], budget: {percent: 1, min: 0}}
    - name: retried
      matches: [{path: {value: /retried}}]
      backendRefs: [{name: go.mesh.srv.down}]
      retry: {attempts: 2, codes: [503], backoff: 1ms}
---
${HEAD}metadata: {name: calls}
spec:
  handler: rpc
  rules:
    - name: rpc-storm
      matches: [{path: {value: /rpcstorm}}]
      backendRefs: [{name: go.mesh.srv.down}]
      retry: {attempts: 3, codes: [503], budget: {percent: 1, min: 0}}
    - name: rpc-retried
      matches: [{path: {value: /rpcretried}}]
      backendRefs: [{name: go.mesh.srv.down}]
      retry: {attempts: 2, codes: [503]}
    - name: rpc-headers
      matches: [{path: {value: /rpchdr}}]
      backendRefs: [{name: go.mesh.srv.echo}]
      filters:
        - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Set, value: one}], remove: [X-Drop]}}
        - {type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /svc/greet/hello}}}
    - name: rpc-once
      matches: [{path: {value: /rpconce}}]
      backendRefs: [{name: go.mesh.srv.down}]
      retry: {attempts: 2, codes: [500]}
`;

/** A node that answers every request 503 and counts them. */
async function startDown(): Promise<{ server: Server; port: number; count: () => number }> {
  let n = 0;
  const server = createServer((req, res) => {
    n++;
    req.resume();
    res.writeHead(503, { 'content-type': 'text/plain' });
    res.end('down');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as AddressInfo).port, count: () => n };
}

async function stats(admin: string, prefix: string): Promise<Record<string, number>> {
  const filter = `^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`;
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(filter)}`);
  const out: Record<string, number> = {};
  for (const s of res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []) out[s.name.slice(prefix.length)] = s.value;
  return out;
}

describe('mesh api --routes: filters, retries, faults, mirrors, per-route stats', () => {
  const dir = tempDir('mesh-route-filters-');
  const routesFile = join(dir.path, 'routes.yaml');
  const rulesFile = join(dir.path, 'rules.yaml');
  const logFile = join(dir.path, 'access.log');
  let registry: Registry;
  let echo: PlainApp;
  let shadow: PlainApp;
  let down: Awaited<ReturnType<typeof startDown>>;
  let gw: GatewayProcess;
  let pool: Pool;

  before(async () => {
    registry = createRegistry('local', dir.path);
    [echo, shadow, down] = await Promise.all([startPlainApp('echo'), startPlainApp('shadow'), startDown()]);
    await registerPlain(registry, 'go.mesh.srv.echo', echo.port);
    await registerPlain(registry, 'go.mesh.srv.shadow', shadow.port);
    await registerPlain(registry, 'go.mesh.srv.down', down.port);
    writeFileSync(routesFile, ROUTES);
    writeFileSync(rulesFile, 'rules:\n  - {path: /old/secret, access: deny}\n  - {path: /new/, access: deny}\n');
    gw = await startGatewayProcess(dir.path, [`--routes=${routesFile}`, `--auth_rules=${rulesFile}`, `--access_log=${logFile}`, '--access_log_format=%ROUTE_NAME% %REQ(:PATH)% %RESPONSE_CODE%']);
    pool = new Pool(gw.url, { connections: 16 });
  });

  after(async () => {
    await pool?.close();
    await gw?.stop();
    await Promise.all([echo?.close(), shadow?.close(), new Promise((r) => down?.server.close(r))]);
    await registry?.close();
    dir.cleanup();
  });

  it('a fault of 50 % aborts lands within 4 points over 2,000 requests, counted per route', async () => {
    const counts: Record<number, number> = {};
    let next = 0;
    const worker = async () => {
      while (next < 2000) {
        next++;
        const res = await pool.request({ method: 'GET', path: '/fault' });
        const body = await res.body.text();
        counts[res.statusCode] = (counts[res.statusCode] ?? 0) + 1;
        if (res.statusCode === 418) assert.equal(body, '{"id":"go.mesh.api","code":418,"detail":"fault injected by route fault","status":"I\'m a Teapot"}');
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    assert.equal((counts[418] ?? 0) + (counts[200] ?? 0), 2000, JSON.stringify(counts));
    const share = (counts[418] ?? 0) / 2000;
    // 4 points: 4.5 standard deviations of 2,000 draws (3 points failed about one run in 300).
    assert.ok(Math.abs(share - 0.5) <= 0.04, `aborts: ${share}`);
    const s = await waitFor(async () => {
      const got = await stats(gw.admin, 'vhost.*.route.fault.');
      return got.rq_4xx! + got.rq_2xx! === 2000 ? got : undefined;
    });
    assert.equal(s.rq_total, 2000);
    assert.equal(s['fault.aborts_injected'], counts[418]);
    assert.equal(s.rq_4xx, counts[418]);
    assert.equal(s['fault.delays_injected'], 0);
    // Prometheus: the host and the rule are labels.
    const prom = (await http('GET', `${gw.admin}/stats/prometheus`)).text;
    assert.ok(prom.includes(`mesh_vhost_route_rq_total{route_name="fault",virtual_host_name="*"} 2000\n`), prom.split('\n').filter((l) => l.includes('vhost')).join('\n'));
  });

  it('header modifiers reach the backend as set; the answer gets its own', async () => {
    const res = await http('GET', `${gw.url}/hdr/a?q=1`, { headers: { 'X-Set': 'old', 'X-Add': 'first', 'X-Drop': 'gone', 'X-Keep': 'kept' } });
    assert.equal(res.status, 200);
    const got = JSON.parse(res.text);
    assert.equal(got.url, '/hdr/a?q=1');
    assert.equal(got.headers['x-set'], 'one');
    assert.equal(got.headers['x-add'], 'first, two');
    assert.equal(got.headers['x-drop'], undefined);
    assert.equal(got.headers['x-keep'], 'kept');
    assert.equal(res.headers['x-resp'], 'yes');
    assert.equal(res.headers['content-type'], undefined);
  });

  it('URL rewrite: the prefix replaced and the Host set; a full path replaced; the query kept', async () => {
    const a = JSON.parse((await http('GET', `${gw.url}/old/items/7?x=1`)).text);
    assert.equal(a.url, '/new/items/7?x=1');
    assert.equal(a.headers.host, 'backend.internal');
    assert.equal(JSON.parse((await http('GET', `${gw.url}/old`)).text).url, '/new');
    assert.equal(JSON.parse((await http('GET', `${gw.url}/full/any/thing?y=2`)).text).url, '/exact?y=2');
  });

  it('auth rules see the path as the client sent it (normalized), before the rewrite', async () => {
    const denied = await http('GET', `${gw.url}/old/x/../secret/a`);
    assert.equal(denied.status, 403);
    const before = echo.received.length;
    // /new/ is denied, but the client asked for /old/ok: allowed, and the backend gets /new/ok.
    const allowed = await http('GET', `${gw.url}/old/ok`);
    assert.equal(allowed.status, 200);
    assert.equal(echo.received.length, before + 1);
    assert.equal(echo.received[before]!.url, '/new/ok');
  });

  it('a delay fault is counted and the request then served', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await http('GET', `${gw.url}/delayed`)).status, 200);
    const s = await stats(gw.admin, 'vhost.*.route.delayed.');
    assert.equal(s['fault.delays_injected'], 3);
    assert.equal(s['fault.aborts_injected'], 0);
    assert.equal(s.rq_2xx, 3);
  });

  it("the access log names the rule (%ROUTE_NAME%), '-' for a request no route served", async () => {
    assert.equal((await http('GET', `${gw.url}/full/log-me`)).status, 200);
    assert.equal((await http('GET', `${gw.url}/nowhere/log-me`)).status, 404);
    const lines = await waitFor(() => {
      const got = readFileSync(logFile, 'utf8').split('\n').filter((l) => l.includes('/log-me'));
      return got.length === 2 ? got : undefined;
    });
    assert.deepEqual(lines.sort(), ['- /nowhere/log-me 404', 'full /full/log-me 200']);
  });

  it('redirect answers exactly, without a backend', async () => {
    const res = await http('GET', `${gw.url}/moved/a/b?c=d`);
    assert.equal(res.status, 301);
    assert.equal(res.headers.location, 'https://shop.example.com/here/a/b?c=d');
    assert.equal(res.text, '');
  });

  it('a mirror receives copies while the client sees only the primary answers', async () => {
    const before = shadow.received.length;
    for (let i = 0; i < 20; i++) {
      const res = await http('POST', `${gw.url}/mirror/${i}`, { body: `copy ${i}`, headers: { 'content-type': 'text/plain' } });
      assert.equal(res.status, 200);
      assert.equal(JSON.parse(res.text).app, 'echo');
    }
    await waitFor(() => shadow.received.length - before >= 20);
    const copies = shadow.received.slice(before).map((r) => `${r.method} ${r.url} ${r.body}`).sort();
    assert.deepEqual(copies, Array.from({ length: 20 }, (_, i) => `POST /mirror/${i} copy ${i}`).sort());
    const s = await waitFor(async () => {
      const got = await stats(gw.admin, 'vhost.*.route.mirror.');
      return got['mirror.sent'] === 20 ? got : undefined;
    });
    assert.equal(s['mirror.dropped'], 0);
    assert.equal(s['mirror.failed'], 0);
  });

  it("a retry storm on a route whose nodes all fail is stopped by the route's budget (counted); without it every retry is made", async () => {
    const start = down.count();
    for (let i = 0; i < 10; i++) {
      const res = await http('GET', `${gw.url}/storm`);
      assert.equal(res.status, 503);
      assert.match(res.text, /^\{"id":"go\.mesh\.api","code":503,"detail":"proxy to go\.mesh\.srv\.down on 127\.0\.0\.1:\d+: answered 503","status":"Service Unavailable"\}$/);
    }
    // The budget (1 %, at least 0) admits no retry at this load: each request made one try.
    assert.equal(down.count() - start, 10);
    const storm = await stats(gw.admin, 'vhost.*.route.storm.');
    assert.equal(storm.retry, 0);
    assert.equal(storm.retry_overflow, 10);
    assert.equal(storm.rq_5xx, 10);

    const mid = down.count();
    for (let i = 0; i < 5; i++) {
      const res = await http('GET', `${gw.url}/retried`);
      assert.equal(res.status, 503);
      assert.equal(res.text, 'down'); // the last try's own answer
    }
    assert.equal(down.count() - mid, 15);
    const retried = await stats(gw.admin, 'vhost.*.route.retried.');
    assert.equal(retried.retry, 10);
    assert.equal(retried.retry_overflow, 0);
  });

  it('on an rpc route, the header modifier reaches the backend and the rewritten path names the method', async () => {
    const before = echo.received.length;
    const res = await http('POST', `${gw.url}/rpchdr/say/hi`, { body: '{}', headers: { 'content-type': 'application/json', 'X-Set': 'old', 'X-Drop': 'gone' } });
    assert.equal(res.status, 200);
    assert.equal(res.json().endpoint, 'Greet.Hello');
    const got = echo.received[before]!;
    assert.equal(got.headers['x-set'], 'one');
    assert.equal(got.headers['x-drop'], undefined);
  });

  it("an rpc route's retries go through the client's retries: its codes, its budget (counted)", async () => {
    const call = (path: string) => http('POST', `${gw.url}${path}/say/hello`, { body: '{}', headers: { 'content-type': 'application/json' } });
    let at = down.count();
    for (let i = 0; i < 4; i++) assert.equal((await call('/rpcstorm')).status, 503);
    assert.equal(down.count() - at, 4);
    at = down.count();
    for (let i = 0; i < 4; i++) assert.equal((await call('/rpcretried')).status, 503);
    assert.equal(down.count() - at, 12);
    at = down.count();
    // 503 is not among this route's codes: no retry.
    for (let i = 0; i < 4; i++) assert.equal((await call('/rpconce')).status, 503);
    assert.equal(down.count() - at, 4);
    const storm = await stats(gw.admin, 'vhost.*.route.rpc-storm.');
    assert.deepEqual([storm.retry, storm.retry_overflow, storm.rq_5xx], [0, 4, 4]);
    const retried = await stats(gw.admin, 'vhost.*.route.rpc-retried.');
    assert.deepEqual([retried.retry, retried.retry_overflow], [8, 0]);
  });
});
