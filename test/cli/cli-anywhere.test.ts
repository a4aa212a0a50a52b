/**
 * docs/cli.md "From any directory": the command it shows, run as written (the checkout's path for
 * /path/to/checkout) from a directory that is no project, prints what its comment says.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ROOT, tempDir } from '../helpers.js';

const run = promisify(execFile);

describe('the CLI from a directory outside the project', () => {
  const tmp = tempDir('mesh-anywhere-');
  after(() => tmp.cleanup());

  it('docs/cli.md\'s command runs from anywhere and prints what it says', async () => {
    const doc = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');
    const section = doc.slice(doc.indexOf('## From any directory'), doc.indexOf('## Help'));
    const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
    const m = /^(node \/path\/to\/checkout\/\S+ version)\s+#\s+(\S+ \S+)/.exec(block);
    assert.ok(m, block);
    const { stdout } = await run('sh', ['-c', m[1]!.replace('/path/to/checkout', ROOT)], { cwd: tmp.path });
    assert.equal(stdout, `${m[2]!}\n`);
  });
});
