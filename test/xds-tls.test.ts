/**
 * `mesh xds --enable_tls` serves ADS over TLS with --tls_cert_file and --tls_key_file: a client
 * that trusts the certificate's CA reads the clusters. Without
 * the files the command refuses to start (exit 2, naming the flags).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { runCli, startProcess, tempDir, type RunningProcess } from './helpers.js';
import { makePki, type Pki } from './fixtures/pki.js';
import { AdsProbe } from './fixtures/xds-clients.js';
import { TYPE_URLS } from '../src/xds/resources.js';

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
