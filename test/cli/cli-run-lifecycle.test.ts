/**
 * `mesh run` (docs/run.md) with real processes, the app's life: SIGTERM deregisters before the app
 * gets it and exits with the app's status; a crash passes its status on and deregisters; an app that
 * never answers 200 is not registered and a warning says so; a bad file or flag exits 2 naming the
 * line and field. Waits on output lines and the registry.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { runCli, startProcess, waitFor, type RunningProcess } from '../helpers.js';
import { NODE_APP, at, docBlock, killAll, world, type World } from '../fixtures/run-world.js';

describe('mesh run: the app ends, or never becomes healthy', () => {
  let w: World;
  let proc: RunningProcess | undefined;
  before(() => {
    w = world();
    writeFileSync(join(w.dir, 'node-app.mjs'), NODE_APP);
  });
  after(async () => {
    await killAll(proc);
    await w.cleanup();
  });

  it('a program that is not there: 127, as a shell says, and the sidecar stops', async () => {
    const r = await runCli(['run', '--name=go.mesh.srv.missing', '--', join(w.dir, 'no-such-program')], w.env);
    assert.match(r.stdout, /^mesh run: go\.mesh\.srv\.missing could not be started: \S+no-such-program: ENOENT \(status 127\)$/m);
    assert.equal(r.code, 127);
  });

  it('a log file that cannot be opened: the app is not started (126), naming the file', async () => {
    const path = join(w.dir, 'logged.yaml');
    writeFileSync(path, `apps:\n  - name: go.mesh.srv.logged\n    command: [${JSON.stringify(process.execPath)}, node-app.mjs]\n    log: no-such-dir/app.log\n`);
    const r = await runCli(['run', '-f', path], w.env);
    assert.match(r.stdout, new RegExp(`^mesh run: go\\.mesh\\.srv\\.logged could not be started: log ${join(w.dir, 'no-such-dir/app.log').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: ENOENT \\(status 126\\)$`, 'm'));
    assert.equal(r.code, 126);
    assert.deepEqual(await w.nodes('go.mesh.srv.logged'), []);
  });

  it('an app that stops answering 2xx is deregistered, and registered again when it answers again', async () => {
    proc = startProcess(['run', '--name=go.mesh.srv.flaky', '--', process.execPath, 'node-app.mjs'], w.env, undefined, w.dir);
    const port = await proc.waitForPort(/PORT=(\d+)\)/);
    const registered = async (yes: boolean) => waitFor(async () => (await w.nodes('go.mesh.srv.flaky')).length === (yes ? 1 : 0), 10000);
    await registered(true);
    await fetch(`http://127.0.0.1:${port}/set-health/500`);
    await registered(false);
    await fetch(`http://127.0.0.1:${port}/set-health/200`);
    await registered(true);
    assert.equal(await proc.stop('SIGTERM'), 143);
    assert.deepEqual(await w.nodes('go.mesh.srv.flaky'), []);
    proc = undefined;
  });

  for (const [trigger, status] of [['/exit/3', 3], ['/kill', 137]] as const) {
    it(`an app that ends by itself (${trigger}): mesh run exits ${status} and the node is deregistered`, async () => {
      proc = startProcess(['run', '--name=go.mesh.srv.crashy', '--', process.execPath, 'node-app.mjs'], w.env, undefined, w.dir);
      const port = await proc.waitForPort(/PORT=(\d+)\)/);
      await waitFor(async () => (await w.nodes('go.mesh.srv.crashy')).length === 1, 10000);
      // The app may go before its answer is out: only its exit counts.
      await fetch(`http://127.0.0.1:${port}${trigger}`).catch(() => undefined);
      assert.equal(await once(proc.child, 'exit').then(([code]) => code), status);
      assert.match(proc.output(), status === 137 ? /go\.mesh\.srv\.crashy killed by SIGKILL \(status 137\)/ : /go\.mesh\.srv\.crashy exited with status 3/);
      assert.deepEqual(await w.nodes('go.mesh.srv.crashy'), []);
      proc = undefined;
    });
  }

  it('an app whose health path answers 204 is registered; SIGINT is passed on after it is deregistered: an app it kills gives 130', async () => {
    // A health path that answers 204 is healthy too (any 2xx).
    proc = startProcess(['run', '--name=go.mesh.srv.interrupted', '--', process.execPath, 'node-app.mjs'], { ...w.env, HEALTH: '204' }, undefined, w.dir);
    await waitFor(async () => (await w.nodes('go.mesh.srv.interrupted')).length === 1, 10000);
    // A Node app on one mesh run line: mesh call reaches it through the registry.
    const r = await runCli(['call', 'go.mesh.srv.interrupted', 'Node.Call', '{}'], w.env);
    assert.deepEqual([r.code, r.stdout, r.stderr], [0, '{}\n', '']);
    assert.equal(await proc.stop('SIGINT'), 130);
    const out = proc.output();
    assert.ok(at(out, /"msg":"app deregistered"/) < at(out, /go\.mesh\.srv\.interrupted killed by SIGINT \(status 130\)/), out);
    assert.deepEqual(await w.nodes('go.mesh.srv.interrupted'), []);
    proc = undefined;
  });

  it('an app that never answers 2xx is not registered; a warning says so; SIGTERM kills it: 143', async () => {
    proc = startProcess(['run', '--name=go.mesh.srv.sick', '--', process.execPath, 'node-app.mjs'], { ...w.env, HEALTH: '503' }, undefined, w.dir);
    await proc.waitForOutput(/^\[go\.mesh\.srv\.sick\] up$/m);
    // Every 5 intervals (at least 1s), not at each check.
    const line = await proc.waitForOutput(/.*app go\.mesh\.srv\.sick is not healthy yet.*/);
    assert.match(line, /"reason":"status 503"/);
    assert.match(line, /no 2xx answer from http:\/\/127\.0\.0\.1:\d+\/health\): not registered/);
    assert.deepEqual(await w.nodes('go.mesh.srv.sick'), []);
    assert.equal(await proc.stop('SIGTERM'), 143);
    assert.match(proc.output(), /go\.mesh\.srv\.sick killed by SIGTERM \(status 143\)/);
    proc = undefined;
  });
});

