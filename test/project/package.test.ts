/**
 * The package as a user gets it: `npm pack` (prepack builds), `npm install <tarball>` into a fresh
 * project, a strict TypeScript service written against `@mesh-platform/mesh` only, run on a local
 * registry and called through the installed `mesh api` (HTTP) and `mesh call`; a project made by the
 * installed `mesh new service`, built, tested and run with its own scripts, every command of its
 * README run as written; publint and attw on the tarball; the tarball's file list. One pack and one
 * install for the whole file.
 *
 * Slow on purpose (pack, install, builds), so the hooks and tests get generous timeouts. The
 * install takes better-sqlite3's binary from the checkout's own build as a local prebuild
 * (withLocalPrebuild) rather than compiling it again. CI has the npm registry; locally the npm cache serves what it can (--prefer-offline).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { request } from 'undici';
import { PRINTED, ROOT, freePort, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const run = promisify(execFile);
const SLOW = 15 * 60_000;
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

/** The versions the repository builds with (so the cache has them). */
const versionOf = (name: string) => (JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;

const SERVICE = `import { runService, MeshError, type HandlerContext } from '@mesh-platform/mesh';

interface HelloRequest {
  name: string;
}
interface HelloResponse {
  msg: string;
}

await runService((mesh) => {
  mesh
    .service({ name: 'go.mesh.srv.pkgtest' })
    .handle<HelloRequest, HelloResponse>('Say.Hello', (req, ctx: HandlerContext) => {
      if (typeof req.name !== 'string') throw new MeshError(ctx.service, 400, 'name: required');
      return { msg: \`Hello \${req.name}\` };
    })
    .handle<HelloRequest, HelloResponse>('Say.Twice', async (req, ctx) => {
      const once = await mesh.call<HelloResponse>('go.mesh.srv.pkgtest', 'Say.Hello', { name: req.name }, { timeout: ctx.deadline - Date.now(), id: ctx.id });
      const msg: string = once.msg;
      return { msg: \`\${msg}, \${msg}\` };
    });
});
`;

/** Must not type-check: proves the types are real (not any). */
const WRONG = `import { Mesh } from '@mesh-platform/mesh';
const mesh = new Mesh({ clientRetries: 1 });
const res = await mesh.call<{ msg: string }>('go.mesh.srv.pkgtest', 'Say.Hello', { name: 'x' });
export const n: number = res.msg;
`;

/** A command of a README's ```sh blocks: continuation lines joined, its inline comment apart, the `# ` lines under it (what it prints). */
interface ReadmeCommand {
  command: string;
  comment: string;
  output: string[];
}

function shellCommands(markdown: string): ReadmeCommand[] {
  const commands: ReadmeCommand[] = [];
  for (const [, block] of markdown.matchAll(/```sh\n([\s\S]*?)```/g)) {
    const lines = block!.split('\n').filter((l) => l.trim() !== '');
    let last: ReadmeCommand | undefined;
    for (let i = 0; i < lines.length; i++) {
      let line = lines[i]!;
      if (line.startsWith('#')) {
        assert.ok(last, `output line with no command above it: ${line}`);
        last.output.push(line.replace(/^# ?/, ''));
        continue;
      }
      while (line.endsWith('\\') && i + 1 < lines.length) line = line.slice(0, -1) + lines[++i]!.trim();
      const m = /^(.*?)\s+#\s+(.*)$/.exec(line);
      last = { command: (m ? m[1]! : line).trim(), comment: m ? m[2]! : '', output: [] };
      commands.push(last);
    }
  }
  return commands;
}

/** A README comment of what a command prints as a regular expression: PORT any port, `(...)` any parenthesis. */
function saidPattern(comment: string): string {
  return comment
    .split(/(PORT|\(\.\.\.\))/)
    .map((part) => (part === 'PORT' ? '\\d+' : part === '(...)' ? '\\([^)\\n]+\\)' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
}

/**
 * The environment of the install, with better-sqlite3's binary for this Node (the checkout's own
 * build) as a local prebuild: its install script (prebuild-install) takes it as it would take the
 * prebuilt binary a user downloads, instead of compiling from source, which no test here is about
 * and which costs minutes on a 2-core machine. Without that build, or for another version, the
 * install compiles as before.
 */
async function withLocalPrebuild(dir: string): Promise<NodeJS.ProcessEnv> {
  const built = join(ROOT, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node');
  if (!existsSync(built)) return process.env;
  const stage = join(dir, 'stage');
  mkdirSync(join(stage, 'build/Release'), { recursive: true });
  cpSync(built, join(stage, 'build/Release/better_sqlite3.node'));
  const name = `better-sqlite3-v${versionOf('better-sqlite3')}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
  await run('tar', ['-czf', join(dir, name), '-C', stage, 'build']);
  return { ...process.env, npm_config_better_sqlite3_local_prebuilds: dir };
}

/** `sh -c COMMAND` in its own process group, so a stop ends npm, its shell and the node it starts alike. */
function startShell(command: string, cwd: string, env: NodeJS.ProcessEnv): RunningProcess {
  const child = spawn('sh', ['-c', command], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = once(child, 'exit');
  const group = -child.pid!;
  const alive = () => {
    try {
      process.kill(group, 0);
      return true;
    } catch {
      return false;
    }
  };
  return {
    child,
    output: () => out,
    waitForOutput: (re, timeoutMs = 10000) =>
      waitFor(() => {
        if (child.exitCode !== null) throw new Error(`${command} exited (${child.exitCode})`);
        const m = re.exec(out);
        return m ? m[0] : '';
      }, timeoutMs).catch((err: Error) => {
        throw new Error(`${err.message}\n--- output of ${command} ---\n${out}`);
      }),
    stop: async (signal = 'SIGTERM') => {
      if (alive()) process.kill(group, signal);
      await waitFor(() => !alive(), 15000).catch(() => alive() && process.kill(group, 'SIGKILL'));
      await exited;
      return child.exitCode;
    },
  };
}

describe('the installable package', { timeout: SLOW }, () => {
  const tmp = tempDir('mesh-package-');
  const app = join(tmp.path, 'app');
  const registryDir = join(tmp.path, 'registry');
  let tarball = '';
  let files: string[] = [];
  const processes: RunningProcess[] = [];
  const samples: string[] = [];
  const started = Date.now();

  before(
    async () => {
      // Pack a copy of the checkout: prepack builds there from scratch, and the dist/ other test
      // files are running from is not rebuilt under them.
      const source = join(tmp.path, 'source');
      cpSync(ROOT, source, {
        recursive: true,
        filter: (p) => {
          const rel = relative(ROOT, p).split(sep)[0];
          return rel !== 'node_modules' && rel !== 'dist' && rel !== '.git';
        },
      });
      symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(source, 'node_modules'), 'dir');
      mkdirSync(join(tmp.path, 'pack'));
      const packed = await run(NPM, ['pack', '--json', '--pack-destination', join(tmp.path, 'pack')], { cwd: source, maxBuffer: 64 * 1024 * 1024 });
      const info = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('[\n'))) as Array<{ filename: string; files: Array<{ path: string }> }>;
      tarball = join(tmp.path, 'pack', info[0]!.filename.replace(/^@/, '').replace('/', '-'));
      files = info[0]!.files.map((f) => f.path);

      mkdirSync(app);
      mkdirSync(registryDir);
      writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'pkgtest-app', private: true, type: 'module' }, null, 2));
      writeFileSync(
        join(app, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, outDir: 'out', types: ['node'], skipLibCheck: false }, include: ['service.ts', 'samples/*.ts'] }, null, 2),
      );
      writeFileSync(join(app, 'service.ts'), SERVICE);
      // The TypeScript samples of the README and docs/api.md are type-checked with the service.
      mkdirSync(join(app, 'samples'));
      for (const doc of ['README.md', 'docs/api.md']) {
        const blocks = [...readFileSync(join(ROOT, doc), 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
        assert.ok(blocks.length > 0, `${doc} has TypeScript samples`);
        blocks.forEach((code, i) => {
          samples.push(`${doc} sample ${i + 1}`);
          writeFileSync(join(app, 'samples', `${doc.replace(/\W/g, '_')}_${i + 1}.ts`), code);
        });
      }
      writeFileSync(join(app, 'wrong.ts'), WRONG);
      await run(
        NPM,
        ['install', tarball, `typescript@${versionOf('typescript')}`, `@types/node@${versionOf('@types/node')}`, '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'],
        { cwd: app, env: await withLocalPrebuild(join(tmp.path, 'prebuilds')), maxBuffer: 64 * 1024 * 1024, timeout: SLOW },
      );
    },
    { timeout: SLOW },
  );

  after(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    tmp.cleanup();
    process.stdout.write(`# package test: ${((Date.now() - started) / 1000).toFixed(1)} s (pack + install + checks)\n`);
  });

  it('the tarball holds what runs and nothing else', () => {
    for (const f of ['LICENSE', 'README.md', 'package.json', 'bin/mesh.js', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/cli/main.js', 'proto/api.proto', 'src/fronts/dashboard/page.html', 'src/fronts/dashboard/dashboard.js', 'src/fronts/dashboard/topology.js', 'src/fronts/dashboard/dashboard.css']) {
      assert.ok(files.includes(f), `${f} is in the tarball`);
    }
    // No source map: they point at src/*.ts, which the package does not ship.
    const stray = files.filter((f) => /^(test|bench|\.ci|examples|scripts|docs)\//.test(f) || /^dist\/(test|examples|bench)\//.test(f) || (/^src\//.test(f) && !f.startsWith('src/fronts/dashboard/')) || (f.endsWith('.ts') && !f.endsWith('.d.ts')) || f.endsWith('.map'));
    assert.deepEqual(stray, []);
  });

  it('the samples of the README and docs/api.md import the package name only', () => {
    for (const doc of ['README.md', 'docs/api.md']) {
      const text = readFileSync(join(ROOT, doc), 'utf8');
      const specifiers = [...text.matchAll(/from '([^']+)'/g)].map((m) => m[1]);
      assert.deepEqual([...new Set(specifiers)], ['@mesh-platform/mesh'], doc);
      assert.doesNotMatch(text, /@mesh-platform\/mesh\/|from '[^']*dist\//, doc);
    }
  });

  it('a strict TypeScript service (and every docs sample) type-checks against the package name alone', async () => {
    assert.ok(samples.length >= 5, samples.join(', '));
    const tsc = join(app, 'node_modules/.bin/tsc');
    await run(tsc, ['--strict', '--noEmit', '-p', 'tsconfig.json'], { cwd: app });
    const wrong = await run(tsc, ['--strict', '--noEmit', '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--target', 'ES2022', '--types', 'node', 'wrong.ts'], { cwd: app }).then(
      () => '',
      (err: { stdout: string }) => err.stdout,
    );
    assert.match(wrong, /wrong\.ts\(4,14\): error TS2322: Type 'string' is not assignable to type 'number'/);
    await run(tsc, ['-p', 'tsconfig.json'], { cwd: app });
  });

  it('the README\'s service, in a project made by `npm init -y`, builds and runs with the README\'s commands', { timeout: 5 * 60_000 }, async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('## Writing a service'), readme.indexOf('Without flags, build'));
    const commands = shellCommands(section);
    assert.deepEqual(
      commands.map((c) => c.command),
      ['npm init -y', 'npm pkg set type=module', 'npm install @mesh-platform/mesh', 'npm install --save-dev typescript @types/node', 'npx tsc --module nodenext --target es2022 --strict --types node greeter.ts', 'node greeter.js'],
    );
    const fresh = join(tmp.path, 'fresh');
    mkdirSync(fresh);
    const sample = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    // It runs beside the demo (npm start) in one mesh: no name of the demo's services.
    const demo = [...readFileSync(join(ROOT, 'src/demo/greeter.ts'), 'utf8').matchAll(/name: '([^']+)'/g)].map((m) => m[1]!);
    assert.ok(demo.length > 0);
    for (const name of demo) assert.ok(!sample.includes(`'${name}'`), `the README's service uses ${name}, a service of the demo`);
    writeFileSync(join(fresh, 'greeter.ts'), sample);
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT' && !k.startsWith('npm_')));
    env.MESH_HOME = join(tmp.path, 'fresh-home');
    env.MESH_LOG_LEVEL = 'warning';
    const sh = (command: string) => run('sh', ['-c', command], { cwd: fresh, env, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });
    const tscCommand = commands[4]!.command;
    // Both `npm install`s, done already: the app's node_modules (the package, typescript, @types/node).
    symlinkSync('../app/node_modules', join(fresh, 'node_modules'), 'dir');
    for (const { command, comment } of commands) {
      if (command.startsWith('npm install')) continue;
      if (command === 'npm pkg set type=module') {
        // Without it, the trap the README warns of: CommonJS refuses the top-level await.
        const refused = await sh(tscCommand).then(
          () => '',
          (err: { stdout: string }) => err.stdout,
        );
        assert.match(refused, /greeter\.ts\(\d+,\d+\): error TS1309: /);
      }
      if (command.startsWith('node ')) {
        const service = startShell(`${command} --registry_address=${join(tmp.path, 'fresh-registry')} --admin_address=127.0.0.1:0`, fresh, env);
        processes.push(service);
        await service.waitForOutput(new RegExp(`${saidPattern(comment)}\\n`), 30_000);
        await service.stop();
        continue;
      }
      await sh(command);
    }
    assert.equal((JSON.parse(readFileSync(join(fresh, 'package.json'), 'utf8')) as { type?: string }).type, 'module');
  });

  it('runs the service and answers through the installed mesh api and mesh call', { timeout: 5 * 60_000 }, async () => {
    const flags = [`--registry_address=${registryDir}`, '--log_level=error'];
    const service = startProcess([join(app, 'out/service.js'), ...flags, '--admin_address=off'], {}, '');
    processes.push(service);
    await service.waitForOutput(/go\.mesh\.srv\.pkgtest listening on 127\.0\.0\.1:\d+ \(node go\.mesh\.srv\.pkgtest-[0-9a-f-]+\)\n/, 30_000);

    const bin = join(app, 'node_modules/.bin/mesh');
    const api = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=off', ...flags], {}, bin);
    processes.push(api);
    const port = await api.waitForPort(PRINTED.api, 30_000);
    const res = await request(`http://127.0.0.1:${port}/rpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'go.mesh.srv.pkgtest', method: 'Say.Twice', request: { name: 'John' } }),
    });
    assert.equal(res.statusCode, 200);
    assert.equal(await res.body.text(), '{"msg":"Hello John, Hello John"}');

    const call = await run(bin, ['call', 'go.mesh.srv.pkgtest', 'Say.Hello', '{"name":"Ada"}', '--output=json', ...flags], { cwd: app });
    assert.equal(call.stdout, '{"msg":"Hello Ada"}\n');
    const refused = await run(bin, ['call', 'go.mesh.srv.pkgtest', 'Say.Hello', '{}', '--output=json', ...flags], { cwd: app }).then(
      () => undefined,
      (err: { code: number; stderr: string }) => err,
    );
    assert.equal(refused?.code, 1);
    assert.equal(refused?.stderr, '{"id":"go.mesh.srv.pkgtest","code":400,"detail":"name: required","status":"Bad Request"}\n');
  });

  it('`mesh new service` from the installed bin: the project builds and tests with its own scripts and answers as its README says', { timeout: 5 * 60_000 }, async () => {
    const bin = join(app, 'node_modules/.bin/mesh');
    const created = await run(bin, ['new', 'service', 'hello'], { cwd: app });
    assert.match(created.stdout, /^created go\.mesh\.srv\.hello in hello:\n/);
    const hello = join(app, 'hello');
    // Its `npm install`, done already: the app's node_modules (the package, typescript, @types/node).
    symlinkSync('../node_modules', join(hello, 'node_modules'), 'dir');
    // Its commands run as a user's would: no trace of this runner (nested node --test, npm's
    // variables), one mesh home for the service and the CLI, as its README says.
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT' && !k.startsWith('npm_')));
    env.MESH_HOME = join(tmp.path, 'home');
    env.MESH_LOG_LEVEL = 'warning';
    env.MESH_DRAIN_DELAY = '0s';
    const sh = (command: string) => run('sh', ['-c', command], { cwd: hello, env, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });

    // The versions its package.json asks for are the ones installed (npm ls fails on a mismatch).
    const ls = await sh('npm ls --json --depth=0').then(
      (r) => r.stdout,
      (err: { stdout: string }) => err.stdout,
    );
    const deps = JSON.parse(ls) as { problems?: string[]; dependencies?: Record<string, unknown> };
    assert.equal(deps.problems, undefined, ls);
    assert.deepEqual(Object.keys(deps.dependencies ?? {}).sort(), ['@mesh-platform/mesh', '@types/node', 'typescript'], ls);

    // Every command of its README, in order, as written (the gateway on a free port instead of :8080).
    const commands = shellCommands(readFileSync(join(hello, 'README.md'), 'utf8'));
    assert.deepEqual(
      commands.map((c) => c.command),
      [
        'npm install',
        'npm run build',
        'npm start',
        'npx mesh list services',
        `npx mesh call go.mesh.srv.hello Hello.Call '{"name":"John"}'`,
        'npx mesh api --handler=rpc --namespace=go.mesh.srv',
        `curl -XPOST localhost:8080/hello/call -H 'content-type: application/json' -d '{"name":"John"}'`,
        'npx mesh api',
        `curl -XPOST localhost:8080/rpc -H 'content-type: application/json' -d '{"service":"go.mesh.srv.hello","method":"Hello.Call","request":{"name":"John"}}'`,
        'npm test',
      ],
    );
    let gateway: RunningProcess | undefined;
    let gatewayPort = 0;
    for (const { command, comment, output } of commands) {
      if (command === 'npm install') continue;
      if (command === 'npm start') {
        // `npm start  # go.mesh.srv.hello listening on 127.0.0.1:PORT (...), admin on 127.0.0.1:PORT`; a flag after `--`.
        const admin = await freePort();
        const service = startShell(`${command} -- --admin_address=127.0.0.1:${admin}`, hello, env);
        processes.push(service);
        const said = saidPattern(comment);
        assert.match(await service.waitForOutput(new RegExp(`${said}\\n`), 30_000), new RegExp(`, admin on 127\\.0\\.0\\.1:${admin}\\n$`));
        continue;
      }
      if (command.startsWith('npx mesh api')) {
        assert.equal(comment, ':8080', command);
        await gateway?.stop();
        gatewayPort = await freePort();
        gateway = startShell(command, hello, { ...env, MESH_ADDRESS: `127.0.0.1:${gatewayPort}`, MESH_ADMIN_ADDRESS: 'off' });
        processes.push(gateway);
        await gateway.waitForOutput(new RegExp(`mesh api listening on http://127\\.0\\.0\\.1:${gatewayPort} `), 30_000);
        if (command.includes('--handler=rpc')) {
          // The path of the README with another client and other names.
          for (const [body, answer] of [
            ['{"name":"Ada"}', '{"msg":"Hello Ada"}'],
            ['{}', '{"msg":"Hello world"}'],
          ] as const) {
            const res = await request(`http://127.0.0.1:${gatewayPort}/hello/call`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
            assert.equal(res.statusCode, 200);
            assert.match(String(res.headers['content-type']), /^application\/json/);
            assert.equal(await res.body.text(), answer);
          }
        }
        continue;
      }
      const { stdout } = await sh(command.replaceAll('localhost:8080', `127.0.0.1:${gatewayPort}`));
      if (output.length > 0) assert.equal(stdout.replace(/\n$/, ''), output.join('\n'), command);
      if (command === 'npm run build') assert.ok(existsSync(join(hello, 'dist/src/main.js')) && existsSync(join(hello, 'dist/test/handler.test.js')));
      if (command === 'npx mesh list services') assert.match(stdout, /^go\.mesh\.srv\.hello$/m);
      // TAP on Node 20 (not a terminal), the spec reporter's summary from Node 23 on.
      if (command === 'npm test') assert.match(stdout, /^(?:# |ℹ )pass 2\n(?:# |ℹ )fail 0\n/m);
    }
  });

  it('`mesh new service --mesh=TARBALL`: the project depends on the tarball, installs it offline and type-checks with it', { timeout: SLOW }, async () => {
    const bin = join(app, 'node_modules/.bin/mesh');
    await run(bin, ['new', 'service', 'offline', `--mesh=${tarball}`], { cwd: app });
    const dir = join(app, 'offline');
    const p = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    assert.deepEqual(p.dependencies, { '@mesh-platform/mesh': `file:${tarball}` });
    // Offline: everything comes from the tarball and the npm cache the first install filled. No
    // install scripts (the native build is the first install's business): the type-check needs none.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT' && !k.startsWith('npm_')));
    await run(NPM, ['install', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, env, maxBuffer: 64 * 1024 * 1024, timeout: SLOW });
    const installed = JSON.parse(readFileSync(join(dir, 'node_modules/@mesh-platform/mesh/package.json'), 'utf8')) as { version: string };
    assert.equal(installed.version, (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version);
    await run(join(dir, 'node_modules/.bin/tsc'), ['--noEmit', '-p', 'tsconfig.json'], { cwd: dir });
  });

  it('publint and attw (ESM only: node16 from ESM and bundler) pass on the tarball', async () => {
    const lint = await run(join(ROOT, 'node_modules/.bin/publint'), ['run', tarball, '--strict'], { cwd: tmp.path });
    assert.match(lint.stdout, /All good!/);
    // `attw --pack` analyses the tarball `npm pack` makes; this is that tarball (packing again would build again).
    await run(join(ROOT, 'node_modules/.bin/attw'), [tarball, '--profile', 'esm-only', '--format', 'ascii'], { cwd: tmp.path });
  });
});
