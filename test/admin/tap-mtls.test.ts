/**
 * admin /tap over mutual TLS (--tap_allowed_identities) on a real `mesh api`, played as the
 * attacker: an allowed identity taps without the admin token, from a node client and from `mesh
 * tap --mtls`; another identity of the same CA is refused (403, counted, logged) and so is the
 * allowed identity asking for anything but /tap over mutual TLS; a certificate with the allowed
 * SPIFFE ID from another CA, and a TLS client without a certificate, never finish the handshake;
 * plain HTTP still needs the token. And the start-up errors: no --mtls, an ID that is not one,
 * --concurrency above 1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpsRequest } from 'node:https';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { makePki, type Leaf, type Pki, type TestCa } from '../fixtures/pki.js';
import { helloRoutes, openTap, statValue as tokenStat } from '../fixtures/tap-client.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const TOKEN = 'tap-mtls-test-token';
const ROUTES = helloRoutes();
interface TlsAnswer {
  status: number;
  body: string;
}

/** A request to the admin over TLS with `leaf` (or no certificate); the answer's head, and its body (read for `readMs` ms at most, for a stream). */
function tlsGet(port: number, path: string, ca: string, leaf?: Leaf, readMs = 0): Promise<TlsAnswer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: '127.0.0.1', port, path, agent: false, ca, ...(leaf ? { cert: leaf.cert, key: leaf.key } : {}), checkServerIdentity: () => undefined },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        const done = () => resolve({ status: res.statusCode ?? 0, body });
        if (readMs > 0) setTimeout(() => (done(), req.destroy()), readMs);
        else res.on('end', done);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const statValue = (admin: string, name: string) => tokenStat(admin, name, TOKEN);

