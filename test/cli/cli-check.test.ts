/**
 * `mesh check` as a real CLI process against a temporary MESH_HOME: a healthy mesh (a framework
 * service answering Debug.Health) passes, and each planted fault is reported with its exact line:
 * a registry directory others can read, an unreachable etcd, a service whose only node does not
 * answer, a CA root and a --tls_cert_file expiring within 30 days, a Node.js past its end of life,
 * a check that cannot get its own workload certificate (not reported as the nodes' fault), and a
 * plain node next to one that serves mutual TLS.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, runCli, startProcess, tempDir, ROOT } from '../helpers.js';
import { findBinary, OwnEtcd, OwnNats } from '../fixtures/engines-common.js';
import { ALL_WELL } from '../../src/cli/check/finding.js';
import { NODE_EOL, nodeAdvice } from '../../src/cli/check/node-version.js';

const tmp = tempDir('mesh-check-');
after(() => tmp.cleanup());
const WHO = join(ROOT, 'test/fixtures/who-service.ts');

/** The line this Node.js gets from the node_version check (none on a version still supported). */
function nodeLine(): string | undefined {
  const major = Number(process.versions.node.split('.')[0]);
  const eol = NODE_EOL[major];
  if (eol === undefined || Date.parse(`${eol}T00:00:00Z`) > Date.now()) return undefined;
  return `warning: node_version: Node.js ${process.version} reached its end of life on ${eol} (mesh still supports it): ${nodeAdvice(Date.now())}`;
}
const NODE_LINE = nodeLine();
const withNode = (lines: string[]) => [...lines.filter((l) => l.startsWith('error: ')), ...(NODE_LINE ? [NODE_LINE] : []), ...lines.filter((l) => l.startsWith('warning: '))];
const text = (lines: string[]) => (lines.length ? lines.join('\n') + '\n' : ALL_WELL + '\n');

