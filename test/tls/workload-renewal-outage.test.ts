/**
 * A process with --ca_server cut from `mesh ca serve` past its certificate's expiry, in process
 * on loopback: each failed renewal is counted (mtls.cert_renewal_failed) and logged (error), the
 * certificate's renewal state in admin /certs says `failing` since when and the last error, and
 * an error is logged when the certificate expires. Its join token gone, it renews with its
 * expired certificate once the service is back (the service renews an expired certificate of its
 * own CA within --ca_join_lifetime), and the state is `ok` again.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { renderCerts } from '../../src/admin/certs.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { CaServer } from '../../src/tls/workload/ca-server.js';
import { caPaths, initCa } from '../../src/tls/workload/ca.js';
import { openWorkloadTls } from '../../src/tls/workload/index.js';
import { makeToken } from '../../src/tls/workload/token.js';
import { tempDir, waitFor } from '../helpers.js';

const cleanups: Array<() => unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** A pino logger whose lines land in `lines` (parsed). */
function capture(): { log: pino.Logger; lines: Array<{ level: number; msg: string }> } {
  const lines: Array<{ level: number; msg: string }> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line) as { level: number; msg: string });
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

describe('a workload certificate through a CA outage', () => {
  it('counts and shows the failing renewals, logs the expiry, and renews with the expired certificate (no token) once the service is back', async () => {
    const tmp = tempDir('renewal-outage-');
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'ca');
    await initCa(caDir, { trustDomain: 'mesh.local' });
    const quiet = pino({ level: 'silent' });
    const start = (port: number) => CaServer.start({ caDir, trustDomain: 'mesh.local', host: '127.0.0.1', port, names: ['127.0.0.1'], certTtlMs: 3_600_000, log: quiet });
    let server = await start(0);
    const port = server.port;
    const tokenFile = join(tmp.path, 'token');
    writeFileSync(tokenFile, (await makeToken(caDir, { services: ['go.mesh.srv.*'], trustDomain: 'mesh.local', ttlMs: 600_000 })).token);
    const { log, lines } = capture();
    const stats = new StatsStore();
    const workload = await openWorkloadTls({
      mode: 'strict',
      trustDomain: 'mesh.local',
      caDir: join(tmp.path, 'none'),
      certTtlMs: 3000,
      service: 'go.mesh.srv.o',
      caServer: `https://127.0.0.1:${port}`,
      caTokenFile: tokenFile,
      caRootFile: caPaths(caDir).signerCert,
      bundlePollMs: 60_000,
      log,
      stats,
    });
    cleanups.push(() => workload.close());
    cleanups.push(() => server.close());
    // The token is gone: from now on only the certificate can renew.
    rmSync(tokenFile);
    await waitFor(() => stats.counter('mtls.cert_renewed').value >= 1, 10_000);
    const ok = JSON.parse(renderCerts(workload.certificates(), Date.now())) as { certificates: Array<{ cert_chain: Array<{ renewal?: Record<string, unknown> }> }> };
    assert.equal(ok.certificates[0]!.cert_chain[0]!.renewal!.state, 'ok');

    // The outage.
    await server.close();
    await waitFor(() => stats.counter('mtls.cert_renewal_failed').value >= 1, 10_000);
    const failing = workload.certificates()[0]!.renewal!;
    assert.equal(failing.state, 'failing');
    assert.ok(failing.failures >= 1 && failing.failingSince instanceof Date);
    assert.match(failing.lastError!, /mesh ca serve https:\/\/127\.0\.0\.1:\d+: connect ECONNREFUSED/);
    const shown = JSON.parse(renderCerts(workload.certificates(), Date.now())) as { certificates: Array<{ cert_chain: Array<{ renewal?: Record<string, unknown> }> }> };
    assert.deepEqual(Object.keys(shown.certificates[0]!.cert_chain[0]!.renewal!).sort(), ['failing_since', 'failures', 'last_error', 'last_renewal', 'state']);
    assert.equal(shown.certificates[0]!.cert_chain[0]!.renewal!.state, 'failing');
    assert.ok(lines.some((l) => l.level === 50 && l.msg === 'workload certificate renewal failed; keeping the current certificate and trying again'));
    const expiredSerial = workload.certificates()[0]!.serialNumber;
    const expiredLine = await waitFor(() => lines.find((l) => l.level === 50 && l.msg.startsWith(`workload certificate spiffe://mesh.local/svc/go.mesh.srv.o (serial ${expiredSerial}) `)), 15_000);
    assert.match(expiredLine.msg, new RegExp(`\\(serial ${expiredSerial}\\) expired at \\S+: peers refuse it until a renewal succeeds \\(last renewal error: .*ECONNREFUSED.*\\)$`));
    assert.ok(workload.certificates()[0]!.expiration.getTime() < Date.now());

    // The service is back (same port): the expired certificate renews, no token needed.
    server = await start(port);
    await waitFor(() => workload.certificates()[0]!.renewal!.state === 'ok', 20_000);
    const renewed = workload.certificates()[0]!;
    assert.notEqual(renewed.serialNumber, expiredSerial);
    assert.ok(renewed.expiration.getTime() > Date.now());
    assert.ok(lines.some((l) => l.level === 30 && /^workload certificate renewal succeeded again after \d+ failed attempt\(s\)$/.test(l.msg)));
  });
});
