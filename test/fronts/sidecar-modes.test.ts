/**
 * The sidecar's other modes as real processes: `--handler=proxy` (plain HTTP and WebSocket to the
 * app registered through the sidecar) and `--enable_tls` (HTTPS with openssl-made files; a missing
 * file is a start-up error naming it).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket, { WebSocketServer } from 'ws';
import { freePort, runCli, tempDir } from '../helpers.js';
import { http, postJson, refusedHandshake, startPlainApp, startSidecar, subscribe, type ErrorJson, type PlainApp, type SidecarProcess } from '../fixtures/sidecar-common.js';

describe('sidecar --handler=proxy', () => {
  const home = tempDir('mesh-sidecar-proxy-');
  let sc: SidecarProcess;
  let app: PlainApp;
  let wss: WebSocketServer;

  before(async () => {
    [sc, app] = await Promise.all([startSidecar(home.path, ['--handler=proxy']), startPlainApp()]);
    wss = new WebSocketServer({ server: app.server });
    wss.on('connection', (ws, req) => ws.on('message', (m) => ws.send(`echo ${req.url} ${m.toString()}`)));
    const r = await postJson(`${sc.base}/registry`, { Name: 'go.mesh.srv.web', Nodes: [{ Id: 'web-1', Address: '127.0.0.1', Port: app.port }] });
    assert.equal(r.status, 200, r.text);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    wss?.close();
    await app?.close();
    home.cleanup();
  });

  it('proxies to <namespace>.<first element> with the full path, query and X-Forwarded-*', async () => {
    const r = await http('PUT', `${sc.base}/web/items/7?x=1&y=two`, { headers: { 'content-type': 'text/plain', 'x-custom': 'a' }, body: 'payload' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json<{ method: string; url: string; got: string }>(), { method: 'PUT', url: '/web/items/7?x=1&y=two', got: 'payload' });
    const seen = app.seen.at(-1)!;
    assert.equal(seen.headers['x-custom'], 'a');
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(seen.headers['x-forwarded-proto'], 'http');
    assert.equal(seen.headers['x-forwarded-host'], `127.0.0.1:${sc.port}`);
    const unknown = await http('GET', `${sc.base}/nothing/here`);
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json<ErrorJson>().detail, 'service go.mesh.srv.nothing: not found');
  });

  it('proxies WebSocket upgrades; /registry, /rpc and /broker stay the sidecar\'s', async () => {
    const ws = new WebSocket(`${sc.base.replace('http', 'ws')}/web/socket`);
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const answer = new Promise<string>((resolve) => ws.once('message', (m) => resolve(m.toString())));
    ws.send('hi');
    assert.equal(await answer, 'echo /web/socket hi');
    ws.close();
    assert.equal((await http('GET', `${sc.base}/registry?service=go.mesh.srv.web`)).status, 200);
    const sub = await subscribe(sc.base, 'proxy-mode');
    assert.equal((await http('POST', `${sc.base}/broker?topic=proxy-mode`, { body: 'm' })).status, 200);
    sub.ws.close();
  });
});

describe('sidecar --enable_tls', () => {
  const home = tempDir('mesh-sidecar-tls-');
  const cert = join(home.path, 'cert.pem');
  const key = join(home.path, 'key.pem');
  let sc: SidecarProcess;

  before(async () => {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', key, '-out', cert,
    ], { stdio: 'ignore' });
    sc = await startSidecar(join(home.path, 'registry'), ['--enable_tls', `--tls_cert_file=${cert}`, `--tls_key_file=${key}`]);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    home.cleanup();
  });

  it('serves HTTPS with the given files, and admin /certs lists the certificate', async () => {
    assert.match(sc.base, /^https:\/\//);
    const ca = readFileSync(cert);
    const r = await http('GET', `${sc.base}/`, { ca });
    assert.equal(r.status, 200);
    const reg = await http('POST', `${sc.base}/registry`, {
      ca,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ Name: 'tls.app', Nodes: [{ Id: 't1', Address: '127.0.0.1', Port: 1 }] }),
    });
    assert.equal(reg.status, 200, reg.text);
    const certs = await http('GET', `${sc.admin}/certs`);
    assert.equal(certs.status, 200);
    assert.ok(certs.text.includes(cert), certs.text);
  });

  it('a missing or unreadable file is a start-up error naming it', async () => {
    const missing = join(home.path, 'nope.pem');
    const [noKey, noFile] = await Promise.all([
      runCli(['sidecar', `--registry_address=${home.path}`, '--admin_address=off', '--address=127.0.0.1:0', '--enable_tls', `--tls_cert_file=${cert}`], {}, 30000),
      runCli(['sidecar', `--registry_address=${home.path}`, '--admin_address=off', '--address=127.0.0.1:0', '--enable_tls', `--tls_cert_file=${cert}`, `--tls_key_file=${missing}`], {}, 30000),
    ]);
    assert.equal(noKey.code, 1, noKey.stdout + noKey.stderr);
    assert.match(noKey.stderr, /--tls_key_file/);
    assert.equal(noFile.code, 1, noFile.stdout + noFile.stderr);
    assert.ok(noFile.stderr.includes(missing), noFile.stderr);
    assert.match(noFile.stderr, /ENOENT/);
  });
});

describe('sidecar with its broker down', () => {
  const home = tempDir('mesh-sidecar-nobroker-');
  let sc: SidecarProcess;

  before(async () => {
    // A NATS address where nothing listens: every publish and subscribe fails.
    sc = await startSidecar(home.path, ['--broker=nats', `--broker_address=127.0.0.1:${await freePort()}`]);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    home.cleanup();
  });

  it('a publish is a 503, never a silent 200; a subscribe is refused with 503', async () => {
    const r = await http('POST', `${sc.base}/broker?topic=lost`, { body: 'hello' });
    assert.equal(r.status, 503, r.text);
    const e = r.json<ErrorJson>();
    assert.equal(e.id, 'go.mesh.sidecar');
    assert.match(e.detail, /^publish to topic lost failed: /);
    const ws = await refusedHandshake(`${sc.base.replace('http', 'ws')}/broker?topic=lost`);
    assert.equal(ws.status, 503);
    assert.match(ws.body, /subscribe to topic lost failed/);
    assert.equal((await http('GET', `${sc.base}/registry`)).status, 200, 'everything else keeps working');
  });
});
