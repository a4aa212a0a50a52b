/**
 * The mesh CA on one host, a workload on another, on the hosts of test/fixtures/netns.ts:
 * `mesh ca serve` in ns b (the only host with the CA directory in use), a process in ns c started
 * with --ca_server, a join token and the pinned root gets its workload certificate over the
 * bridge; a client in ns b reaches it with mutual TLS and openssl sees its SPIFFE ID, chained to
 * the CA's root; curl in ns c checks the service's own certificate against the root and its IP
 * name. Needs root, iproute2, curl and openssl (skips loudly otherwise, see the fixture).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, ROOT, runCli, tempDir, type RunningProcess } from './helpers.js';
import { startCommand } from './fixtures/engines-common.js';
import { Hosts, IP, bins, netnsSkipReason, type Host } from './fixtures/netns.js';
import { caPaths } from '../src/tls/workload/ca.js';
import { LocalCaSigner } from '../src/tls/workload/signer.js';
import { createCsr, generateKeyPair, privateKeyPem } from '../src/tls/workload/x509.js';

const reason = netnsSkipReason('multi-host mesh ca serve test');
const WORKLOAD = join(ROOT, 'test/fixtures/workload-process.ts');

describe('multi-host: a workload certificate from mesh ca serve on another host', { skip: reason ?? false }, () => {
  const tmp = tempDir('mesh-mh-ca-');
  const home = join(tmp.path, 'ca-home');
  const caDir = join(home, 'ca');
  const procs: RunningProcess[] = [];
  const hosts = new Hosts();

  /** node with `args` inside a namespace, with `env`. */
  function nodeIn(host: Host, args: string[], env: Record<string, string>): RunningProcess {
    const [ip, ...prefix] = hosts.inNs(host);
    const p = startCommand(ip!, [...prefix, process.execPath, ...args], env);
    procs.push(p);
    return p;
  }

  before(async () => {
    await hosts.build();
    const init = await runCli(['ca', 'init'], { MESH_HOME: home });
    assert.equal(init.code, 0, init.stderr);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    hosts.dispose();
    tmp.cleanup();
  });

  it('ns c gets its certificate from ns b, and serves mutual TLS with it to ns b', async () => {
    const serve = nodeIn('b', [CLI, 'ca', 'serve', `--address=${IP.b}:0`, `--ca_serve_names=${IP.b}`], { MESH_HOME: home });
    const line = await serve.waitForOutput(/mesh ca serve listening on .*\n/);
    const port = Number(new RegExp(`https://${IP.b.replace(/\./g, '\\.')}:(\\d+) `).exec(line)![1]);
    const pin = /--ca_root_fingerprint=(sha256:[0-9a-f]{64})/.exec(line)![1]!;
    const token = (await runCli(['ca', 'token', '--services=go.mesh.srv.*', '--ttl=5m'], { MESH_HOME: home })).stdout.trim();

    // The service's own certificate, checked by curl in ns c against the root and the IP it is reached at.
    await assert.rejects(hosts.curlIn('c', 'GET', `https://${IP.b}:${port}/v1/roots`), /self-signed certificate in certificate chain/);
    const rootsOut = await hosts.outputIn('c', bins.curl!, ['-sS', '-m', '10', '--cacert', caPaths(caDir).signerCert, `https://${IP.b}:${port}/v1/roots`]);
    assert.match(rootsOut, /^\{"roots":\["-----BEGIN CERTIFICATE-----/);

    const workload = nodeIn(
      'c',
      ['--import', 'tsx', WORKLOAD, 'api', '--registry=memory', '--log_level=warning', '--mtls=strict', `--ca_server=https://${IP.b}:${port}`, `--ca_token=${token}`, `--ca_root_fingerprint=${pin}`, `--ca_dir=${join(tmp.path, 'no-ca')}`],
      { MESH_HOME: join(tmp.path, 'c-home'), MESH_TEST_LISTEN: IP.c, MESH_TEST_SERVICE: 'go.mesh.srv.payments' },
    );
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
    const { execFileSync } = await import('node:child_process');
    const sClient = execFileSync(ip!, [...prefix, 'openssl', 's_client', '-connect', `${IP.c}:${wport}`, '-CAfile', caPaths(caDir).signerCert, '-verify_return_error', '-cert', join(tmp.path, 'caller.crt'), '-key', join(tmp.path, 'caller.key')], { input: 'Q\n', encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
    assert.match(sClient, /Verify return code: 0 \(ok\)/);
    const served = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(sClient)![0];
    const san = execFileSync('openssl', ['x509', '-noout', '-ext', 'subjectAltName'], { input: served, encoding: 'utf8' });
    assert.match(san, /URI:spiffe:\/\/mesh\.local\/svc\/go\.mesh\.srv\.payments/);
  });
});
