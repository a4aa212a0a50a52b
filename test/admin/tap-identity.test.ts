/**
 * admin /tap of a real `mesh sidecar --mtls=strict` with an app behind it: a call over mutual TLS
 * reaches the app through the sidecar's inbound listener, and its tap event names that front end
 * (`sidecar_inbound`) and the caller's SPIFFE ID; the `identity` filter takes it, another
 * identity does not.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { PRINTED, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { openTap } from '../fixtures/tap-client.js';
import { startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';

describe('admin /tap: the caller identity of mutual TLS', () => {
  const dir = tempDir();
  const ca = tempDir('mesh-ca-');
  let app: PlainApp;
  let sidecar: RunningProcess;
  let admin = '';
  const common = () => [`--registry_address=${dir.path}`, `--ca_dir=${ca.path}`, '--log_level=warning'];

  before(async () => {
    app = await startPlainApp('who');
    sidecar = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--mtls=strict', '--server_name=go.mesh.srv.who', `--server_address=127.0.0.1:${app.port}`, ...common()]);
    await sidecar.waitForPort(PRINTED.sidecar, 20_000);
    admin = `http://127.0.0.1:${await sidecar.waitForPort(PRINTED.sidecarAdmin)}`;
  });

  after(async () => {
    await sidecar?.stop();
    await app?.close();
    dir.cleanup();
    ca.cleanup();
  });

  it('a call over mutual TLS: the event of the inbound listener names the caller; the identity filter takes it', async () => {
    const mine = await openTap(admin, `?identity=${encodeURIComponent('spiffe://mesh.local/svc/mesh.cli')}`);
    const other = await openTap(admin, `?identity=${encodeURIComponent('spiffe://mesh.local/svc/go.mesh.srv.else')}`);
    const all = await openTap(admin, '');
    try {
      const out = await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', '--mtls=strict', ...common()]);
      assert.equal(out.code, 0, out.stderr);
      const inbound = await waitFor(() => all.lines().find((e) => e.front === 'sidecar_inbound'), 10_000);
      assert.equal(inbound.identity, 'spiffe://mesh.local/svc/mesh.cli');
      assert.equal(inbound.status, 200);
      const [e] = await waitFor(() => (mine.lines().length > 0 ? mine.lines() : undefined));
      assert.equal(e!.front, 'sidecar_inbound');
      assert.equal(e!.identity, 'spiffe://mesh.local/svc/mesh.cli');
      assert.equal(other.lines().length, 0);
    } finally {
      for (const t of [mine, other, all]) t.close();
    }
  });

  it('mesh stat identities: the calls over mutual TLS counted per caller identity at the inbound listener; a plain call as plain', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', '--mtls=strict', ...common()])).code, 0);
    const report = (await (await fetch(`${admin}/traffic`)).json()) as { callers: Array<{ front: string; identity: string; rq_2xx: number }> };
    const inbound = report.callers.find((c) => c.front === 'sidecar_inbound' && c.identity === 'spiffe://mesh.local/svc/mesh.cli');
    assert.ok(inbound && inbound.rq_2xx >= 3, JSON.stringify(report.callers));
    const r = await runCli(['stat', 'identities', `--registry_address=${dir.path}`, '--window=0', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const rows = JSON.parse(r.stdout) as Array<{ identity: string; requests: number; success: number; mtls: number }>;
    const cli = rows.find((x) => x.identity === 'spiffe://mesh.local/svc/mesh.cli');
    assert.ok(cli, r.stdout);
    assert.equal(cli.requests, inbound.rq_2xx);
    assert.deepEqual([cli.success, cli.mtls], [1, 1]);
    for (const x of rows) if (x.identity === 'plain') assert.equal(x.mtls, 0);
    const text = await runCli(['stat', 'identities', `--registry_address=${dir.path}`, '--window=0']);
    assert.match(text.stdout, /^IDENTITY +REQUESTS +RPS +SUCCESS +P50 +P95 +P99 +MTLS\n/);
    assert.match(text.stdout, /\nspiffe:\/\/mesh\.local\/svc\/mesh\.cli +\d+ +\S+ +100\.0% +\S+ +\S+ +\S+ +100\.0%\n/);
  });
});
