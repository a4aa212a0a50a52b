/**
 * `mesh ca serve` and `mesh ca token` as real processes on loopback: the signing service issues a
 * certificate for a CSR with a good join token (checked by openssl against the root), and refuses,
 * with exact error JSON, no token, a changed token, a token of another CA, an expired token, a
 * service outside the token's globs, a CSR with a key that is not P-256 or that asks for another
 * name, its own identity. A process that has no CA directory, started with --ca_server, gets its
 * workload certificate from the service (openssl s_client sees the SPIFFE ID, chained to the
 * root) and renews it over mutual TLS once its token is gone; a wrong pinned root is refused.
 * `mesh ca revoke --token_id=ID` makes the running service refuse that token at once.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { caPaths } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { makeToken } from '../../src/tls/workload/token.js';
import { createCsr, generateKeyPair, privateKeyPem } from '../../src/tls/workload/x509.js';
import { ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const WORKLOAD = join(ROOT, 'test/fixtures/workload-process.ts');
const tmp = tempDir('mesh-ca-serve-');
const home = join(tmp.path, 'home');
const caDir = join(home, 'ca');
const processes: RunningProcess[] = [];
after(async () => {
  for (const p of processes) await p.stop();
  tmp.cleanup();
});

function openssl(args: string[], input?: string): string {
  return execFileSync('openssl', args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** A CSR made by openssl: `key` is an openssl -newkey argument; `san` an -addext subjectAltName. */
function opensslCsr(name: string, key = 'ec -pkeyopt ec_paramgen_curve:prime256v1', san?: string): string {
  const keyFile = join(tmp.path, `${name}.key`);
  const csrFile = join(tmp.path, `${name}.csr`);
  openssl(['req', '-new', '-newkey', ...key.split(' '), '-nodes', '-subj', `/CN=${name}`, ...(san ? ['-addext', `subjectAltName=${san}`] : []), '-keyout', keyFile, '-out', csrFile]);
  return readFileSync(csrFile, 'utf8');
}

interface Answer {
  status: number;
  text: string;
}

