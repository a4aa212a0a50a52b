/**
 * Encoded and dotted paths cannot walk around the rules (docs/security.md, "How paths are
 * matched"): a real `mesh api --handler=proxy` and `mesh sidecar --handler=proxy` with API keys
 * and a rules file, and a real `mesh proxy`, in front of a backend that decodes paths as WSGI does. Every spelling of a denied
 * or scoped path is refused (400) or decided by its rule (401/403) and never reaches the backend;
 * what passes is forwarded in its normal form, the query untouched.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { PRINTED, rawHttp, startProcess, tempDir, type RunningProcess } from '../helpers.js';
import { registerPlain, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { startDecodingBackend, type DecodingBackend } from '../fixtures/decoding-backend.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const KEY = 'reader-key-0123456789abcdef';
const RULES = `rules:
  - path: /raw/internal/
    ignore_case: true
    access: deny
  - path: /raw/admin/
    scopes: [admin]
  - path: /raw/
    access: public
`;

const errorJson = (id: string, code: number, status: string, detail: string) => JSON.stringify({ id, code, detail, status });
const badPath = (id: string, detail: string) => errorJson(id, 400, 'Bad Request', `invalid path: ${detail}`);

/** The refusals, the same on every front end (the id is the front end's). */
const REFUSED: Array<[string, string]> = [
  ['/raw/internal;a=b/x', '";" (path parameters) is refused'],
  ['/raw/public/..;/internal/x', '";" (path parameters) is refused'],
  ['/raw/internal%3Ba=b/x', 'an encoded ";" (%3B) is refused'],
  ['/raw/internal%2Fx', 'an encoded "/" (%2F) is refused'],
  ['/raw/public%2f..%2finternal/x', 'an encoded "/" (%2F) is refused'],
  ['/raw/public/..%5Cinternal/x', 'an encoded backslash (%5C) is refused'],
  ['/raw/public/..\\internal/x', 'a backslash is refused'],
  ['/raw/internal%00/x', 'an encoded NUL (%00) is refused'],
  ['/raw/%zzinternal/x', '"%" must be followed by two hex digits'],
  ['/raw/internal/x%4', '"%" must be followed by two hex digits'],
  ['/raw/../../raw/internal/x', '".." climbs above the root'],
  ['/raw//internal/x', 'an empty segment ("//") is refused'],
  ['//raw/internal/x', 'an empty segment ("//") is refused'],
  ['/raw/public/x#/../../internal/x', '"#" is refused (a fragment is never sent)'],
  ['http://127.0.0.1/raw/internal/x', 'the request target must be a path starting with "/"'],
];

