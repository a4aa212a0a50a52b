/**
 * A port in use at start: the message names the listener, the process that holds the port (a mesh
 * process by its command) and the flag to change; real processes, the holder a `mesh api`.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { portHolder } from '../../src/base/util/listen-error.js';
import { PRINTED, runCli, startProcess, tempDir, type RunningProcess } from '../helpers.js';

describe('a listen address in use', { skip: process.platform !== 'linux' && 'reads /proc' }, () => {
  const dir = tempDir('mesh-listen-');
  let holder: RunningProcess;
  let front = 0;
  let admin = 0;
  const common = ['--registry=memory', '--log_level=warning'];

  before(async () => {
    holder = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', ...common], { MESH_HOME: dir.path });
    front = await holder.waitForPort(PRINTED.api);
    admin = await holder.waitForPort(PRINTED.apiAdmin);
  });
  after(async () => {
    await holder.stop();
    dir.cleanup();
  });

  const held = (port: number, flag: string) => `address already in use: mesh api (pid ${holder.child.pid}) listens on port ${port}; stop it, or give another ${flag}`;

  it('--admin_address', async () => {
    const r = await runCli(['sidecar', '--address=127.0.0.1:0', `--admin_address=127.0.0.1:${admin}`, ...common], { MESH_HOME: dir.path });
    assert.equal(r.code, 1);
    assert.equal(r.stderr, `mesh: admin cannot listen on 127.0.0.1:${admin}: ${held(admin, '--admin_address')}\n`);
  });

  it('the sidecar\'s --address', async () => {
    const r = await runCli(['sidecar', `--address=127.0.0.1:${front}`, '--admin_address=off', ...common], { MESH_HOME: dir.path });
    assert.equal(r.code, 1);
    assert.equal(r.stderr, `mesh: sidecar cannot listen on 127.0.0.1:${front}: ${held(front, '--address')}\n`);
  });

  it('the gateway\'s --address', async () => {
    const r = await runCli(['api', `--address=127.0.0.1:${front}`, '--admin_address=off', ...common], { MESH_HOME: dir.path });
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`^mesh: gateway cannot listen on 127\\.0\\.0\\.1:${front}: ${held(front, '--address').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
  });

  it('a holder whose command line carries a terminal escape is named without it', async () => {
    const child = spawn(process.execPath, ['-e', "require('net').createServer().listen(0, '127.0.0.1', function () { console.log(this.address().port) })"], { argv0: 'evil\x1b[2J\nname', stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
      const holder = portHolder(Number(chunk.toString().trim()));
      assert.equal(holder?.pid, child.pid);
      assert.doesNotMatch(holder!.command, /[\x00-\x1f\x7f]/);
      assert.match(holder!.command, /^evil.*name$/);
    } finally {
      child.kill();
    }
  });
});