/** POST /v1/certificate over HTTPS, the server checked against the CA's root. */
function post(port: number, body: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/v1/certificate', method: 'POST', ca: readFileSync(caPaths(caDir).signerCert), headers: { 'content-type': 'application/json', ...headers }, agent: false },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const signBody = (service: string, csr: string) => JSON.stringify({ service, csr });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const caError = (code: number, status: string, detail: string) => JSON.stringify({ id: 'go.mesh.ca', code, detail, status });

let serve: RunningProcess;
let port: number;
let pin: string;
let token: string;
let tokenId: string;

before(async () => {
  const init = await runCli(['ca', 'init'], { MESH_HOME: home });
  assert.equal(init.code, 0, init.stderr);
  serve = startProcess(['ca', 'serve', '--address=127.0.0.1:0', '--mtls_cert_ttl=3s'], { MESH_HOME: home });
  processes.push(serve);
  const line = await serve.waitForOutput(/mesh ca serve listening on https:\/\/127\.0\.0\.1:\d+ .*\n/);
  port = Number(/:(\d+) /.exec(line)![1]);
  pin = /--ca_root_fingerprint=(sha256:[0-9a-f]{64})/.exec(line)![1]!;
  const made = await runCli(['ca', 'token', "--services=go.mesh.srv.*,mesh.ca", '--ttl=1h', '--output=json'], { MESH_HOME: home });
  assert.equal(made.code, 0, made.stderr);
  ({ token, id: tokenId } = JSON.parse(made.stdout) as { token: string; id: string });
});

describe('mesh ca serve (real processes, checked by openssl)', () => {
  it('prints where it listens, its identity and the root to pin (the fingerprint of mesh ca show)', async () => {
    const show = await runCli(['ca', 'show', '--output=json'], { MESH_HOME: home });
    const fingerprint = (JSON.parse(show.stdout) as { roots: Array<{ fingerprint: string }> }).roots[0]!.fingerprint;
    assert.equal(pin, `sha256:${fingerprint.replace(/:/g, '').toLowerCase()}`);
    assert.match(serve.output(), /as spiffe:\/\/mesh\.local\/svc\/mesh\.ca \(names: 127\.0\.0\.1, localhost;/);
  });

  it('issues a certificate for a good token: the SPIFFE ID of the service, chained to the root; answers the trust bundle; logs the token id, never the token', async () => {
    const a = await post(port, signBody('go.mesh.srv.a', opensslCsr('a')), bearer(token));
    assert.equal(a.status, 200, a.text);
    const body = JSON.parse(a.text) as { spiffe_id: string; serial: string; chain: string; roots: string[] };
    assert.equal(body.spiffe_id, 'spiffe://mesh.local/svc/go.mesh.srv.a');
    assert.deepEqual(body.roots, [readFileSync(caPaths(caDir).signerCert, 'utf8')]);
    writeFileSync(join(tmp.path, 'a.crt'), body.chain);
    assert.equal(openssl(['verify', '-CAfile', caPaths(caDir).signerCert, join(tmp.path, 'a.crt')]).trim(), `${join(tmp.path, 'a.crt')}: OK`);
    const text = openssl(['x509', '-noout', '-text', '-in', join(tmp.path, 'a.crt')]);
    assert.match(text, /URI:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.a\s*\n/);
    assert.match(text, /Public-Key: \(256 bit\)/);
    // The lifetime is bounded by the service's --mtls_cert_ttl (3s), whatever the request asked.
    const dates = openssl(['x509', '-noout', '-startdate', '-enddate', '-in', join(tmp.path, 'a.crt')]);
    const [start, end] = [...dates.matchAll(/=(.+)/g)].map((m) => Date.parse(m[1]!));
    assert.equal(end! - start!, 63_000);
    await serve.waitForOutput(new RegExp(`issued spiffe://mesh.local/svc/go.mesh.srv.a \\(serial ${body.serial}\\) with join token ${tokenId}`));
    assert.ok(!serve.output().includes(token), 'the token is never logged');
  });

  it('refuses no token, a changed token, a token of another CA, an expired token, with exact error JSON', async () => {
    const csr = opensslCsr('b');
    const noToken = await post(port, signBody('go.mesh.srv.b', csr));
    assert.equal(noToken.status, 401);
    assert.equal(noToken.text, caError(401, 'Unauthorized', 'no join token: send "Authorization: Bearer <token>" (mesh ca token), or renew with a certificate from this CA as the TLS client certificate'));

    const refused = caError(401, 'Unauthorized', 'join token refused: it was not made by this CA (mesh ca token), or it was changed');
    // Widened: the payload says "*" instead of "go.mesh.srv.*", the signature is the old one.
    const [header, payload, signature] = token.split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString()) as { svc: string[] };
    claims.svc = ['*'];
    const widened = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${signature}`;
    assert.deepEqual(await post(port, signBody('go.other', csr), bearer(widened)), { status: 401, text: refused });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.b', csr), bearer(`${token}x`)), { status: 401, text: refused });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.b', csr), bearer('not-a-token')), { status: 401, text: refused });

    const otherHome = join(tmp.path, 'other');
    assert.equal((await runCli(['ca', 'init'], { MESH_HOME: otherHome })).code, 0);
    const forged = (await runCli(['ca', 'token', '--services=*'], { MESH_HOME: otherHome })).stdout.trim();
    assert.deepEqual(await post(port, signBody('go.mesh.srv.b', csr), bearer(forged)), { status: 401, text: refused });

    const now = Date.now() - 3_600_000;
    const expired = await makeToken(caDir, { services: ['go.mesh.srv.*'], trustDomain: 'mesh.local', ttlMs: 60_000, now });
    const at = new Date((Math.floor(now / 1000) + 60) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    assert.deepEqual(await post(port, signBody('go.mesh.srv.b', csr), bearer(expired.token)), {
      status: 401,
      text: caError(401, 'Unauthorized', `join token expired at ${at}: make a new one with mesh ca token`),
    });

    const otherDomain = await makeToken(caDir, { services: ['*'], trustDomain: 'other.local', ttlMs: 60_000 });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.b', csr), bearer(otherDomain.token)), {
      status: 401,
      text: caError(401, 'Unauthorized', 'join token refused: it is for the trust domain "other.local", not mesh.local'),
    });
  });

  it('refuses a service outside the token\'s globs, its own identity, a CSR whose key is not P-256 or that asks for another name, a bad body', async () => {
    const csr = opensslCsr('c');
    assert.deepEqual(await post(port, signBody('go.other.c', csr), bearer(token)), {
      status: 403,
      text: caError(403, 'Forbidden', `join token ${tokenId} may be used for go.mesh.srv.*, mesh.ca only, not for go.other.c`),
    });
    assert.deepEqual(await post(port, signBody('mesh.ca', csr), bearer(token)), {
      status: 403,
      text: caError(403, 'Forbidden', 'mesh.ca is the signing service\'s own identity: it is never issued to a workload'),
    });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.c', opensslCsr('rsa', 'rsa:2048')), bearer(token)), {
      status: 400,
      text: caError(400, 'Bad Request', 'the certificate request\'s key is RSA: only ECDSA P-256 keys are signed'),
    });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.c', opensslCsr('p384', 'ec -pkeyopt ec_paramgen_curve:secp384r1')), bearer(token)), {
      status: 400,
      text: caError(400, 'Bad Request', 'the certificate request\'s key is EC P-384: only ECDSA P-256 keys are signed'),
    });
    const otherName = opensslCsr('san', undefined, 'URI:spiffe://mesh.local/svc/go.mesh.srv.payments,DNS:evil.example');
    assert.deepEqual(await post(port, signBody('go.mesh.srv.c', otherName), bearer(token)), {
      status: 400,
      text: caError(400, 'Bad Request', 'the certificate request asks for URI:spiffe://mesh.local/svc/go.mesh.srv.payments, DNS:evil.example: a certificate for go.mesh.srv.c names spiffe://mesh.local/svc/go.mesh.srv.c only (leave the names out of the request)'),
    });
    // Asking for its own SPIFFE ID is fine.
    const own = opensslCsr('own', undefined, 'URI:spiffe://mesh.local/svc/go.mesh.srv.c');
    assert.equal((await post(port, signBody('go.mesh.srv.c', own), bearer(token))).status, 200);
    assert.deepEqual(await post(port, 'nope', bearer(token)), { status: 400, text: caError(400, 'Bad Request', 'the body must be a JSON object: {"service": NAME, "csr": PEM}') });
    assert.deepEqual(await post(port, signBody('go.mesh.srv.c', 'x'.repeat(70_000)), bearer(token)), {
      status: 413,
      text: caError(413, 'Payload Too Large', 'request body larger than 65536 bytes'),
    });
  });
});

describe('mesh ca token and mesh ca serve: usage', () => {
  it('token needs --services (service globs) and a --ttl of at most 168h; --address is for serve; serve needs a CA', async () => {
    const noServices = await runCli(['ca', 'token'], { MESH_HOME: home });
    assert.deepEqual([noServices.code, noServices.stderr], [2, "mesh: mesh ca token needs --services: the service names (globs) the token may get certificates for, e.g. --services='go.mesh.srv.*'\n"]);
    const badGlob = await runCli(['ca', 'token', '--services=go mesh'], { MESH_HOME: home });
    assert.deepEqual([badGlob.code, badGlob.stderr], [2, 'mesh: --services: "go mesh" is not a service glob (letters, digits, ".", "-", "_", and the wildcards * and ?)\n']);
    const long = await runCli(['ca', 'token', '--services=a', '--ttl=169h'], { MESH_HOME: home });
    assert.deepEqual([long.code, long.stderr], [1, 'mesh: --ttl: a join token lives from 1s to 168h (7 days)\n']);
    const address = await runCli(['ca', 'show', '--address=127.0.0.1:1'], { MESH_HOME: home });
    assert.equal(address.code, 2);
    assert.match(address.stderr, /^mesh: --address and --ca_serve_names are for mesh ca serve /);
    // The same options from the environment (one environment for `ca serve` and the others) are ignored by the others.
    const fromEnv = await runCli(['ca', 'token', '--services=a'], { MESH_HOME: home, MESH_ADDRESS: '127.0.0.1:1', MESH_CA_SERVE_NAMES: 'mesh-ca' });
    assert.equal(fromEnv.code, 0, fromEnv.stderr);
    const noCa = await runCli(['ca', 'serve', `--ca_dir=${join(tmp.path, 'none')}`, '--address=127.0.0.1:0'], { MESH_HOME: home });
    assert.deepEqual([noCa.code, noCa.stderr], [1, `mesh: no mesh CA in ${join(tmp.path, 'none')}: run \`mesh ca init --ca_dir=${join(tmp.path, 'none')}\` first (or point --ca_dir at it)\n`]);
  });
});

