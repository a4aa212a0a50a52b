/**
 * The package as a user gets it: `npm pack` (prepack builds), `npm install <tarball>` into a fresh
 * project, a strict TypeScript service written against `@mesh-platform/mesh` only, run on a local
 * registry and called through the installed `mesh api` (HTTP) and `mesh call`; publint and attw on
 * the tarball; the tarball's file list. One pack and one install for the whole file.
 *
 * Slow on purpose: the install compiles better-sqlite3 from source when no prebuilt binary can
 * be fetched (about a minute, more on a loaded machine), so the hooks and tests get generous
 * timeouts. CI has the npm registry; locally the npm cache serves what it can (--prefer-offline).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { request } from 'undici';
import { PRINTED, ROOT, startProcess, tempDir, type RunningProcess } from './helpers.js';

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
        { cwd: app, maxBuffer: 64 * 1024 * 1024, timeout: SLOW },
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
    for (const f of ['LICENSE', 'README.md', 'package.json', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/cli/main.js', 'proto/api.proto', 'src/dashboard/page.html', 'src/dashboard/dashboard.js', 'src/dashboard/dashboard.css']) {
      assert.ok(files.includes(f), `${f} is in the tarball`);
    }
    const stray = files.filter((f) => /^(test|bench|\.ci|examples|scripts|docs)\//.test(f) || /^dist\/(test|examples|bench)\//.test(f) || (/^src\//.test(f) && !f.startsWith('src/dashboard/')) || f.endsWith('.ts') && !f.endsWith('.d.ts'));
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

  it('publint and attw (ESM only: node16 from ESM and bundler) pass on the tarball', async () => {
    const lint = await run(join(ROOT, 'node_modules/.bin/publint'), ['run', tarball, '--strict'], { cwd: tmp.path });
    assert.match(lint.stdout, /All good!/);
    // `attw --pack` analyses the tarball `npm pack` makes; this is that tarball (packing again would build again).
    await run(join(ROOT, 'node_modules/.bin/attw'), [tarball, '--profile', 'esm-only', '--format', 'ascii'], { cwd: tmp.path });
  });
});
