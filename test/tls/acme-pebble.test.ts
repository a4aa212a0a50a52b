/**
 * `--enable_acme` against a real local ACME CA: Debian's `pebble` (.ci/run installs and starts it).
 *
 * Environment:
 *   MESH_TEST_PEBBLE_DIRECTORY  pebble's directory URL, e.g. https://127.0.0.1:14000/dir
 *   MESH_TEST_PEBBLE_CA         pebble's own TLS certificate (given to mesh as NODE_EXTRA_CA_CERTS)
 *   MESH_TEST_PEBBLE_HTTP_PORT  optional: pebble's `httpPort`, where it validates HTTP-01 for real
 *                               (mesh's challenge listener binds it). Without it pebble must run with
 *                               PEBBLE_VA_ALWAYS_VALID=1 and the listener gets any free port.
 *
 * Shows: a certificate obtained for an allowed name (`localhost`) and served by the gateway (issued
 * by pebble's intermediate), admin /certs listing `acme:localhost`, a name outside --acme_hosts
 * refused at the handshake with no order placed, concurrent first handshakes sharing one order, and
 * restarts (the gateway, then a sidecar on the same cache) serving the cached certificate without an
 * order.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { engine, freePort, tempDir } from '../helpers.js';
import { adminCerts, adminStats, httpsGet, peer, startServer, type ServerProcess } from '../tls-fixtures.js';
import { directoryKey } from '../../src/tls/acme/cache.js';

const directory = engine('MESH_TEST_PEBBLE_DIRECTORY', 'pebble (local ACME CA)');
const pebbleCa = directory ? engine('MESH_TEST_PEBBLE_CA', "pebble's TLS certificate") : undefined;
const skip = !directory || !pebbleCa ? 'pebble not available: set MESH_TEST_PEBBLE_DIRECTORY and MESH_TEST_PEBBLE_CA' : false;

const HOST = 'localhost';
const DENIED = 'not-allowed.localhost';

describe('ACME with pebble', { skip }, () => {
  const home = tempDir('mesh-acme-pebble-');
  let challengePort: number;
  let gw: ServerProcess | undefined;
  let served = '';

  const acmeArgs = () => [
    `--mesh_home=${home.path}`,
    '--enable_acme',
    `--acme_hosts=${HOST}`,
    `--acme_directory=${directory}`,
    `--acme_http_port=127.0.0.1:${challengePort}`,
    '--acme_email=ops@mesh.test',
  ];
  const env = () => ({ NODE_EXTRA_CA_CERTS: pebbleCa! });
  const cacheDir = () => join(home.path, 'acme', directoryKey(directory!));

  before(async () => {
    challengePort = process.env.MESH_TEST_PEBBLE_HTTP_PORT ? Number(process.env.MESH_TEST_PEBBLE_HTTP_PORT) : await freePort();
  });
  after(async () => {
    await gw?.stop();
    home.cleanup();
  });

  it('obtains a certificate for an allowed name on start; concurrent first handshakes share the one order', async () => {
    gw = await startServer('api', acmeArgs(), env());
    const peers = await Promise.all(Array.from({ length: 6 }, () => peer(gw!.port, HOST)));
    served = peers[0]!.serial;
    for (const p of peers) {
      assert.equal(p.serial, served);
      assert.equal(p.subject, HOST);
      assert.match(p.sans, /DNS:localhost/);
      assert.match(p.issuer, /^Pebble Intermediate CA/, 'issued by pebble');
      assert.equal(p.issuerSubject, p.issuer, 'the chain carries pebble\'s intermediate');
    }
    const r = await httpsGet(gw.port, '/', { servername: HOST });
    assert.equal(r.status, 200);
    assert.match(r.text, /"version"/);
    const stats = await adminStats(gw.admin, '^acme\\.');
    assert.equal(stats['acme.order_started'], 1, JSON.stringify(stats));
    assert.equal(stats['acme.order_success'], 1, JSON.stringify(stats));
    const out = gw.proc.output();
    assert.match(out, /ordering certificate for localhost \(start\)/);
    assert.match(out, new RegExp(`certificate for localhost obtained \\(serial ${served}`));
    if (process.env.MESH_TEST_PEBBLE_HTTP_PORT) assert.match(out, /answered HTTP-01 challenge for localhost/, 'pebble validated HTTP-01 for real');
    // Cached: account key, certificate and key, all 0600.
    for (const f of ['account.key', `${HOST}.crt`, `${HOST}.key`]) {
      assert.equal(statSync(join(cacheDir(), f)).mode & 0o777, 0o600, f);
    }
  });

  it('admin /certs lists acme:localhost with the served serial', async () => {
    const certs = await adminCerts(gw!.admin);
    assert.equal(certs.length, 1, JSON.stringify(certs));
    const c = certs[0]!;
    assert.equal(c.path, `acme:${HOST}`);
    assert.equal(c.serial_number, served);
    assert.deepEqual(c.subject_alt_names, [{ dns: HOST }]);
    assert.ok(Number(c.days_until_expiration) > 0, c.days_until_expiration);
    assert.ok(Date.parse(c.valid_from) <= Date.now() && Date.parse(c.expiration_time) > Date.now());
  });

  it('a name outside --acme_hosts: the handshake fails and no order is placed', async () => {
    await assert.rejects(peer(gw!.port, DENIED));
    await assert.rejects(peer(gw!.port, 'www.example.com'));
    const stats = await adminStats(gw!.admin, '^acme\\.');
    assert.equal(stats['acme.order_started'], 1, 'still the one order for localhost');
    assert.equal(stats['acme.sni_refused'], 2);
    assert.deepEqual(readdirSync(cacheDir()).sort(), ['account.key', `${HOST}.crt`, `${HOST}.key`]);
    assert.equal(existsSync(join(cacheDir(), `${DENIED}.crt`)), false);
    await gw!.proc.waitForOutput(/refused TLS handshake for \\"not-allowed\.localhost\\": not in --acme_hosts, no certificate ordered/);
    assert.doesNotMatch(gw!.proc.output(), /ordering certificate for not-allowed/);
    // A client without SNI (an IP address in the URL) gets the allowed name's certificate.
    assert.equal((await peer(gw!.port)).serial, served);
  });

  it('a restart serves the cached certificate without a new order (gateway, then a sidecar on the same cache)', async () => {
    await gw!.stop();
    gw = await startServer('api', acmeArgs(), env());
    assert.equal((await peer(gw.port, HOST)).serial, served);
    await gw.proc.waitForOutput(new RegExp(`certificate for localhost loaded from cache \\(serial ${served}\\)`));
    let stats = await adminStats(gw.admin, '^acme\\.');
    assert.equal(stats['acme.order_started'], 0, JSON.stringify(stats));
    assert.equal(stats['acme.cache_hit'], 1);
    assert.equal((await adminCerts(gw.admin))[0]!.serial_number, served);
    await gw.stop();
    gw = undefined;

    const sc = await startServer('sidecar', acmeArgs(), env());
    try {
      assert.equal((await peer(sc.port, HOST)).serial, served);
      assert.equal((await httpsGet(sc.port, '/', { servername: HOST })).status, 200);
      stats = await adminStats(sc.admin, '^acme\\.');
      assert.equal(stats['acme.order_started'], 0, JSON.stringify(stats));
      assert.equal((await adminCerts(sc.admin))[0]!.path, `acme:${HOST}`);
      assert.match(sc.proc.output(), /loaded from cache/);
    } finally {
      await sc.stop();
    }
  });
});
