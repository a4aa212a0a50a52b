/** `--semi_space_mb` (src/cli/heap-size.ts): when a server restarts itself, and with which arguments. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { keepsNodeHeap, sizeYoungGeneration, type HeapSizing } from '../../src/cli/heap-size.js';

class Restarted extends Error {
  constructor(readonly file: string, readonly args: string[], readonly env: NodeJS.ProcessEnv) {
    super('restarted');
  }
}

function proc(over: Partial<HeapSizing> = {}): HeapSizing {
  return {
    execArgv: ['--import', 'x.mjs'],
    argv: ['/usr/bin/node', '/app/main.js', 'sidecar', '--address=:8081'],
    env: { A: '1' },
    execPath: '/usr/bin/node',
    execve: (file, args, env) => {
      throw new Restarted(file, args, env);
    },
    ...over,
  };
}

describe('--semi_space_mb', () => {
  it('restarts node in place with --max-semi-space-size first, then node\'s own flags, the script and its arguments, the same environment', () => {
    assert.throws(
      () => sizeYoungGeneration(4, proc()),
      (e: unknown) => {
        assert.ok(e instanceof Restarted);
        assert.equal(e.file, '/usr/bin/node');
        assert.deepEqual(e.args, ['/usr/bin/node', '--max-semi-space-size=4', '--import', 'x.mjs', '/app/main.js', 'sidecar', '--address=:8081']);
        assert.deepEqual(e.env, { A: '1' });
        return true;
      },
    );
  });

  it('keeps Node\'s size, saying why: 0, a size given to node (flag or NODE_OPTIONS, either spelling), a Node without execve', () => {
    assert.equal(keepsNodeHeap(0, proc()), '--semi_space_mb=0');
    assert.equal(sizeYoungGeneration(0, proc()), '--semi_space_mb=0');
    assert.equal(keepsNodeHeap(4, proc({ execArgv: ['--max-semi-space-size=8'] })), 'node was given --max-semi-space-size');
    assert.equal(keepsNodeHeap(4, proc({ execArgv: ['--max-semi-space-size', '8'] })), 'node was given --max-semi-space-size');
    assert.equal(keepsNodeHeap(4, proc({ execArgv: ['--max_semi_space_size=8'] })), 'node was given --max-semi-space-size');
    assert.equal(keepsNodeHeap(4, proc({ env: { NODE_OPTIONS: '--enable-source-maps --max-semi-space-size=8' } })), 'node was given --max-semi-space-size');
    assert.match(keepsNodeHeap(4, proc({ execve: undefined }))!, /^this Node\.js \(v\d+\.\d+\.\d+\) cannot restart a process in place \(process\.execve: Node 22\.15 or later\)$/);
    // Already restarted: the flag is in execArgv, so it does not loop.
    assert.equal(keepsNodeHeap(4, proc({ execArgv: ['--max-semi-space-size=4', '--import', 'x.mjs'] })), 'node was given --max-semi-space-size');
  });
});
