/**
 * `mesh run` (docs/run.md) with real processes: the docs' Python app joins the mesh with one
 * `mesh run` line and `mesh call` (another process) reaches it; `mesh run -f` runs the docs' Python
 * and Node apps, the Node app calling the Python one through its own sidecar with the token it got;
 * SIGTERM deregisters before the app gets it and exits with the app's status; a crash passes its
 * status on and deregisters; an app that never answers 200 is not registered and a warning says
 * so; a bad file or flag exits 2 naming the line and field. Waits on output lines and the registry.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';

const DOC = readFileSync(join(ROOT, 'docs/run.md'), 'utf8');

/** The code block of the docs whose first line starts with `first`. */
function docBlock(first: string): string {
  const blocks = [...DOC.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const found = blocks.find((b) => b.startsWith(first));
  assert.ok(found, `docs/run.md has a block starting with ${first}`);
  return found;
}

/** Words of a shell line (single quotes only, as the docs' samples use). */
function words(line: string): string[] {
  return [...line.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

/** A `mesh ...` line of the docs' sh blocks, as CLI arguments, and the `# ` lines after it (its output). */
function docCommand(prefix: string): { args: string[]; expected: string } {
  const lines = DOC.split('\n');
  const i = lines.findIndex((l) => l.startsWith(prefix));
  assert.ok(i >= 0, `docs/run.md has the line ${prefix}`);
  const expected: string[] = [];
  for (let j = i + 1; lines[j]!.startsWith('# '); j++) expected.push(lines[j]!.slice(2));
  return { args: words(lines[i]!).slice(1), expected: expected.length ? expected.join('\n') + '\n' : '' };
}

interface World {
  dir: string;
  env: Record<string, string>;
  registry: Registry;
  nodes: (service: string) => Promise<Array<{ address: string; port: number }>>;
  cleanup: () => Promise<void>;
}

/** A directory with the docs' files, a registry of its own, and checks every 100ms (MESH_HEALTHCHECK_INTERVAL). */
function world(): World {
  const t = tempDir('mesh-run-');
  const registryDir = join(t.path, 'registry');
  mkdirSync(registryDir);
  writeFileSync(join(t.path, 'app.py'), docBlock('# app.py'));
  writeFileSync(join(t.path, 'relay.mjs'), docBlock('// relay.mjs'));
  writeFileSync(join(t.path, 'mesh-apps.yaml'), docBlock('# mesh-apps.yaml'));
  const registry = createRegistry('local', registryDir);
  return {
    dir: t.path,
    env: { MESH_REGISTRY_ADDRESS: registryDir, MESH_HOME: join(t.path, 'home'), MESH_HEALTHCHECK_INTERVAL: '100ms', MESH_LOG_FORMAT: 'json' },
    registry,
    nodes: async (service) => (await registry.getService(service)).flatMap((s) => s.nodes),
    cleanup: async () => {
      await registry.close();
      t.cleanup();
    },
  };
}

/**
 * Kills mesh run and its apps, which run in process groups of their own (after a failed test: a
 * SIGKILL of mesh run alone would leave them running).
 */
async function killAll(proc: RunningProcess | undefined): Promise<void> {
  if (!proc) return;
  await proc.stop('SIGKILL');
  for (const m of proc.output().matchAll(/\(pid (\d+), PORT=/g)) {
    try {
      process.kill(-Number(m[1]), 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/** Index of the first match in the output (fails when absent). */
function at(out: string, re: RegExp): number {
  const m = re.exec(out);
  assert.ok(m, `output has ${re}:\n${out}`);
  return m.index;
}

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
  });
});

/** A Node app: /health answers HEALTH (default 200), /set-health/N changes it; /exit/N exits with N; /kill kills itself with SIGKILL. */
const NODE_APP = `
import { createServer } from 'node:http';
let health = Number(process.env.HEALTH ?? 200);
createServer((req, res) => {
  if (req.url === '/health') return res.writeHead(health).end();
  if (req.url.startsWith('/set-health/')) { health = Number(req.url.slice(12)); return res.end(); }
  if (req.url.startsWith('/exit/')) { res.end(); setImmediate(() => process.exit(Number(req.url.slice(6)))); return; }
  if (req.url === '/kill') { res.end(); setImmediate(() => process.kill(process.pid, 'SIGKILL')); return; }
  res.end('{}');
}).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('up'));
`;

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
    ['an unknown field', 'apps:\n  - name: a\n    command: [x]\n    ports: 80\n', 'line 4: apps[0]: unknown field "ports" (use name, command, port, health_path, env, dir, sidecar)'],
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
