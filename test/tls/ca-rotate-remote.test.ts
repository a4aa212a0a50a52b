/**
 * `mesh ca rotate` across hosts, under load, through to `--finish`, with no restart. Three
 * "hosts" on loopback that share nothing but the address of `mesh ca serve`: host A runs the CA
 * and `mesh ca serve` (its own MESH_HOME); host B a workload process (the fixture) with
 * --ca_server, a join token and the old root's fingerprint pinned; host C this test process, a
 * workload opened the same way, which calls B over mutual TLS without a pause (each call a new
 * connection: both certificates checked each time).
 *
 * The rotation: the service renews its own certificate from the new root within seconds (a 6 s
 * --mtls_cert_ttl), and B and C still trust it through the cross certificate it sends (the new
 * root certified by the old); their renewals bring certificates from the new root (each with the
 * cross certificate, so a peer that does not trust the new root yet checks it) and the new trust
 * bundle; after `--finish` they drop the old root and keep renewing. No call fails on the way.
 * The trust bundle's own poll is set to 10 minutes here, so that nothing but the renewals (which
 * the service's switch to the new root would break without the cross certificates) carries the
 * rotation. A process started during the rotation with the new root's fingerprint joins too.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { join } from 'node:path';
import { connect } from 'node:tls';
import pino from 'pino';
import { openWorkloadTls, type OpenedWorkloadTls } from '../../src/tls/workload/index.js';
import { ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const WORKLOAD = join(ROOT, 'test/fixtures/workload-process.ts');
const tmp = tempDir('ca-rotate-remote-');
const processes: RunningProcess[] = [];
const closers: Array<() => unknown> = [];
after(async () => {
  for (const c of closers.reverse()) await c();
  for (const p of processes) await p.stop();
  tmp.cleanup();
});

const homeA = join(tmp.path, 'host-a');
const log = pino({ level: 'silent' });

/** One call from C to B: a new mutual TLS connection, an echo. Resolves with B's certificate's issuer. */
function callB(port: number, c: OpenedWorkloadTls): Promise<string> {
  const pems = c.contextOptions();
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, cert: pems.cert, key: pems.key, ca: [...pems.ca], checkServerIdentity: () => undefined }, () => {
      const issuer = socket.getPeerCertificate().issuer.CN ?? '';
      socket.write('ping');
      socket.once('data', (d: Buffer) => {
        socket.end();
        if (d.toString() === 'ping') resolve(String(issuer));
        else reject(new Error(`echoed ${d.toString()}`));
      });
    });
    socket.setTimeout(5000, () => socket.destroy(new Error('timed out')));
    socket.on('error', reject);
    // Closed by B without an error (it refused the handshake): a failure, not a hang.
    socket.on('close', () => reject(new Error('closed before the echo')));
  });
}

const cnOf = (pem: string) => /CN=([^\n]+)/.exec(new X509Certificate(pem).issuer)![1]!;

