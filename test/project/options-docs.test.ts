/** The flag tables of docs/ are generated from the option schema: each is up to date (else run `npm run docs:options`). */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { OPTION_DOCS, updateOptionTables } from '../../src/cli/options-doc.js';
import { OPTION_GROUPS, optionEntries } from '../../src/base/options/schema.js';
import { ROOT } from '../helpers.js';

describe('generated option tables', () => {
  it('every table in docs/ is what the schema gives (npm run docs:options rewrites them)', () => {
    for (const file of OPTION_DOCS) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      assert.equal(updateOptionTables(text), text, `${file} has a flag table that is out of date: run npm run docs:options`);
    }
  });

  it('docs/cli.md has a table for every group that has flags, so every flag is documented', () => {
    const text = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');
    const used = new Set(optionEntries().map(([, spec]) => spec.group));
    for (const group of Object.keys(OPTION_GROUPS)) {
      assert.equal(text.includes(`<!-- options:begin group=${group} -->`), used.has(group as 'other'), group);
    }
    for (const [key] of optionEntries()) assert.match(text, new RegExp(`^\\| \`--${key}\` \\|`, 'm'));
  });

  it('a stale table is rewritten; an unknown group is an error', () => {
    const stale = 'a\n<!-- options:begin group=client -->\n| old |\n<!-- options:end -->\nb\n';
    const fresh = updateOptionTables(stale);
    assert.notEqual(fresh, stale);
    assert.match(fresh, /^\| `--client_request_timeout` \| `MESH_CLIENT_REQUEST_TIMEOUT` \| duration \| `5s` \|/m);
    assert.ok(fresh.startsWith('a\n<!-- options:begin group=client -->\n') && fresh.endsWith('<!-- options:end -->\nb\n'));
    assert.throws(() => updateOptionTables('<!-- options:begin group=nope -->\n<!-- options:end -->'), /names no group "nope"/);
  });
});
