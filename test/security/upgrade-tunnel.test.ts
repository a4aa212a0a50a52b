/**
 * An Upgrade request becomes a tunnel only after the node's `101 Switching Protocols`, through every
 * front end that proxies upgrades: the gateway's proxy handler, a registry-router proxy route, the
 * sidecar's proxy handler and `mesh proxy` (with a prefix_rewrite route), each a real process.
 *
 * The attack: a backend that answers an Upgrade GET with a plain 200 (node:http without an
 * 'upgrade' listener does, and keeps the connection open). Were the client connection turned into
 * a byte pipe anyway, the requests pipelined behind the upgrade would reach the backend without
 * auth, rules, rate limit, route match or rewrite, carrying the client's own Mesh-Auth-* headers.
 * Here the client gets the 200 with `Connection: close`, its connection closes, and the backend
 * sees the upgrade request alone. A real WebSocket (`ws`) still works end to end; `Upgrade: h2c` is
 * refused; upgrades pass `--rate_limit`.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { freePort, http, listenLoopback, PRINTED, rawHttp, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

/** A backend that answers every request, an Upgrade GET included, with 200 `ok`, keeping the connection open. */
async function startOkBackend(): Promise<{ port: number; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
    res.end('ok');
  });
  return { seen, ...(await listenLoopback(server)) };
}

const KEY = 'k-0123456789abcdef-admin';
const H2C_DETAIL = 'Upgrade: h2c is refused: an HTTP/2 connection would carry requests past the edge (send HTTP/1.1 requests)';
const errorBody = (id: string, code: number, status: string, detail: string) => JSON.stringify({ id, code, detail, status });

