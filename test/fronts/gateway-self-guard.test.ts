/**
 * The self-forwarding guard: `mesh api` as a real process never forwards to its own admin or front
 * listener, whatever the registry says (proxy handler and /rpc with `address`); hosts of its own are
 * avoided when the service has others. Plus SelfAddresses on its own (wildcard listeners).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { networkInterfaces } from 'node:os';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { SelfAddresses } from '../../src/core/upstream/self-guard.js';
import { tempDir } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const expected = (service: string, key: string, what: string) =>
  `{"id":"go.mesh.api","code":502,"detail":"service ${service}: node ${key} is this process's own ${what} listener; refusing to forward to itself","status":"Bad Gateway"}`;

describe('mesh api never forwards to itself', () => {
  const dir = tempDir('mesh-gateway-self-');
  let registry: Registry;
  let gw: GatewayProcess;
  let plain: PlainApp;
  let adminPort: number;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    gw = await startGatewayProcess(dir.path, ['--handler=proxy']);
    adminPort = Number(new URL(gw.admin).port);
    await registerPlain(registry, 'go.mesh.api.quitquitquit', adminPort);
    await registerPlain(registry, 'go.mesh.api.healthcheck', adminPort);
    await registerPlain(registry, 'go.mesh.api.loop', gw.port);
    // a health-check path on the admin: the checks must not reach it either
    await registry.register({
      name: 'go.mesh.api.hc',
      version: 'v1',
      metadata: {},
      endpoints: [],
      nodes: [{ id: 'hc-admin', address: 'localhost', port: adminPort, metadata: { health_check_path: '/healthcheck/fail' } }],
    });
    // one good node and one at the admin's address
    await registerPlain(registry, 'go.mesh.api.mixed', plain.port);
    await registry.register({
      name: 'go.mesh.api.mixed',
      version: 'v2',
      metadata: {},
      endpoints: [],
      nodes: [{ id: 'mixed-admin', address: '127.0.0.1', port: adminPort, metadata: {} }],
    });
  });
  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('the proxy handler refuses a node at its own admin address: 502, the admin never sees it', async () => {
    const quit = await http('GET', `${gw.url}/quitquitquit`);
    assert.equal(quit.status, 502);
    assert.equal(quit.headers['content-type'], 'application/json');
    assert.equal(quit.text, expected('go.mesh.api.quitquitquit', `127.0.0.1:${adminPort}`, 'admin'));
    const fail = await http('POST', `${gw.url}/healthcheck/fail`);
    assert.equal(fail.status, 502);
    assert.equal(fail.text, expected('go.mesh.api.healthcheck', `127.0.0.1:${adminPort}`, 'admin'));
    assert.equal(gw.proc.child.exitCode, null);
    assert.equal((await http('GET', `${gw.admin}/ready`)).text, 'LIVE\n');
  });

  it('/rpc with address refuses the admin and the front listener', async () => {
    const body = JSON.stringify({ service: 'go.mesh.api.quitquitquit', endpoint: 'Admin.Quit', request: {}, address: `127.0.0.1:${adminPort}` });
    const r = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json' }, body });
    assert.equal(r.status, 502);
    assert.equal(r.text, expected('go.mesh.api.quitquitquit', `127.0.0.1:${adminPort}`, 'admin'));
    const loop = await http('POST', `${gw.url}/rpc`, {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'go.mesh.api.loop', endpoint: 'Loop.Call', address: `127.0.0.1:${gw.port}` }),
    });
    assert.equal(loop.status, 502);
    assert.equal(loop.text, expected('go.mesh.api.loop', `127.0.0.1:${gw.port}`, 'gateway'));
    const viaProxy = await http('GET', `${gw.url}/loop/x`);
    assert.equal(viaProxy.text, expected('go.mesh.api.loop', `127.0.0.1:${gw.port}`, 'gateway'));
    assert.equal(gw.proc.child.exitCode, null);
  });

  it('health checks of an own-address node are never sent (its health_check_path cannot drain the gateway)', async () => {
    // The first health checks of a new cluster finish before its first pick: once this answers,
    // the check has been attempted.
    const r = await http('GET', `${gw.url}/hc/x`);
    assert.equal(r.status, 502);
    assert.equal(r.text, expected('go.mesh.api.hc', `localhost:${adminPort}`, 'admin'));
    assert.equal((await http('GET', `${gw.admin}/ready`)).text, 'LIVE\n');
    const flags = await http('GET', `${gw.admin}/clusters`);
    assert.match(flags.text, new RegExp(`^go\\.mesh\\.api\\.hc::localhost:${adminPort}::health_flags::/failed_active_hc$`, 'm'));
  });

  it('a service with another node is served by it; its own-address node is never picked', async () => {
    const before = plain.received.length;
    for (let i = 0; i < 6; i++) {
      const r = await http('GET', `${gw.url}/mixed/item?i=${i}`);
      assert.equal(r.status, 200, r.text);
      assert.equal(JSON.parse(r.text).app, 'plain');
    }
    assert.equal(plain.received.length - before, 6);
  });

  it('refusals are counted per cluster', async () => {
    const stats = await http('GET', `${gw.admin}/stats?filter=self_refused`);
    assert.equal(
      stats.text,
      'cluster.go.mesh.api.hc.upstream_cx_self_refused: 1\n' +
        'cluster.go.mesh.api.healthcheck.upstream_cx_self_refused: 1\n' +
        'cluster.go.mesh.api.loop.upstream_cx_self_refused: 2\n' +
        'cluster.go.mesh.api.quitquitquit.upstream_cx_self_refused: 2\n',
    );
  });
});

describe('SelfAddresses', () => {
  it('exact listeners match themselves only; localhost and numeric forms are canonical', () => {
    const self = new SelfAddresses();
    self.add('127.0.0.1', 9901, 'admin');
    assert.equal(self.lookup('127.0.0.1', 9901), 'admin');
    assert.equal(self.lookup('localhost', 9901), 'admin');
    assert.equal(self.lookup('127.1', 9901), 'admin');
    assert.equal(self.lookup('2130706433', 9901), 'admin');
    assert.equal(self.lookup('0.0.0.0', 9901), 'admin');
    assert.equal(self.lookup('127.0.0.2', 9901), undefined);
    assert.equal(self.lookup('127.0.0.1', 9902), undefined);
    assert.equal(self.lookup('example.com', 9901), undefined);
  });

  it('a wildcard listener covers loopback and every interface address on its port', () => {
    const self = new SelfAddresses();
    self.add('::', 8080, 'gateway');
    const v = self.version;
    for (const a of ['127.0.0.1', '127.3.2.1', '::1', 'localhost', '0.0.0.0', '[::ffff:127.0.0.1]']) assert.equal(self.lookup(a, 8080), 'gateway', a);
    for (const list of Object.values(networkInterfaces())) for (const i of list ?? []) if (!i.address.includes('%')) assert.equal(self.lookup(i.address, 8080), 'gateway', i.address);
    assert.equal(self.lookup('192.0.2.77', 8080), undefined, 'TEST-NET address, on no interface');
    assert.equal(self.lookup('127.0.0.1', 8081), undefined);
    self.add('::', 8080, 'gateway');
    assert.equal(self.version, v, 'the same listener twice changes nothing');
  });
});
