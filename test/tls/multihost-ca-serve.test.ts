/**
 * The mesh CA on one host, its workloads on others, on the hosts of test/fixtures/netns.ts:
 * `mesh ca serve` and etcd in ns a (the only host whose CA directory is used); processes in ns b
 * and ns c started with --ca_server, a join token and the pinned root get their workload
 * certificates over the bridge, and none of them reads a CA directory.
 *
 * - A workload in ns c serves mutual TLS with its certificate to a client in ns b: openssl sees
 *   its SPIFFE ID, chained to the CA's root; curl in ns c checks the service's own certificate
 *   against the root and the IP address it is reached at.
 * - A gateway in ns b (`mesh api --mtls=strict`) calls a framework service in ns c
 *   (`--mtls=strict`) over mutual TLS, both with certificates from the service.
 *
 * Needs root, iproute2, curl, openssl and etcd (skips loudly otherwise, see the fixture).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, PRINTED, ROOT, runCli, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { GATEWAY_LISTENING, OwnEtcd, printed, serviceListening, startCommand } from '../fixtures/engines-common.js';
import { Hosts, IP, bins, netnsSkipReason, type Host } from '../fixtures/netns.js';
import { caPaths } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { createCsr, generateKeyPair, privateKeyPem } from '../../src/tls/workload/x509.js';

const reason = netnsSkipReason('multi-host mesh ca serve test');
const WORKLOAD = join(ROOT, 'test/fixtures/workload-process.ts');
const WHO = join(ROOT, 'test/fixtures/who-service.ts');

describe('multi-host: workload certificates from mesh ca serve on another host', { skip: reason ?? false }, () => {
  const tmp = tempDir('mesh-mh-ca-');
  const home = join(tmp.path, 'ca-home');
  const caDir = join(home, 'ca');
  const procs: RunningProcess[] = [];
  const hosts = new Hosts();
  let etcd: OwnEtcd;
  let serve: RunningProcess;
  let caPort = 0;
  let pin = '';
  let token = '';

  /** node with `args` inside a namespace, with `env`. */
  function nodeIn(host: Host, args: string[], env: Record<string, string> = {}): RunningProcess {
    const [ip, ...prefix] = hosts.inNs(host);
    const p = startCommand(ip!, [...prefix, process.execPath, ...args], env);
    procs.push(p);
    return p;
  }

  /** The flags of a process on a host without the CA: the service, the token, the pinned root, no CA directory. */
  const remoteCa = (host: Host) => [`--ca_server=https://${IP.a}:${caPort}`, `--ca_token=${token}`, `--ca_root_fingerprint=${pin}`, `--ca_dir=${join(tmp.path, `no-ca-${host}`)}`];

  before(async () => {
    await hosts.build();
    etcd = new OwnEtcd(bins.etcd!, IP.a, 2379, 2380, hosts.inNs('a'));
    await etcd.start(join(tmp.path, 'etcd'));
    const init = await runCli(['ca', 'init'], { MESH_HOME: home });
    assert.equal(init.code, 0, init.stderr);
    serve = nodeIn('a', [CLI, 'ca', 'serve', `--address=${IP.a}:0`, `--ca_serve_names=${IP.a}`], { MESH_HOME: home });
    const line = await serve.waitForOutput(/mesh ca serve listening on .*\n/);
    caPort = Number(new RegExp(`https://${IP.a.replace(/\./g, '\\.')}:(\\d+) `).exec(line)![1]);
    pin = /--ca_root_fingerprint=(sha256:[0-9a-f]{64})/.exec(line)![1]!;
    const made = await runCli(['ca', 'token', '--services=go.mesh.srv.*,mesh.api', '--ttl=10m'], { MESH_HOME: home });
    assert.equal(made.code, 0, made.stderr);
    token = made.stdout.trim();
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    await etcd?.kill().catch(() => undefined);
    hosts.dispose();
    tmp.cleanup();
  });

  it('a workload in ns c gets its certificate from ns a and serves mutual TLS with it to ns b', async () => {
    // The service's own certificate, checked by curl in ns c: refused without the root, taken with it.
    await assert.rejects(hosts.curlIn('c', 'GET', `https://${IP.a}:${caPort}/v1/roots`), /self-signed certificate in certificate chain/);
    const roots = await hosts.outputIn('c', bins.curl!, ['-sS', '-m', '10', '--cacert', caPaths(caDir).signerCert, `https://${IP.a}:${caPort}/v1/roots`]);
    assert.match(roots, /^\{"roots":\["-----BEGIN CERTIFICATE-----/);

    const workload = nodeIn('c', ['--import', 'tsx', WORKLOAD, 'api', '--registry=memory', '--log_level=warning', '--mtls=strict', ...remoteCa('c')], {
      MESH_HOME: join(tmp.path, 'c-home'),
      MESH_TEST_LISTEN: IP.c,
      MESH_TEST_SERVICE: 'go.mesh.srv.payments',
    });
    const listening = await workload.waitForOutput(/workload listening on \S+ as \S+ serial [0-9a-f]+\n/);
    const [, wport, spiffeId, serial] = /:(\d+) as (\S+) serial ([0-9a-f]+)/.exec(listening)!;
    assert.equal(spiffeId, 'spiffe://mesh.local/svc/go.mesh.srv.payments');
    await serve.waitForOutput(new RegExp(`issued spiffe://mesh.local/svc/go.mesh.srv.payments \\(serial ${serial}\\) with join token [0-9a-f]+`));
    assert.match(serve.output(), new RegExp(`"client":"${IP.c.replace(/\./g, '\\.')}"`));

    // A caller in ns b with a certificate of the same CA: mutual TLS across the hosts.
    const keys = await generateKeyPair();
    writeFileSync(join(tmp.path, 'caller.crt'), await new LocalCaSigner(caDir, 'mesh.local').sign(await createCsr(keys, 'go.mesh.srv.caller'), 'go.mesh.srv.caller', 600_000));
    writeFileSync(join(tmp.path, 'caller.key'), await privateKeyPem(keys.privateKey));
    const [ip, ...prefix] = hosts.inNs('b');
    const sClient = execFileSync(ip!, [...prefix, 'openssl', 's_client', '-connect', `${IP.c}:${wport}`, '-CAfile', caPaths(caDir).signerCert, '-verify_return_error', '-cert', join(tmp.path, 'caller.crt'), '-key', join(tmp.path, 'caller.key')], {
      input: 'Q\n',
      encoding: 'utf8',
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    assert.match(sClient, /Verify return code: 0 \(ok\)/);
    const served = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(sClient)![0];
    assert.match(execFileSync('openssl', ['x509', '-noout', '-ext', 'subjectAltName'], { input: served, encoding: 'utf8' }), /URI:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.payments/);
  });

  it('a strict gateway in ns b calls a strict framework service in ns c over mutual TLS, both certified by ns a', async () => {
    const registry = ['--registry=etcd', `--registry_address=${etcd.address}`];
    const who = nodeIn('c', ['--import', 'tsx', WHO, ...registry, `--address=${IP.c}:0`, '--log_level=warning', '--mtls=strict', ...remoteCa('c')], { MESH_HOME: join(tmp.path, 'c-home') });
    await printed(who, serviceListening('go.mesh.srv.who'));
    const gw = nodeIn('b', [CLI, 'api', ...registry, `--address=${IP.b}:0`, '--admin_address=127.0.0.1:0', '--handler=rpc', '--namespace=go.mesh.srv', '--log_level=warning', '--mtls=strict', ...remoteCa('b')], {
      MESH_HOME: join(tmp.path, 'b-home'),
    });
    const url = await printed(gw, GATEWAY_LISTENING);
    const answer = await waitFor(async () => {
      const r = await hosts.curlIn('b', 'GET', `${url}/who/am`);
      return r.status === 200 ? r : undefined;
    }, 20_000);
    assert.match((JSON.parse(answer.text) as { node: string }).node, /^go\.mesh\.srv\.who-/);
    const admin = await printed(gw, PRINTED.apiAdmin);
    const stats = await hosts.curlIn('b', 'GET', `http://127.0.0.1:${admin}/stats?filter=${encodeURIComponent('^cluster\\.go\\.mesh\\.srv\\.who\\.ssl\\.handshake$')}`);
    assert.match(stats.text, /^cluster\.go\.mesh\.srv\.who\.ssl\.handshake: [1-9]\d*$/m, 'the call went over mutual TLS');
    // Both identities were issued by the service in ns a, each to its own host.
    await serve.waitForOutput(new RegExp(`"client":"${IP.c.replace(/\./g, '\\.')}"[^\\n]*issued spiffe://mesh.local/svc/go.mesh.srv.who `));
    await serve.waitForOutput(new RegExp(`"client":"${IP.b.replace(/\./g, '\\.')}"[^\\n]*issued spiffe://mesh.local/svc/mesh.api`));
  });
});
