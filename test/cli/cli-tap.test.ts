/**
 * `mesh tap` against two real `mesh api` processes: their streams merged, one line per request
 * (and `-o json`), exit 0 on SIGTERM; a stream that ends is reported; bad flags exit 2.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

describe('mesh tap', () => {
  const dir = tempDir();
  let registry: Registry;
  let plain: PlainApp;
  let a: GatewayProcess;
  let b: GatewayProcess;
  const adminOf = (g: GatewayProcess) => new URL(g.admin).host;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    [a, b] = await Promise.all([startGatewayProcess(dir.path, ['--handler=proxy']), startGatewayProcess(dir.path, ['--handler=proxy'])]);
  });

  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('merges the streams of two processes, one line per request; exits 0 on SIGTERM', async () => {
    const tap = startProcess(['tap', `--admin=${adminOf(a)},${adminOf(b)}`, '--path=/plain']);
    try {
      await tap.waitForOutput(new RegExp(`${adminOf(a)}: tapping`));
      await tap.waitForOutput(new RegExp(`${adminOf(b)}: tapping`));
      await http('GET', `${a.url}/plain/from-a`);
      await http('GET', `${b.url}/plain/from-b`);
      await http('GET', `${b.url}/other/not-shown`);
      const lineA = await tap.waitForOutput(/^.* GET \/plain\/from-a .*$/m);
      const lineB = await tap.waitForOutput(/^.* GET \/plain\/from-b .*$/m);
      const shape = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z gateway GET \/plain\/from-[ab] 200 \d+(\.\d)?ms route=- upstream=go\.mesh\.api\.plain@127\.0\.0\.1:\d+ trace=[0-9a-f]{32} admin=127\.0\.0\.1:\d+$/;
      assert.match(lineA, shape);
      assert.match(lineB, shape);
      assert.ok(lineA.endsWith(`admin=${adminOf(a)}`) && lineB.endsWith(`admin=${adminOf(b)}`));
      assert.ok(!tap.output().includes('not-shown'));
    } finally {
      assert.equal(await tap.stop('SIGTERM'), 0);
    }
  });

  it('-o json: one JSON event a line, with the admin it came from', async () => {
    const tap = startProcess(['tap', `--admin=${adminOf(a)}`, '-o', 'json', '--method=DELETE']);
    try {
      await tap.waitForOutput(/tapping/);
      await http('GET', `${a.url}/plain/skip`);
      await http('DELETE', `${a.url}/plain/gone`);
      const text = await tap.waitForOutput(/^\{.*"path":"\/plain\/gone".*\}$/m);
      const e = JSON.parse(text);
      assert.equal(e.admin, adminOf(a));
      assert.equal(e.method, 'DELETE');
      assert.equal(e.status, 200);
      assert.equal(e.cluster, 'go.mesh.api.plain');
      assert.ok(!tap.output().includes('/plain/skip'));
    } finally {
      assert.equal(await tap.stop('SIGTERM'), 0);
    }
  });

  it('reports a stream that ends, and taps again when the process is back', async () => {
    const c = await startGatewayProcess(dir.path, ['--handler=proxy']);
    const tap = startProcess(['tap', `--admin=${adminOf(c)}`]);
    try {
      await tap.waitForOutput(/tapping\n/);
      await c.stop();
      await tap.waitForOutput(new RegExp(`${adminOf(c)}: (the stream ended|cannot reach the admin)`));
      assert.equal(tap.child.exitCode, null);
    } finally {
      assert.equal(await tap.stop('SIGINT'), 0);
    }
  });

  it('bad flags exit 2 naming the flag; no --admin exits 2', async () => {
    const none = await runCli(['tap', '--registry=memory']);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^mesh: no mesh process is recorded in this registry \(see mesh ps\); name the admin interfaces with --admin=HOST:PORT/);
    const status = await runCli(['tap', '--admin=127.0.0.1:1', '--status=6xx']);
    assert.equal(status.code, 2);
    assert.equal(status.stderr, 'mesh: invalid value "6xx" for flag --status: use a class 1xx to 5xx or a status code 100 to 599\n');
    const rate = await runCli(['tap', '--admin=127.0.0.1:1', '--rate=5000']);
    assert.equal(rate.code, 2);
    assert.match(rate.stderr, /invalid value "5000" for flag --rate: events a second, 1 to 1000/);
    const admin = await runCli(['tap', '--admin=nope']);
    assert.equal(admin.code, 2);
    assert.match(admin.stderr, /invalid value "nope" for flag --admin/);
  });

  it('an admin that refuses the tap (a wrong token) is said, and the command exits 1', async () => {
    const t = await startGatewayProcess(dir.path, ['--handler=proxy'], { MESH_ADMIN_TOKEN: 'right' });
    try {
      const r = await runCli(['tap', `--admin=${adminOf(t)}`, '--admin_token=wrong']);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /tap refused \(401\): Unauthorized/);
      await waitFor(async () => (await http('GET', `${t.admin}/ready`, { headers: { authorization: 'Bearer right' } })).status === 200);
    } finally {
      await t.stop();
    }
  });
});