/** An upgrade request for `path`, then `count` requests pipelined behind it on the same connection. */
function upgradeThenPipelined(path: string, follow: string, count: number, extra = ''): string {
  let bytes = `GET ${path} HTTP/1.1\r\nHost: localhost\r\n${extra}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;
  for (let i = 0; i < count; i++) bytes += `GET ${follow}?n=${i} HTTP/1.1\r\nHost: localhost\r\nMesh-Auth-Subject: admin\r\nMesh-Auth-Scopes: admin root\r\n\r\n`;
  return bytes;
}

/** How many HTTP answers (status lines) a raw exchange holds. */
/** A counter or gauge of an admin /stats dump. */
async function stat(admin: string, name: string): Promise<number | undefined> {
  for (const line of (await http('GET', `${admin}/stats`)).text.split('\n')) {
    const [k, v] = line.split(': ');
    if (k === name) return Number(v);
  }
  return undefined;
}

const answers = (raw: string) => (raw.match(/(^|\r\n)HTTP\/1\.1 \d{3} /g) ?? []).length;

async function wsRoundTrip(url: string): Promise<{ hello: { url: string }; echo: string }> {
  const ws = new WebSocket(url);
  const hello = new Promise<string>((resolve, reject) => {
    ws.once('message', (m) => resolve(m.toString()));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`status ${res.statusCode}`)));
  });
  const first = JSON.parse(await hello) as { url: string };
  const echo = new Promise<string>((resolve) => ws.once('message', (m) => resolve(m.toString())));
  ws.send('hi');
  const text = await echo;
  ws.close();
  return { hello: first, echo: text };
}

describe('an upgrade the backend did not accept never becomes a tunnel', () => {
  const dir = tempDir('mesh-upgrade-tunnel-');
  let registry: Registry;
  let ok: Awaited<ReturnType<typeof startOkBackend>>;
  let app: PlainApp;
  let gwProxy: GatewayProcess;
  let gwRouter: GatewayProcess;
  let gwSubject: GatewayProcess;
  let sidecar: SidecarProcess;
  let proxy: RunningProcess;
  let proxyPort: number;
  /** A node that accepts connections and never answers. */
  let hang: { port: number; sockets: Socket[]; close(): void };

  before(async () => {
    registry = createRegistry('local', dir.path);
    [ok, app] = await Promise.all([startOkBackend(), startPlainApp('wsapp')]);
    const sockets: Socket[] = [];
    const hangServer = createNetServer((sock) => {
      sockets.push(sock);
      sock.on('error', () => {});
    });
    await new Promise<void>((r) => hangServer.listen(0, '127.0.0.1', () => r()));
    hang = { port: (hangServer.address() as AddressInfo).port, sockets, close: () => (sockets.forEach((x) => x.destroy()), hangServer.close()) };
    await registerPlain(registry, 'go.mesh.api.hang', hang.port, [{ name: 'Hang.Web', metadata: { handler: 'proxy', path: '/hang/*' } }]);
    await registerPlain(registry, 'go.mesh.api.dead', await freePort(), [{ name: 'Dead.Web', metadata: { handler: 'proxy', path: '/dead/*' } }]);
    await registerPlain(registry, 'go.mesh.api.plain', ok.port);
    await registerPlain(registry, 'go.mesh.api.wsapp', app.port);
    await registerPlain(registry, 'go.mesh.srv.plain', ok.port);
    await registerPlain(registry, 'go.mesh.srv.wsapp', app.port);
    await registerPlain(registry, 'go.mesh.api.routed', ok.port, [{ name: 'Routed.Web', metadata: { handler: 'proxy', path: '/web/*' } }]);
    await registerPlain(registry, 'go.mesh.api.routedws', app.port, [{ name: 'Routed.Ws', metadata: { handler: 'proxy', path: '/wsr/*' } }]);
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, 'rules:\n  - path: /hang/\n    access: public\n  - path: /dead/\n    access: public\n  - path: /plain/open\n    access: public\n  - path: /web/open\n    access: public\n  - path: /wsapp/\n    access: public\n  - path: /wsr/\n    access: public\n');
    const keys = join(dir.path, 'keys.txt');
    writeFileSync(keys, `${KEY} admin admin\n`);
    const auth = ['--auth=key', `--auth_keys=${keys}`, `--auth_rules=${rules}`];
    const config = join(dir.path, 'proxy.yaml');
    writeFileSync(
      config,
      `admin: { address: 127.0.0.1:0 }
listeners:
  - name: in
    address: 127.0.0.1:0
    routes:
      - match: { prefix: /api/ }
        prefix_rewrite: /
        cluster: ok
      - match: { prefix: /ws/ }
        cluster: wsapp
clusters:
  - name: ok
    hosts: [127.0.0.1:${ok.port}]
  - name: wsapp
    hosts: [127.0.0.1:${app.port}]
`,
    );
    proxy = startProcess(['proxy', '-c', config, '--log_level=warning']);
    [gwProxy, gwRouter, gwSubject, sidecar, proxyPort] = await Promise.all([
      // Keyed by route: each path has its own bucket of 2, so only the rate limit test exhausts one.
      startGatewayProcess(dir.path, ['--handler=proxy', ...auth, '--rate_limit=2/s', '--rate_limit_key=route']),
      startGatewayProcess(dir.path, [...auth, '--client_request_timeout=1s']),
      startGatewayProcess(dir.path, ['--handler=proxy', ...auth, '--rate_limit=2/s', '--rate_limit_key=subject']),
      startSidecar(dir.path, ['--handler=proxy']),
      proxy.waitForPort(PRINTED.proxy, 15000),
    ]);
  });

  after(async () => {
    await Promise.all([gwProxy?.stop(), gwRouter?.stop(), gwSubject?.stop(), sidecar?.stop(), proxy?.stop()]);
    hang?.close();
    await Promise.all([ok?.close(), app?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  const fronts = () => [
    { name: 'gateway --handler=proxy', port: gwProxy.port, id: 'go.mesh.api', upgrade: '/plain/open/up', follow: '/plain/secret', sent: '/plain/open/up', ws: '/wsapp/socket' },
    { name: 'registry-router proxy route', port: gwRouter.port, id: 'go.mesh.api', upgrade: '/web/open/up', follow: '/web/secret', sent: '/web/open/up', ws: '/wsr/socket' },
    { name: 'sidecar --handler=proxy', port: sidecar.port, id: 'go.mesh.sidecar', upgrade: '/plain/up', follow: '/plain/other', sent: '/plain/up', ws: '/wsapp/socket' },
    { name: 'mesh proxy, prefix_rewrite', port: proxyPort, id: 'go.mesh.proxy', upgrade: '/api/up', follow: '/api/follow', sent: '/up', ws: '/ws/socket' },
  ];

  it('a 200 to the upgrade is passed on with Connection: close; the pipelined requests never reach the backend', async () => {
    for (const f of fronts()) {
      const before = ok.seen.length;
      const r = await rawHttp(f.port, upgradeThenPipelined(f.upgrade, f.follow, 5), 5000);
      assert.equal(r.status, 200, `${f.name}: ${r.raw}`);
      assert.equal(r.headers['connection'], 'close', f.name);
      assert.equal(r.headers['content-length'], '2', f.name);
      assert.equal(r.body, 'ok', f.name);
      assert.equal(answers(r.raw), 1, `${f.name}: ${r.raw}`);
      assert.deepEqual(
        ok.seen.slice(before).map((s) => s.url),
        [f.sent],
        f.name,
      );
      assert.equal(ok.seen.at(-1)!.headers['mesh-auth-subject'], undefined, f.name);
    }
  });

  it('the wait for the answer is bounded (504), a refused node is a 502, and each lease is released with its outcome', async () => {
    const timedOut = await rawHttp(gwRouter.port, upgradeThenPipelined('/hang/up', '/hang/next', 3), 10_000);
    assert.equal(timedOut.status, 504, timedOut.raw);
    assert.equal(timedOut.headers['connection'], 'close');
    assert.match(timedOut.body, /^\{"id":"go\.mesh\.api","code":504,"detail":"proxy to go\.mesh\.api\.hang on 127\.0\.0\.1:\d+: timeout after 1000ms","status":"Gateway Timeout"\}$/);
    const refused = await rawHttp(gwRouter.port, upgradeThenPipelined('/dead/up', '/dead/next', 3), 10_000);
    assert.equal(refused.status, 502, refused.raw);
    assert.match(refused.body, /^\{"id":"go\.mesh\.api","code":502,"detail":"proxy to go\.mesh\.api\.dead on 127\.0\.0\.1:\d+: econnrefused: .*","status":"Bad Gateway"\}$/);
    await waitFor(async () => (await stat(gwRouter.admin, 'cluster.go.mesh.api.hang.upstream_rq_active')) === 0);
    assert.equal(await stat(gwRouter.admin, 'cluster.go.mesh.api.hang.upstream_rq_timeout'), 1);
    assert.equal(await stat(gwRouter.admin, 'cluster.go.mesh.api.dead.upstream_rq_5xx'), 1); // a connect failure, charged as 503
    assert.equal(await stat(gwRouter.admin, 'cluster.go.mesh.api.dead.upstream_rq_active'), 0);
    // The 200s passed on earlier released their leases as answers.
    assert.equal(await stat(gwRouter.admin, 'cluster.go.mesh.api.routed.upstream_rq_active'), 0);
    assert.ok((await stat(gwRouter.admin, 'cluster.go.mesh.api.routed.upstream_rq_2xx'))! >= 1);
  });

  it('a real WebSocket (101) still works end to end', async () => {
    for (const f of fronts()) {
      const { hello, echo } = await wsRoundTrip(`ws://127.0.0.1:${f.port}${f.ws}`);
      assert.equal(hello.url, f.ws, f.name);
      assert.equal(echo, 'echo:hi', f.name);
    }
  });

  it('Upgrade: h2c is refused with error JSON, wherever h2c is in the list', async () => {
    for (const f of fronts()) {
      for (const [i, upgrade] of ['h2c', 'websocket, H2C'].entries()) {
        const before = ok.seen.length;
        const r = await rawHttp(f.port, `GET ${f.upgrade}/h2c-${i} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: ${upgrade}\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\nGET ${f.follow} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 5000);
        assert.equal(r.status, 400, `${f.name}: ${r.raw}`);
        assert.equal(r.headers['content-type'], 'application/json', f.name);
        assert.equal(r.headers['connection'], 'close', f.name);
        assert.equal(r.body, errorBody(f.id, 400, 'Bad Request', H2C_DETAIL), f.name);
        assert.equal(ok.seen.length, before, `${f.name}: the backend saw ${JSON.stringify(ok.seen.slice(before).map((s) => s.url))}`);
      }
    }
  });

  it('an upgrade request with a body is refused, and the body is never forwarded', async () => {
    for (const f of fronts()) {
      const before = ok.seen.length;
      const r = await rawHttp(f.port, `GET ${f.upgrade}/body HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 42\r\n\r\nGET ${f.follow} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 5000);
      assert.equal(r.status, 400, `${f.name}: ${r.raw}`);
      assert.equal(r.body, errorBody(f.id, 400, 'Bad Request', 'an upgrade request carries no body'), f.name);
      assert.equal(ok.seen.length, before, f.name);
    }
  });

  it('--rate_limit=2/s: one upgrade with 50 pipelined requests is one request; upgrades past the limit get 429', async () => {
    const path = '/plain/open/limited';
    const before = ok.seen.length;
    const r = await rawHttp(gwProxy.port, upgradeThenPipelined(path, path, 50), 5000);
    assert.equal(r.status, 200, r.raw);
    assert.equal(answers(r.raw), 1, r.raw);
    assert.equal(ok.seen.length - before, 1);
    // Upgrades on new connections take a token each: the bucket (2) runs out within a few.
    let refused: Awaited<ReturnType<typeof rawHttp>> | undefined;
    let passed = 1;
    for (let i = 0; i < 20 && !refused; i++) {
      const next = await rawHttp(gwProxy.port, upgradeThenPipelined(path, path, 0), 5000);
      if (next.status === 429) refused = next;
      else {
        assert.equal(next.status, 200, next.raw);
        passed++;
      }
    }
    assert.ok(refused, 'no upgrade was refused');
    assert.equal(refused.headers['connection'], 'close');
    assert.match(refused.headers['retry-after'] ?? '', /^\d+$/);
    assert.match(refused.headers['ratelimit'] ?? '', /^"default";r=0;t=\d+$/);
    const body = JSON.parse(refused.body) as { id: string; code: number; detail: string; status: string };
    assert.deepEqual({ ...body, detail: '' }, { id: 'go.mesh.api', code: 429, detail: '', status: 'Too Many Requests' });
    assert.match(body.detail, /^rate limit of 2\/s \(burst 2\) exceeded: retry after \d+s$/);
    assert.equal(ok.seen.length - before, passed, 'the backend saw exactly the upgrades that passed');
  });

  it('--rate_limit_key=subject: an upgrade is limited after the auth step, in its subject\'s bucket', async () => {
    const path = '/plain/open/by-subject';
    const keyed = upgradeThenPipelined(path, path, 0, `Authorization: Bearer ${KEY}\r\n`);
    let refused: Awaited<ReturnType<typeof rawHttp>> | undefined;
    for (let i = 0; i < 20 && !refused; i++) {
      const next = await rawHttp(gwSubject.port, keyed, 5000);
      if (next.status === 429) refused = next;
      else assert.equal(next.status, 200, next.raw);
    }
    assert.ok(refused, 'no upgrade was refused');
    assert.match(refused.body, /"detail":"rate limit of 2\/s \(burst 2\) exceeded: retry after \d+s"/);
    assert.equal(ok.seen.at(-1)!.headers['mesh-auth-subject'], 'admin');
    // An anonymous client from the same address has a bucket of its own (its address).
    const anonymous = await rawHttp(gwSubject.port, upgradeThenPipelined(path, path, 0), 5000);
    assert.equal(anonymous.status, 200, anonymous.raw);
  });
});
