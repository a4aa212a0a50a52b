/**
 * What admin /routes and /certs list comes from sources registered with the runtime
 * (addRouteSource, addCertificateSource), read at each request: a process may build its parts in
 * any order. A real Runtime, its admin on loopback, a real gateway, a real TLS provider.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Runtime } from '../../src/process/runtime.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import type { CertificateInfo } from '../../src/admin/context.js';
import { tempDir } from '../helpers.js';
import { get } from '../admin-fixtures.js';
import { makePair } from '../tls-fixtures.js';

function runtimeWith(flags: string[] = []): Runtime {
  const config = parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0', ...flags], {}).config;
  return new Runtime(optionsFromFlags(config), { role: 'test' });
}


const ROUTES_HELP = '  /routes: print out currently loaded dynamic HTTP route tables\n';

describe('runtime sources read by the admin at each request', () => {
  let runtime: Runtime;
  let base: string;

  before(async () => {
    runtime = runtimeWith();
    const admin = await runtime.startAdmin('127.0.0.1:0');
    base = `http://127.0.0.1:${admin!.port}`;
  });
  after(async () => {
    await runtime.shutdown();
  });

  it('/routes appears when the first route source registers after the admin started, and goes with the last', async () => {
    let res = await get(base, '/routes');
    assert.equal(res.status, 404);
    assert.ok(res.body.startsWith('invalid path. admin commands are:\n'), res.body);
    assert.ok(!res.body.includes('/routes'), res.body);
    assert.ok(!(await get(base, '/help')).body.includes('/routes'));

    const removeA = runtime.addRouteSource(() => [{ routeConfigName: 'a', versionInfo: '1', table: { n: 1 } }]);
    const removeB = runtime.addRouteSource(() => [
      { routeConfigName: 'b', versionInfo: '2', table: [] },
      { routeConfigName: 'c', versionInfo: '3', table: null },
    ]);
    assert.ok((await get(base, '/help')).body.includes(ROUTES_HELP));
    res = await get(base, '/routes');
    assert.equal(res.status, 200);
    assert.equal(
      res.body,
      '[\n' +
        '{\n"version_info": "1",\n"route_config_name": "a",\n"route_table_dump": {"n":1}\n}\n' +
        ',{\n"version_info": "2",\n"route_config_name": "b",\n"route_table_dump": []\n}\n' +
        ',{\n"version_info": "3",\n"route_config_name": "c",\n"route_table_dump": null\n}\n' +
        ']\n',
    );

    removeA();
    removeA(); // twice: no effect
    res = await get(base, '/routes');
    assert.deepEqual(
      (JSON.parse(res.body) as Array<{ route_config_name: string }>).map((t) => t.route_config_name),
      ['b', 'c'],
    );
    removeB();
    assert.equal((await get(base, '/routes')).status, 404);
    assert.ok(!(await get(base, '/help')).body.includes('/routes'));
  });

  it('the same function registered twice is two sources, each removed on its own', async () => {
    const read = () => [{ routeConfigName: 'same', versionInfo: '1', table: {} }];
    const first = runtime.addRouteSource(read);
    const second = runtime.addRouteSource(read);
    const names = async () => (JSON.parse((await get(base, '/routes')).body) as Array<{ route_config_name: string }>).map((t) => t.route_config_name);
    assert.deepEqual(await names(), ['same', 'same']);
    first();
    assert.deepEqual(await names(), ['same']);
    second();
    assert.equal((await get(base, '/routes')).status, 404);
  });

  it('/certs lists a certificate source registered after the admin started, until it is removed', async () => {
    assert.equal((await get(base, '/certs')).body, '{\n "certificates": []\n}\n');
    const cert: CertificateInfo = {
      path: '/etc/mesh/tls/late.crt',
      serialNumber: '0a',
      subjectAltNames: [{ dns: 'late.example' }],
      validFrom: new Date('2020-01-01T00:00:00Z'),
      expiration: new Date('2020-01-02T00:00:00Z'),
    };
    const remove = runtime.addCertificateSource(() => [cert]);
    const listed = JSON.parse((await get(base, '/certs')).body) as { certificates: Array<{ cert_chain: Array<{ path: string; serial_number: string }> }> };
    assert.deepEqual(
      listed.certificates.map((c) => c.cert_chain.map((x) => [x.path, x.serial_number])),
      [[['/etc/mesh/tls/late.crt', '0a']]],
    );
    remove();
    assert.equal((await get(base, '/certs')).body, '{\n "certificates": []\n}\n');
  });

  it('a gateway built after the admin started has its routes listed', async () => {
    const gateway = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api' });
    await gateway.start();
    const res = await get(base, '/routes?route_config_name=go.mesh.api');
    assert.equal(res.status, 200);
    const tables = JSON.parse(res.body) as Array<{ route_config_name: string }>;
    assert.deepEqual(
      tables.map((t) => t.route_config_name),
      ['go.mesh.api'],
    );
  });
});

describe('the TLS provider lives on the runtime', () => {
  it('built once on first use, listed by /certs whatever the order, one per runtime', async () => {
    const dir = tempDir();
    const pair = makePair(dir.path, 'server');
    const runtime = runtimeWith(['--enable_tls', `--tls_cert_file=${pair.certFile}`, `--tls_key_file=${pair.keyFile}`]);
    try {
      const admin = await runtime.startAdmin('127.0.0.1:0');
      const base = `http://127.0.0.1:${admin!.port}`;
      assert.equal((await get(base, '/certs')).body, '{\n "certificates": []\n}\n', 'nothing before the provider is built');
      const provider = await runtime.startTls();
      assert.ok(provider);
      assert.equal(runtime.tls, provider, 'one provider per runtime');
      const listed = JSON.parse((await get(base, '/certs')).body) as { certificates: Array<{ cert_chain: Array<{ path: string; serial_number: string }> }> };
      assert.deepEqual(
        listed.certificates.map((c) => c.cert_chain.map((x) => [x.path, x.serial_number])),
        [[[pair.certFile, pair.serial]]],
      );
      const other = runtimeWith(['--enable_tls', `--tls_cert_file=${pair.certFile}`, `--tls_key_file=${pair.keyFile}`]);
      assert.notEqual(other.tls, provider, 'each runtime has its own');
      await other.shutdown();
    } finally {
      await runtime.shutdown();
      dir.cleanup();
    }
  });

  it('without TLS there is no provider', async () => {
    const runtime = runtimeWith();
    assert.equal(runtime.tls, undefined);
    assert.equal(await runtime.startTls(), undefined);
    await runtime.shutdown();
  });
});
