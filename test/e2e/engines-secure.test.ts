/**
 * etcd and NATS behind TLS and a password, as production runs them: this test starts its own etcd
 * (https, authentication enabled) and nats-server (TLS with client certificates, user and password)
 * on free ports with a CA made by openssl, and reaches them through the registry, the broker and
 * the CLI. Needs the etcd, etcdctl, nats-server and openssl binaries (CI installs them); without
 * them it skips loudly, and with MESH_TEST_REQUIRE_ENGINES=1 it fails.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { NatsBroker } from '../../src/engines/broker/nats.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { freePort, runCli, sleep, tempDir, waitFor } from '../helpers.js';

/** The path of a binary, or undefined with a loud reason (a failure under MESH_TEST_REQUIRE_ENGINES=1). */
function binary(name: string): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin']) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  const reason = `${name} not installed (CI's .ci/run installs it)`;
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
  console.warn(`SKIP: ${reason}`);
  return undefined;
}

const bins = { etcd: binary('etcd'), etcdctl: binary('etcdctl'), nats: binary('nats-server'), openssl: binary('openssl') };
const missing = Object.values(bins).some((b) => b === undefined);

interface Pki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  otherCa: string;
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate (CN root) it signed; and an unrelated CA. */
function makePki(dir: string): Pki {
  const openssl = (...args: string[]) => execFileSync(bins.openssl!, args, { stdio: 'pipe' });
  const ca = (name: string) => {
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', `/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
      '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.crt`));
    return join(dir, `${name}.crt`);
  };
  const caFile = ca('mesh-test-ca');
  const otherCa = ca('other-ca');
  const leaf = (name: string, cn: string, ext: string) => {
    const extFile = join(dir, `${name}.ext`);
    writeFileSync(extFile, ext);
    openssl('req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${cn}`,
      '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.csr`));
    openssl('x509', '-req', '-in', join(dir, `${name}.csr`), '-CA', caFile, '-CAkey', join(dir, 'mesh-test-ca.key'), '-CAcreateserial',
      '-days', '2', '-extfile', extFile, '-out', join(dir, `${name}.crt`));
    return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  };
  const server = leaf('server', '127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  const client = leaf('client', 'root', 'extendedKeyUsage=clientAuth\n');
  return { ca: caFile, serverCert: server.cert, serverKey: server.key, clientCert: client.cert, clientKey: client.key, otherCa };
}

function start(cmd: string, args: string[], logs: string[]): ChildProcess {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (d: Buffer) => logs.push(d.toString()));
  child.stderr!.on('data', (d: Buffer) => logs.push(d.toString()));
  return child;
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null) return;
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  await Promise.race([gone, sleep(5000).then(() => child.kill('SIGKILL'))]); // a kill deadline, not ordering
}

