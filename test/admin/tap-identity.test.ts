/**
 * admin /tap of a real `mesh sidecar --mtls=strict` with an app behind it: a call over mutual TLS
 * reaches the app through the sidecar's inbound listener, and its tap event names that front end
 * (`sidecar_inbound`) and the caller's SPIFFE ID; the `identity` filter takes it, another
 * identity does not.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import { PRINTED, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';

function openTap(admin: string, query: string): Promise<{ res: IncomingMessage; lines: () => Array<Record<string, any>>; close: () => void }> {
  return new Promise((resolve, reject) => {
    const req = request(`${admin}/tap${query}`, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('error', () => undefined);
      resolve({ res, lines: () => text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, any>), close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

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
});
