/**
 * Certificates the mesh CA would never issue are not identities. Signed with the mesh CA's own
 * signing key (as someone holding a copy of it, or a CA bug, could), certificates with no SAN,
 * `SPIFFE://MESH.LOCAL/...`, a dot segment, a percent-encoded `/`, a trailing-dot or foreign
 * trust domain, or two URI SANs are presented to a sidecar's inbound listener with
 * `--mtls=strict`: each is answered 403 naming the reason, counted in `ssl.fail_verify_san`, and
 * the app never sees the request (neither as that identity nor as a plain caller). A certificate
 * of the CA's own making still passes.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { openWorkloadTls, type OpenedWorkloadTls } from '../../src/tls/workload/index.js';
import { PRINTED, startProcess, tempDir, type RunningProcess } from '../helpers.js';
import { mtlsPost, PYTHON, startWsgi } from '../fixtures/wsgi.js';

const missing = existsSync(PYTHON) ? undefined : `${PYTHON} (Debian's python3) is absent: the WSGI backend test is SKIPPED`;
if (missing) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${missing}`);
  console.warn(`SKIP: ${missing}`);
}
const INBOUND = /inbound listening on \S+:(\d+) for /;
const WIRE = { 'mesh-service': 'go.mesh.srv.wsgi', 'mesh-endpoint': 'Py.Echo' };

describe('a strict inbound listener takes only SPIFFE IDs the mesh CA would issue', { skip: missing }, () => {
  const dir = tempDir('mesh-spiffe-');
  const ca = tempDir('mesh-spiffe-ca-');
  const procs: RunningProcess[] = [];
  let app: ChildProcess;
  let inbound = 0;
  let admin = '';
  let good: OpenedWorkloadTls;
  let n = 0;

  /** A leaf signed by the mesh CA's signing key, with these SAN lines (none: no SAN at all). */
  function leaf(sans: string[]): { cert: string; key: string } {
    const base = join(dir.path, `leaf-${++n}`);
    const ext = ['basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature', 'extendedKeyUsage=serverAuth,clientAuth'];
    if (sans.length > 0) ext.push(`subjectAltName=${sans.join(',')}`);
    writeFileSync(`${base}.ext`, ext.join('\n'));
    const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir.path, stdio: ['ignore', 'ignore', 'pipe'] });
    run(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${base}.key`, '-out', `${base}.csr`, '-subj', '/CN=forged']);
    run(['x509', '-req', '-in', `${base}.csr`, '-CA', join(ca.path, 'signer.pem'), '-CAkey', join(ca.path, 'signer.key'), '-set_serial', String(1000 + n), '-days', '1', '-out', `${base}.pem`, '-extfile', `${base}.ext`]);
    return { cert: readFileSync(`${base}.pem`, 'utf8') + readFileSync(join(ca.path, 'signer.pem'), 'utf8'), key: readFileSync(`${base}.key`, 'utf8') };
  }

  before(async () => {
    const wsgi = await startWsgi();
    app = wsgi.child;
    const appPort = wsgi.port;
    const sc = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--mtls=strict', `--ca_dir=${ca.path}`, '--server_name=go.mesh.srv.wsgi', `--server_address=127.0.0.1:${appPort}`, `--registry_address=${dir.path}`, '--log_level=error']);
    procs.push(sc);
    admin = `http://127.0.0.1:${await sc.waitForPort(PRINTED.sidecarAdmin, 20_000)}`;
    inbound = await sc.waitForPort(INBOUND, 20_000);
    good = await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: ca.path, certTtlMs: 3_600_000, service: 'go.mesh.srv.good', log: pino({ level: 'silent' }) });
  });
  after(async () => {
    await good?.close();
    for (const p of procs) await p.stop('SIGKILL');
    app?.kill('SIGKILL');
    dir.cleanup();
    ca.cleanup();
  });

  const cases: Array<[string, string[], string]> = [
    ['no SAN', [], 'the certificate has no SPIFFE ID (URI SAN)'],
    ['upper-case scheme and trust domain', ['URI:SPIFFE://MESH.LOCAL/svc/mesh.api'], '\\"SPIFFE://MESH.LOCAL/svc/mesh.api\\" is not a SPIFFE ID (spiffe://, in lower case)'],
    ['a dot segment', ['URI:spiffe://mesh.local/svc/a/../mesh.api'], '\\"spiffe://mesh.local/svc/a/../mesh.api\\": the path must be segments of letters, digits, \\".\\", \\"-\\" and \\"_\\" (none empty, \\".\\" or \\"..\\")'],
    ['a percent-encoded /', ['URI:spiffe://mesh.local/svc/a%2Fmesh.api'], '\\"spiffe://mesh.local/svc/a%2Fmesh.api\\": the path must be segments of letters, digits, \\".\\", \\"-\\" and \\"_\\" (none empty, \\".\\" or \\"..\\")'],
    ['a trailing-dot trust domain', ['URI:spiffe://mesh.local./svc/mesh.api'], '\\"spiffe://mesh.local./svc/mesh.api\\" is of trust domain \\"mesh.local.\\", not mesh.local'],
    ['a foreign trust domain', ['URI:spiffe://partner.example/svc/mesh.api'], '\\"spiffe://partner.example/svc/mesh.api\\" is of trust domain \\"partner.example\\", not mesh.local'],
    ['two URI SANs', ['URI:spiffe://mesh.local/svc/go.mesh.srv.good', 'URI:spiffe://mesh.local/svc/mesh.api'], 'the certificate has 2 URI SANs (a SPIFFE certificate has one)'],
  ];

  for (const [what, sans, reason] of cases) {
    test(`${what}: 403, counted, the app never reached`, async () => {
      const before = await (await fetch(`${admin}/stats`)).text();
      const count = (text: string) => Number(/^http\.sidecar_inbound\.ssl\.fail_verify_san: (\d+)$/m.exec(text)?.[1] ?? -1);
      const { cert, key } = leaf(sans);
      const r = await mtlsPost(inbound, { cert, key, ca: good.contextOptions().ca }, WIRE);
      assert.equal(r.status, 403, r.text);
      assert.equal(r.text, `{"id":"go.mesh.srv.wsgi","code":403,"detail":"service go.mesh.srv.wsgi refuses this client certificate: ${reason}","status":"Forbidden"}`);
      assert.equal(count(await (await fetch(`${admin}/stats`)).text()), count(before) + 1);
    });
  }

  test('a certificate of the CA\'s own making passes, and the app reads its identity', async () => {
    const pems = good.contextOptions();
    const r = await mtlsPost(inbound, pems, WIRE);
    assert.equal(r.status, 200, r.text);
    assert.equal((JSON.parse(r.text) as { env: Record<string, string> }).env.HTTP_MESH_PEER_IDENTITY, 'spiffe://mesh.local/svc/go.mesh.srv.good');
  });
});
