/**
 * `--semi_space_mb` on a real `mesh sidecar`: where Node can restart a process in place (22.15 and
 * later) the running process is node with `--max-semi-space-size` (its /proc cmdline), same pid;
 * 0, or a size the user gave node, keeps Node's own; on an older Node the process runs unchanged.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { http, PRINTED, startProcess } from '../helpers.js';

const canRestart = typeof (process as { execve?: unknown }).execve === 'function';

async function nodeArgsOf(flags: string[], env: Record<string, string> = {}): Promise<string[]> {
  const proc = startProcess(['sidecar', '--registry=memory', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--log_level=warning', ...flags], env);
  try {
    const admin = await proc.waitForPort(PRINTED.sidecarAdmin);
    assert.equal((await http('GET', `http://127.0.0.1:${admin}/ready`)).status, 200);
    const argv = readFileSync(`/proc/${proc.child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    return argv.slice(1, argv.findIndex((a) => a.endsWith('main.js')));
  } finally {
    await proc.stop();
  }
}

describe(`mesh sidecar --semi_space_mb (process.execve ${canRestart ? 'present' : 'absent'}: ${process.version})`, () => {
  it('the default is 4 MiB', async () => {
    assert.deepEqual(await nodeArgsOf([]), canRestart ? ['--max-semi-space-size=4'] : []);
  });

  it('a size of the flag', async () => {
    assert.deepEqual(await nodeArgsOf(['--semi_space_mb=2']), canRestart ? ['--max-semi-space-size=2'] : []);
  });

  it("0 keeps Node's own size", async () => {
    assert.deepEqual(await nodeArgsOf(['--semi_space_mb=0']), []);
  });

  it('a size given to node in NODE_OPTIONS wins', async () => {
    assert.deepEqual(await nodeArgsOf([], { NODE_OPTIONS: '--max-semi-space-size=8' }), []);
  });
});
