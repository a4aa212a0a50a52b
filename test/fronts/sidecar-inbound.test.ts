/**
 * An app behind a sidecar gets mutual TLS without code: a Python app (http.server, no TLS) behind
 * `mesh sidecar --mtls=strict --server_name=go.mesh.srv.py` is registered at the sidecar's inbound
 * listener (mtls=true), is called over mutual TLS by `mesh call`, a gateway and a raw TLS client,
 * and reads the caller's SPIFFE ID in Mesh-Peer-Identity. A plain caller is refused in strict
 * mode; in permissive mode it is served but a Mesh-Peer-Identity it forges (even with a
 * `Connection:` nomination) never reaches the app. --authz_rules is enforced there. And the
 * app's own calls through the sidecar present the sidecar's certificate to a strict service.
 * Real processes; certificates from one mesh CA made in --ca_dir.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import pino from 'pino';
import { createRegistry } from '../../src/engines/registry/create.js';
import { openWorkloadTls, type OpenedWorkloadTls } from '../../src/tls/workload/index.js';
import { listenLoopback, PRINTED, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { createServer } from 'node:http';
import WebSocket, { WebSocketServer } from 'ws';

const PYTHON = '/usr/bin/python3';
const reason = spawnSync(PYTHON, ['-c', 'import http.server'], { encoding: 'utf8' }).status === 0 ? undefined : `${PYTHON} not available`;
if (reason) console.warn(`SKIP: ${reason}`);

const WHO = join(ROOT, 'test/fixtures/who-service.ts');
const INBOUND = /inbound listening on \S+:(\d+) for /;

/** The app: answers every POST with the Mesh-Peer-Identity headers it got and how many requests it served. */
const APP = `
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

served = 0

class App(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_POST(self):
        global served
        served += 1
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        body = json.dumps({
            'peer': self.headers.get('Mesh-Peer-Identity'),
            'peers': self.headers.get_all('Mesh-Peer-Identity') or [],
            'endpoint': self.headers.get('Mesh-Endpoint'),
            'served': served,
        }).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

server = HTTPServer(('127.0.0.1', 0), App)
print('app listening on %d' % server.server_address[1], flush=True)
server.serve_forever()
`;

interface Echo {
  peer: string | null;
  peers: string[];
  endpoint: string | null;
  served: number;
}

async function startApp(dir: string): Promise<{ child: ChildProcess; port: number }> {
  const script = join(dir, 'app.py');
  writeFileSync(script, APP);
  const child = spawn(PYTHON, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const port = await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`python exited:\n${out}`);
    const m = /app listening on (\d+)/.exec(out);
    return m ? Number(m[1]) : undefined;
  }, 10_000);
  return { child, port };
}

async function stat(admin: string, name: string): Promise<number> {
  const res = await fetch(`${admin}/stats?filter=${encodeURIComponent(`^${name.replace(/[.|]/g, (c) => `\\${c}`)}$`)}`);
  const m = new RegExp(`^${name.replace(/[.|]/g, (c) => `\\${c}`)}: (\\d+)$`, 'm').exec(await res.text());
  return m ? Number(m[1]) : -1;
}