describe('mesh ca revoke', () => {
  it('revokes a join token by its id: the running service refuses it at once (401); usage errors exit 2', async () => {
    const made = await runCli(['ca', 'token', '--services=go.mesh.srv.*', '--ttl=1h', '--output=json'], { MESH_HOME: home });
    const other = JSON.parse(made.stdout) as { token: string; id: string };
    const csr = opensslCsr('revoked');
    assert.equal((await post(port, signBody('go.mesh.srv.r', csr), bearer(other.token))).status, 200);
    const revoked = await runCli(['ca', 'revoke', `--token_id=${other.id}`], { MESH_HOME: home });
    assert.deepEqual([revoked.code, revoked.stdout], [0, `revoked join token ${other.id}: joins with it, and every certificate that joined with it\nmesh ca serve refuses its renewals from now on; certificates already issued stay valid until they expire (--mtls_cert_ttl at most)\n`]);
    const refused = await post(port, signBody('go.mesh.srv.r', csr), bearer(other.token));
    assert.equal(refused.status, 401);
    assert.match(refused.text, new RegExp(`"detail":"join token ${other.id} was revoked at \\S+Z: make a new one with mesh ca token"`));
    // The other token still joins.
    assert.equal((await post(port, signBody('go.mesh.srv.r', csr), bearer(token))).status, 200);

    const none = await runCli(['ca', 'revoke'], { MESH_HOME: home });
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^mesh: mesh ca revoke takes one of --serial, --service or --token_id /);
    const bad = await runCli(['ca', 'revoke', '--serial=xyz'], { MESH_HOME: home });
    assert.deepEqual([bad.code, bad.stderr], [2, 'mesh: --serial: "xyz" is not a certificate serial (hex, as mesh ca serve logs it)\n']);
    const elsewhere = await runCli(['ca', 'show', '--token_id=0123456789abcdef'], { MESH_HOME: home });
    assert.equal(elsewhere.code, 2);
    assert.match(elsewhere.stderr, /^mesh: --serial, --service and --token_id are for mesh ca revoke /);
  });
});

