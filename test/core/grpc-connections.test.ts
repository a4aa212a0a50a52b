/**
 * The connections of gRPC backends in the stats (docs/grpc.md "Stats and tracing"): a real `mesh api`
 * calling a real @grpc/grpc-js server process (test/fixtures/grpc-greeter.ts) counts the channel's
 * connection in the host's cx_* of admin /clusters and the cluster's upstream_cx_*; the connection
 * closes when the server dies; a node where nothing listens counts a connect failure.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startProcess, runCli, tempDir, waitFor, freePort, http, ROOT, PRINTED, type RunningProcess } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const JSON_CT = { 'content-type': 'application/json' };

async function register(env: Record<string, string>, name: string, port: number, metadata: Record<string, string> = {}, id = 'n1'): Promise<void> {
  const record = { Name: name, Nodes: [{ Id: id, Address: '127.0.0.1', Port: port, Metadata: { protocol: 'grpc', ...metadata } }] };
  const r = await runCli(['register', 'service', JSON.stringify(record)], env);
  assert.equal(r.code, 0, r.stderr);
}

describe('gRPC backends: connections in the host and cluster stats', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let greeter: RunningProcess;
  let api: RunningProcess;
  let greeterPort = 0;
  let deadPort = 0;
  let apiPort = 0;
  let admin = '';

  const clusters = async () => (await http('GET', `${admin}/clusters`)).text;
  const stat = async (name: string): Promise<number | undefined> => {
    const res = await http('GET', `${admin}/stats?format=json`);
    return res.json<{ stats: Array<{ name: string; value: number }> }>().stats.find((s) => s.name === name)?.value;
  };

  before(async () => {
    greeter = startProcess(['--import', 'tsx', GREETER, '--label=c'], {}, '');
    greeterPort = await greeter.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    deadPort = await freePort();
    await register(env, 'go.mesh.srv.greeter', greeterPort);
    await register(env, 'go.mesh.srv.down', deadPort);
    api = startProcess(['api', `--registry_address=${home.path}`, `--proto_path=${PROTOS}`, '--namespace=go.mesh.srv', '--handler=rpc', '--log_level=warning', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--client_retries=0']);
    let adminPort: number;
    [apiPort, adminPort] = await Promise.all([api.waitForPort(PRINTED.api), api.waitForPort(PRINTED.apiAdmin)]);
    admin = `http://127.0.0.1:${adminPort}`;
  });
  after(async () => {
    await Promise.all([api, greeter].map((p) => p?.stop('SIGKILL')));
    home.cleanup();
  });

  it('a call opens one connection: cx_total 1, cx_active 1 in /clusters; upstream_cx_total and upstream_cx_active in the stats', async () => {
    const res = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"name":"Cx"}' });
    assert.equal(res.status, 200, res.text);
    const host = `go.mesh.srv.greeter::127.0.0.1:${greeterPort}`;
    const text = await waitFor(async () => {
      const t = await clusters();
      return t.includes(`${host}::cx_active::1\n`) ? t : undefined;
    });
    assert.match(text, new RegExp(`^${host}::cx_total::1$`, 'm'));
    assert.match(text, new RegExp(`^${host}::cx_connect_fail::0$`, 'm'));
    assert.equal(await stat('cluster.go.mesh.srv.greeter.upstream_cx_total'), 1);
    assert.equal(await stat('cluster.go.mesh.srv.greeter.upstream_cx_active'), 1);
    // A second call reuses the channel's connection.
    const again = await http('POST', `http://127.0.0.1:${apiPort}/greeter/say-hello`, { headers: JSON_CT, body: '{"name":"Cx"}' });
    assert.equal(again.status, 200, again.text);
    assert.match(await clusters(), new RegExp(`^${host}::cx_total::1$`, 'm'));
    const prom = (await http('GET', `${admin}/stats/prometheus`)).text;
    assert.match(prom, /^mesh_cluster_upstream_cx_total\{cluster_name="go\.mesh\.srv\.greeter"\} 1$/m);
  });

  it('a call to a port where nothing listens counts cx_connect_fail (host and cluster), and no connection', async () => {
    const res = await http('POST', `http://127.0.0.1:${apiPort}/down/say-hello`, { headers: JSON_CT, body: '{}' });
    assert.equal(res.status, 502, res.text);
    const host = `go.mesh.srv.down::127.0.0.1:${deadPort}`;
    const text = await waitFor(async () => {
      const t = await clusters();
      return /::cx_connect_fail::[1-9]/.test(t.split('\n').filter((l) => l.startsWith(host)).join('\n')) ? t : undefined;
    });
    assert.match(text, new RegExp(`^${host}::cx_total::0$`, 'm'));
    assert.match(text, new RegExp(`^${host}::cx_active::0$`, 'm'));
    assert.ok(((await stat('cluster.go.mesh.srv.down.upstream_cx_connect_fail')) ?? 0) >= 1);
    assert.equal(await stat('cluster.go.mesh.srv.down.upstream_cx_total'), 0);
  });

  it('the host leaves its cluster (node deregistered): its channel closes, upstream_cx_active drops to 0', async () => {
    // Its endpoint Greeter.SayHello names no service it has: the node's grpc_service does.
    await register(env, 'go.mesh.srv.leaving', greeterPort, { grpc_service: 'helloworld.Greeter' });
    const res = await http('POST', `http://127.0.0.1:${apiPort}/leaving/greeter/say-hello`, { headers: JSON_CT, body: '{}' });
    assert.equal(res.status, 200, res.text);
    await waitFor(async () => (await stat('cluster.go.mesh.srv.leaving.upstream_cx_active')) === 1);
    // A second node keeps the cluster (and its stats) when the first leaves.
    await register(env, 'go.mesh.srv.leaving', deadPort, {}, 'n2');
    await waitFor(async () => (await clusters()).includes(`go.mesh.srv.leaving::127.0.0.1:${deadPort}::cx_active::0`));
    const record = { Name: 'go.mesh.srv.leaving', Nodes: [{ Id: 'n1', Address: '127.0.0.1', Port: greeterPort }] };
    const r = await runCli(['deregister', 'service', JSON.stringify(record)], env);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(async () => (await stat('cluster.go.mesh.srv.leaving.upstream_cx_active')) === 0);
    assert.doesNotMatch(await clusters(), new RegExp(`^go\\.mesh\\.srv\\.leaving::127\\.0\\.0\\.1:${greeterPort}::`, 'm'));
    assert.equal(await stat('cluster.go.mesh.srv.leaving.upstream_cx_destroy'), 1);
    assert.equal(await stat('cluster.go.mesh.srv.leaving.upstream_cx_total'), 1);
  });

  it('the server process killed: cx_active drops to 0 (host and cluster)', async () => {
    const host = `go.mesh.srv.greeter::127.0.0.1:${greeterPort}`;
    assert.match(await clusters(), new RegExp(`^${host}::cx_active::1$`, 'm'));
    await greeter.stop('SIGKILL');
    await waitFor(async () => (await clusters()).includes(`${host}::cx_active::0\n`));
    assert.equal(await stat('cluster.go.mesh.srv.greeter.upstream_cx_active'), 0);
    assert.equal(await stat('cluster.go.mesh.srv.greeter.upstream_cx_destroy'), 1);
    assert.match(await clusters(), new RegExp(`^${host}::cx_total::1$`, 'm'));
  });
});
