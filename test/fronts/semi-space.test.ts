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

/** The node flags the running sidecar has (its /proc cmdline), and whether it said the size was not applied. */
async function started(flags: string[], env: Record<string, string> = {}): Promise<{ nodeArgs: string[]; warned: boolean; output: string }> {
  const proc = startProcess(['sidecar', '--registry=memory', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--log_level=warning', ...flags], env);
  try {
    const admin = await proc.waitForPort(PRINTED.sidecarAdmin);
    assert.equal((await http('GET', `http://127.0.0.1:${admin}/ready`)).status, 200);
    const argv = readFileSync(`/proc/${proc.child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    // The warning is written before the server starts, so it is in the output by the time the admin answers.
    return { nodeArgs: argv.slice(1, argv.findIndex((a) => a.endsWith('main.js'))), warned: proc.output().includes('is not applied'), output: proc.output() };
  } finally {
    await proc.stop();
  }
}

async function nodeArgsOf(flags: string[], env: Record<string, string> = {}): Promise<string[]> {
  return (await started(flags, env)).nodeArgs;
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

  it('a size given where Node cannot restart the process says so, once, naming NODE_OPTIONS; the default and 0 say nothing', async () => {
    const given = await started(['--semi_space_mb=2']);
    if (canRestart) assert.equal(given.warned, false, given.output);
    else {
      const line = `mesh: --semi_space_mb=2 is not applied: this Node.js (${process.version}) cannot restart a process in place (process.execve: Node 22.15 or later); give node the size instead: NODE_OPTIONS=--max-semi-space-size=2`;
      assert.equal(given.output.split(line).length - 1, 1, given.output);
    }
    assert.equal((await started([])).warned, false);
    assert.equal((await started(['--semi_space_mb=0'])).warned, false);
    assert.equal((await started(['--semi_space_mb=2'], { NODE_OPTIONS: '--max-semi-space-size=8' })).warned, false);
  });
});