describe('mesh ca rotate with processes on other hosts', () => {
  it('under load, through to --finish, with no restart and no failed call', async () => {
    assert.equal((await runCli(['ca', 'init'], { MESH_HOME: homeA })).code, 0);
    const serve = startProcess(['ca', 'serve', '--address=127.0.0.1:0', '--mtls_cert_ttl=6s'], { MESH_HOME: homeA });
    processes.push(serve);
    const line = await serve.waitForOutput(/mesh ca serve listening on https:\/\/127\.0\.0\.1:\d+ .*\n/);
    const port = Number(/:(\d+) /.exec(line)![1]);
    const oldPin = /--ca_root_fingerprint=(sha256:[0-9a-f]{64})/.exec(line)![1]!;
    const token = (await runCli(['ca', 'token', '--services=go.mesh.srv.*', '--ttl=10m'], { MESH_HOME: homeA })).stdout.trim();
    const caServer = `https://127.0.0.1:${port}`;

    // Host B: the fixture, its own MESH_HOME, the old root pinned.
    const b = startProcess(
      ['--import', 'tsx', WORKLOAD, 'api', '--registry=memory', '--log_level=info', '--mtls=strict', `--ca_server=${caServer}`, `--ca_token=${token}`, `--ca_root_fingerprint=${oldPin}`, '--mtls_cert_ttl=6s', '--ca_bundle_poll=10m', `--ca_dir=${join(tmp.path, 'host-b', 'no-ca')}`],
      { MESH_HOME: join(tmp.path, 'host-b'), MESH_TEST_SERVICE: 'go.mesh.srv.b' },
      '',
    );
    processes.push(b);
    const bPort = Number(/workload listening on 127\.0\.0\.1:(\d+) /.exec(await b.waitForOutput(/workload listening on \S+ as \S+ serial [0-9a-f]+\n/, 20_000))![1]);

    // Host C: this process, the old root pinned.
    const c = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: join(tmp.path, 'host-c', 'no-ca'), certTtlMs: 6000, service: 'go.mesh.srv.c', caServer, caToken: token, caRootFingerprint: oldPin, bundlePollMs: 600_000, log });
    closers.push(() => c.close());
    const oldCn = cnOf(c.contextOptions().cert);

    // The load: C calls B without a pause, each call a new connection.
    let ok = 0;
    const failures: string[] = [];
    const issuersSeen = new Set<string>();
    let running = true;
    const load = (async () => {
      while (running) {
        try {
          issuersSeen.add(await callB(bPort, c));
          ok++;
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
    })();
    closers.push(async () => {
      running = false;
      await load;
    });
    await waitFor(() => ok >= 20, 10_000);

    // The rotation.
    const rotated = await runCli(['ca', 'rotate', '--output=json'], { MESH_HOME: homeA });
    assert.equal(rotated.code, 0, rotated.stderr);
    const newRoot = (JSON.parse(rotated.stdout) as { root: { fingerprint: string; subject: string } }).root;
    const newPin = `sha256:${newRoot.fingerprint.replace(/:/g, '').toLowerCase()}`;
    const newCn = /CN=([^,]+)/.exec(newRoot.subject)![1]!;
    assert.notEqual(newCn, oldCn);

    // The service's own certificate from the new root (it renews every ~4 s).
    await serve.waitForOutput(/workload certificate renewed/, 20_000);
    const servedIssuer = async () => {
      const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
      await new Promise((r) => s.once('secureConnect', r));
      const cn = s.getPeerCertificate().issuer.CN;
      s.destroy();
      return cn;
    };
    await waitFor(async () => (await servedIssuer()) === newCn, 20_000);
    // B and C: the new root trusted, then certificates from it, their renewals going on.
    await waitFor(() => c.contextOptions().ca.length === 2 && cnOf(c.contextOptions().cert) === newCn, 30_000);
    await waitFor(() => issuersSeen.has(newCn), 30_000);

    // A process started during the rotation with the new root's fingerprint joins.
    const d = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: join(tmp.path, 'host-d', 'no-ca'), certTtlMs: 6000, service: 'go.mesh.srv.d', caServer, caToken: token, caRootFingerprint: newPin, bundlePollMs: 600_000, log });
    closers.push(() => d.close());
    assert.equal(cnOf(d.contextOptions().cert), newCn);

    // Finish: the old root is dropped everywhere; renewals go on against the service with the old pin.
    const finished = await runCli(['ca', 'rotate', '--finish'], { MESH_HOME: homeA });
    assert.equal(finished.code, 0, finished.stderr);
    await waitFor(() => c.contextOptions().ca.length === 1, 30_000);
    const serialAfterFinish = c.certificates()[0]!.serialNumber;
    const bOutputAtFinish = b.output().length;
    await waitFor(() => c.certificates()[0]!.serialNumber !== serialAfterFinish, 20_000);
    await waitFor(() => /workload certificate serial [0-9a-f]+\n/.test(b.output().slice(bOutputAtFinish)), 20_000);
    const okAtEnd = ok;
    await waitFor(() => ok >= okAtEnd + 20, 10_000);
    running = false;
    await load;

    assert.deepEqual(failures, [], `no call failed during the rotation (B: ${b.output().split('\n').filter((l) => /fail|refus|expired/.test(l)).join(' | ')}; C: ${JSON.stringify(c.certificates()[0]!.renewal)})`);
    assert.ok(issuersSeen.has(oldCn) && issuersSeen.has(newCn));
    assert.doesNotMatch(b.output(), /renewal failed|does not chain|not trusted/);
    assert.equal(c.certificates()[0]!.renewal!.state, 'ok');
  });
});
