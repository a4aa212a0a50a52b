/** `mesh check`'s pieces in process: the Node.js end-of-life table and the text of the findings. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ALL_WELL, formatFindings } from '../../src/cli/check/finding.js';
import { checkNodeVersion, nodeAdvice } from '../../src/cli/check/node-version.js';

describe('mesh check: Node.js end of life', () => {
  const day = (iso: string) => Date.parse(`${iso}T00:00:00Z`);
  it('Node.js 20 is a warning from 2026-04-30 on, not the day before', () => {
    assert.deepEqual(checkNodeVersion('v20.18.1', day('2026-04-29')), []);
    assert.deepEqual(checkNodeVersion('v20.18.1', day('2026-04-30')), [{ level: 'warning', check: 'node_version', message: 'Node.js v20.18.1 reached its end of life on 2026-04-30 (mesh still supports it): use Node.js 24 (recommended) or 22' }]);
  });
  it('Node.js 22 and 24 pass today; a major older than the table is a warning; one newer passes', () => {
    const now = day('2026-11-27');
    assert.deepEqual(checkNodeVersion('v22.12.0', now), []);
    assert.deepEqual(checkNodeVersion('v24.11.1', now), []);
    assert.deepEqual(checkNodeVersion('v16.20.2', now), [{ level: 'warning', check: 'node_version', message: 'Node.js v16.20.2 is past its end of life (mesh does not support it): use Node.js 24 (recommended) or 22' }]);
    assert.deepEqual(checkNodeVersion('v26.0.0', now), []);
    assert.deepEqual(checkNodeVersion('v18.20.4', now), [{ level: 'warning', check: 'node_version', message: 'Node.js v18.20.4 reached its end of life on 2025-04-30 (mesh does not support it): use Node.js 24 (recommended) or 22' }]);
  });
  it('the advice leaves out a supported major once it is past its end of life', () => {
    assert.equal(nodeAdvice(day('2027-04-29')), 'use Node.js 24 (recommended) or 22');
    assert.equal(nodeAdvice(day('2027-04-30')), 'use Node.js 24 (recommended)');
  });
});

describe('mesh check: text output', () => {
  it('one line per finding; one all-well line when there is none', () => {
    assert.equal(formatFindings([]), `${ALL_WELL}\n`);
    assert.equal(ALL_WELL, 'ok: no problem found (registry, broker, nodes, files, certificates, Node.js version)');
    assert.equal(
      formatFindings([
        { level: 'error', check: 'registry', message: 'cannot be read: x' },
        { level: 'warning', check: 'files', message: '/h is 0755' },
      ]),
      'error: registry: cannot be read: x\nwarning: files: /h is 0755\n',
    );
  });
});
