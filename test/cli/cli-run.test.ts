/**
 * `mesh run` (docs/run.md) with real processes: the docs' Python app joins the mesh with one
 * `mesh run` line and `mesh call` (another process) reaches it; `mesh run -f` runs the docs' Python
 * and Node apps, the Node app calling the Python one through its own sidecar with the token it got;
 * in a strict mesh an app joins with mutual TLS. Waits on output lines and the registry.
 * The app's end, signals and bad input: cli-run-lifecycle.test.ts.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, runCli, startProcess, waitFor, type RunningProcess } from '../helpers.js';
import { at, docBlock, docCommand, killAll, world, type World } from '../fixtures/run-world.js';

describe('mesh run: the docs samples', () => {
  let w: World;
  let proc: RunningProcess | undefined;
  before(() => (w = world()));
  after(async () => {
    await killAll(proc);
    await w.cleanup();
  });

  it('a Python app joins with one line; mesh call reaches it; SIGTERM deregisters first and exits with its status', async () => {
    const { args } = docCommand('mesh run --name=go.mesh.srv.python');
    proc = startProcess(args, w.env, undefined, w.dir);
    const port = await proc.waitForPort(/started python3 app\.py \(pid \d+, PORT=(\d+)\)/);
    await proc.waitForOutput(new RegExp(`^\\[go\\.mesh\\.srv\\.python\\] listening on ${port}$`, 'm'));
    const [node] = await waitFor(async () => ((await w.nodes('go.mesh.srv.python')).length === 1 ? w.nodes('go.mesh.srv.python') : undefined), 10000);
    assert.deepEqual({ address: node!.address, port: node!.port }, { address: '127.0.0.1', port });
    // What the docs show it prints (ports, pids and times vary).
    for (const line of docBlock('mesh run: go.mesh.srv.python: mesh sidecar').trimEnd().split('\n')) {
      assert.match(proc.output(), new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\d{4,5}/g, '\\d+')}$`, 'm'));
    }
    // The checks before the app has started are no warning (mesh run's own says when it is slow).
    const untilHealthy = proc.output().slice(0, at(proc.output(), /"msg":"app is healthy"/));
    assert.doesNotMatch(untilHealthy, /"level":"warning"/);

    const call = docCommand('mesh call go.mesh.srv.python');
    const r = await runCli(call.args, w.env);
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, call.expected);
    assert.equal(r.code, 0);
    // The app's request log, prefixed.
    await proc.waitForOutput(/^\[go\.mesh\.srv\.python\] "POST \/ HTTP\/1\.1" 200 -$/m);

    assert.equal(await proc.stop('SIGTERM'), 0);
    const out = proc.output();
    assert.ok(at(out, /"msg":"app deregistered"/) < at(out, /mesh run: go\.mesh\.srv\.python exited with status 0/), out);
    assert.deepEqual(await w.nodes('go.mesh.srv.python'), []);
    proc = undefined;
  });

  it('Ctrl-C (SIGINT) stops the Python app of the docs quietly: status 0, no traceback; its health checks are not logged', async () => {
    const { args } = docCommand('mesh run --name=go.mesh.srv.python');
    proc = startProcess(args, w.env, undefined, w.dir);
    await proc.waitForOutput(/"msg":"app registered"/);
    // A call after the health checks: its line in the app's log comes after theirs, had they any.
    const call = docCommand('mesh call go.mesh.srv.python');
    assert.equal((await runCli(call.args, w.env)).code, 0);
    await proc.waitForOutput(/^\[go\.mesh\.srv\.python\] "POST \/ HTTP\/1\.1" 200 -$/m);
    assert.equal(await proc.stop('SIGINT'), 0);
    const out = proc.output();
    assert.match(out, /mesh run: go\.mesh\.srv\.python exited with status 0/);
    assert.doesNotMatch(out, /Traceback|KeyboardInterrupt|GET \/health/);
    proc = undefined;
  });

  it('-f: the Python and the Node app, the Node app calling through its sidecar with MESH_SIDECAR_TOKEN', async () => {
    const { args } = docCommand('mesh run -f mesh-apps.yaml');
    proc = startProcess(args, w.env, undefined, w.dir);
    await waitFor(async () => (await w.nodes('go.mesh.srv.python')).length === 1 && (await w.nodes('go.mesh.srv.relay')).length === 1, 10000);
    await proc.waitForOutput(/^\[go\.mesh\.srv\.python\] listening on \d+$/m);
    await proc.waitForOutput(/^\[go\.mesh\.srv\.relay\] listening on \d+$/m);

    const call = docCommand('mesh call go.mesh.srv.relay');
    const r = await runCli(call.args, w.env);
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, call.expected);

    // Without the token the sidecar refuses: the app's token is what let it through.
    const sidecar = /mesh run: go\.mesh\.srv\.relay: mesh sidecar listening on (http:\/\/\S+) /.exec(proc.output())![1]!;
    const refused = await fetch(`${sidecar}/registry`);
    assert.equal(refused.status, 401);

    assert.equal(await proc.stop('SIGTERM'), 0);
    const out = proc.output();
    assert.ok(at(out, /"app":"go\.mesh\.srv\.relay"[^\n]*"msg":"app deregistered"/) < at(out, /^\[go\.mesh\.srv\.relay\] stopping$/m), out);
    assert.match(out, /mesh run: go\.mesh\.srv\.python exited with status 0/);
    assert.deepEqual(await w.nodes('go.mesh.srv.python'), []);
    assert.deepEqual(await w.nodes('go.mesh.srv.relay'), []);
    proc = undefined;
    // The relay's `log:` file has its output, whole lines, without the prefix; the Python app's is not there.
    const logged = readFileSync(join(w.dir, 'relay.log'), 'utf8');
    assert.match(logged, /^listening on \d+\n/);
    assert.match(logged, /\nstopping\n$/);
    assert.doesNotMatch(logged, /\[go\.mesh\.srv|Hello\.Say/);
    assert.equal(statSync(join(w.dir, 'relay.log')).mode & 0o777, 0o600);
  });
});

describe("mesh run: the mesh's mutual TLS (docs/run.md, Mutual TLS)", () => {
  let w: World;
  let who: RunningProcess | undefined;
  let proc: RunningProcess | undefined;
  before(() => (w = world()));
  after(async () => {
    await killAll(proc);
    await who?.stop('SIGKILL');
    await w.cleanup();
  });

  it('in a strict mesh, an app run without --mtls joins with --mtls=strict and a strict caller reaches it; one run with --mtls=off is plain, refused by a strict caller, and mesh check names it', async () => {
    // The strict mesh: a framework service with --mtls=strict (it makes the mesh CA in $MESH_HOME/ca), as mesh dev's are.
    who = startProcess(['--import', 'tsx', join(ROOT, 'test/fixtures/who-service.ts'), '--mtls=strict', '--register_ttl=30s', '--log_level=warning'], w.env, '');
    await who.waitForOutput(/listening on/);
    const ca = join(w.env.MESH_HOME!, 'ca');

    proc = startProcess(['run', '--name=go.mesh.srv.python', '--', 'python3', 'app.py'], w.env, undefined, w.dir);
    await proc.waitForOutput(/"msg":"app registered"/);
    assert.ok(`\n${proc.output()}`.includes(`\nmesh run: mTLS strict, as the mesh's: its 1 node serves mutual TLS; certificates from the mesh CA in ${ca} (--mtls=off runs the app without)\n`), proc.output());
    assert.match(proc.output(), /^mesh run: go\.mesh\.srv\.python: inbound listening on 127\.0\.0\.1:\d+ for go\.mesh\.srv\.python \(mutual TLS, --mtls=strict\)$/m);
    const [node] = await w.registry.getService('go.mesh.srv.python').then((v) => v.flatMap((s) => s.nodes));
    assert.equal(node!.metadata.mtls, 'true');
    // A strict caller (as mesh dev's gateway is) calls it over mutual TLS.
    const strict = await runCli(['call', '--mtls=strict', 'go.mesh.srv.python', 'Hello.Say', '{"name":"Ada"}', '--output=json'], w.env);
    assert.equal(strict.stderr, '');
    assert.deepEqual(JSON.parse(strict.stdout), { msg: 'Hello Ada', endpoint: 'Hello.Say' });
    assert.equal(await proc.stop('SIGTERM'), 0);
    proc = undefined;

    // --mtls=off: plain, as before; a strict caller refuses it and mesh check names the node.
    proc = startProcess(['run', '--mtls=off', '--name=go.mesh.srv.python', '--', 'python3', 'app.py'], w.env, undefined, w.dir);
    await proc.waitForOutput(/"msg":"app registered"/);
    assert.doesNotMatch(proc.output(), /mesh run: mTLS/);
    const [plain] = await w.registry.getService('go.mesh.srv.python').then((v) => v.flatMap((s) => s.nodes));
    assert.equal(plain!.metadata.mtls, undefined);
    const refused = await runCli(['call', '--mtls=strict', 'go.mesh.srv.python', 'Hello.Say', '{}'], w.env);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /does not serve mutual TLS \(no mtls=true in its registry metadata\); not called in strict mode/);
    const check = await runCli(['check', '--output=json'], w.env);
    const findings = (JSON.parse(check.stdout) as Array<{ level: string; check: string; message: string }>).filter((f) => f.check === 'mtls');
    assert.deepEqual(findings, [
      {
        level: 'warning',
        check: 'mtls',
        message: `go.mesh.srv.python node ${plain!.id} at 127.0.0.1:${plain!.port} does not serve mutual TLS, while 1 node of the mesh does: callers with --mtls=strict (as mesh dev's gateway) do not call it (502); start it with --mtls=strict (mesh run: --mtls=strict)`,
      },
    ]);
    assert.equal(check.code, 0, check.stdout);
    assert.equal(await proc.stop('SIGTERM'), 0);
    proc = undefined;
  });
});