/** One request over mutual TLS with `workload`'s certificate (raw headers, so Connection can be set). */
function tlsPost(port: number, workload: OpenedWorkloadTls, headers: Record<string, string>, body = '{}'): Promise<{ status: number; text: string }> {
  const pems = workload.contextOptions();
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: '127.0.0.1', port, method: 'POST', path: '/', cert: pems.cert, key: pems.key, ca: [...pems.ca], checkServerIdentity: () => undefined, agent: false, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers } },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** One plain HTTP/1.1 request as raw bytes; resolves with everything the server sent before it closed (or the first answer). */
function rawPlain(port: number, head: string, body = '{}'): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      const len = /content-length: (\d+)/i.exec(got);
      if (end !== -1 && len && got.length >= end + 4 + Number(len[1])) socket.end();
    });
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.write(`${head}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

describe('an app behind a sidecar with --mtls', { skip: reason }, () => {
  const dir = tempDir();
  const ca = tempDir('mesh-ca-');
  const procs: RunningProcess[] = [];
  const apps: ChildProcess[] = [];
  const common = () => [`--registry_address=${dir.path}`, `--ca_dir=${ca.path}`, '--log_level=warning'];
  const log = pino({ level: 'silent' });
  let intruder: OpenedWorkloadTls;
  let strictApp = 0;
  let strictSidecar = '';
  let strictAdmin = '';
  let strictInbound = 0;

  before(async () => {
    const app = await startApp(dir.path);
    apps.push(app.child);
    strictApp = app.port;
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, ['rules:', '  - caller: [mesh.cli, mesh.api, go.mesh.srv.intruder]', '    service: go.mesh.srv.py', '    endpoint: Py.Echo', '    action: allow', '  - caller: go.mesh.srv.intruder', '    action: deny', ''].join('\n'));
    const sc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--mtls=strict', '--server_name=go.mesh.srv.py', `--server_address=127.0.0.1:${app.port}`, `--authz_rules=${rules}`, ...common()]);
    procs.push(sc);
    strictSidecar = `http://127.0.0.1:${await sc.waitForPort(PRINTED.sidecar, 20_000)}`;
    strictAdmin = `http://127.0.0.1:${await sc.waitForPort(PRINTED.sidecarAdmin)}`;
    strictInbound = await sc.waitForPort(INBOUND);
    // A workload of the same CA that is none of the callers the rules allow everything.
    intruder = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: ca.path, certTtlMs: 3_600_000, service: 'go.mesh.srv.intruder', log });
  });
  after(async () => {
    await intruder?.close();
    for (const p of procs) await p.stop('SIGKILL');
    for (const a of apps) a.kill('SIGKILL');
    dir.cleanup();
    ca.cleanup();
  });

  test('the app is registered at the inbound listener, with mtls=true', async () => {
    const registry = createRegistry('local', dir.path);
    try {
      const [record] = await waitFor(async () => {
        const found = await registry.getService('go.mesh.srv.py').catch(() => []);
        return found.length > 0 ? found : undefined;
      }, 10_000);
      assert.equal(record!.nodes.length, 1);
      assert.equal(record!.nodes[0]!.port, strictInbound);
      assert.notEqual(record!.nodes[0]!.port, strictApp);
      assert.equal(record!.nodes[0]!.metadata.mtls, 'true');
    } finally {
      await registry.close();
    }
  });

  test('mesh call --mtls=strict reaches the app over mutual TLS; the app reads the CLI\'s SPIFFE ID', async () => {
    const out = await runCli(['call', 'go.mesh.srv.py', 'Py.Echo', '{}', '--mtls=strict', ...common()]);
    assert.equal(out.code, 0, out.stderr);
    const echo = JSON.parse(out.stdout) as Echo;
    assert.equal(echo.peer, 'spiffe://mesh.local/svc/mesh.cli');
    assert.deepEqual(echo.peers, ['spiffe://mesh.local/svc/mesh.cli']);
    assert.equal(echo.endpoint, 'Py.Echo');
    assert.ok((await stat(strictAdmin, 'http.sidecar_inbound.ssl.handshake')) >= 1);
  });

  test('a strict gateway calls the app as mesh.api', async () => {
    const gw = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=off', '--handler=rpc', '--namespace=go.mesh.srv', '--mtls=strict', ...common()]);
    procs.push(gw);
    const url = `http://127.0.0.1:${await gw.waitForPort(PRINTED.api, 20_000)}`;
    // A client's forged header is removed at the gateway's edge, and again at the inbound listener.
    const res = await fetch(`${url}/py/echo`, { method: 'POST', headers: { 'content-type': 'application/json', 'mesh-peer-identity': 'spiffe://mesh.local/svc/go.mesh.srv.admin' }, body: '{}' });
    assert.equal(res.status, 200);
    const echo = (await res.json()) as Echo;
    assert.deepEqual(echo.peers, ['spiffe://mesh.local/svc/mesh.api']);
  });

  test('a forged Mesh-Peer-Identity, nominated by Connection or not, never reaches the app: it reads the caller\'s own', async () => {
    const forged = 'spiffe://mesh.local/svc/go.mesh.srv.admin';
    for (const connection of [undefined, 'keep-alive, Mesh-Peer-Identity', 'Mesh-Peer-Identity']) {
      const res = await tlsPost(strictInbound, intruder, { 'mesh-endpoint': 'Py.Echo', 'mesh-service': 'go.mesh.srv.py', 'mesh-peer-identity': forged, ...(connection ? { connection } : {}) });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual((JSON.parse(res.text) as Echo).peers, ['spiffe://mesh.local/svc/go.mesh.srv.intruder'], `Connection: ${connection}`);
    }
  });

  test('a plain caller of the strict inbound listener gets the 400 naming the app, and the app sees nothing', async () => {
    const before = (JSON.parse((await runCli(['call', 'go.mesh.srv.py', 'Py.Echo', '{}', '--mtls=strict', ...common()])).stdout) as Echo).served;
    const got = await rawPlain(strictInbound, `POST / HTTP/1.1\r\nhost: 127.0.0.1\r\nmesh-service: go.mesh.srv.py\r\nmesh-endpoint: Py.Echo\r\nmesh-peer-identity: spiffe://mesh.local/svc/mesh.cli\r\ncontent-type: application/json`);
    assert.match(got, /^HTTP\/1\.1 400 Bad Request\r\n/);
    const body = got.slice(got.indexOf('\r\n\r\n') + 4);
    assert.equal(body, '{"id":"go.mesh.srv.py","code":400,"detail":"service go.mesh.srv.py accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate","status":"Bad Request"}');
    assert.ok((await stat(strictAdmin, 'http.sidecar_inbound.downstream_cx_plain_refused')) >= 1);
    const after = (JSON.parse((await runCli(['call', 'go.mesh.srv.py', 'Py.Echo', '{}', '--mtls=strict', ...common()])).stdout) as Echo).served;
    assert.equal(after, before + 1);
  });

  test('--authz_rules on the inbound listener: a denied call gets the 403 error JSON and never reaches the app', async () => {
    const deniedBefore = await stat(strictAdmin, 'authz.denied');
    const first = await tlsPost(strictInbound, intruder, { 'mesh-endpoint': 'Py.Echo', 'mesh-service': 'go.mesh.srv.py' });
    assert.equal(first.status, 200, first.text);
    const res = await tlsPost(strictInbound, intruder, { 'mesh-endpoint': 'Py.Other', 'mesh-service': 'go.mesh.srv.py' });
    assert.equal(res.status, 403);
    assert.equal(res.text, '{"id":"go.mesh.authz","code":403,"detail":"caller spiffe://mesh.local/svc/go.mesh.srv.intruder may not call go.mesh.srv.py Py.Other (denied by rule 2)","status":"Forbidden"}');
    assert.equal(await stat(strictAdmin, 'authz.denied'), deniedBefore + 1);
    // The same caller may call Py.Echo (rule 1); mesh.cli is not denied Py.Other (no rule: --authz_default allow).
    const allowed = await tlsPost(strictInbound, intruder, { 'mesh-endpoint': 'Py.Echo', 'mesh-service': 'go.mesh.srv.py' });
    assert.equal(allowed.status, 200, allowed.text);
    assert.equal((JSON.parse(allowed.text) as Echo).served, (JSON.parse(first.text) as Echo).served + 1);
    const cli = await runCli(['call', 'go.mesh.srv.py', 'Py.Other', '{}', '--mtls=strict', ...common()]);
    assert.equal(cli.code, 0, cli.stderr);
    assert.equal((JSON.parse(cli.stdout) as Echo).endpoint, 'Py.Other');
    const rules = (await (await fetch(`${strictAdmin}/auth_rules`)).json()) as unknown[];
    assert.match(JSON.stringify(rules), /go\.mesh\.srv\.intruder/);
  });

  test('the app\'s own calls through the sidecar present the sidecar\'s certificate (the app\'s name) to a strict service', async () => {
    const who = startProcess(['--import', 'tsx', WHO, ...common(), '--mtls=strict'], {}, '');
    procs.push(who);
    await who.waitForOutput(/go\.mesh\.srv\.who listening/, 20_000);
    const res = await fetch(`${strictSidecar}/rpc`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Peer', request: {} }) });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { peer: 'spiffe://mesh.local/svc/go.mesh.srv.py' });
  });

  test('the app calling itself through its sidecar: the app-facing listener drops a forged header, the inbound listener names the sidecar', async () => {
    const res = await fetch(`${strictSidecar}/py/echo`, { method: 'POST', headers: { 'content-type': 'application/json', 'mesh-peer-identity': 'spiffe://mesh.local/svc/mesh.api' }, body: '{}' });
    assert.equal(res.status, 200);
    assert.deepEqual(((await res.json()) as Echo).peers, ['spiffe://mesh.local/svc/go.mesh.srv.py']);
  });

  test('permissive: a plain caller is served, but its forged Mesh-Peer-Identity never reaches the app', async () => {
    const app = await startApp(dir.path);
    apps.push(app.child);
    const sc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=off', '--mtls=permissive', '--server_name=go.mesh.srv.pyp', `--server_address=127.0.0.1:${app.port}`, ...common()]);
    procs.push(sc);
    const inbound = await sc.waitForPort(INBOUND, 20_000);
    for (const connection of ['keep-alive', 'keep-alive, Mesh-Peer-Identity']) {
      const got = await rawPlain(inbound, `POST / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: ${connection}\r\nmesh-service: go.mesh.srv.pyp\r\nmesh-endpoint: Py.Echo\r\nmesh-peer-identity: spiffe://mesh.local/svc/mesh.cli\r\nMesh-Peer-Identity: spiffe://mesh.local/svc/mesh.api\r\ncontent-type: application/json`);
      assert.match(got, /^HTTP\/1\.1 200 OK\r\n/, got);
      const echo = JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4)) as Echo;
      assert.equal(echo.peer, null);
      assert.deepEqual(echo.peers, []);
    }
    // An mTLS caller through the same listener is named.
    const res = await tlsPost(inbound, intruder, { 'mesh-endpoint': 'Py.Echo', 'mesh-service': 'go.mesh.srv.pyp', 'mesh-peer-identity': 'spiffe://mesh.local/svc/mesh.cli' });
    assert.deepEqual((JSON.parse(res.text) as Echo).peers, ['spiffe://mesh.local/svc/go.mesh.srv.intruder']);
  });

  test('a WebSocket through a strict gateway\'s proxy handler reaches an app behind a strict sidecar over mutual TLS', async () => {
    // The app: a WebSocket server that says who its sidecar said called.
    const server = createServer((_req, res) => res.end());
    const wss = new WebSocketServer({ server });
    wss.on('connection', (socket, req) => socket.send(JSON.stringify({ peer: req.headers['mesh-peer-identity'] ?? null })));
    const app = await listenLoopback(server);
    try {
      const sc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=off', '--mtls=strict', '--server_name=go.mesh.srv.wsapp', `--server_address=127.0.0.1:${app.port}`, ...common()]);
      procs.push(sc);
      await sc.waitForPort(INBOUND, 20_000);
      const gw = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=off', '--handler=proxy', '--namespace=go.mesh.srv', '--mtls=strict', ...common()]);
      procs.push(gw);
      const port = await gw.waitForPort(PRINTED.api, 20_000);
      const ws = new WebSocket(`ws://127.0.0.1:${port}/wsapp/socket`, { headers: { 'mesh-peer-identity': 'spiffe://mesh.local/svc/go.mesh.srv.admin' } });
      const first = await new Promise<string>((resolve, reject) => {
        ws.once('message', (d) => resolve(d.toString()));
        ws.once('error', reject);
        ws.once('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => reject(new Error(`upgrade refused: ${res.statusCode} ${body}`)));
        });
      });
      ws.close();
      assert.deepEqual(JSON.parse(first), { peer: 'spiffe://mesh.local/svc/mesh.api' });
    } finally {
      for (const c of wss.clients) c.terminate();
      await app.close();
    }
  });

  test('--inbound_address and --authz_rules need --mtls and an app', async () => {
    const noMtls = await runCli(['sidecar', '--address=127.0.0.1:0', '--admin_address=off', '--inbound_address=127.0.0.1:0', '--server_name=go.mesh.srv.x', '--server_address=127.0.0.1:9', ...common()]);
    assert.equal(noMtls.code, 2);
    assert.match(noMtls.stderr, /flag --inbound_address needs --mtls=permissive or --mtls=strict/);
    const noApp = await runCli(['sidecar', '--address=127.0.0.1:0', '--admin_address=off', '--mtls=strict', `--authz_rules=${join(dir.path, 'rules.yaml')}`, ...common()]);
    assert.equal(noApp.code, 2);
    assert.match(noApp.stderr, /flag --authz_rules needs --server_name and --server_address on a sidecar/);
  });
});
