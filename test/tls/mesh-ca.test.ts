/**
 * `mesh ca init|show|rotate|status` as real CLI processes, and what the mesh CA makes checked by
 * openssl: the root (a CA, keyCertSign, P-256), the modes of its files, the refusal to overwrite
 * a CA, bring-your-own root or intermediate (refused when not a CA, with a key that does not match,
 * or an intermediate without its root), the 30-day warning of `status`, a workload certificate's
 * SPIFFE ID and key usages (`openssl x509 -text`, `openssl verify`), and the error a process gets
 * when it cannot read --ca_dir.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { caPaths } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { createCsr, generateKeyPair } from '../../src/tls/workload/x509.js';
import { ROOT, runCli, tempDir } from '../helpers.js';

const tmp = tempDir('mesh-ca-');
after(() => tmp.cleanup());

function openssl(args: string[], input?: string): string {
  return execFileSync('openssl', args, { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] });
}

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

/** A workload certificate for `service` from the CA in `dir`, written to a file; returns its path. */
async function workloadCert(dir: string, service: string, file: string): Promise<string> {
  const keys = await generateKeyPair();
  const chain = await new LocalCaSigner(dir, 'mesh.local').sign(await createCsr(keys, service), service, 3_600_000);
  writeFileSync(file, chain);
  return file;
}

/** openssl-made CA material in `dir`: a root (CA:TRUE, `days`), an intermediate it signed, a leaf (CA:FALSE), a stray key. */
function byoMaterial(dir: string, days: number) {
  const f = (name: string) => join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-days', String(days), '-subj', '/CN=byo root', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-keyout', f('root.key'), '-out', f('root.crt')]);
  openssl(['req', '-new', ...ec, '-subj', '/CN=byo intermediate', '-keyout', f('int.key'), '-out', f('int.csr')]);
  writeFileSync(f('int.ext'), 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n');
  openssl(['x509', '-req', '-in', f('int.csr'), '-CA', f('root.crt'), '-CAkey', f('root.key'), '-CAcreateserial', '-days', String(days), '-extfile', f('int.ext'), '-out', f('int.crt')]);
  writeFileSync(f('int-chain.crt'), readFileSync(f('int.crt'), 'utf8') + readFileSync(f('root.crt'), 'utf8'));
  openssl(['req', '-x509', ...ec, '-days', '30', '-subj', '/CN=not a ca', '-addext', 'basicConstraints=critical,CA:FALSE', '-keyout', f('leaf.key'), '-out', f('leaf.crt')]);
  openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-out', f('stray.key')]);
  return f;
}

