/**
 * `mesh xds --enable_tls` serves ADS over TLS with --tls_cert_file and --tls_key_file: a client
 * that trusts the certificate's CA reads the clusters. Without
 * the files the command refuses to start (exit 2, naming the flags).
 *
 * With --xds_tls_client_ca_file (mutual TLS) and --xds_token_file, only a client with a
 * certificate of that CA and the token is served; the token is not on the process's command line.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, startProcess, tempDir, type RunningProcess } from '../helpers.js';
import { makePki, type Leaf, type Pki } from '../fixtures/pki.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { TYPE_URLS } from '../../src/xds/resources.js';

describe('mesh xds over TLS', () => {
  const home = tempDir('mesh-xds-tls-');
  let pki: Pki;
  let xds: RunningProcess;
  let port = 0;
  let caCert = '';

  before(async () => {
    pki = makePki();
    const ca = pki.ca('xds-ca');
    caCert = ca.cert;
    const leaf = ca.leaf('xds', undefined, ['localhost']);
    xds = startProcess(['xds', `--registry_address=${home.path}`, '--address=127.0.0.1:0', '--admin_address=off', '--enable_tls', `--tls_cert_file=${leaf.certFile}`, `--tls_key_file=${leaf.keyFile}`]);
    port = await xds.waitForPort(/mesh xds listening on grpcs:\/\/\S+:(\d+)/);
  });
  after(async () => {
    await xds?.stop();
    pki?.cleanup();
    home.cleanup();
  });

  it('a client that trusts the CA reads the clusters', async () => {
    const probe = new AdsProbe(`localhost:${port}`, 'tls-probe', grpc.credentials.createSsl(Buffer.from(caCert)));
    try {
      const cds = await probe.request(TYPE_URLS.cluster);
      assert.equal(cds.type_url, TYPE_URLS.cluster);
      assert.match(cds.version_info, /^[0-9a-f]{16}$/);
    } finally {
      probe.close();
    }
  });

  it('--enable_tls without the certificate files: exit 2', async () => {
    const r = await runCli(['xds', '--enable_tls', '--address=127.0.0.1:0'], { MESH_HOME: home.path });
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: --enable_tls needs --tls_cert_file and --tls_key_file\n');
  });

  it('--listener_address with a host name: exit 2 (Envoy listens on IP addresses)', async () => {
    const r = await runCli(['xds', '--address=127.0.0.1:0', '--routes=routes.yaml', '--listener_address=localhost:10000'], { MESH_HOME: home.path });
    assert.deepEqual(
      { code: r.code, stdout: r.stdout, stderr: r.stderr },
      {
        code: 2,
        stdout: '',
        stderr: 'mesh: invalid --listener_address "localhost:10000": Envoy listens on an IP address, not a host name (e.g. 0.0.0.0:10000 for every address, 127.0.0.1:10000 for this machine only)\n',
      },
    );
  });
});

describe('mesh xds admitting only its clients: mutual TLS and a token from a file', () => {
  const home = tempDir('mesh-xds-mtls-');
  const TOKEN = 'xds-file-token-5f2c7a9e1b';
  let pki: Pki;
  let xds: RunningProcess;
  let port = 0;
  let caCert = '';
  let client: Leaf;
  let stranger: Leaf;

  before(async () => {
    pki = makePki();
    const ca = pki.ca('xds-ca');
    caCert = ca.cert;
    const leaf = ca.leaf('xds', undefined, ['localhost']);
    const clientsCa = pki.ca('envoys-ca');
    client = clientsCa.leaf('edge');
    stranger = pki.ca('other-ca').leaf('edge');
    const clientCaFile = join(home.path, 'clients-ca.pem');
    writeFileSync(clientCaFile, clientsCa.cert);
    const tokenFile = join(home.path, 'xds-token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    xds = startProcess([
      'xds',
      `--registry_address=${home.path}`,
      '--address=127.0.0.1:0',
      '--admin_address=off',
      '--enable_tls',
      `--tls_cert_file=${leaf.certFile}`,
      `--tls_key_file=${leaf.keyFile}`,
      `--xds_tls_client_ca_file=${clientCaFile}`,
      `--xds_token_file=${tokenFile}`,
    ]);
    port = await xds.waitForPort(/mesh xds listening on grpcs:\/\/\S+:(\d+)/);
  });
  after(async () => {
    await xds?.stop();
    pki?.cleanup();
    home.cleanup();
  });

  const probe = (leaf: Leaf | undefined, token?: string) => {
    const metadata = new grpc.Metadata();
    if (token) metadata.set('authorization', `Bearer ${token}`);
    const creds = leaf ? grpc.credentials.createSsl(Buffer.from(caCert), Buffer.from(leaf.key), Buffer.from(leaf.cert)) : grpc.credentials.createSsl(Buffer.from(caCert));
    return new AdsProbe(`localhost:${port}`, 'edge-1', creds, '', metadata);
  };

  it('a client with a certificate of the clients\' CA and the token reads the clusters', async () => {
    const p = probe(client, TOKEN);
    try {
      assert.equal((await p.request(TYPE_URLS.cluster)).type_url, TYPE_URLS.cluster);
    } finally {
      p.close();
    }
  });

  it('no client certificate, or one of another CA: no stream; the right certificate without the token: UNAUTHENTICATED', async () => {
    for (const leaf of [undefined, stranger]) {
      const p = probe(leaf, TOKEN);
      p.send(TYPE_URLS.cluster, []);
      const status = await p.status;
      p.close();
      assert.equal(status.code, grpc.status.UNAVAILABLE, status.details);
    }
    const p = probe(client);
    p.send(TYPE_URLS.cluster, []);
    const status = await p.status;
    p.close();
    assert.equal(status.code, grpc.status.UNAUTHENTICATED);
    await xds.waitForOutput(/a stream was refused \(UNAUTHENTICATED\)/);
  });

  it('the token is on no command line: /proc/PID/cmdline names the file only', { skip: process.platform !== 'linux' }, () => {
    const cmdline = readFileSync(`/proc/${xds.child.pid}/cmdline`, 'utf8');
    assert.match(cmdline, /--xds_token_file=/);
    assert.ok(!cmdline.includes(TOKEN));
    assert.ok(!xds.output().includes(TOKEN));
  });

  it('--xds_tls_client_ca_file without --enable_tls, a token file that is empty or missing, a token given twice or too short: exit 2', async () => {
    const empty = join(home.path, 'empty');
    writeFileSync(empty, '\n');
    const cases: Array<[string[], string]> = [
      [['--xds_tls_client_ca_file=/nonexistent/ca.pem'], 'mesh: --xds_tls_client_ca_file needs --enable_tls (mutual TLS is TLS)\n'],
      [[`--xds_token_file=${empty}`], `mesh: invalid value "${empty}" for flag --xds_token_file: the file is empty (it should hold --xds_token)\n`],
      [['--xds_token_file=/nonexistent/token'], 'mesh: invalid value "/nonexistent/token" for flag --xds_token_file: cannot read it (ENOENT)\n'],
      [['--xds_token=abc', `--xds_token_file=${empty}`], 'mesh: give --xds_token or --xds_token_file, not both\n'],
      [['--xds_token=short-token'], 'mesh: invalid value for flag --xds_token: use at least 16 characters (e.g. openssl rand -hex 32)\n'],
    ];
    for (const [flags, stderr] of cases) {
      const r = await runCli(['xds', '--address=127.0.0.1:0', '--admin_address=off', ...flags], { MESH_HOME: home.path });
      assert.deepEqual({ code: r.code, stderr: r.stderr }, { code: 2, stderr }, flags.join(' '));
    }
  });
});
