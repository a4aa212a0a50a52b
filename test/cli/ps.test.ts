/**
 * `mesh ps`, `mesh stop` and `mesh tap` without --admin, against real `mesh api` and `mesh sidecar`
 * processes that record themselves in one local registry; and the attacks on the records: the
 * reserved name through the doors and through the fronts, a record that outlived its process and
 * names an admin port another process holds now, records that do not parse.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { processService, type ProcessRecord } from '../../src/engines/registry/processes.js';
import { PROCESS_SERVICE } from '../../src/engines/registry/validate.js';
import { http, runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startSidecar, postJson, type SidecarProcess } from '../fixtures/sidecar-common.js';

interface PsRow {
  id: string;
  kind: string;
  name: string;
  pid: number;
  host: string;
  admin: string;
  started: string;
  uptime_s: number;
  mtls: string;
  listeners: string[];
  version: string;
}

describe('mesh ps and mesh stop', () => {
  const dir = tempDir();
  const reg = () => `--registry_address=${dir.path}`;
  let registry: Registry;
  let app: PlainApp;
  let api: GatewayProcess;
  let sidecar: SidecarProcess;
  const hostOf = (url: string) => new URL(url).host;

  const ps = async (): Promise<PsRow[]> => {
    const r = await runCli(['ps', reg(), '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as PsRow[];
  };

  before(async () => {
    registry = createRegistry('local', dir.path);
    app = await startPlainApp('app');
    [api, sidecar] = await Promise.all([
      startGatewayProcess(dir.path, ['--handler=proxy']),
      startSidecar(dir.path, ['--server_name=go.mesh.srv.psapp', `--server_address=127.0.0.1:${app.port}`]),
    ]);
  });

  after(async () => {
    await Promise.all([api?.stop(), sidecar?.stop()]);
    await app?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('lists each process with its kind, name, pid, admin, mTLS mode and listeners (text and -o json)', async () => {
    let rows: PsRow[] = [];
    // The front listeners are bound after the admin: the record is written again with them.
    await waitFor(async () => {
      rows = await ps();
      return rows.length === 2 && rows.every((r) => r.listeners.length >= 2);
    }, 15000);
    const [a, s] = rows;
    assert.equal(a!.kind, 'api');
    assert.equal(a!.name, '');
    assert.equal(a!.pid, api.proc.child.pid);
    assert.equal(a!.admin, hostOf(api.admin));
    assert.equal(a!.mtls, 'off');
    assert.match(a!.id, new RegExp(`^[A-Za-z0-9.-]+-${api.proc.child.pid}-[0-9a-f]{6}$`));
    assert.deepEqual(a!.listeners, [`admin=${hostOf(api.admin)}`, `gateway=127.0.0.1:${api.port}`]);
    assert.deepEqual(Object.keys(a!), ['id', 'kind', 'name', 'pid', 'host', 'admin', 'started', 'uptime_s', 'mtls', 'listeners', 'version']);
    assert.ok(Math.abs(Date.parse(a!.started) - Date.now()) < 120_000);
    assert.equal(s!.kind, 'sidecar');
    assert.equal(s!.name, 'go.mesh.srv.psapp');
    assert.equal(s!.pid, sidecar.proc.child.pid);
    assert.equal(s!.admin, hostOf(sidecar.admin));
    assert.ok(s!.listeners.includes(`admin=${hostOf(sidecar.admin)}`), s!.listeners.join());

    const text = await runCli(['ps', reg()]);
    assert.equal(text.code, 0);
    const lines = text.stdout.split('\n');
    assert.match(lines[0]!, /^ID +KIND +NAME +PID +HOST +ADMIN +UPTIME +MTLS +LISTENERS$/);
    const cols = (line: string) => line.split(/ {2,}/);
    assert.deepEqual(cols(lines[1]!).slice(0, 4), [a!.id, 'api', '-', String(a!.pid)]);
    assert.deepEqual(cols(lines[2]!).slice(0, 4), [s!.id, 'sidecar', 'go.mesh.srv.psapp', String(s!.pid)]);
    assert.match(cols(lines[1]!)[6]!, /^\d+s$|^\d+m\d\ds$/);
    assert.equal(lines.length, 4);
  });

  it('the records are not services: mesh list services leaves them out', async () => {
    const r = await runCli(['list', 'services', reg()]);
    assert.equal(r.code, 0);
    assert.ok(!r.stdout.includes(PROCESS_SERVICE), r.stdout);
    assert.ok(r.stdout.includes('go.mesh.srv.psapp'));
  });

  it('attacker: the reserved name is refused at every door (mesh register, the sidecar\'s /registry, POST and DELETE)', async () => {
    const record = JSON.stringify({ Name: PROCESS_SERVICE, Nodes: [{ Id: 'fake', Address: '127.0.0.1', Port: 1 }] });
    const cli = await runCli(['register', 'service', record, reg()]);
    assert.equal(cli.code, 2);
    assert.equal(cli.stderr, `mesh: register service: Name: "${PROCESS_SERVICE}" is reserved: mesh's processes record themselves under it\n`);
    for (const method of ['POST', 'DELETE'] as const) {
      const res = await http(method, `${sidecar.base}/registry`, { headers: { 'content-type': 'application/json' }, body: record });
      assert.equal(res.status, 400, `${method}: ${res.text}`);
      assert.match(res.text, /is reserved: mesh's processes record themselves under it/);
    }
    assert.equal((await ps()).length, 2);
  });

  it('attacker: no front calls the records (they name admin ports): the sidecar\'s /rpc and proxy answer 404, the admin is untouched', async () => {
    const rpc = await postJson(`${sidecar.base}/rpc`, { service: PROCESS_SERVICE, method: 'Admin.Quit', request: {} });
    assert.equal(rpc.status, 404, rpc.text);
    assert.match(rpc.text, /_mesh\.process/);
    const proxied = await http('POST', `${sidecar.base}/${PROCESS_SERVICE}/quitquitquit`);
    assert.equal(proxied.status, 404, proxied.text);
    const viaGateway = await http('POST', `${api.url}/${PROCESS_SERVICE}/quitquitquit`);
    assert.notEqual(viaGateway.status, 200);
    assert.equal((await http('GET', `${api.admin}/ready`)).status, 200);
    assert.equal((await http('GET', `${sidecar.admin}/ready`)).status, 200);
  });

  it('attacker: a record that does not parse is said on stderr and skipped; a bidi override in its strings never reaches the terminal raw', async () => {
    const bad = processService(fakeRecord('vm-1-aaaaaa', 1));
    bad.nodes[0]!.metadata.pid = 'abc';
    const escaped = processService({ ...fakeRecord('vm-2-bbbbbb', 2), name: 'evil\u202ename' });
    await registry.register(bad, { ttlMs: 60_000 });
    await registry.register(escaped, { ttlMs: 60_000 });
    try {
      const r = await runCli(['ps', reg()]);
      assert.equal(r.code, 0);
      assert.ok(r.stderr.includes('mesh: skipped process record vm-1-aaaaaa: pid "abc" is not a process id\n'), r.stderr);
      assert.ok(r.stdout.includes('evil\\u202ename'), r.stdout);
      assert.ok(!r.stdout.includes('\u202e'));
    } finally {
      await registry.deregister(bad);
      await registry.deregister(escaped);
    }
  });

  it('attacker: mesh stop of a stale record whose admin port another process holds now stops nothing', async () => {
    // A process killed hard leaves its record until the TTL; its admin port is the api's now.
    const port = Number(new URL(api.admin).port);
    const stale = processService({ ...fakeRecord('vm-3-cccccc', 3), admin: { address: '127.0.0.1', port } });
    await registry.register(stale, { ttlMs: 60_000 });
    try {
      const r = await runCli(['stop', 'vm-3-cccccc', reg()]);
      assert.equal(r.code, 1);
      assert.equal(r.stderr, `mesh: vm-3-cccccc is not running: its admin port 127.0.0.1:${port} is another process's now; its record expires within 30 s\n`);
      assert.equal((await http('GET', `${api.admin}/ready`)).status, 200);
      assert.equal(api.proc.child.exitCode, null);
    } finally {
      await registry.deregister(stale);
    }
  });

  it('mesh stop of a record whose admin does not answer says so; of a name that matches nothing or several, refuses', async () => {
    const gone = processService({ ...fakeRecord('vm-4-dddddd', 4), kind: 'proxy', admin: { address: '127.0.0.1', port: 1 } });
    await registry.register(gone, { ttlMs: 60_000 });
    try {
      const r = await runCli(['stop', 'vm-4-dddddd', reg()]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /^mesh: vm-4-dddddd is not running: its admin at 127\.0\.0\.1:1 does not answer \(.*\); its record expires within 30 s\n$/);
      const none = await runCli(['stop', 'nothing-like-it', reg()]);
      assert.equal(none.code, 1);
      assert.equal(none.stderr, 'mesh: no recorded process is named "nothing-like-it" (mesh ps lists them)\n');
      const usage = await runCli(['stop', reg()]);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /usage: mesh stop ID\|NAME\|KIND\|PID/);
    } finally {
      await registry.deregister(gone);
    }
    const second = await startGatewayProcess(dir.path, ['--handler=proxy']);
    try {
      await waitFor(async () => (await ps()).filter((p) => p.kind === 'api').length === 2, 15000);
      const several = await runCli(['stop', 'api', reg()]);
      assert.equal(several.code, 2);
      assert.match(several.stderr, /^mesh: "api" names 2 processes; name one by its ID:\nID /);
      // By pid: the one process.
      const byPid = await runCli(['stop', String(second.proc.child.pid), reg()]);
      assert.equal(byPid.code, 0, byPid.stderr);
      assert.match(byPid.stdout, /^stopped \S+-\d+-[0-9a-f]{6}\n$/);
      assert.match(byPid.stderr, new RegExp(`^mesh: stopping \\S+ \\(api, pid ${second.proc.child.pid}\\): it drains, then exits\\n$`));
      assert.equal(await second.proc.stop(), 0);
      assert.deepEqual((await ps()).map((p) => p.kind), ['api', 'sidecar']);
    } finally {
      await second.stop();
    }
  });

  it('a process stopped by a signal removes its record; mesh tap without --admin taps every recorded process, those that start later too, and lets go of those that stop', async () => {
    const escaped = (url: string) => hostOf(url).replace(/\./g, '\\.');
    const tap = startProcess(['tap', reg(), '--path=/app']);
    try {
      await tap.waitForOutput(new RegExp(`${escaped(api.admin)}: tapping`));
      await tap.waitForOutput(new RegExp(`${escaped(sidecar.admin)}: tapping`));
      // A process that starts now is tapped once its record is read (every 5 s).
      const extra = await startGatewayProcess(dir.path, ['--handler=proxy']);
      await tap.waitForOutput(new RegExp(`${escaped(extra.admin)}: tapping`), 20_000);
      await http('GET', `${extra.url}/app/late`);
      await tap.waitForOutput(new RegExp(`GET /app/late \\d{3} .* admin=${escaped(extra.admin)}$`, 'm'));
      assert.equal(await extra.stop('SIGTERM'), 0);
      assert.equal((await ps()).length, 2);
      await tap.waitForOutput(new RegExp(`${escaped(extra.admin)}: its process is no longer recorded; let go`), 20_000);
    } finally {
      assert.equal(await tap.stop('SIGTERM'), 0);
    }
  });
});

function fakeRecord(id: string, pid: number): ProcessRecord {
  return { id, kind: 'api', name: '', pid, host: 'vm', admin: { address: '127.0.0.1', port: 9 }, startedMs: Date.now(), mtls: 'off', listeners: [], version: '0.1.0' };
}

describe('mesh ps and mesh stop with --concurrency', () => {
  const dir = tempDir();
  let api: GatewayProcess;

  before(async () => {
    api = await startGatewayProcess(dir.path, ['--handler=proxy', '--concurrency=2']);
  });

  after(async () => {
    await api?.stop();
    dir.cleanup();
  });

  it('lists the primary once (its pid and admin, the workers\' listener), and mesh stop stops it and its workers', async () => {
    const ps = async (): Promise<PsRow[]> => JSON.parse((await runCli(['ps', `--registry_address=${dir.path}`, '-o', 'json'])).stdout) as PsRow[];
    const rows = await waitFor(async () => {
      const r = await ps();
      return r.length === 1 && r[0]!.listeners.length >= 2 ? r : undefined;
    }, 15000);
    const primary = rows[0]!;
    assert.equal(primary.kind, 'api');
    assert.equal(primary.pid, api.proc.child.pid);
    assert.equal(primary.admin, new URL(api.admin).host);
    assert.deepEqual(primary.listeners, [`admin=${new URL(api.admin).host}`, `gateway=127.0.0.1:${api.port}`]);
    // The primary's admin quits for its own id only.
    const other = await http('POST', `${api.admin}/quitquitquit?process=${primary.id}x`);
    assert.equal(other.status, 409);
    const stop = await runCli(['stop', primary.id, `--registry_address=${dir.path}`]);
    assert.equal(stop.code, 0, stop.stderr);
    // mesh stop waits until the record is gone, which worker 0 removes as it exits; then the primary exits 0.
    const child = api.proc.child;
    assert.equal(child.exitCode ?? (await once(child, 'exit'))[0], 0);
    assert.deepEqual(await ps(), []);
  });
});