function openssl(args: string[]): string {
  return execFileSync('openssl', args, { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

/** A self-signed CA root (and its key) valid for `days`. */
function opensslCa(dir: string, name: string, days: number, ca = true): { cert: string; key: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const bc = ca ? 'basicConstraints=critical,CA:TRUE' : 'basicConstraints=critical,CA:FALSE';
  openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(days), '-subj', `/CN=${name}`, '-addext', bc, '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature', '-keyout', key, '-out', cert]);
  return { cert, key };
}

const serialOf = (cert: string) => openssl(['x509', '-in', cert, '-noout', '-serial']).trim().replace(/^serial=/, '').toLowerCase().replace(/^0+/, '');

describe('mesh check (real CLI processes)', () => {
  it('a healthy mesh: a service whose node answers; exit 0, only the Node.js line if this Node.js is past its end of life', async () => {
    const home = join(tmp.path, 'healthy');
    const who = startProcess(['--import', 'tsx', WHO, `--mesh_home=${home}`, '--register_ttl=30s', '--log_level=warning'], {}, '');
    try {
      await who.waitForOutput(/listening on/);
      const r = await runCli(['check'], { MESH_HOME: home });
      assert.equal(r.stdout, text(withNode([])), r.stderr);
      assert.equal(r.code, 0);
      assert.equal(r.stderr, '');
      const json = await runCli(['check', '--output=json'], { MESH_HOME: home });
      assert.equal(json.code, 0);
      const findings = JSON.parse(json.stdout) as unknown[];
      assert.deepEqual(findings, NODE_LINE ? [{ level: 'warning', check: 'node_version', message: NODE_LINE.replace('warning: node_version: ', '') }] : []);
    } finally {
      await who.stop('SIGKILL');
    }
  });

  it('Node.js 20 is past its end of life: a warning, not an error (exit 0)', { skip: process.versions.node.startsWith('20.') ? false : 'runs on Node.js 20' }, async () => {
    const r = await runCli(['check', '--output=json'], { MESH_HOME: join(tmp.path, 'node') });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), [{ level: 'warning', check: 'node_version', message: `Node.js ${process.version} reached its end of life on 2026-04-30 (mesh still supports it): use Node.js 24 (recommended) or 22` }]);
  });

  it('a registry directory other users can read: a warning', async () => {
    const home = join(tmp.path, 'open');
    assert.equal((await runCli(['list', 'services'], { MESH_HOME: home })).code, 0);
    chmodSync(home, 0o755);
    const r = await runCli(['check'], { MESH_HOME: home });
    assert.equal(r.stdout, text(withNode([`warning: files: ${home} is 0755, open to other users: chmod 700 ${home}`])), r.stderr);
    assert.equal(r.code, 0);
  });

  it("the mesh CA's signing key readable by others: an error, exit 1; its directory open: a warning", async () => {
    const home = join(tmp.path, 'cakey');
    const init = await runCli(['ca', 'init'], { MESH_HOME: home });
    assert.equal(init.code, 0, init.stderr);
    const ca = join(home, 'ca');
    chmodSync(ca, 0o755);
    chmodSync(join(ca, 'signer.key'), 0o640);
    const r = await runCli(['check'], { MESH_HOME: home });
    assert.equal(
      r.stdout,
      text(
        withNode([
          `error: files: ${ca}/signer.key is 0640: other users can read the mesh CA's signing key and issue any identity: chmod 600 ${ca}/signer.key`,
          `warning: files: ${ca} is 0755, open to other users: chmod 700 ${ca}`,
        ]),
      ),
      r.stderr,
    );
    assert.equal(r.code, 1);
  });

  it('an unreachable etcd: an error, exit 1', async () => {
    const port = await freePort();
    const r = await runCli(['check', '--registry=etcd', `--registry_address=127.0.0.1:${port}`, '--output=json'], { MESH_HOME: join(tmp.path, 'etcd') });
    assert.equal(r.code, 1, r.stderr);
    const findings = JSON.parse(r.stdout) as Array<{ level: string; check: string; message: string }>;
    assert.deepEqual(findings[0]!.level, 'error');
    assert.deepEqual(findings[0]!.check, 'registry');
    assert.match(findings[0]!.message, new RegExp(`^cannot be read: registry etcd \\(http://127\\.0\\.0\\.1:${port}\\): list services: .*ECONNREFUSED 127\\.0\\.0\\.1:${port}.*\\(is etcd running there\\? an etcd that serves TLS needs an https:// address\\)$`));
    assert.equal(findings.length, NODE_LINE ? 2 : 1);
  });

  it('a service whose only node does not answer: a warning for the node, an error for the service, exit 1', async () => {
    const home = join(tmp.path, 'gone');
    const port = await freePort();
    const reg = await runCli(['register', 'service', `{"Name":"go.mesh.srv.gone","Nodes":[{"Id":"gone-1","Address":"127.0.0.1","Port":${port}}]}`], { MESH_HOME: home });
    assert.equal(reg.code, 0, reg.stderr);
    const r = await runCli(['check'], { MESH_HOME: home });
    assert.equal(
      r.stdout,
      text(
        withNode([
          'error: services: go.mesh.srv.gone has no healthy node (1 registered)',
          `warning: nodes: go.mesh.srv.gone node gone-1 at 127.0.0.1:${port} does not answer Debug.Health: call go.mesh.srv.gone on 127.0.0.1:${port}: connection failed: econnrefused: connect ECONNREFUSED 127.0.0.1:${port}`,
        ]),
      ),
      r.stderr,
    );
    assert.equal(r.code, 1);
  });

  it('a plain node in a mesh whose other node serves mutual TLS: one warning naming the service and the node, exit 0', async () => {
    const home = join(tmp.path, 'mixed');
    const strict = startProcess(['--import', 'tsx', WHO, `--mesh_home=${home}`, '--register_ttl=30s', '--log_level=warning', '--mtls=strict'], {}, '');
    let plain: ReturnType<typeof startProcess> | undefined;
    try {
      await strict.waitForOutput(/listening on/);
      plain = startProcess(['--import', 'tsx', WHO, `--mesh_home=${home}`, '--register_ttl=30s', '--log_level=warning', '--mtls=off'], {}, '');
      const [, port, id] = /listening on 127\.0\.0\.1:(\d+) \(node (\S+)\)/.exec(await plain.waitForOutput(/listening on 127\.0\.0\.1:\d+ \(node \S+\)/))!;
      const r = await runCli(['check'], { MESH_HOME: home });
      assert.equal(
        r.stdout,
        text(withNode([`warning: mtls: go.mesh.srv.who node ${id} at 127.0.0.1:${port} does not serve mutual TLS, while 1 node of the mesh does: callers with --mtls=strict (as mesh dev's gateway) do not call it (502); start it with --mtls=strict (mesh run: --mtls=strict)`])),
        r.stderr,
      );
      assert.equal(r.code, 0);
    } finally {
      await plain?.stop('SIGKILL');
      await strict.stop('SIGKILL');
    }
  });

  it('a check that cannot get its own workload certificate (mesh ca serve unreachable) says so, not "no healthy node" for a strict service that answers', async () => {
    const home = join(tmp.path, 'ca-cut');
    const who = startProcess(['--import', 'tsx', WHO, `--mesh_home=${home}`, '--register_ttl=30s', '--log_level=warning', '--mtls=strict'], {}, '');
    try {
      await who.waitForOutput(/listening on/);
      const port = await freePort();
      const cut = [`--ca_server=https://127.0.0.1:${port}`, '--ca_token=t', `--ca_root_fingerprint=sha256:${'0'.repeat(64)}`];
      const r = await runCli(['check', ...cut, '--output=json'], { MESH_HOME: home });
      assert.equal(r.code, 1, r.stderr);
      const findings = JSON.parse(r.stdout) as Array<{ level: string; check: string; message: string }>;
      assert.ok(!findings.some((f) => /no healthy node|does not answer/.test(f.message)), r.stdout);
      const mtls = findings.filter((f) => f.check === 'mtls');
      assert.equal(mtls.length, 1, r.stdout);
      assert.equal(mtls[0]!.level, 'error');
      assert.match(mtls[0]!.message, new RegExp(`^cannot check the nodes of go\\.mesh\\.srv\\.who: this check has no workload certificate of its own \\(mesh\\.cli\\) to call them over mutual TLS: .*127\\.0\\.0\\.1:${port}.*ECONNREFUSED`));
    } finally {
      await who.stop('SIGKILL');
    }
  });

  it('a mesh CA root expiring in 20 days and a --tls_cert_file expiring in 10: warnings', async () => {
    const home = join(tmp.path, 'ca');
    const caDir = join(tmp.path, 'ca-dir');
    const root = opensslCa(tmp.path, 'root20', 20);
    const init = await runCli(['ca', 'init', `--ca_dir=${caDir}`, `--ca_cert_file=${root.cert}`, `--ca_key_file=${root.key}`]);
    assert.equal(init.code, 0, init.stderr);
    const leaf = opensslCa(tmp.path, 'leaf10', 10, false);
    const notAfter = (cert: string) => new Date(openssl(['x509', '-in', cert, '-noout', '-enddate']).trim().replace(/^notAfter=/, '')).toISOString().replace(/\.\d{3}Z$/, 'Z');
    const r = await runCli(['check', `--ca_dir=${caDir}`, `--tls_cert_file=${leaf.cert}`], { MESH_HOME: home });
    assert.equal(
      // A serial is compared without its leading zeros (openssl and node differ on them; a random serial has one in 16 runs).
      r.stdout.replace(/ root 0+([0-9a-f])/, ' root $1'),
      text(
        withNode([
          `warning: certificates: mesh CA ${caDir}: root ${serialOf(root.cert)} expires in 19 days (${notAfter(root.cert)}), within 30: rotate it (mesh ca rotate)`,
          `warning: certificates: --tls_cert_file ${leaf.cert} expires in 9 days (${notAfter(leaf.cert)}), within 30: renew it`,
        ]),
      ),
      r.stderr,
    );
    assert.equal(r.code, 0);
  });

  const etcdBin = findBinary('etcd');
  const natsBin = findBinary('nats-server');
  it('etcd and NATS that answer: nothing found; a NATS that does not: an error, exit 1', { skip: (!etcdBin || !natsBin) && 'no etcd or nats-server binary' }, async () => {
    const etcd = await OwnEtcd.onLoopback(etcdBin!);
    const nats = await OwnNats.onLoopback(natsBin!);
    try {
      await Promise.all([etcd.start(join(tmp.path, 'etcd-data')), nats.start()]);
      const flags = ['--registry=etcd', `--registry_address=${etcd.address}`, '--broker=nats'];
      const env = { MESH_HOME: join(tmp.path, 'engines') };
      const ok = await runCli(['check', ...flags, `--broker_address=${nats.address}`], env);
      assert.equal(ok.stdout, text(withNode([])), ok.stderr);
      assert.equal(ok.code, 0);
      const port = await freePort();
      const down = await runCli(['check', ...flags, `--broker_address=127.0.0.1:${port}`], env);
      assert.equal(down.stdout, text(withNode([`error: broker: nats broker: cannot connect to 127.0.0.1:${port}: CONNECTION_REFUSED`])), down.stderr);
      assert.equal(down.code, 1);
    } finally {
      await Promise.all([etcd.kill(), nats.kill()]);
    }
  });

  it('--routes: a route whose backendRefs do not resolve is an error naming the rules and backends, a rule without backendRefs a warning; a file a front end would refuse an error', async () => {
    const home = join(tmp.path, 'routes');
    const file = join(tmp.path, 'routes.yaml');
    writeFileSync(
      file,
      `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  rules:
    - name: bucket
      backendRefs: [{group: storage.example, kind: Bucket, name: photos}]
    - name: empty
      matches: [{path: {value: /empty}}]
    - name: nowhere
      matches: [{path: {value: /nowhere}}]
      backendRefs: [{name: go.mesh.srv.nowhere}]
`,
    );
    const r = await runCli(['check', `--routes=${file}`], { MESH_HOME: home });
    assert.equal(
      r.stdout,
      text(
        withNode([
          `error: routes: ${file} line 1: HTTPRoute web: ResolvedRefs False (InvalidKind): rules[0] (bucket) backendRefs[0]: backend "photos" is a "Bucket" of group "storage.example", not a mesh service; rules[2] (nowhere) backendRefs[0]: service go.mesh.srv.nowhere is not in the registry`,
          `warning: routes: ${file} line 8: HTTPRoute web rules[1] (empty): no backendRefs (and no RequestRedirect): its requests answer 500`,
        ]),
      ),
      r.stderr,
    );
    assert.equal(r.code, 1);
    writeFileSync(file, 'kind: HTTPRoute\n');
    const bad = await runCli(['check', '--output=json', `--routes=${file}`], { MESH_HOME: home });
    assert.equal(bad.code, 1);
    assert.deepEqual(
      (JSON.parse(bad.stdout) as Array<{ check: string }>).filter((f) => f.check === 'routes'),
      [{ level: 'error', check: 'routes', message: `${file} line 1: apiVersion is required (gateway.networking.k8s.io/v1)` }],
    );
    // With Gateway documents: a route that attaches to no listener is an error saying why.
    writeFileSync(
      file,
      `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  listeners: [{name: www, port: 80, protocol: HTTP, hostname: www.example.com}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop}
spec:
  parentRefs: [{name: edge, sectionName: shop}]
  rules: [{backendRefs: [{name: go.mesh.srv.shop}]}]
`,
    );
    const gw = await runCli(['check', '--output=json', `--routes=${file}`], { MESH_HOME: home });
    assert.equal(gw.code, 1);
    assert.deepEqual(
      (JSON.parse(gw.stdout) as Array<{ check: string }>).filter((f) => f.check === 'routes'),
      [
        { level: 'error', check: 'routes', message: `${file} line 7: HTTPRoute shop: Accepted False (NoMatchingParent): parentRefs[0] (Gateway edge sectionName shop): Gateway edge has no such listener` },
        { level: 'error', check: 'routes', message: `${file} line 7: HTTPRoute shop: ResolvedRefs False (BackendNotFound): rules[0] (shop-0) backendRefs[0]: service go.mesh.srv.shop is not in the registry` },
      ],
    );
  });

  it('takes no argument, and no flag it does not use', async () => {
    const extra = await runCli(['check', 'now']);
    assert.equal(extra.code, 2);
    assert.equal(extra.stderr, 'mesh: mesh check takes no argument (got "now")\n');
    const flag = await runCli(['check', '--proxy_address=127.0.0.1:1']);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /^mesh: flag --proxy_address is not used by mesh check /);
  });
});
