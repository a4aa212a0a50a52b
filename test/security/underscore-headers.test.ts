/**
 * Header names by another spelling. CGI-style backends (here Python's own WSGI server) read
 * `Mesh_Auth_Subject` as `Mesh-Auth-Subject`: no front lets a client's header reach a backend
 * under a name the mesh sets or reads, whatever the spelling (`_` for `-`, case). Played against
 * real processes on loopback: `mesh api --auth=key` (an anonymous client and one with a key
 * forging its subject and scopes), `mesh proxy` (which removes the edge's identity headers too),
 * the sidecar's inbound listener (a forged peer identity, an endpoint spelled to pass an authz
 * rule, a repeated Mesh-Endpoint, and `Mesh-Auth-Subject` from callers other than the gateway),
 * and the three values of --headers_with_underscores.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { openWorkloadTls, type OpenedWorkloadTls } from '../../src/tls/workload/index.js';
import { http, PRINTED, rawHttp, startProcess, tempDir, type RunningProcess } from '../helpers.js';
import { mtlsPost, PYTHON, startWsgi } from '../fixtures/wsgi.js';
import { registerPlain } from '../fixtures/gateway-helpers.js';

const missing = existsSync(PYTHON) ? undefined : `${PYTHON} (Debian's python3) is absent: the WSGI backend tests are SKIPPED`;
if (missing) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${missing}`);
  console.warn(`SKIP: ${missing}`);
}

const KEY = 'k-0123456789abcdef-billing';
const INBOUND = /inbound listening on \S+:(\d+) for /;

interface Seen {
  path: string;
  env: Record<string, string>;
}

async function stat(admin: string, name: string): Promise<number> {
  const text = await (await fetch(`${admin}/stats`)).text();
  const m = new RegExp(`^${name.replace(/[.|]/g, (c) => `\\${c}`)}: (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : -1;
}

/** The HTTP_* variables the backend read, of the mesh's names. */
function meshVars(seen: Seen): Record<string, string> {
  return Object.fromEntries(Object.entries(seen.env).filter(([k]) => k.startsWith('HTTP_MESH_') || k.startsWith('HTTP_X_FORWARDED_')));
}

/** Spellings a CGI-style backend reads as the mesh's own headers. */
const FORGED = {
  Mesh_Auth_Subject: 'admin',
  'mesh_auth-scopes': 'admin',
  MESH_PEER_IDENTITY: 'spiffe://mesh.local/svc/mesh.api',
  Mesh_Endpoint: 'Admin.Reset',
  'X_Forwarded-For': '10.0.0.1',
};