function get(port: number, target: string, headers = ''): ReturnType<typeof rawHttp> {
  return rawHttp(port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers}Connection: close\r\n\r\n`);
}

describe('encoded paths at the gateway: the rules see the path the backend serves', () => {
  const dir = tempDir('mesh-encoded-path-');
  let registry: Registry;
  let backend: DecodingBackend;
  let gw: GatewayProcess;
  const reached = () => backend.seen.length;

  before(async () => {
    backend = await startDecodingBackend();
    registry = createRegistry('local', dir.path);
    await registerPlain(registry, 'go.mesh.api.raw', backend.port);
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, RULES);
    const keys = join(dir.path, 'keys.txt');
    writeFileSync(keys, `${KEY} reader read\n`);
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--auth=key', `--auth_keys=${keys}`, `--auth_rules=${rules}`]);
  });

  after(async () => {
    await gw?.stop();
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('the public path passes, forwarded in its normal form with the query untouched', async () => {
    const r = await get(gw.port, '/raw/p%75blic/./a/../x%7e%2a?q=%2e%2e/..;%2F');
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(JSON.parse(r.body), { url: '/raw/public/x~%2A?q=%2e%2e/..;%2F', served: '/raw/public/x~*' });
  });

  it('encoded letters, encoded dots and case cannot reach a denied path: 403, the backend never asked', async () => {
    const before = reached();
    for (const path of ['/raw/%69nternal/x', '/raw/Internal/x', '/raw/%49NTERNAL/x', '/raw/public/../internal/x', '/raw/public/%2e%2E/internal/x', '/raw/public/.%2e/%2e/internal/x', '/raw/x/../INTERNAL/']) {
      const r = await get(gw.port, path, `Authorization: Bearer ${KEY}\r\n`);
      assert.equal(r.status, 403, path);
      assert.equal(r.body, errorJson('go.mesh.auth', 403, 'Forbidden', 'access to go.mesh.api.raw denied by rule 1'), path);
    }
    assert.equal(reached(), before);
  });

  it('an encoded letter cannot skip a scope: 401 without a key, 403 without the scope', async () => {
    const before = reached();
    const anonymous = await get(gw.port, '/raw/%61dmin/x');
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.body, errorJson('go.mesh.auth', 401, 'Unauthorized', 'an API key is required (Authorization: Bearer <key>)'));
    const reader = await get(gw.port, '/raw/%61%64min/x', `Authorization: Bearer ${KEY}\r\n`);
    assert.equal(reader.status, 403);
    assert.equal(reader.body, errorJson('go.mesh.auth', 403, 'Forbidden', 'access to go.mesh.api.raw needs scope admin (rule 2)'));
    assert.equal(reached(), before);
  });

  it('what cannot be normalized safely is 400, anonymous or not, and never reaches the backend', async () => {
    const before = reached();
    for (const [path, detail] of REFUSED) {
      for (const auth of ['', `Authorization: Bearer ${KEY}\r\n`]) {
        const r = await get(gw.port, path, auth);
        assert.equal(r.status, 400, path);
        assert.equal(r.body, badPath('go.mesh.api', detail), path);
      }
    }
    assert.equal(reached(), before);
  });

  it('a WebSocket upgrade is normalized the same: 403 for an encoded denied path, 400 for ";"', async () => {
    const before = reached();
    const upgrade = 'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n';
    const denied = await rawHttp(gw.port, `GET /raw/%69nternal/ws HTTP/1.1\r\nHost: 127.0.0.1\r\n${upgrade}\r\n`);
    assert.equal(denied.status, 403);
    assert.equal(denied.body, errorJson('go.mesh.auth', 403, 'Forbidden', 'access to go.mesh.api.raw denied by rule 1'));
    const refused = await rawHttp(gw.port, `GET /raw/public/..;/internal/ws HTTP/1.1\r\nHost: 127.0.0.1\r\n${upgrade}\r\n`);
    assert.equal(refused.status, 400);
    assert.equal(refused.body, badPath('go.mesh.api', '";" (path parameters) is refused'));
    assert.equal(reached(), before);
  });
});

describe('encoded paths at the sidecar: the same normal form before its rules', () => {
  const dir = tempDir('mesh-encoded-sidecar-');
  let registry: Registry;
  let backend: DecodingBackend;
  let sc: SidecarProcess;

  before(async () => {
    backend = await startDecodingBackend();
    registry = createRegistry('local', dir.path);
    await registerPlain(registry, 'go.mesh.srv.raw', backend.port);
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, RULES);
    const keys = join(dir.path, 'keys.txt');
    writeFileSync(keys, `${KEY} reader read\n`);
    sc = await startSidecar(dir.path, ['--handler=proxy', '--auth=key', `--auth_keys=${keys}`, `--auth_rules=${rules}`]);
  });

  after(async () => {
    await sc?.stop();
    await backend?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('encoded, dotted and cased spellings of a denied path are 403, what cannot be normalized is 400: none reaches the app', async () => {
    for (const path of ['/raw/%69nternal/x', '/raw/INTERNAL/x', '/raw/public/%2e%2e/internal/x']) {
      const r = await get(sc.port, path, `Authorization: Bearer ${KEY}\r\n`);
      assert.equal(r.status, 403, path);
      assert.equal(r.body, errorJson('go.mesh.auth', 403, 'Forbidden', 'access to go.mesh.srv.raw denied by rule 1'), path);
    }
    for (const [path, detail] of REFUSED) {
      const r = await get(sc.port, path);
      assert.equal(r.status, 400, path);
      assert.equal(r.body, badPath('go.mesh.sidecar', detail), path);
    }
    assert.equal(backend.seen.length, 0);
    const ok = await get(sc.port, '/raw/p%75blic/x?q=%2e');
    assert.equal(ok.status, 200, ok.body);
    assert.deepEqual(JSON.parse(ok.body), { url: '/raw/public/x?q=%2e', served: '/raw/public/x' });
  });
});

describe('encoded paths through mesh proxy: the route matched is the path the backend serves', () => {
  const dir = tempDir('mesh-encoded-proxy-');
  let outside: DecodingBackend;
  let inside: DecodingBackend;
  let proc: RunningProcess;
  let port: number;

  before(async () => {
    [outside, inside] = await Promise.all([startDecodingBackend(), startDecodingBackend()]);
    const file = join(dir.path, 'proxy.yaml');
    writeFileSync(
      file,
      `admin: { address: 127.0.0.1:0 }
listeners:
  - name: edge
    address: 127.0.0.1:0
    routes:
      - match: { prefix: /raw/internal/ }
        cluster: inside
      - match: { prefix: /raw/ }
        cluster: outside
clusters:
  - name: inside
    hosts: [127.0.0.1:${inside.port}]
  - name: outside
    hosts: [127.0.0.1:${outside.port}]
`,
    );
    proc = startProcess(['proxy', '-c', file, '--log_level=warning']);
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    port = await proc.waitForPort(PRINTED.proxy);
  });

  after(async () => {
    await proc?.stop();
    await Promise.all([outside?.close(), inside?.close()]);
    dir.cleanup();
  });

  it('encoded letters and dot segments are routed by the path they decode to, and forwarded normalized', async () => {
    for (const path of ['/raw/%69nternal/x', '/raw/public/../internal/x', '/raw/public/%2e%2e/internal/x']) {
      const r = await get(port, path);
      assert.equal(r.status, 200, path);
      assert.deepEqual(JSON.parse(r.body), { url: '/raw/internal/x', served: '/raw/internal/x' }, path);
    }
    assert.equal(inside.seen.length, 3);
    const r = await get(port, '/raw/p%75blic/x?a=%2e%2e');
    assert.deepEqual(JSON.parse(r.body), { url: '/raw/public/x?a=%2e%2e', served: '/raw/public/x' });
    assert.deepEqual(
      outside.seen.map((s) => s.served),
      ['/raw/public/x'],
    );
  });

  it('what cannot be normalized safely is 400 and reaches neither backend', async () => {
    const before = inside.seen.length + outside.seen.length;
    for (const [path, detail] of REFUSED) {
      const r = await get(port, path);
      assert.equal(r.status, 400, path);
      assert.equal(r.body, badPath('go.mesh.proxy', detail), path);
    }
    assert.equal(inside.seen.length + outside.seen.length, before);
  });
});