describe('admin /tap over mutual TLS (--tap_allowed_identities)', () => {
  const dir = tempDir();
  let pki: Pki;
  let ca: TestCa;
  let ops: Leaf;
  let evil: Leaf;
  let registry: Registry;
  let plain: PlainApp;
  let gw: GatewayProcess;
  let adminPort: number;
  const mtlsFlags = (leaf: Leaf) => ['--mtls=permissive', `--mtls_cert_file=${leaf.certFile}`, `--mtls_key_file=${leaf.keyFile}`, `--mtls_ca_file=${ca.certFile}`];

  before(async () => {
    pki = makePki();
    ca = pki.ca('mesh');
    ops = ca.leaf('ops');
    evil = ca.leaf('evil');
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    const routes = join(dir.path, 'routes.yaml');
    writeFileSync(routes, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routes}`, ...mtlsFlags(ca.leaf('mesh.api')), `--tap_allowed_identities=${ops.spiffeId}`, `--admin_token=${TOKEN}`]);
    adminPort = Number(new URL(gw.admin).port);
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    pki?.cleanup();
    dir.cleanup();
  });

  it('an allowed identity taps without the admin token', async () => {
    const tapping = tlsGet(adminPort, '/tap?path_prefix=/hello/ops', ca.cert, ops, 3000);
    await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 1);
    assert.equal((await http('GET', `${gw.url}/hello/ops/1`)).status, 200);
    const answer = await tapping;
    assert.equal(answer.status, 200);
    const events = answer.body.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.deepEqual(events.map((e) => e.path), ['/hello/ops/1']);
  });

  it('another identity of the same CA is refused (403), counted and logged', async () => {
    const refused = await statValue(gw.admin, 'admin.tap.refused');
    const answer = await tlsGet(adminPort, '/tap', ca.cert, evil);
    assert.deepEqual(answer, { status: 403, body: `Forbidden: ${evil.spiffeId} may not tap this process (see --tap_allowed_identities).\n` });
    assert.equal(await statValue(gw.admin, 'admin.tap.refused'), refused + 1);
    await gw.proc.waitForOutput(/admin refused a tap: its identity is not in --tap_allowed_identities/);
  });

  it('over mutual TLS only /tap is served, even to the allowed identity', async () => {
    // Other spellings of /tap are other paths here: refused too, never served as /tap or as the path they decode to.
    for (const path of ['/stats', '/quitquitquit', '/healthcheck/fail', '/tap/../quitquitquit', '/%74ap', '/TAP', '/tap/', '/tap;x', '//tap']) {
      const answer = await tlsGet(adminPort, path, ca.cert, ops);
      assert.equal(answer.status, 403, path);
      assert.match(answer.body, /^Forbidden: over mutual TLS this admin interface serves only \/tap; ask for \/\S* over plain HTTP\.\n$/);
    }
    assert.equal((await http('GET', `${gw.admin}/ready`, { headers: { authorization: `Bearer ${TOKEN}` } })).text, 'LIVE\n');
  });

  it('the allowed SPIFFE ID from another CA, and no client certificate, never finish the handshake', async () => {
    const forged = pki.ca('other').leaf('ops');
    assert.equal(forged.spiffeId, ops.spiffeId);
    const failedVerify = await statValue(gw.admin, 'http.admin.ssl.fail_verify_error');
    await assert.rejects(tlsGet(adminPort, '/tap', ca.cert, forged));
    await waitFor(async () => (await statValue(gw.admin, 'http.admin.ssl.fail_verify_error')) === failedVerify + 1);
    const noCert = await statValue(gw.admin, 'http.admin.ssl.fail_verify_no_cert');
    await assert.rejects(tlsGet(adminPort, '/tap', ca.cert));
    await waitFor(async () => (await statValue(gw.admin, 'http.admin.ssl.fail_verify_no_cert')) === noCert + 1);
  });

  it('plain HTTP still needs the admin token', async () => {
    const without = await openTap(gw.admin);
    assert.equal(without.res.statusCode, 401);
    without.close();
    const withToken = await openTap(gw.admin, '', { authorization: `Bearer ${TOKEN}` });
    assert.equal(withToken.res.statusCode, 200);
    withToken.close();
  });

  it('mesh tap --mtls taps with its certificate; with one not allowed it is refused and exits 1', async () => {
    const tap = startProcess(['tap', `--admin=127.0.0.1:${adminPort}`, '--path=/hello/cli', ...mtlsFlags(ops)]);
    try {
      await tap.waitForOutput(new RegExp(`127\\.0\\.0\\.1:${adminPort}: tapping`));
      assert.equal((await http('GET', `${gw.url}/hello/cli/1`)).status, 200);
      await tap.waitForOutput(/GET \/hello\/cli\/1 200 /);
    } finally {
      assert.equal(await tap.stop('SIGTERM'), 0);
    }
    const r = await runCli(['tap', `--admin=127.0.0.1:${adminPort}`, ...mtlsFlags(evil)]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`tap refused \\(403\\): Forbidden: ${evil.spiffeId.replace(/\./g, '\\.')} may not tap this process`));
  });

  it('start-up errors: without --mtls, an ID that is not one, --concurrency above 1', async () => {
    const base = ['api', '--registry=memory', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'];
    const noMtls = await runCli([...base, `--tap_allowed_identities=${ops.spiffeId}`]);
    assert.equal(noMtls.code, 1, noMtls.stderr);
    assert.match(noMtls.stderr, /--tap_allowed_identities needs --mtls \(permissive or strict\): the admin checks who taps by their certificate\n$/);
    const notAnId = await runCli([...base, ...mtlsFlags(ops), '--tap_allowed_identities=SPIFFE://mesh.local/svc/ops']);
    assert.equal(notAnId.code, 1, notAnId.stderr);
    assert.match(notAnId.stderr, /invalid value "SPIFFE:\/\/mesh\.local\/svc\/ops" for flag --tap_allowed_identities: "SPIFFE:\/\/mesh\.local\/svc\/ops" is not a SPIFFE ID/);
    const workers = await runCli([...base, '--concurrency=2', `--tap_allowed_identities=${ops.spiffeId}`]);
    assert.equal(workers.code, 2, workers.stderr);
    assert.match(workers.stderr, /^mesh: invalid value "2" for flag --concurrency: --tap_allowed_identities needs a single process/);
  });
});
