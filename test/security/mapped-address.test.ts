/**
 * A gateway must not reach an admin interface through its proxy route: neither its own, whatever
 * spelling of the address a node is registered at (IPv4-mapped IPv6 in dotted or hex form, the
 * full form, numeric forms), nor another mesh process's on the same machine, whose Host check the
 * forwarded `Host: 127.0.0.1:…` passes: an admin without --admin_token refuses mutating requests
 * that carry forwarding headers. Real `mesh api` processes on loopback.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { SelfAddresses } from '../../src/core/upstream/self-guard.js';
import { tempDir } from '../helpers.js';
import { http, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

const TEXT = 'text/plain; charset=UTF-8';
const MAPPED = ['::ffff:127.0.0.1', '::ffff:7f00:1', '0:0:0:0:0:ffff:7f00:1'];

const selfRefused = (service: string, key: string) =>
  `{"id":"go.mesh.api","code":502,"detail":"service ${service}: node ${key} is this process's own admin listener; refusing to forward to itself","status":"Bad Gateway"}`;
const forwardedRefused = (path: string, header: string) =>
  `Forbidden: ${path} changes state and refuses forwarded requests (${header}); set --admin_token to manage this process through a proxy.\n`;

describe('the self-forwarding guard compares addresses in one canonical form', () => {
  const dir = tempDir('mesh-mapped-self-');
  let registry: Registry;
  let gw: GatewayProcess;
  let adminPort: number;

  before(async () => {
    registry = createRegistry('local', dir.path);
    gw = await startGatewayProcess(dir.path, ['--handler=proxy']);
    adminPort = Number(new URL(gw.admin).port);
    // Every node of the service is the gateway's own admin, each in another spelling: one that
    // the guard did not recognise would be picked, and the POST would drain the gateway.
    await registry.register({
      name: 'go.mesh.api.healthcheck',
      version: 'v1',
      metadata: {},
      endpoints: [],
      nodes: MAPPED.map((address, i) => ({ id: `mapped-${i}`, address, port: adminPort, metadata: {} })),
    });
  });
  after(async () => {
    await gw?.stop();
    await registry?.close();
    dir.cleanup();
  });

  it('POST /healthcheck/fail through the proxy route is refused: 502, counted, the gateway stays live', async () => {
    const fail = await http('POST', `${gw.url}/healthcheck/fail`);
    assert.equal(fail.status, 502);
    assert.equal(fail.headers['content-type'], 'application/json');
    const key = /node (\S+) is/.exec(fail.text)?.[1];
    assert.ok(MAPPED.some((a) => key === `[${a}]:${adminPort}`), fail.text);
    assert.equal(fail.text, selfRefused('go.mesh.api.healthcheck', key!));
    assert.equal((await http('GET', `${gw.admin}/ready`)).text, 'LIVE\n');
    assert.equal(gw.proc.child.exitCode, null);
  });

  it('/rpc with address refuses each spelling of the admin address', async () => {
    for (const a of MAPPED) {
      const body = JSON.stringify({ service: 'go.mesh.api.healthcheck', endpoint: 'Admin.Fail', request: {}, address: `[${a}]:${adminPort}` });
      const r = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json' }, body });
      assert.equal(r.status, 502, a);
      assert.equal(r.text, selfRefused('go.mesh.api.healthcheck', `[${a}]:${adminPort}`));
    }
    const stats = await http('GET', `${gw.admin}/stats?filter=self_refused`);
    assert.equal(stats.text, `cluster.go.mesh.api.healthcheck.upstream_cx_self_refused: ${1 + MAPPED.length}\n`);
    assert.equal((await http('GET', `${gw.admin}/ready`)).text, 'LIVE\n');
  });

  it('SelfAddresses: every spelling a connect reaches 127.0.0.1 by is that address', () => {
    const self = new SelfAddresses();
    self.add('127.0.0.1', 9901, 'admin');
    const reaching = [...MAPPED, '[::ffff:127.0.0.1]', '[::FFFF:7F00:1]', '::0:ffff:7f00:1', '127.1', '2130706433', '0x7f.1', '0177.0.0.1', 'LOCALHOST', '0.0.0.0', '::', '::ffff:0.0.0.0'];
    for (const a of reaching) assert.equal(self.lookup(a, 9901), 'admin', a);
    // Not IPv4-mapped (a connect to them fails: EHOSTUNREACH), and other loopback addresses than the bound one.
    for (const a of ['::7f00:1', '::ffff:0:7f00:1', '::1', '127.0.0.2', '::ffff:127.0.0.2']) assert.equal(self.lookup(a, 9901), undefined, a);
    // A listener bound to a mapped address is the IPv4 one.
    const mapped = new SelfAddresses();
    mapped.add('::ffff:127.0.0.1', 9902, 'sidecar');
    assert.equal(mapped.lookup('127.0.0.1', 9902), 'sidecar');
    const wildcard = new SelfAddresses();
    wildcard.add('0.0.0.0', 9903, 'gateway');
    for (const a of ['::ffff:127.0.0.9', '::ffff:7f00:9', '[::1]']) assert.equal(wildcard.lookup(a, 9903), 'gateway', a);
  });
});

describe('an admin refuses mutating requests forwarded by a proxy, unless --admin_token is set', () => {
  const open = tempDir('mesh-mapped-open-');
  const guarded = tempDir('mesh-mapped-token-');
  const targets = tempDir('mesh-mapped-targets-');
  let target: GatewayProcess;
  let tokenTarget: GatewayProcess;
  let proxy: GatewayProcess;
  let tokenProxy: GatewayProcess;
  const registries: Registry[] = [];
  const bearer = { authorization: 'Bearer s3cret-admin' };

  /** A gateway (--handler=proxy) in its own registry whose service `healthcheck` is the admin of `of`. */
  async function proxyTo(dir: string, of: GatewayProcess): Promise<GatewayProcess> {
    const registry = createRegistry('local', dir);
    registries.push(registry);
    await registry.register({
      name: 'go.mesh.api.healthcheck',
      version: 'v1',
      metadata: {},
      endpoints: [],
      nodes: [{ id: 'other-admin', address: '127.0.0.1', port: Number(new URL(of.admin).port), metadata: {} }],
    });
    return startGatewayProcess(dir, ['--handler=proxy']);
  }

  before(async () => {
    [target, tokenTarget] = await Promise.all([
      startGatewayProcess(targets.path),
      startGatewayProcess(targets.path, ['--admin_token=s3cret-admin']),
    ]);
    [proxy, tokenProxy] = await Promise.all([proxyTo(open.path, target), proxyTo(guarded.path, tokenTarget)]);
  });
  after(async () => {
    await Promise.all([proxy?.stop(), tokenProxy?.stop(), target?.stop(), tokenTarget?.stop()]);
    await Promise.all(registries.map((r) => r.close()));
    open.cleanup();
    guarded.cleanup();
    targets.cleanup();
  });

  it('through another gateway: 403 from the admin, nothing runs', async () => {
    for (const method of ['POST', 'GET']) {
      const r = await http(method, `${proxy.url}/healthcheck/fail`);
      assert.equal(r.status, 403, method);
      assert.equal(r.headers['content-type'], TEXT);
      assert.equal(r.text, forwardedRefused('/healthcheck/fail', 'X-Forwarded-For'));
    }
    assert.equal((await http('GET', `${target.admin}/ready`)).text, 'LIVE\n');
    assert.equal(target.proc.child.exitCode, null);
  });

  it('each forwarding header counts; reading is still allowed; a request without them is served', async () => {
    const markers: Array<[string, string]> = [
      ['X-Forwarded-For', '10.0.0.1'],
      ['X-Forwarded-Host', 'example.com'],
      ['X-Forwarded-Proto', 'https'],
      ['Forwarded', 'for=10.0.0.1'],
      ['Via', '1.1 edge'],
    ];
    for (const [name, value] of markers) {
      for (const path of ['/healthcheck/fail', '/quitquitquit', '/reset_counters', '/logging?level=debug', '/cpuprofiler?enable=y']) {
        const r = await http('POST', `${target.admin}${path}`, { headers: { [name]: value } });
        assert.equal(r.status, 403, `${name} ${path}`);
        assert.equal(r.text, forwardedRefused(path.split('?')[0]!, name));
      }
    }
    const read = await http('GET', `${target.admin}/stats?filter=%5Eserver%5C.live%24`, { headers: { 'X-Forwarded-For': '10.0.0.1', Via: '1.1 edge' } });
    assert.equal(read.text, 'server.live: 1\n');
    assert.equal((await http('GET', `${target.admin}/logging`, { headers: { Via: '1.1 edge' } })).status, 200);
    assert.equal((await http('POST', `${target.admin}/healthcheck/ok`)).text, 'OK\n');
    assert.equal((await http('GET', `${target.admin}/ready`)).text, 'LIVE\n');
    assert.equal(target.proc.child.exitCode, null);
  });

  it('with --admin_token the forwarded request carrying the token is served (and without it, 401)', async () => {
    const none = await http('POST', `${tokenProxy.url}/healthcheck/fail`);
    assert.equal(none.status, 401);
    assert.equal(none.text, 'Unauthorized: this admin interface needs "Authorization: Bearer <token>"\n');
    assert.equal((await http('GET', `${tokenTarget.admin}/ready`, { headers: bearer })).text, 'LIVE\n');
    const r = await http('POST', `${tokenProxy.url}/healthcheck/fail`, { headers: bearer });
    assert.equal(r.status, 200);
    assert.equal(r.text, 'OK\n');
    assert.equal((await http('GET', `${tokenTarget.admin}/ready`, { headers: bearer })).text, 'DRAINING\n');
  });
});