describe('mesh ca (real CLI processes, checked by openssl)', () => {
  const dir = join(tmp.path, 'home', 'ca');

  it('init makes a P-256 CA root in $MESH_HOME/ca (directory 0700, key 0600) and refuses to overwrite it', async () => {
    const first = await runCli(['ca', 'init'], { MESH_HOME: join(tmp.path, 'home') });
    assert.equal(first.stderr, '');
    assert.equal(first.code, 0);
    const lines = first.stdout.split('\n');
    assert.equal(lines[0], `made a mesh CA in ${dir}`);
    assert.equal(lines[1], 'serial\tfingerprint\tsubject\texpires\tdays_left\tsigns');
    assert.equal(mode(dir), '700');
    assert.equal(mode(caPaths(dir).signerKey), '600');
    const roots = readdirSync(caPaths(dir).roots);
    assert.equal(roots.length, 1);
    const rootFile = join(caPaths(dir).roots, roots[0]!);
    const text = openssl(['x509', '-in', rootFile, '-noout', '-text']);
    assert.match(text, /X509v3 Basic Constraints: critical\n\s+CA:TRUE/);
    assert.match(text, /X509v3 Key Usage: critical\n\s+Certificate Sign, CRL Sign/);
    assert.match(text, /ASN1 OID: prime256v1/);
    assert.match(text, /Subject: CN = mesh root CA \d{4}-\d\d-\d\d [0-9a-f]{8}, O = mesh.local/);
    // The fingerprint and serial are openssl's.
    const fingerprint = openssl(['x509', '-in', rootFile, '-noout', '-fingerprint', '-sha256']).trim().split('=')[1];
    assert.ok(lines[2]!.startsWith(`${roots[0]!.replace('.pem', '')}\t${fingerprint}\t`), lines[2]);
    const before = readFileSync(caPaths(dir).signerKey, 'utf8');
    const again = await runCli(['ca', 'init', `--ca_dir=${dir}`]);
    assert.equal(again.code, 1);
    assert.equal(again.stdout, '');
    assert.equal(again.stderr, `mesh: a mesh CA exists in ${dir} already: refusing to overwrite it (\`mesh ca rotate\` makes a new root; \`mesh ca show\` lists the roots)\n`);
    assert.equal(readFileSync(caPaths(dir).signerKey, 'utf8'), before);
  });

  it('a workload certificate: URI SAN spiffe://<trust_domain>/svc/<service>, serverAuth and clientAuth, not a CA, verified by openssl against the root', async () => {
    const leaf = await workloadCert(dir, 'go.mesh.srv.payments', join(tmp.path, 'payments.crt'));
    const text = openssl(['x509', '-in', leaf, '-noout', '-text']);
    assert.match(text, /X509v3 Subject Alternative Name: critical\n\s+URI:spiffe:\/\/mesh.local\/svc\/go.mesh.srv.payments\n/);
    assert.match(text, /X509v3 Extended Key Usage: \n\s+TLS Web Server Authentication, TLS Web Client Authentication\n/);
    assert.match(text, /X509v3 Basic Constraints: critical\n\s+CA:FALSE/);
    assert.match(text, /X509v3 Key Usage: critical\n\s+Digital Signature\n/);
    const root = join(caPaths(dir).roots, readdirSync(caPaths(dir).roots)[0]!);
    assert.equal(openssl(['verify', '-CAfile', root, '-purpose', 'sslserver', leaf]).trim(), `${leaf}: OK`);
    assert.equal(openssl(['verify', '-CAfile', root, '-purpose', 'sslclient', leaf]).trim(), `${leaf}: OK`);
  });

  it('show, rotate, status, rotate --finish: the old root stays trusted until the rotation is finished', async () => {
    const show = await runCli(['ca', 'show', `--ca_dir=${dir}`, '--output=json']);
    assert.equal(show.code, 0);
    const shown = JSON.parse(show.stdout) as { caDir: string; roots: Array<{ serial: string; signs: boolean; daysLeft: number }> };
    assert.equal(shown.caDir, dir);
    assert.equal(shown.roots.length, 1);
    assert.equal(shown.roots[0]!.signs, true);
    assert.ok(shown.roots[0]!.daysLeft >= 3649);
    const old = shown.roots[0]!.serial;
    const oldLeaf = await workloadCert(dir, 'go.mesh.srv.old', join(tmp.path, 'old.crt'));
    const rotate = await runCli(['ca', 'rotate', `--ca_dir=${dir}`]);
    assert.equal(rotate.code, 0, rotate.stderr);
    assert.match(rotate.stdout, /^new root [0-9a-f]{32} \([0-9A-F:]{95}\) signs from now on; 2 roots trusted\n/);
    const status = await runCli(['ca', 'status', `--ca_dir=${dir}`, '--output=json']);
    assert.equal(status.code, 0, status.stdout);
    const st = JSON.parse(status.stdout) as { ok: boolean; roots: Array<{ serial: string; signs: boolean }> };
    assert.equal(st.ok, true);
    assert.deepEqual(st.roots.map((r) => [r.serial === old, r.signs]).sort(), [[false, true], [true, false]]);
    // Both roots are the bundle: the old leaf and a new one verify against it.
    const bundle = join(tmp.path, 'bundle.pem');
    writeFileSync(bundle, readdirSync(caPaths(dir).roots).map((n) => readFileSync(join(caPaths(dir).roots, n), 'utf8')).join(''));
    const newLeaf = await workloadCert(dir, 'go.mesh.srv.new', join(tmp.path, 'new.crt'));
    assert.equal(openssl(['verify', '-CAfile', bundle, oldLeaf, newLeaf]).trim(), `${oldLeaf}: OK\n${newLeaf}: OK`);
    const finish = await runCli(['ca', 'rotate', '--finish', `--ca_dir=${dir}`]);
    assert.equal(finish.code, 0, finish.stderr);
    assert.match(finish.stdout, new RegExp(`^removed root ${old} \\([0-9A-F:]{95}\\)\\n$`));
    const roots = readdirSync(caPaths(dir).roots);
    assert.equal(roots.length, 1);
    const only = join(caPaths(dir).roots, roots[0]!);
    assert.equal(openssl(['verify', '-CAfile', only, newLeaf]).trim(), `${newLeaf}: OK`);
    assert.throws(() => openssl(['verify', '-CAfile', only, oldLeaf]));
    const nothing = await runCli(['ca', 'rotate', '--finish', `--ca_dir=${dir}`]);
    assert.equal(nothing.stdout, 'nothing to remove: only the signing root is trusted\n');
  });

  it('usage errors exit 2: an unknown word, --finish without rotate, a key file without its certificate, a bad trust domain', async () => {
    const bad = await runCli(['ca', 'shwo', `--ca_dir=${dir}`]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^mesh: unknown command "ca shwo"/);
    const finish = await runCli(['ca', 'show', '--finish', `--ca_dir=${dir}`]);
    assert.equal(finish.code, 2);
    assert.match(finish.stderr, /--finish is for mesh ca rotate/);
    const key = await runCli(['ca', 'init', '--ca_key_file=/x.key', `--ca_dir=${join(tmp.path, 'nokey')}`]);
    assert.equal(key.code, 2);
    assert.match(key.stderr, /--ca_key_file needs --ca_cert_file/);
    const domain = await runCli(['ca', 'init', '--trust_domain=Mesh Local', `--ca_dir=${join(tmp.path, 'domain')}`]);
    assert.equal(domain.code, 2);
    assert.equal(domain.stderr, 'mesh: --trust_domain "Mesh Local": must be lower-case letters, digits, ".", "-" and "_" (a SPIFFE trust domain, e.g. mesh.local)\n');
    const none = await runCli(['ca', 'show', `--ca_dir=${join(tmp.path, 'none')}`]);
    assert.equal(none.code, 1);
    assert.equal(none.stderr, `mesh: no mesh CA in ${join(tmp.path, 'none')}: run \`mesh ca init\` (or give --ca_dir)\n`);
  });

  it('bring your own: refuses a certificate that is not a CA, a key that does not match, an intermediate without its root; takes an intermediate with its root', async () => {
    const f = byoMaterial(tmp.path, 20);
    const byo = join(tmp.path, 'byo');
    const notCa = await runCli(['ca', 'init', `--ca_dir=${byo}`, `--ca_cert_file=${f('leaf.crt')}`, `--ca_key_file=${f('leaf.key')}`]);
    assert.equal(notCa.code, 1);
    assert.equal(notCa.stderr, `mesh: ${f('leaf.crt')} is not a CA certificate (its basicConstraints do not say CA:TRUE): the mesh CA signs certificates, so it needs a root or intermediate CA\n`);
    const mismatch = await runCli(['ca', 'init', `--ca_dir=${byo}`, `--ca_cert_file=${f('root.crt')}`, `--ca_key_file=${f('stray.key')}`]);
    assert.equal(mismatch.code, 1);
    assert.equal(mismatch.stderr, `mesh: ${f('stray.key')} does not match the CA certificate in ${f('root.crt')} (mismatched pair)\n`);
    const noRoot = await runCli(['ca', 'init', `--ca_dir=${byo}`, `--ca_cert_file=${f('int.crt')}`, `--ca_key_file=${f('int.key')}`]);
    assert.equal(noRoot.code, 1);
    assert.equal(noRoot.stderr, `mesh: ${f('int.crt')} holds an intermediate CA without its root: append its issuers up to the self-signed root, which every process will trust\n`);
    assert.throws(() => statSync(byo), /ENOENT/);
    const ok = await runCli(['ca', 'init', `--ca_dir=${byo}`, `--ca_cert_file=${f('int-chain.crt')}`, `--ca_key_file=${f('int.key')}`]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(mode(caPaths(byo).signerKey), '600');
    // Workload certificates come from the intermediate and chain to the operator's root.
    const leaf = await workloadCert(byo, 'go.mesh.srv.byo', join(tmp.path, 'byo-leaf.crt'));
    assert.equal(openssl(['verify', '-CAfile', f('root.crt'), '-untrusted', f('int.crt'), leaf]).trim(), `${leaf}: OK`);
    assert.equal(readFileSync(leaf, 'utf8').split('-----BEGIN CERTIFICATE-----').length - 1, 2, 'the leaf and the intermediate');
    // The operator's root expires in 20 days: status warns and exits 1.
    const status = await runCli(['ca', 'status', `--ca_dir=${byo}`]);
    assert.equal(status.code, 1);
    assert.match(status.stdout, /\nwarning: root [0-9a-f]+ expires in 19 days \(\S+\), within 30: rotate it \(mesh ca rotate\)\n/);
    assert.match(status.stdout, /\nwarning: signing CA [0-9a-f]+ expires in 19 days/);
  });

  it('a process that cannot read --ca_dir is told so, naming --ca_dir', { skip: process.getuid?.() !== 0 && 'needs root, to run the process as another user' }, () => {
    chmodSync(tmp.path, 0o755);
    chmodSync(join(tmp.path, 'home'), 0o755);
    const script = `import { openWorkloadTls } from ${JSON.stringify(join(ROOT, 'dist/src/tls/workload/index.js'))};
const log = { info() {}, warn() {}, error() {} };
try { await openWorkloadTls({ mode: 'strict', trustDomain: 'mesh.local', caDir: ${JSON.stringify(dir)}, certTtlMs: 60000, service: 'x', log }); console.log('opened'); }
catch (err) { console.log(err.message); }`;
    const run = () => spawnSync(process.execPath, ['--input-type=module', '-e', script], { uid: 65534, gid: 65534, encoding: 'utf8', cwd: '/' }).stdout;
    assert.equal(run(), `cannot read the mesh CA directory ${dir} (EACCES): a process that signs its own workload certificate needs read access to --ca_dir; or give it --mtls_cert_file, --mtls_key_file and --mtls_ca_file\n`);
    chmodSync(dir, 0o755);
    chmodSync(caPaths(dir).roots, 0o755);
    assert.equal(run(), `cannot read the mesh CA's key ${caPaths(dir).signerKey} (EACCES): a process that signs its own workload certificate needs read access to --ca_dir (${dir}); or give it --mtls_cert_file, --mtls_key_file and --mtls_ca_file\n`);
  });
});