describe('headers by another name never reach a backend as the mesh\'s own', { skip: missing }, () => {
  const dir = tempDir('mesh-underscore-');
  const ca = tempDir('mesh-underscore-ca-');
  const procs: RunningProcess[] = [];
  const children: ChildProcess[] = [];
  let registry: Registry;
  let wsgi = 0;
  const common = () => [`--registry_address=${dir.path}`, '--log_level=warning'];

  async function gateway(extra: string[]): Promise<{ url: string; admin: string }> {
    const p = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--handler=proxy', ...common(), ...extra]);
    procs.push(p);
    const port = await p.waitForPort(PRINTED.api, 20_000);
    const admin = await p.waitForPort(PRINTED.apiAdmin);
    return { url: `http://127.0.0.1:${port}`, admin: `http://127.0.0.1:${admin}` };
  }

  before(async () => {
    registry = createRegistry('local', dir.path);
    const app = await startWsgi();
    children.push(app.child);
    wsgi = app.port;
    await registerPlain(registry, 'go.mesh.api.wsgi', wsgi);
  });

  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    for (const c of children) c.kill('SIGKILL');
    await registry?.close();
    dir.cleanup();
    ca.cleanup();
  });

  describe('mesh api --auth=key (--headers_with_underscores=allow, the default)', () => {
    let gw: { url: string; admin: string };
    before(async () => {
      const keys = join(dir.path, 'keys.txt');
      writeFileSync(keys, `${KEY} billing read,write\n`);
      gw = await gateway(['--auth=key', `--auth_keys=${keys}`, '--auth_default=public']);
    });

    test('an anonymous client: the backend reads no subject, scopes, identity, endpoint or forwarding header of its own', async () => {
      const r = await http('GET', `${gw.url}/wsgi/x`, { headers: { ...FORGED, X_Custom: 'kept' } });
      assert.equal(r.status, 200, r.text);
      const seen = r.json<Seen>();
      assert.deepEqual(meshVars(seen), { HTTP_X_FORWARDED_FOR: '127.0.0.1', HTTP_X_FORWARDED_HOST: gw.url.slice('http://'.length), HTTP_X_FORWARDED_PROTO: 'http' });
      // A name that is none of the mesh's passes under allow.
      assert.equal(seen.env.HTTP_X_CUSTOM, 'kept');
      assert.equal(await stat(gw.admin, 'http.gateway.dropped_headers_with_underscores'), Object.keys(FORGED).length);
    });

    test('a client with a valid key: the backend reads its subject and scopes alone, not the forged ones first', async () => {
      const r = await http('GET', `${gw.url}/wsgi/x`, { headers: { ...FORGED, authorization: `Bearer ${KEY}` } });
      assert.equal(r.status, 200, r.text);
      const vars = meshVars(r.json<Seen>());
      assert.equal(vars.HTTP_MESH_AUTH_SUBJECT, 'billing');
      assert.equal(vars.HTTP_MESH_AUTH_SCOPES, 'read write');
      assert.equal(vars.HTTP_MESH_PEER_IDENTITY, undefined);
      assert.equal(vars.HTTP_MESH_ENDPOINT, undefined);
    });

    test('raw bytes: every case and spelling of one name, in one request', async () => {
      const forged = ['MESH_AUTH_SUBJECT: a', 'mesh_auth_subject: b', 'Mesh_auth-Subject: c', 'mesh-AUTH_subject: d'].join('\r\n');
      const port = Number(new URL(gw.url).port);
      const r = await rawHttp(port, `GET /wsgi/x HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n${forged}\r\n\r\n`);
      assert.equal(r.status, 200, r.raw);
      assert.equal((JSON.parse(r.body) as Seen).env.HTTP_MESH_AUTH_SUBJECT, undefined);
    });
  });

  test('--headers_with_underscores=drop removes every name with _; reject answers 400 and the backend sees nothing', async () => {
    const dropping = await gateway(['--headers_with_underscores=drop']);
    const r = await http('GET', `${dropping.url}/wsgi/x`, { headers: { X_Custom: 'gone', 'X-Other': 'kept' } });
    assert.equal(r.status, 200, r.text);
    const seen = r.json<Seen>();
    assert.equal(seen.env.HTTP_X_CUSTOM, undefined);
    assert.equal(seen.env.HTTP_X_OTHER, 'kept');
    assert.equal(await stat(dropping.admin, 'http.gateway.dropped_headers_with_underscores'), 1);

    const rejecting = await gateway(['--headers_with_underscores=reject']);
    const refused = await http('GET', `${rejecting.url}/wsgi/x`, { headers: { X_Custom: 'x' } });
    assert.equal(refused.status, 400);
    assert.equal(refused.text, '{"id":"go.mesh.api","code":400,"detail":"header \\"x_custom\\" has _ in its name (--headers_with_underscores=reject)","status":"Bad Request"}');
    assert.equal(await stat(rejecting.admin, 'http.gateway.requests_rejected_with_underscores_in_headers'), 1);
    assert.equal((await http('GET', `${rejecting.url}/wsgi/x`, { headers: { 'X-Custom': 'x' } })).status, 200);
  });

  test('mesh proxy removes a client\'s Mesh-Auth-*, Mesh-Peer-Identity in every spelling', async () => {
    const config = join(dir.path, 'proxy.yaml');
    writeFileSync(config, ['listeners:', '  - name: edge', '    address: 127.0.0.1:0', '    routes:', '      - match: { prefix: / }', '        cluster: wsgi', 'clusters:', '  - name: wsgi', `    hosts: [127.0.0.1:${wsgi}]`, ''].join('\n'));
    const p = startProcess(['proxy', '-c', config, '--admin_address=off', '--log_level=warning']);
    procs.push(p);
    const port = await p.waitForPort(PRINTED.proxy, 20_000);
    const r = await http('GET', `http://127.0.0.1:${port}/x`, {
      headers: { 'Mesh-Auth-Subject': 'admin', 'Mesh-Auth-Scopes': 'admin', 'Mesh-Peer-Identity': 'spiffe://mesh.local/svc/mesh.api', Mesh_Auth_Subject: 'admin2' },
    });
    assert.equal(r.status, 200, r.text);
    const vars = meshVars(r.json<Seen>());
    assert.equal(vars.HTTP_MESH_AUTH_SUBJECT, undefined);
    assert.equal(vars.HTTP_MESH_AUTH_SCOPES, undefined);
    assert.equal(vars.HTTP_MESH_PEER_IDENTITY, undefined);
  });

  describe('the sidecar\'s inbound listener (--mtls=permissive, an authz rule on Admin.*)', () => {
    let inbound = 0;
    let admin = '';
    const log = pino({ level: 'silent' });
    let gatewayId: OpenedWorkloadTls;
    let other: OpenedWorkloadTls;

    const tlsPost = (workload: OpenedWorkloadTls, headers: Record<string, string>) => mtlsPost(inbound, workload.contextOptions(), headers);

    before(async () => {
      const app = await startWsgi();
      children.push(app.child);
      const rules = join(dir.path, 'authz.yaml');
      writeFileSync(rules, ['rules:', '  - caller: unauthenticated', '    endpoint: Admin.*', '    action: deny', ''].join('\n'));
      const sc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--mtls=permissive', `--ca_dir=${ca.path}`, '--server_name=go.mesh.srv.wsgi', `--server_address=127.0.0.1:${app.port}`, `--authz_rules=${rules}`, ...common()]);
      procs.push(sc);
      admin = `http://127.0.0.1:${await sc.waitForPort(PRINTED.sidecarAdmin, 20_000)}`;
      inbound = await sc.waitForPort(INBOUND, 20_000);
      gatewayId = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: ca.path, certTtlMs: 3_600_000, service: 'mesh.api', log });
      other = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: ca.path, certTtlMs: 3_600_000, service: 'go.mesh.srv.other', log });
    });
    after(async () => {
      await gatewayId?.close();
      await other?.close();
    });

    const plain = (headers: string) => rawHttp(inbound, `POST / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 2\r\nmesh-service: go.mesh.srv.wsgi\r\n${headers}\r\n\r\n{}`);

    test('Mesh-Endpoint: Admin.Reset is denied; Mesh_Endpoint: Admin.Reset is removed, so the app reads no endpoint', async () => {
      const denied = await plain('Mesh-Endpoint: Admin.Reset');
      assert.equal(denied.status, 403, denied.raw);
      for (const spelling of ['Mesh_Endpoint', 'MESH_ENDPOINT', 'mesh_endpoint']) {
        const r = await plain(`${spelling}: Admin.Reset`);
        assert.equal(r.status, 200, r.raw);
        assert.equal((JSON.parse(r.body) as Seen).env.HTTP_MESH_ENDPOINT, undefined, spelling);
      }
      // Both spellings at once: the rule sees the one the app will read.
      const both = await plain('Mesh-Endpoint: Py.Echo\r\nMesh_Endpoint: Admin.Reset');
      assert.equal(both.status, 200, both.raw);
      assert.equal((JSON.parse(both.body) as Seen).env.HTTP_MESH_ENDPOINT, 'Py.Echo');
    });

    test('a repeated Mesh-Endpoint is a 400: the rules and the app cannot read different endpoints', async () => {
      const r = await plain('Mesh-Endpoint: Py.Echo\r\nMesh-Endpoint: Admin.Reset');
      assert.equal(r.status, 400, r.raw);
      assert.equal(r.body, '{"id":"go.mesh.sidecar","code":400,"detail":"Mesh-Endpoint given more than once","status":"Bad Request"}');
    });

    test('a plain caller\'s Mesh_Peer_Identity and Mesh-Auth-Subject never reach the app', async () => {
      const r = await plain('Mesh-Endpoint: Py.Echo\r\nMesh_Peer_Identity: spiffe://mesh.local/svc/mesh.api\r\nMesh-Auth-Subject: admin\r\nMesh-Auth-Scopes: admin');
      assert.equal(r.status, 200, r.raw);
      const vars = Object.entries(meshVars(JSON.parse(r.body) as Seen)).filter(([k]) => k.startsWith('HTTP_MESH_'));
      assert.deepEqual(Object.fromEntries(vars), { HTTP_MESH_SERVICE: 'go.mesh.srv.wsgi', HTTP_MESH_ENDPOINT: 'Py.Echo' });
      assert.ok((await stat(admin, 'http.sidecar_inbound.dropped_headers_with_underscores')) >= 1);
    });

    test('Mesh-Auth-Subject reaches the app from the gateway\'s identity only (--inbound_auth_callers)', async () => {
      const fromGateway = await tlsPost(gatewayId, { 'mesh-service': 'go.mesh.srv.wsgi', 'mesh-endpoint': 'Py.Echo', 'mesh-auth-subject': 'alice', 'mesh-auth-scopes': 'read' });
      assert.equal(fromGateway.status, 200, fromGateway.text);
      const g = meshVars(JSON.parse(fromGateway.text) as Seen);
      assert.equal(g.HTTP_MESH_AUTH_SUBJECT, 'alice');
      assert.equal(g.HTTP_MESH_AUTH_SCOPES, 'read');
      assert.equal(g.HTTP_MESH_PEER_IDENTITY, 'spiffe://mesh.local/svc/mesh.api');
      const fromOther = await tlsPost(other, { 'mesh-service': 'go.mesh.srv.wsgi', 'mesh-endpoint': 'Py.Echo', 'mesh-auth-subject': 'alice', 'mesh-auth-scopes': 'read' });
      assert.equal(fromOther.status, 200, fromOther.text);
      const o = meshVars(JSON.parse(fromOther.text) as Seen);
      assert.equal(o.HTTP_MESH_AUTH_SUBJECT, undefined);
      assert.equal(o.HTTP_MESH_AUTH_SCOPES, undefined);
      assert.equal(o.HTTP_MESH_PEER_IDENTITY, 'spiffe://mesh.local/svc/go.mesh.srv.other');
      // Even the gateway's identity cannot pass them spelled with _.
      const spelled = await tlsPost(gatewayId, { 'mesh-service': 'go.mesh.srv.wsgi', 'mesh-endpoint': 'Py.Echo', Mesh_Auth_Subject: 'root' });
      assert.equal(meshVars(JSON.parse(spelled.text) as Seen).HTTP_MESH_AUTH_SUBJECT, undefined);
    });
  });
});