describe('etcd over https with a password, and NATS over TLS with client certificates and a password', { skip: missing }, () => {
  const dir = tempDir('mesh-engines-secure-');
  let pki: Pki;
  let etcd: ChildProcess | undefined;
  let nats: ChildProcess | undefined;
  const etcdLogs: string[] = [];
  const natsLogs: string[] = [];
  let etcdPort = 0;
  let natsPort = 0;
  const PASSWORD = 's3cret-pw';

  before(async () => {
    pki = makePki(dir.path);
    etcdPort = await freePort();
    const peerPort = await freePort();
    etcd = start(bins.etcd!, [
      '--name', 'secure', '--data-dir', join(dir.path, 'etcd'),
      '--listen-client-urls', `https://127.0.0.1:${etcdPort}`, '--advertise-client-urls', `https://127.0.0.1:${etcdPort}`,
      '--listen-peer-urls', `http://127.0.0.1:${peerPort}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peerPort}`,
      '--initial-cluster', `secure=http://127.0.0.1:${peerPort}`,
      '--cert-file', pki.serverCert, '--key-file', pki.serverKey,
    ], etcdLogs);
    const ctl = (...args: string[]) =>
      execFileSync(bins.etcdctl!, [`--endpoints=https://127.0.0.1:${etcdPort}`, `--cacert=${pki.ca}`, ...args], { stdio: 'pipe', env: { ...process.env, ETCDCTL_API: '3' } }).toString();
    await waitFor(() => {
      try {
        ctl('endpoint', 'health'); // exit status 0: healthy (etcdctl says so on stderr)
        return true;
      } catch {
        return false;
      }
    }, 20000, 200).catch((err: Error) => {
      throw new Error(`etcd did not start: ${err.message}\n${etcdLogs.join('')}`);
    });
    ctl('user', 'add', `root:${PASSWORD}`);
    ctl('auth', 'enable');

    natsPort = await freePort();
    nats = start(bins.nats!, [
      '-a', '127.0.0.1', '-p', String(natsPort),
      '--tls', '--tlscert', pki.serverCert, '--tlskey', pki.serverKey, '--tlsverify', '--tlscacert', pki.ca,
      '--user', 'mesh', '--pass', PASSWORD,
    ], natsLogs);
    await waitFor(() => natsLogs.join('').includes('Server is ready'), 20000).catch((err: Error) => {
      throw new Error(`nats-server did not start: ${err.message}\n${natsLogs.join('')}`);
    });
  });

  after(async () => {
    await Promise.all([stop(etcd), stop(nats)]);
    dir.cleanup();
  });

  const service = { name: 'go.mesh.srv.secure', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'secure-1', address: '127.0.0.1', port: 9, metadata: {} }] };

  it('etcd: https:// with the CA file and user:password in the address registers and reads', async () => {
    const registry = new EtcdRegistry(`https://root:${PASSWORD}@127.0.0.1:${etcdPort}`, { tls: { caFile: pki.ca }, callTimeoutMs: 3000 });
    try {
      await registry.register(service);
      const [found] = await registry.getService('go.mesh.srv.secure');
      assert.equal(found?.nodes[0]?.id, 'secure-1');
      assert.deepEqual(registry.hosts, [`https://127.0.0.1:${etcdPort}`], 'no credentials in what is shown');
    } finally {
      await registry.close();
    }
  });

  it('etcd: a wrong password, an untrusted server certificate, plain http: clear errors without the password', async () => {
    const attempts: Array<[string, EtcdRegistry, RegExp]> = [
      ['wrong password', new EtcdRegistry(`https://root:wrong-pw@127.0.0.1:${etcdPort}`, { tls: { caFile: pki.ca }, callTimeoutMs: 3000 }), /authentication failed|invalid user ID or password/i],
      ['another CA', new EtcdRegistry(`https://root:${PASSWORD}@127.0.0.1:${etcdPort}`, { tls: { caFile: pki.otherCa }, callTimeoutMs: 3000 }), /registry etcd \(https:\/\/127\.0\.0\.1:\d+\): .*does --registry_tls_ca_file name the CA/],
      ['plain http', new EtcdRegistry(`http://root:${PASSWORD}@127.0.0.1:${etcdPort}`, { callTimeoutMs: 3000 }), /registry etcd \(http:\/\/127\.0\.0\.1:\d+\): .*needs an https:\/\/ address/],
    ];
    for (const [what, registry, expected] of attempts) {
      try {
        await assert.rejects(registry.getService('go.mesh.srv.secure'), (err: Error) => {
          assert.match(err.message, expected, `${what}: ${err.message}`);
          assert.ok(!err.message.includes(PASSWORD), `${what}: the password is not shown`);
          return true;
        });
      } finally {
        await registry.close();
      }
    }
  });

  it('etcd: TLS files with an http:// address, or a certificate without its key, stop the start', () => {
    assert.throws(() => new EtcdRegistry(`127.0.0.1:${etcdPort}`, { tls: { caFile: pki.ca } }), /registry etcd: TLS files \(registryTlsCaFile, registryTlsCertFile, registryTlsKeyFile\) need https:\/\/ addresses/);
    assert.throws(() => new EtcdRegistry(`https://127.0.0.1:${etcdPort}`, { tls: { certFile: pki.clientCert } }), /registryTlsCertFile and registryTlsKeyFile go together/);
    assert.throws(() => new EtcdRegistry(`https://127.0.0.1:${etcdPort}`, { tls: { caFile: join(dir.path, 'nope.pem') } }), /--registry_tls_ca_file \S+nope\.pem: ENOENT/);
    assert.throws(() => new EtcdRegistry(`https://127.0.0.1:${etcdPort}`, { tls: { caFile: join(dir.path, 'server.ext') } }), /not a PEM file/);
  });

  it('NATS: tls:// with the CA, a client certificate and user:password in the address delivers', async () => {
    const broker = new NatsBroker({ address: `tls://mesh:${PASSWORD}@127.0.0.1:${natsPort}`, tls: { caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey } });
    try {
      const got: Message[] = [];
      await broker.subscribe('secure.topic', (m) => {
        got.push(m);
      });
      await broker.publish('secure.topic', { header: { 'x-k': 'v' }, body: Buffer.from('over tls') });
      await waitFor(() => got.length === 1);
      assert.equal(Buffer.from(got[0]!.body).toString(), 'over tls');
      assert.equal(got[0]!.header['x-k'], 'v');
    } finally {
      await broker.close();
    }
  });

  it('NATS: no client certificate, a wrong password, an untrusted server: refused with a clear error, password not shown', async () => {
    const cases: Array<[string, NatsBroker, RegExp]> = [
      ['no client certificate', new NatsBroker({ address: `tls://mesh:${PASSWORD}@127.0.0.1:${natsPort}`, tls: { caFile: pki.ca }, timeoutMs: 3000 }), /needs --broker_tls_cert_file and --broker_tls_key_file/],
      ['wrong password', new NatsBroker({ address: `tls://mesh:wrong-pw@127.0.0.1:${natsPort}`, tls: { caFile: pki.ca, certFile: pki.clientCert, keyFile: pki.clientKey }, timeoutMs: 3000 }), /Authorization Violation/],
      ['untrusted server', new NatsBroker({ address: `tls://mesh:${PASSWORD}@127.0.0.1:${natsPort}`, tls: { caFile: pki.otherCa, certFile: pki.clientCert, keyFile: pki.clientKey }, timeoutMs: 3000 }), /unable to verify/],
    ];
    for (const [what, broker, detail] of cases) {
      try {
        await assert.rejects(broker.publish('secure.topic', { header: {}, body: Buffer.from('x') }), (err: Error) => {
          assert.match(err.message, new RegExp(`nats broker: cannot connect to 127\\.0\\.0\\.1:${natsPort}`), `${what}: ${err.message}`);
          assert.match(err.message, detail, `${what}: ${err.message}`);
          assert.ok(!err.message.includes(PASSWORD), `${what}: the password is not shown`);
          return true;
        });
      } finally {
        await broker.close();
      }
    }
    assert.throws(() => new NatsBroker({ address: `http://127.0.0.1:${natsPort}` }), /scheme http:\/\/ is not nats:\/\/ or tls:\/\//);
    assert.throws(() => new NatsBroker({ address: `127.0.0.1:${natsPort}`, tls: { keyFile: pki.clientKey } }), /brokerTlsCertFile and brokerTlsKeyFile go together/);
  });

  it('CLI: mesh register / list services against the secured etcd; a bad TLS flag is a clear error at start', async () => {
    const flags = ['--registry=etcd', `--registry_address=https://root:${PASSWORD}@127.0.0.1:${etcdPort}`, `--registry_tls_ca_file=${pki.ca}`];
    const reg = await runCli(['register', 'service', JSON.stringify({ Name: 'go.mesh.srv.cli-secure', Nodes: [{ Id: 'c1', Address: '127.0.0.1', Port: 10 }] }), ...flags]);
    assert.equal(reg.code, 0, reg.stderr);
    const list = await runCli(['list', 'services', ...flags]);
    assert.equal(list.code, 0, list.stderr);
    assert.ok(list.stdout.split('\n').includes('go.mesh.srv.cli-secure'), list.stdout);

    const wrong = await runCli(['list', 'services', '--registry=etcd', `--registry_address=https://root:wrong-pw@127.0.0.1:${etcdPort}`, `--registry_tls_ca_file=${pki.ca}`, '--client_request_timeout=3s']);
    assert.notEqual(wrong.code, 0);
    assert.ok(!wrong.stderr.includes('wrong-pw'), wrong.stderr);

    const noKey = await runCli(['list', 'services', ...flags, `--registry_tls_cert_file=${pki.clientCert}`]);
    assert.notEqual(noKey.code, 0);
    assert.match(noKey.stderr, /--registry_tls_cert_file and --registry_tls_key_file go together/);

    const natsBad = await runCli(['publish', 'secure.topic', 'x', '--registry=memory', '--broker=nats', `--broker_address=tls://127.0.0.1:${natsPort}`, `--broker_tls_ca_file=${join(dir.path, 'missing.pem')}`]);
    assert.notEqual(natsBad.code, 0);
    assert.match(natsBad.stderr, /--broker_tls_ca_file \S+missing\.pem: ENOENT/);
  });
});
