/**
 * `mesh sidecar` as a real process: the Host check on every path and on WebSocket upgrades (DNS
 * rebinding), --admin_allowed_hosts, the CLI through --proxy_address, and the self-forwarding guard
 * (a node registered at the sidecar's own admin or front address is never called).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rawHttp, runCli, tempDir } from '../helpers.js';
import { http, postJson, refusedHandshake, startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const FORBIDDEN = (host: string) =>
  `{"id":"go.mesh.sidecar","code":403,"detail":"host ${host} is not allowed (allow it with --admin_allowed_hosts)","status":"Forbidden"}`;

describe('sidecar Host check and self-forwarding guard', () => {
  const home = tempDir('mesh-sidecar-host-');
  let sc: SidecarProcess;
  let adminPort: number;

  before(async () => {
    sc = await startSidecar(home.path, ['--admin_allowed_hosts=mesh.test', '--enable_stats']);
    adminPort = Number(new URL(sc.admin).port);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    home.cleanup();
  });

  const refusedCount = async () => {
    const r = await http('GET', `${sc.admin}/stats?filter=downstream_rq_host_refused`);
    return r.text;
  };

  it('a foreign Host gets 403 error JSON on every path, and nothing is registered', async () => {
    const host = `evil.example:${sc.port}`;
    for (const [method, path, body] of [
      ['GET', '/', undefined],
      ['GET', '/_mesh/health', undefined],
      ['GET', '/stats', undefined],
      ['POST', '/registry', JSON.stringify({ Name: 'go.mesh.srv.planted', Nodes: [{ Id: 'p-1', Address: '127.0.0.1', Port: 7999 }] })],
      ['POST', '/rpc', '{"service":"go.mesh.srv.x","endpoint":"X.Y"}'],
      ['POST', '/broker?topic=t', 'hello'],
      ['POST', '/x/y', '{}'],
      ['OPTIONS', '/registry', undefined],
    ] as Array<[string, string, string | undefined]>) {
      const r = await http(method, `${sc.base}${path}`, {
        headers: { host, 'content-type': 'application/json', 'access-control-request-method': 'POST', origin: 'http://evil.example' },
        body,
      });
      assert.equal(r.status, 403, `${method} ${path}`);
      assert.equal(r.headers['content-type'], 'application/json');
      assert.equal(r.text, FORBIDDEN(host), `${method} ${path}`);
    }
    const g = await http('GET', `${sc.base}/registry?service=go.mesh.srv.planted`);
    assert.equal(g.status, 404);
    assert.equal(await refusedCount(), 'http.sidecar.downstream_rq_host_refused: 8\n');
  });

  it('a WebSocket upgrade with a foreign Host is refused with exact bytes', async () => {
    const host = `evil.example:${sc.port}`;
    const body = FORBIDDEN(host);
    const res = await rawHttp(
      sc.port,
      `GET /broker?topic=t HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
    );
    assert.equal(res.head, `HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close`);
    assert.equal(res.body, body);
    // the same through a WebSocket client
    const ws = await refusedHandshake(`ws://127.0.0.1:${sc.port}/broker?topic=t`, { host: 'rebound.example' });
    assert.deepEqual(ws, { status: 403, body: FORBIDDEN('rebound.example') });
    assert.equal(await refusedCount(), 'http.sidecar.downstream_rq_host_refused: 10\n');
  });

  it('HTTP/1.1 without Host: 403; HTTP/1.0 without Host: served', async () => {
    const missing = await rawHttp(sc.port, 'GET / HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(missing.status, 403);
    assert.equal(missing.body, '{"id":"go.mesh.sidecar","code":403,"detail":"a Host header is required","status":"Forbidden"}');
    const old = await rawHttp(sc.port, 'GET / HTTP/1.0\r\n\r\n');
    assert.equal(old.status, 200);
    assert.match(old.body, /^\{"version":/);
  });

  it('loopback, localhost and --admin_allowed_hosts names are served; the CLI through --proxy_address works', async () => {
    for (const host of [`127.0.0.1:${sc.port}`, `localhost:${sc.port}`, `mesh.test:${sc.port}`, 'MESH.TEST', `[::1]:${sc.port}`]) {
      const r = await http('GET', `${sc.base}/`, { headers: { host } });
      assert.equal(r.status, 200, host);
    }
    const reg = await postJson(`${sc.base}/registry`, { Name: 'go.mesh.srv.listed', Nodes: [{ Id: 'l-1', Address: '127.0.0.1', Port: 7998 }] }, { host: `mesh.test:${sc.port}` });
    assert.equal(reg.status, 200, reg.text);
    const cli = await runCli(['--proxy_address', `127.0.0.1:${sc.port}`, 'list', 'services']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, /^go\.mesh\.srv\.listed$/m);
  });

  it('a node registered at the sidecar\'s own admin or front address is never called: 502, counted', async () => {
    const admin = `127.0.0.1:${adminPort}`;
    const front = `127.0.0.1:${sc.port}`;
    for (const [name, port] of [
      ['go.mesh.srv.quitquitquit', adminPort],
      ['go.mesh.srv.loop', sc.port],
    ] as Array<[string, number]>) {
      const r = await postJson(`${sc.base}/registry`, { Name: name, Nodes: [{ Id: `${name}-1`, Address: 'localhost', Port: port }, { Id: `${name}-2`, Address: '127.0.0.1', Port: port }] });
      assert.equal(r.status, 200, r.text);
    }
    const expected = (service: string, key: string, what: string) =>
      `{"id":"go.mesh.sidecar","code":502,"detail":"service ${service}: node ${key} is this process's own ${what} listener; refusing to forward to itself","status":"Bad Gateway"}`;

    const viaRpc = await postJson(`${sc.base}/rpc`, { service: 'go.mesh.srv.quitquitquit', endpoint: 'Admin.Quit', request: {}, address: admin });
    assert.equal(viaRpc.status, 502);
    assert.equal(viaRpc.text, expected('go.mesh.srv.quitquitquit', admin, 'admin'));
    const viaPath = await postJson(`${sc.base}/quitquitquit/quit`, {});
    assert.equal(viaPath.status, 502);
    assert.equal(viaPath.text, expected('go.mesh.srv.quitquitquit', `localhost:${adminPort}`, 'admin'));
    const loop = await postJson(`${sc.base}/loop/call`, {});
    assert.equal(loop.status, 502);
    assert.equal(loop.text, expected('go.mesh.srv.loop', `localhost:${sc.port}`, 'sidecar'));
    const loopRpc = await postJson(`${sc.base}/rpc`, { service: 'go.mesh.srv.loop', endpoint: 'Loop.Call', address: front });
    assert.equal(loopRpc.text, expected('go.mesh.srv.loop', front, 'sidecar'));

    const stats = await http('GET', `${sc.admin}/stats?filter=self_refused`);
    assert.equal(
      stats.text,
      'cluster.go.mesh.srv.loop.upstream_cx_self_refused: 2\ncluster.go.mesh.srv.quitquitquit.upstream_cx_self_refused: 2\n',
    );
    // the admin never saw a request: the process runs and is live
    assert.equal(sc.proc.child.exitCode, null);
    const ready = await http('GET', `${sc.admin}/ready`);
    assert.equal(ready.text, 'LIVE\n');
  });
});
