/**
 * h2load (nghttp2's load tool, Debian package nghttp2-client) as a real HTTP/2 client of a real
 * `mesh api --enable_http2 --handler=proxy` process on loopback, proxying to a node:http backend:
 * over h2c by prior knowledge (`http://`) and over h2 chosen by ALPN on the TLS listener
 * (`https://`, --enable_tls with an openssl-made certificate). Each run sends 400 POSTs with a JSON
 * body on 4 connections, 10 streams at once on each, and checks h2load's own summary (every
 * request done and succeeded, none failed or errored, every status 2xx, "Application protocol:
 * h2c" over cleartext and "h2" over TLS), what the backend received (400 POSTs with that body)
 * and the gateway's admin stats (4 more HTTP/2 connections, 400 more requests answered 2xx, no
 * HTTP/1.1 connection). Skips loudly without h2load; fails instead under
 * MESH_TEST_REQUIRE_ENGINES=1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';
import { binary, tempDir, waitFor } from '../helpers.js';
import { adminStats, makePair } from '../tls-fixtures.js';
// h2load's summary is read where the bench reads it (one parser for both).
import { parseH2load } from '../../bench/h2load.js';

const H2LOAD = binary('MESH_TEST_H2LOAD', 'h2load', "install Debian's nghttp2-client package (CI's .ci/run does)");
const SERVICE = 'go.mesh.srv.web';
const REQUESTS = 400;
const CONNECTIONS = 4;
const STREAMS = 10;
const BODY = '{"name":"h2load","id":1}';

/** Runs h2load to its end (killed after 60 s); its exit code and everything it printed. */
async function h2load(args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn(H2LOAD!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
  const [code] = await once(child, 'exit');
  clearTimeout(timer);
  return { code: code as number | null, out };
}

const STATS = ['downstream_cx_http2_total', 'downstream_cx_http1_total', 'downstream_rq_total', 'downstream_rq_2xx'] as const;

/** The gateway's counters of STATS (0 for one not counted yet). */
async function gatewayStats(admin: string): Promise<Record<(typeof STATS)[number], number>> {
  const all = await adminStats(admin, '^http\\.gateway\\.');
  return Object.fromEntries(STATS.map((s) => [s, all[`http.gateway.${s}`] ?? 0])) as Record<(typeof STATS)[number], number>;
}

describe('h2load against mesh api --enable_http2', { skip: H2LOAD ? false : 'h2load not installed (see the SKIP line)' }, () => {
  const dir = tempDir('mesh-h2load-');
  let app: PlainApp;
  let plain: GatewayProcess;
  let tls: GatewayProcess;
  const bodyFile = join(dir.path, 'body.json');

  before(async () => {
    app = await startPlainApp('web');
    const registry = createRegistry('local', dir.path);
    await registerPlain(registry, SERVICE, app.port);
    await registry.close();
    writeFileSync(bodyFile, BODY);
    const pair = makePair(dir.path, 'gateway');
    const flags = ['--enable_http2', '--handler=proxy', '--namespace=go.mesh.srv'];
    [plain, tls] = await Promise.all([
      startGatewayProcess(dir.path, flags),
      startGatewayProcess(dir.path, [...flags, '--enable_tls', `--tls_cert_file=${pair.certFile}`, `--tls_key_file=${pair.keyFile}`]),
    ]);
  });
  after(async () => {
    await Promise.all([plain?.stop(), tls?.stop()]);
    await app?.close();
    dir.cleanup();
  });

  /** One h2load run against `gw` and every check on it. */
  async function run(gw: GatewayProcess, protocol: 'h2c' | 'h2'): Promise<void> {
    const path = '/web/h2load?run=1';
    const before = await gatewayStats(gw.admin);
    const receivedBefore = app.received.length;
    const args = ['-n', String(REQUESTS), '-c', String(CONNECTIONS), '-m', String(STREAMS), '-d', bodyFile, '-H', 'content-type: application/json', `${gw.url}${path}`];
    const { code, out } = await h2load(args);
    assert.equal(code, 0, out);
    const s = parseH2load(out, '');
    assert.equal(s.protocol, protocol, out);
    assert.deepEqual(
      { done: s.done, succeeded: s.succeeded, failed: s.failed, errored: s.errored, timeout: s.timeout, non2xx: s.non2xx, status2xx: s.status2xx },
      { done: REQUESTS, succeeded: REQUESTS, failed: 0, errored: 0, timeout: 0, non2xx: 0, status2xx: REQUESTS },
      out,
    );
    // The backend got every request, as sent (over HTTP/1.1 from the gateway).
    const got = app.received.slice(receivedBefore);
    assert.equal(got.length, REQUESTS);
    for (const r of got) assert.deepEqual({ kind: r.kind, method: r.method, url: r.url, body: r.body }, { kind: 'http', method: 'POST', url: path, body: BODY });
    // The gateway counted them: HTTP/2 connections only, every request answered 2xx.
    // A stat may be counted just after the answer's last byte left: wait for it (then compare all).
    const want = { downstream_cx_http2_total: CONNECTIONS, downstream_cx_http1_total: 0, downstream_rq_total: REQUESTS, downstream_rq_2xx: REQUESTS };
    const moved = async () => {
      const after = await gatewayStats(gw.admin);
      return Object.fromEntries(STATS.map((k) => [k, after[k] - before[k]]));
    };
    await waitFor(async () => (await moved()).downstream_rq_2xx >= REQUESTS, 10000).catch(() => undefined);
    assert.deepEqual(await moved(), want);
  }

  it(`h2c by prior knowledge (http://): ${REQUESTS} POSTs on ${CONNECTIONS} connections × ${STREAMS} streams all succeed with 2xx over h2`, async () => {
    await run(plain, 'h2c');
  });

  it(`h2 by ALPN on the TLS listener (https://): ${REQUESTS} POSTs on ${CONNECTIONS} connections × ${STREAMS} streams all succeed with 2xx over h2`, async () => {
    await run(tls, 'h2');
  });
});