/** Whether the process is gone (a zombie not reaped yet counts as gone). */
function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

describe('mesh run: what the app leaves, signals, environment', () => {
  let w: World;
  let proc: RunningProcess | undefined;
  before(() => {
    w = world();
    writeFileSync(join(w.dir, 'node-app.mjs'), NODE_APP);
  });
  after(async () => {
    await killAll(proc);
    await w.cleanup();
  });

  it('an app that exits and leaves a child behind in its group: the child is killed', async () => {
    const r = await runCli(['run', '--name=go.mesh.srv.leaver', '--health_path=off', '--', 'sh', '-c', 'sleep 1000 & echo "child $!"; exit 3'], w.env);
    assert.equal(r.code, 3, r.stdout + r.stderr);
    const child = Number(/^\[go\.mesh\.srv\.leaver\] child (\d+)$/m.exec(r.stdout)?.[1]);
    assert.ok(child > 0, r.stdout);
    try {
      await waitFor(() => gone(child), 5000);
    } finally {
      if (!gone(child)) process.kill(child, 'SIGKILL');
    }
  });

  for (const [signal, status] of [['SIGHUP', 129], ['SIGQUIT', 131]] as const) {
    it(`${signal} is passed on as SIGTERM is: the app is deregistered and stopped (${status})`, async () => {
      proc = startProcess(['run', '--name=go.mesh.srv.hangup', '--drain_delay=0', '--', process.execPath, 'node-app.mjs'], w.env, undefined, w.dir);
      const pid = Number(await proc.waitForPort(/started \S+ node-app\.mjs \(pid (\d+),/));
      await waitFor(async () => (await w.nodes('go.mesh.srv.hangup')).length === 1, 10000);
      assert.equal(await proc.stop(signal), status);
      assert.match(proc.output(), new RegExp(`go\\.mesh\\.srv\\.hangup killed by ${signal} \\(status ${status}\\)`));
      assert.ok(gone(pid));
      assert.deepEqual(await w.nodes('go.mesh.srv.hangup'), []);
      proc = undefined;
    });
  }

  it("the app gets no MESH_* variable of mesh run's but MESH_SIDECAR and MESH_SIDECAR_TOKEN, unless the file's env sets one; with -f a token per app", async () => {
    const env = { ...w.env, MESH_ADMIN_TOKEN: 'admin-secret', MESH_SOMETHING_ELSE: 'x', MESH_SIDECAR_TOKEN: 'run-token-of-mesh-run' };
    const printEnv = ['sh', '-c', 'env | grep ^MESH_ | sort'];
    const one = await runCli(['run', '--name=go.mesh.srv.env', '--health_path=off', '--', ...printEnv], env);
    assert.equal(one.code, 0, one.stdout + one.stderr);
    const vars = (name: string, out: string) => [...out.matchAll(new RegExp(`^\\[${name.replace(/\./g, '\\.')}\\] (MESH_[A-Z_]+)=(.*)$`, 'gm'))].map((m) => [m[1]!, m[2]!]);
    const oneVars = vars('go.mesh.srv.env', one.stdout);
    assert.deepEqual(oneVars.map(([k]) => k), ['MESH_SIDECAR', 'MESH_SIDECAR_TOKEN']);
    // One app on the command line: MESH_SIDECAR_TOKEN of mesh run is its sidecar's --sidecar_token.
    assert.equal(oneVars[1]![1], 'run-token-of-mesh-run');

    const file = join(w.dir, 'env-apps.yaml');
    const app = (name: string, extra: string) => `  - name: ${name}\n    health_path: off\n    command: [sh, -c, 'env | grep ^MESH_ | sort']\n${extra}`;
    writeFileSync(file, `apps:\n${app('go.mesh.srv.enva', '    env:\n      MESH_ADMIN_TOKEN: given\n')}${app('go.mesh.srv.envb', '')}${app('go.mesh.srv.envc', '    sidecar:\n      sidecar_token: token-of-app-c-0123\n')}`);
    const many = await runCli(['run', '-f', file], env);
    assert.equal(many.code, 0, many.stdout + many.stderr);
    const a = Object.fromEntries(vars('go.mesh.srv.enva', many.stdout));
    const b = Object.fromEntries(vars('go.mesh.srv.envb', many.stdout));
    const c = Object.fromEntries(vars('go.mesh.srv.envc', many.stdout));
    assert.deepEqual(Object.keys(a), ['MESH_ADMIN_TOKEN', 'MESH_SIDECAR', 'MESH_SIDECAR_TOKEN']);
    assert.equal(a.MESH_ADMIN_TOKEN, 'given');
    assert.deepEqual(Object.keys(b), ['MESH_SIDECAR', 'MESH_SIDECAR_TOKEN']);
    assert.match(a.MESH_SIDECAR_TOKEN!, /^[0-9a-f]{64}$/);
    assert.match(b.MESH_SIDECAR_TOKEN!, /^[0-9a-f]{64}$/);
    assert.notEqual(a.MESH_SIDECAR_TOKEN, b.MESH_SIDECAR_TOKEN);
    assert.equal(c.MESH_SIDECAR_TOKEN, 'token-of-app-c-0123');
  });

  it('a program spawn refuses at once (an argument over the kernel\'s limit): 126, the sidecar deregistered and stopped, no stack trace', async () => {
    const file = join(w.dir, 'huge-arg.yaml');
    writeFileSync(file, `apps:\n  - name: go.mesh.srv.huge\n    health_path: off\n    command: [sh, -c, '${'x'.repeat(200_000)}']\n`);
    const r = await runCli(['run', '-f', file], w.env);
    assert.match(r.stdout, /^mesh run: go\.mesh\.srv\.huge could not be started: sh: E2BIG \(status 126\)$/m, r.stdout + r.stderr);
    assert.doesNotMatch(r.stderr, /\n\s+at /);
    assert.equal(r.code, 126);
    assert.deepEqual(await w.nodes('go.mesh.srv.huge'), []);
  });
});

describe('mesh run: errors exit 2 before anything starts', () => {
  let w: World;
  before(() => (w = world()));
  after(() => w.cleanup());

  const file = (name: string, text: string) => {
    const path = join(w.dir, name);
    writeFileSync(path, text);
    return path;
  };

  it("the docs' bad file: the line and the field", async () => {
    const path = file('mesh-apps.yaml', docBlock('# mesh-apps.yaml').replace('command: [python3, app.py]', 'command: python3 app.py'));
    const expected = docBlock('mesh: mesh-apps.yaml').replace('mesh-apps.yaml', path);
    const r = await runCli(['run', '-f', path], w.env);
    assert.equal(r.stderr, expected);
    assert.equal(r.stdout, '');
    assert.equal(r.code, 2);
  });

  const cases: Array<[string, string, string]> = [
    ['no apps', 'apps: []\n', 'line 1: apps: must be a non-empty list of apps'],
    ['a top-level field', 'apps:\n  - name: a\n    command: [x]\nversion: 2\n', 'line 4: unknown field "version" (the file has one field, apps: a list of apps)'],
    ['an unknown field', 'apps:\n  - name: a\n    command: [x]\n    ports: 80\n', 'line 4: apps[0]: unknown field "ports" (use name, command, port, health_path, env, dir, log, sidecar)'],
    ['no name', 'apps:\n  - command: [x]\n', 'line 2: apps[0].name: required: the service name the app is registered under'],
    ['a twin name', 'apps:\n  - name: a\n    command: [x]\n  - name: a\n    command: [y]\n', 'line 4: apps[1].name: "a" is also the name of apps[0]; each app needs its own name'],
    ['a bad port', 'apps:\n  - name: a\n    command: [x]\n    port: 70000\n', 'line 4: apps[0] (a).port: invalid value "70000": use a port from 1 to 65535, or auto'],
    ['a bad health path', 'apps:\n  - name: a\n    command: [x]\n    health_path: health\n', 'line 4: apps[0] (a).health_path: invalid value "health": use a path starting with / (e.g. /health), or off'],
    ['a sidecar option run sets', 'apps:\n  - name: a\n    command: [x]\n    sidecar:\n      app_port: 80\n', "line 5: apps[0] (a).sidecar.app_port: set the app's port field instead"],
    ['a flag that is not run\'s', 'apps:\n  - name: a\n    command: [x]\n    sidecar:\n      server_name: b\n', 'line 5: apps[0] (a).sidecar.server_name: not an option of mesh run (the commands that use it: sidecar)'],
    ['a bad sidecar value', 'apps:\n  - name: a\n    command: [x]\n    sidecar:\n      handler: api\n', 'line 5: apps[0] (a).sidecar.handler: invalid value "api" for flag --handler: the sidecar serves rpc (the default) or proxy'],
    ['not YAML', 'apps:\n  - name: [a\n', 'line 3: not valid YAML: '],
    ['a NUL in the command', 'apps:\n  - name: a\n    command: [x, "a\\0b"]\n', 'line 3: apps[0] (a).command: contains a NUL character (\\0), which no program or argument can hold'],
    ['a NUL in the env', 'apps:\n  - name: a\n    command: [x]\n    env:\n      K: "v\\0"\n', 'line 5: apps[0] (a).env.K: contains a NUL character (\\0), which no variable can hold'],
    ['a NUL in the dir', 'apps:\n  - name: a\n    command: [x]\n    dir: "d\\0"\n', 'line 4: apps[0] (a).dir: contains a NUL character (\\0), which no path can hold'],
    ['an empty log', 'apps:\n  - name: a\n    command: [x]\n    log: ""\n', 'line 4: apps[0].log: must be a non-empty string'],
    ['a shared log', 'apps:\n  - name: a\n    command: [x]\n    log: out.log\n  - name: b\n    command: [y]\n    log: ./out.log\n', 'line 7: apps[1] (b).log: ./out.log is also the log of a'],
  ];
  for (const [what, text, message] of cases) {
    it(`a file with ${what}`, async () => {
      const path = file('bad.yaml', text);
      const r = await runCli(['run', '-f', path], w.env);
      assert.ok(r.stderr.startsWith(`mesh: ${path}: ${message}`), r.stderr);
      assert.equal(r.code, 2);
    });
  }

  const flagCases: Array<[string[], string]> = [
    [['run', '--', 'python3', 'app.py'], 'mesh: mesh run needs --name=NAME, the service name the app is registered under (usage: mesh run --name=NAME [flags] -- COMMAND [ARG...], or mesh run -f FILE)\n'],
    [['run', '--name=a'], "mesh: mesh run needs the app's command after -- (usage: mesh run --name=NAME [flags] -- COMMAND [ARG...], or mesh run -f FILE)\n"],
    [['run', '--name=a', 'python3', '--', 'app.py'], 'mesh: unexpected argument "python3": the app\'s command goes after -- (usage: mesh run --name=NAME [flags] -- COMMAND [ARG...], or mesh run -f FILE)\n'],
    [['run', '--name=a', '--app_port=0', '--', 'x'], 'mesh: invalid value "0" for flag --app_port: use a port from 1 to 65535, or auto\n'],
    [['run', '--name=a', '--server_name=b', '--', 'x'], 'mesh: flag --server_name is not used by mesh run (the commands that use it: sidecar)\n'],
    [['run', '--name=a', '--concurrency=2', '--', 'x'], 'mesh: flag --concurrency is not used by mesh run (the commands that use it: api, sidecar, proxy)\n'],
    [['run', '-f', 'x.yaml', '--name=a'], 'mesh: flag --name is for one app (mesh run --name=NAME -- COMMAND); with -f each app sets its own in the file\n'],
    [['run', '-f', '/nonexistent/x.yaml'], 'mesh: invalid value "/nonexistent/x.yaml" for flag -f: cannot read it: ENOENT\n'],
  ];
  for (const [args, message] of flagCases) {
    it(`mesh ${args.join(' ')}`, async () => {
      const r = await runCli(args, w.env);
      assert.equal(r.stderr, message);
      assert.equal(r.code, 2);
    });
  }
});
