/**
 * `mesh ca serve` under a flood of silent connections (TCP connected, no ClientHello), in process
 * on loopback: one client address (127.0.0.2) opens 1,100 of them; the service keeps at most 32
 * from that address (the rest are closed at once), so a join and `GET /v1/roots` from another
 * address (127.0.0.1) still succeed during the flood; and the silent ones are closed at the
 * handshake timeout (shortened here so the test is quick; 10 s by default).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { request } from 'node:https';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { CaServer, DEFAULT_HANDSHAKE_TIMEOUT_MS, MAX_CONNECTIONS_PER_CLIENT } from '../../src/tls/workload/ca-server.js';
import { caPaths, initCa } from '../../src/tls/workload/ca.js';
import { makeToken } from '../../src/tls/workload/token.js';
import { createCsr, generateKeyPair } from '../../src/tls/workload/x509.js';
import { tempDir, waitFor } from '../helpers.js';

const log = pino({ level: 'silent' });
const cleanups: Array<() => unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

function call(port: number, caDir: string, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, ca: readFileSync(caPaths(caDir).signerCert), headers: { 'content-type': 'application/json', ...headers }, agent: false }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('mesh ca serve: a flood of silent connections from one address', () => {
  it('keeps 32 of them, closes the rest at once, serves a join and /v1/roots from another address meanwhile, and closes the silent ones at the handshake timeout', async () => {
    assert.equal(DEFAULT_HANDSHAKE_TIMEOUT_MS, 10_000);
    assert.equal(MAX_CONNECTIONS_PER_CLIENT, 32);
    const tmp = tempDir('ca-serve-flood-');
    cleanups.push(tmp.cleanup);
    const caDir = join(tmp.path, 'ca');
    await initCa(caDir, { trustDomain: 'mesh.local' });
    const server = await CaServer.start({ caDir, trustDomain: 'mesh.local', host: '127.0.0.1', port: 0, names: ['127.0.0.1'], certTtlMs: 3_600_000, log, handshakeTimeoutMs: 5000 });
    cleanups.push(() => server.close());

    const sockets: Socket[] = [];
    let closed = 0;
    // Connected, or closed before that (a SYN the kernel's backlog dropped is retried first).
    let settled = 0;
    // In batches of 100, each settled before the next: a burst of 1,100 SYNs overflows the listen
    // backlog, and the kernel's retries of the dropped ones take up to half a minute.
    for (let i = 0; i < 1100; i++) {
      if (i > 0 && i % 100 === 0) await waitFor(() => settled === i, 20_000);
      const s = connect({ host: '127.0.0.1', port: server.port, localAddress: '127.0.0.2' });
      let done = false;
      const settle = () => {
        if (!done) settled++;
        done = true;
      };
      s.on('connect', settle);
      s.on('error', () => {});
      s.on('close', () => {
        settle();
        closed++;
      });
      sockets.push(s);
    }
    cleanups.push(() => sockets.forEach((s) => s.destroy()));
    // Every one over the per-address cap is closed by the service at once: at most 32 are held.
    await waitFor(() => settled === 1100 && closed >= 1100 - MAX_CONNECTIONS_PER_CLIENT, 20_000);
    const held = 1100 - closed;
    assert.ok(held > 0 && held <= MAX_CONNECTIONS_PER_CLIENT, `${held} held`);

    // Meanwhile, from another address: the trust bundle and a join.
    const roots = await call(server.port, caDir, 'GET', '/v1/roots');
    assert.equal(roots.status, 200, roots.text);
    const token = (await makeToken(caDir, { services: ['go.mesh.srv.*'], trustDomain: 'mesh.local', ttlMs: 600_000 })).token;
    const csr = await createCsr(await generateKeyPair(), 'go.mesh.srv.a');
    const join_ = await call(server.port, caDir, 'POST', '/v1/certificate', JSON.stringify({ service: 'go.mesh.srv.a', csr }), { authorization: `Bearer ${token}` });
    assert.equal(join_.status, 200, join_.text);

    // The silent ones never finish a handshake: closed at the handshake timeout.
    await waitFor(() => closed === 1100, 20_000);
  });
});