describe('--ca_server: workload certificates from mesh ca serve', () => {
  /** The fixture process, as a mesh command with --ca_server, no CA directory of its own. */
  function remoteWorkload(extra: string[]): RunningProcess {
    const p = startProcess(
      ['--import', 'tsx', WORKLOAD, 'api', '--registry=memory', '--log_level=warning', '--mtls=strict', `--ca_server=https://127.0.0.1:${port}`, `--ca_dir=${join(tmp.path, 'no-such-ca')}`, ...extra],
      { MESH_HOME: join(tmp.path, 'remote-home') },
      '',
    );
    processes.push(p);
    return p;
  }

  it('a process that cannot read a CA gets its certificate from the service (SPIFFE ID, chained to the root) and renews it over mTLS without the token', async () => {
    const tokenFile = join(tmp.path, 'token');
    writeFileSync(tokenFile, token + '\n', { mode: 0o600 });
    const workload = remoteWorkload([`--ca_token_file=${tokenFile}`, `--ca_root_fingerprint=${pin}`, '--mtls_cert_ttl=3s']);
    const line = await workload.waitForOutput(/workload listening on 127\.0\.0\.1:\d+ as \S+ serial [0-9a-f]+\n/);
    const [, wport, spiffeId, first] = /:(\d+) as (\S+) serial ([0-9a-f]+)/.exec(line)!;
    assert.equal(spiffeId, 'spiffe://mesh.local/svc/go.mesh.srv.remote');
    // The token is gone: renewals show the certificate instead.
    rmSync(tokenFile);

    // openssl s_client, with a client certificate of the same CA: the server's chain verifies against the root.
    const keys = await generateKeyPair();
    writeFileSync(join(tmp.path, 'client.crt'), await new LocalCaSigner(caDir, 'mesh.local').sign(await createCsr(keys, 'go.mesh.srv.client'), 'go.mesh.srv.client', 600_000));
    writeFileSync(join(tmp.path, 'client.key'), await privateKeyPem(keys.privateKey));
    const sClient = openssl(['s_client', '-connect', `127.0.0.1:${wport}`, '-CAfile', caPaths(caDir).signerCert, '-verify_return_error', '-cert', join(tmp.path, 'client.crt'), '-key', join(tmp.path, 'client.key')], 'Q\n');
    assert.match(sClient, /Verify return code: 0 \(ok\)/);
    const served = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(sClient)![0];
    assert.match(openssl(['x509', '-noout', '-ext', 'subjectAltName'], served), /URI:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.remote/);

    // Renewed at two thirds of 3s, over mutual TLS (the service logs a renewal, not a token).
    const renewed = await workload.waitForOutput(new RegExp(`workload certificate serial (?!${first})[0-9a-f]+\\n`), 15_000);
    const serial = /serial ([0-9a-f]+)/.exec(renewed)![1];
    await serve.waitForOutput(new RegExp(`issued spiffe://mesh.local/svc/go.mesh.srv.remote \\(serial ${serial}\\) as a renewal \\(TLS client certificate\\)`));
    assert.doesNotMatch(workload.output(), /renewal failed/);
  });

  /** Waits for the fixture to exit; resolves with its exit code and output. */
  async function exited(p: RunningProcess): Promise<{ code: number | null; output: string }> {
    if (p.child.exitCode === null) await new Promise((resolve) => p.child.once('exit', resolve));
    return { code: p.child.exitCode, output: p.output() };
  }

  it('refuses a signing service that does not chain to the pinned root (a wrong fingerprint, another CA\'s root file)', async () => {
    const wrong = await exited(remoteWorkload([`--ca_token=${token}`, `--ca_root_fingerprint=sha256:${'0'.repeat(64)}`]));
    assert.equal(wrong.code, 1);
    assert.equal(wrong.output, `workload failed: mesh ca serve https://127.0.0.1:${port} does not chain to the pinned root sha256:${'0'.repeat(64)}: refusing it (compare --ca_root_fingerprint with mesh ca show on the CA's machine)\n`);

    const otherRoot = caPaths(join(tmp.path, 'other', 'ca')).signerCert;
    const other = await exited(remoteWorkload([`--ca_token=${token}`, `--ca_root_file=${otherRoot}`]));
    assert.equal(other.code, 1);
    assert.match(other.output, new RegExp(`^workload failed: mesh ca serve https://127\\.0\\.0\\.1:${port} is not trusted: its certificate does not chain to the pinned root \\(\\w+\\)\\n$`));
  });

  it('refuses --ca_server without a pinned root or a token, and a --ca_token without --ca_server', async () => {
    const [noPin, noToken, noServer] = await Promise.all([
      exited(remoteWorkload([`--ca_token=${token}`])),
      exited(remoteWorkload([`--ca_root_fingerprint=${pin}`])),
      exited(startProcess(['--import', 'tsx', WORKLOAD, 'api', '--registry=memory', '--log_level=warning', '--mtls=strict', `--ca_token=${token}`], { MESH_HOME: join(tmp.path, 'remote-home') }, '')),
    ]);
    assert.equal(noPin.output, 'workload failed: --ca_server needs the CA\'s root pinned: --ca_root_fingerprint=sha256:… (mesh ca show on the CA\'s machine prints it) or --ca_root_file\n');
    assert.equal(noToken.output, 'workload failed: --ca_server needs a join token for the first certificate: --ca_token or --ca_token_file (mesh ca token on the CA\'s machine makes one)\n');
    assert.equal(noServer.output, 'workload failed: --ca_token is for certificates from mesh ca serve: give --ca_server too\n');
    assert.deepEqual([noPin.code, noToken.code, noServer.code], [1, 1, 1]);
  });
});
