/**
 * Mutual TLS with real processes: a framework service with --mtls=strict, and in front of it the
 * gateway (its public listener stays plain HTTP: curl keeps working), a sidecar, `mesh proxy` and
 * `mesh call`, each with a certificate of its own from one mesh CA (made on first use in
 * --ca_dir). A caller with --mtls=off is refused.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { createRegistry } from '../../src/engines/registry/create.js';
import { PRINTED, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');

async function stat(admin: string, name: string): Promise<number> {
  const res = await fetch(`${admin}/stats?filter=${encodeURIComponent(`^${name}$`)}`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(await res.text());
  return m ? Number(m[1]) : -1;
}

describe('mesh processes with --mtls=strict', () => {
  const dir = tempDir();
  const ca = tempDir('mesh-ca-');
  const procs: RunningProcess[] = [];
  const common = () => [`--registry_address=${dir.path}`, `--ca_dir=${ca.path}`, '--log_level=warning'];
  let gatewayUrl = '';
  let gatewayAdmin = '';

  before(async () => {
    const who = startProcess(['--import', 'tsx', WHO, ...common(), '--mtls=strict'], {}, '');
    procs.push(who);
    await who.waitForOutput(/go\.mesh\.srv\.who listening/, 20_000);
    const registry = createRegistry('local', dir.path);
    const [record] = await registry.getService('go.mesh.srv.who');
    await registry.close();
    assert.equal(record?.nodes[0]?.metadata.mtls, 'true');
    const gw = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--handler=rpc', '--namespace=go.mesh.srv', '--mtls=strict', ...common()]);
    procs.push(gw);
    gatewayUrl = `http://127.0.0.1:${await gw.waitForPort(PRINTED.api, 20_000)}`;
    gatewayAdmin = `http://127.0.0.1:${await gw.waitForPort(PRINTED.apiAdmin)}`;
  });
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    dir.cleanup();
    ca.cleanup();
  });

  test('the gateway calls the strict service over mutual TLS; its public listener stays plain HTTP', async () => {
    const res = await fetch(`${gatewayUrl}/who/am`);
    assert.equal(res.status, 200);
    assert.match(((await res.json()) as { node: string }).node, /^go\.mesh\.srv\.who-/);
    assert.equal(await stat(gatewayAdmin, 'cluster.go.mesh.srv.who.ssl.handshake'), 1);
    assert.equal(await stat(gatewayAdmin, 'cluster.go.mesh.srv.who.ssl.fail_verify_san'), 0);
  });

  test('mesh call with --mtls calls it; with --mtls=off it is refused with the service 400', async () => {
    const ok = await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', '--mtls=strict', ...common()]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /"node": ?"go\.mesh\.srv\.who-/);
    // mesh call's own default is --mtls=permissive: it calls a node that says mtls=true with its certificate.
    const byDefault = await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', ...common()]);
    assert.equal(byDefault.code, 0, byDefault.stderr);
    const plain = await runCli(['call', 'go.mesh.srv.who', 'Who.Am', '{}', '--mtls=off', ...common()]);
    assert.notEqual(plain.code, 0);
    assert.match(plain.stderr, /service go\.mesh\.srv\.who accepts mutual TLS only \(--mtls=strict\)/);
  });

  test('a sidecar with --mtls=strict calls it as mesh.sidecar; its app-facing listener stays plain HTTP', async () => {
    const sidecar = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--mtls=strict', ...common()]);
    procs.push(sidecar);
    const port = await sidecar.waitForPort(PRINTED.sidecar, 20_000);
    const admin = `http://127.0.0.1:${await sidecar.waitForPort(PRINTED.sidecarAdmin)}`;
    const res = await fetch(`http://127.0.0.1:${port}/rpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Am', request: {} }),
    });
    assert.equal(res.status, 200);
    assert.match(((await res.json()) as { node: string }).node, /^go\.mesh\.srv\.who-/);
    assert.equal(await stat(admin, 'cluster.go.mesh.srv.who.ssl.handshake'), 1);
  });

  test('mesh proxy with --mtls=strict forwards to the strict service over mutual TLS', async () => {
    const file = join(dir.path, 'proxy.yaml');
    writeFileSync(file, ['listeners:', '  - name: ingress', '    address: 127.0.0.1:0', '    routes:', '      - match: { prefix: / }', '        service: go.mesh.srv.who', ''].join('\n'));
    const proxy = startProcess(['proxy', '-c', file, '--admin_address=127.0.0.1:0', '--mtls=strict', ...common()]);
    procs.push(proxy);
    const port = await proxy.waitForPort(PRINTED.proxy, 20_000);
    const admin = `http://127.0.0.1:${await proxy.waitForPort(PRINTED.proxyAdmin)}`;
    // The proxy passes the request on as it is: here, an RPC call in the mesh wire protocol.
    const res = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', headers: { 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.who', 'mesh-endpoint': 'Who.Am' }, body: '{}' });
    assert.equal(res.status, 200);
    assert.match(((await res.json()) as { node: string }).node, /^go\.mesh\.srv\.who-/);
    assert.equal(await stat(admin, 'cluster.go.mesh.srv.who.ssl.handshake'), 1);
  });

  test('a gateway with --mtls=off in front of the strict service gets the 400 and passes it on', async () => {
    const gw = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=off', '--handler=rpc', '--namespace=go.mesh.srv', ...common()]);
    procs.push(gw);
    const url = `http://127.0.0.1:${await gw.waitForPort(PRINTED.api, 20_000)}`;
    const res = await waitFor(async () => {
      const r = await fetch(`${url}/who/am`);
      return r.status === 404 ? undefined : r;
    }, 10_000);
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      id: 'go.mesh.srv.who',
      code: 400,
      detail: 'service go.mesh.srv.who accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate',
      status: 'Bad Request',
    });
  });
});
