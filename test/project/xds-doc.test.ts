/**
 * docs/xds.md's proxyless gRPC walk-through, as written: its greeter.mjs, protos/greeter.proto,
 * bootstrap.json and client.mjs in a directory of the package (so `@mesh-platform/mesh` and the
 * gRPC packages resolve as in a project), its three commands run in order, and the client prints
 * `Hello xDS`. Only the ports change (a free one for 18000, any for the admin), and the registry is
 * a directory of the test's own.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const doc = readFileSync(join(ROOT, 'docs/xds.md'), 'utf8');
const walkThrough = doc.slice(doc.indexOf('## Proxyless gRPC in Node'));

/** The fenced block of `lang` that follows `after` in the walk-through. */
function block(lang: string, after: string): string {
  const from = walkThrough.indexOf(after);
  assert.ok(from >= 0, `docs/xds.md has no "${after}"`);
  const m = new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(walkThrough.slice(from));
  assert.ok(m, `no ${lang} block after "${after}"`);
  return m[1]!;
}

describe('docs/xds.md: the proxyless gRPC walk-through', () => {
  const home = tempDir('mesh-xds-doc-');
  const dir = mkdtempSync(join(ROOT, '.tmp-xds-doc-'));
  const running: RunningProcess[] = [];
  const children: ChildProcess[] = [];
  let port = 0;
  let commands: string[] = [];
  const env = { MESH_HOME: home.path, MESH_ADMIN_ADDRESS: '127.0.0.1:0' };

  before(async () => {
    port = await freePort();
    const withPort = (text: string) => text.replaceAll('127.0.0.1:18000', `127.0.0.1:${port}`);
    writeFileSync(join(dir, 'greeter.mjs'), block('js', '`greeter.mjs`'));
    mkdirSync(join(dir, 'protos'));
    writeFileSync(join(dir, 'protos/greeter.proto'), block('proto', '`protos/greeter.proto`'));
    writeFileSync(join(dir, 'bootstrap.json'), withPort(block('json', '`bootstrap.json`')));
    writeFileSync(join(dir, 'client.mjs'), block('js', '`client.mjs`'));
    commands = withPort(block('sh', 'Run the control plane')).trim().split('\n');
  });
  after(async () => {
    for (const c of children) {
      if (c.exitCode === null) {
        c.kill('SIGTERM');
        await once(c, 'exit');
      }
    }
    for (const p of running) await p.stop();
    rmSync(dir, { recursive: true, force: true });
    home.cleanup();
  });

  it('the three commands: the client prints Hello xDS', async () => {
    assert.deepEqual(commands, [
      `mesh xds --address=127.0.0.1:${port} &`,
      'node greeter.mjs --server_protocol=grpc --proto_path=./protos &',
      'GRPC_XDS_BOOTSTRAP=bootstrap.json node client.mjs',
    ]);
    const xds = startProcess(commands[0]!.replace(/ &$/, '').split(' ').slice(1), env);
    running.push(xds);
    const admin = `http://127.0.0.1:${await xds.waitForPort(/mesh xds admin on http:\/\/\S+:(\d+)/)}`;
    // The greeter runs in the walk-through's directory, as the doc's `node greeter.mjs` does.
    const greeter = spawn(process.execPath, commands[1]!.replace(/ &$/, '').split(' ').slice(1), { cwd: dir, env: { ...process.env, ...env }, stdio: 'ignore' });
    children.push(greeter);
    // Not a race: the client asks only once the control plane serves the service's endpoints.
    await waitFor(async () => /^go\.mesh\.srv\.greeter::127\.0\.0\.1:\d+::/m.test((await http('GET', `${admin}/clusters`)).text), 20_000);
    const [assignment, node, script] = commands[2]!.split(' ');
    const [name, value] = assignment!.split('=');
    assert.equal(node, 'node');
    const client = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, [script!], { cwd: dir, env: { ...process.env, ...env, [name!]: value! } });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      child.on('exit', (code) => resolve({ code, out }));
    });
    assert.equal(client.out, 'Hello xDS\n');
    assert.equal(client.code, 0);
  });
});
