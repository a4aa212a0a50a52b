/**
 * `--enable_tls` on real `mesh api` and `mesh sidecar` processes, with pairs made by openssl here:
 * HTTPS end to end, admin /certs, start-up errors naming the bad file, and reload when the files
 * change (in place or by rename), keeping the old certificate while the new pair is invalid.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { adminCerts, adminStats, httpsGet, makePair, peer, startServer, type ServerProcess } from '../tls-fixtures.js';

const DAY_MS = 86_400_000;

function isoSeconds(d: string): string {
  return new Date(d).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

describe('mesh api --enable_tls', () => {
  const dir = tempDir('mesh-tls-api-');
  const certFile = join(dir.path, 'server.crt');
  const keyFile = join(dir.path, 'server.key');
  let first: ReturnType<typeof makePair>;
  let gw: ServerProcess;

  before(async () => {
    first = makePair(dir.path, 'server', { sans: 'DNS:localhost,DNS:api.mesh.test,IP:127.0.0.1' });
    gw = await startServer('api', ['--enable_tls', `--tls_cert_file=${certFile}`, `--tls_key_file=${keyFile}`]);
  });
  after(async () => {
    await gw?.stop();
    dir.cleanup();
  });

  it('serves HTTPS with the files, verified against the certificate itself', async () => {
    assert.match(gw.proc.output(), new RegExp(`listening on https://127\\.0\\.0\\.1:${gw.port}`));
    const r = await httpsGet(gw.port, '/', { servername: 'localhost', ca: first.cert });
    assert.equal(r.status, 200);
    assert.match(r.text, /"version"/);
    // Without SNI (an IP address in the URL) the same certificate answers.
    assert.equal((await peer(gw.port)).serial, first.serial);
  });

  it('admin /certs lists the file: path, serial, SANs, valid from, expiry, days until expiration', async () => {
    const x = new X509Certificate(first.cert);
    const certs = await adminCerts(gw.admin);
    assert.equal(certs.length, 1, JSON.stringify(certs));
    const c = certs[0]!;
    assert.equal(c.path, certFile);
    assert.equal(c.serial_number, first.serial);
    assert.deepEqual(c.subject_alt_names, [{ dns: 'localhost' }, { dns: 'api.mesh.test' }, { ip_address: '127.0.0.1' }]);
    assert.equal(c.valid_from, isoSeconds(x.validFrom));
    assert.equal(c.expiration_time, isoSeconds(x.validTo));
    assert.equal(c.days_until_expiration, String(Math.floor((new Date(x.validTo).getTime() - Date.now()) / DAY_MS)));
  });

  it('reloads changed files without a restart; an invalid pair keeps the old certificate', async () => {
    const pid = gw.proc.child.pid;
    // 1. Overwritten in place.
    const second = makePair(join(dir.path), 'next', { sans: 'DNS:localhost' });
    assert.notEqual(second.serial, first.serial);
    writeFileSync(certFile, second.cert);
    writeFileSync(keyFile, second.key);
    await waitFor(async () => (await peer(gw.port, 'localhost')).serial === second.serial, 10000, 200);
    assert.equal((await adminCerts(gw.admin))[0]!.serial_number, second.serial);
    await gw.proc.waitForOutput(new RegExp(`TLS certificate reloaded from \\S+ \\(serial ${second.serial}\\)`));

    // 2. Replaced by rename (how most tools and Kubernetes update files).
    const staging = join(dir.path, 'staging');
    mkdirSync(staging);
    const third = makePair(staging, 'third', { sans: 'DNS:localhost' });
    renameSync(third.keyFile, keyFile);
    renameSync(third.certFile, certFile);
    await waitFor(async () => (await peer(gw.port, 'localhost')).serial === third.serial, 10000, 200);
    assert.equal((await adminCerts(gw.admin))[0]!.serial_number, third.serial);

    // 3. A mismatched pair: logged, the previous certificate keeps serving.
    const fourth = makePair(staging, 'fourth', { sans: 'DNS:localhost' });
    const other = makePair(staging, 'other', { sans: 'DNS:localhost' });
    writeFileSync(certFile, fourth.cert);
    writeFileSync(keyFile, other.key);
    await gw.proc.waitForOutput(/TLS certificate reload failed, keeping the previous certificate/, 10000);
    assert.match(gw.proc.output(), /does not match the certificate/);
    assert.equal((await peer(gw.port, 'localhost')).serial, third.serial);
    assert.equal((await adminCerts(gw.admin))[0]!.serial_number, third.serial);
    assert.equal((await httpsGet(gw.port, '/', { servername: 'localhost', ca: third.cert })).status, 200);

    // 4. The matching key arrives: the new certificate is served.
    writeFileSync(keyFile, fourth.key);
    await waitFor(async () => (await peer(gw.port, 'localhost')).serial === fourth.serial, 10000, 200);
    assert.equal((await adminCerts(gw.admin))[0]!.serial_number, fourth.serial);
    const stats = await adminStats(gw.admin, '^tls\\.');
    assert.equal(stats['tls.file_reload_success'], 3, JSON.stringify(stats));
    assert.equal(stats['tls.file_reload_failure'], 1, JSON.stringify(stats));
    assert.equal(gw.proc.child.pid, pid);
    assert.equal(gw.proc.child.exitCode, null, 'never restarted');
  });
});

describe('mesh sidecar --enable_tls', () => {
  const dir = tempDir('mesh-tls-sidecar-');
  let sc: ServerProcess;
  let first: ReturnType<typeof makePair>;

  before(async () => {
    first = makePair(dir.path, 'sc', { sans: 'DNS:localhost,IP:127.0.0.1' });
    sc = await startServer('sidecar', ['--enable_tls', `--tls_cert_file=${first.certFile}`, `--tls_key_file=${first.keyFile}`]);
  });
  after(async () => {
    await sc?.stop();
    dir.cleanup();
  });

  it('serves HTTPS, lists the file in /certs, and reloads it', async () => {
    assert.equal((await httpsGet(sc.port, '/', { servername: 'localhost', ca: first.cert })).status, 200);
    assert.equal((await adminCerts(sc.admin))[0]!.serial_number, first.serial);
    const fresh = makePair(join(dir.path), 'fresh', { sans: 'DNS:localhost' });
    writeFileSync(first.keyFile, fresh.key);
    writeFileSync(first.certFile, fresh.cert);
    await waitFor(async () => (await peer(sc.port, 'localhost')).serial === fresh.serial, 10000, 200);
    const certs = await adminCerts(sc.admin);
    assert.equal(certs.length, 1);
    assert.equal(certs[0]!.path, first.certFile);
    assert.equal(certs[0]!.serial_number, fresh.serial);
  });
});

describe('TLS start-up errors name the file', () => {
  const dir = tempDir('mesh-tls-errors-');
  let good: ReturnType<typeof makePair>;
  let other: ReturnType<typeof makePair>;

  before(() => {
    good = makePair(dir.path, 'good');
    other = makePair(dir.path, 'other');
    writeFileSync(join(dir.path, 'junk.crt'), 'this is not a certificate\n');
    mkdirSync(join(dir.path, 'a-directory.key'));
  });
  after(() => dir.cleanup());

  const run = (command: 'api' | 'sidecar', cert: string, key: string) =>
    runCli([command, '--address=127.0.0.1:0', '--admin_address=off', '--registry=memory', '--broker=memory', '--enable_tls', `--tls_cert_file=${cert}`, `--tls_key_file=${key}`], {}, 30000);

  it('missing, unreadable, mismatched and non-PEM files: exit 1 and a message naming the file', async () => {
    const missing = join(dir.path, 'missing.crt');
    const unreadable = join(dir.path, 'a-directory.key');
    const junk = join(dir.path, 'junk.crt');
    const cases: Array<{ what: string; command: 'api' | 'sidecar'; cert: string; key: string; re: RegExp; names: string[] }> = [
      { what: 'missing cert', command: 'api', cert: missing, key: good.keyFile, re: /cannot read TLS certificate file .*ENOENT/, names: [missing] },
      { what: 'missing key', command: 'sidecar', cert: good.certFile, key: join(dir.path, 'nokey.key'), re: /cannot read TLS key file .*ENOENT/, names: [join(dir.path, 'nokey.key')] },
      { what: 'unreadable key', command: 'api', cert: good.certFile, key: unreadable, re: /cannot read TLS key file .*EISDIR/, names: [unreadable] },
      { what: 'mismatched', command: 'api', cert: good.certFile, key: other.keyFile, re: /does not match the certificate/, names: [other.keyFile, good.certFile] },
      { what: 'mismatched (sidecar)', command: 'sidecar', cert: other.certFile, key: good.keyFile, re: /does not match the certificate/, names: [good.keyFile, other.certFile] },
      { what: 'not PEM', command: 'api', cert: junk, key: good.keyFile, re: /holds no PEM certificate/, names: [junk] },
    ];
    const results = await Promise.all(cases.map((c) => run(c.command, c.cert, c.key)));
    cases.forEach((c, i) => {
      const r = results[i]!;
      assert.equal(r.code, 1, `${c.what}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, c.re, c.what);
      for (const name of c.names) assert.ok(r.stderr.includes(name), `${c.what}: ${r.stderr} should name ${name}`);
      assert.doesNotMatch(r.stdout, /listening on/, c.what);
    });
  });

  it('--enable_tls without the file flags names the missing flag', async () => {
    const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', '--registry=memory', '--enable_tls', `--tls_cert_file=${good.certFile}`], {}, 30000);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--tls_key_file/);
  });
});
