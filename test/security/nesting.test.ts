/**
 * A configuration file nested 10,000 levels deep is refused with its file and line, never with
 * "Maximum call stack size exceeded": real `mesh api --routes=FILE` and `mesh proxy -c FILE`
 * processes exit 1 naming the file, the line and the bound (docs/routing.md, Errors in the file).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir } from '../helpers.js';

const N = 10_000;

describe('configuration files nested 10,000 levels deep', () => {
  const dir = tempDir('mesh-nesting-');
  after(() => dir.cleanup());

  for (const [style, deep] of [
    ['flow lists', `${'['.repeat(N)}${']'.repeat(N)}`],
    ['compact lists', `\n  ${'- '.repeat(N)}x`],
  ]) {
    it(`mesh api --routes: ${style} → exit 1, file and line`, async () => {
      const routes = join(dir.path, 'routes.yaml');
      writeFileSync(routes, `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: deep\n  annotations: ${deep}\n`);
      const res = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', `--registry_address=${dir.path}`, `--routes=${routes}`]);
      assert.equal(res.code, 1, res.stderr);
      assert.ok(res.stderr.includes(`${routes} line ${style === 'flow lists' ? 5 : 6}: nested deeper than 64 levels`), res.stderr);
      assert.doesNotMatch(res.stderr, /call stack/);
    });
  }

  it('mesh proxy -c: flow mappings → exit 1, file and line', async () => {
    const config = join(dir.path, 'proxy.yaml');
    writeFileSync(config, `admin:\n  address: 127.0.0.1:0\nlisteners:\n  - ${'{a: '.repeat(N)}1${'}'.repeat(N)}\n`);
    const res = await runCli(['proxy', '-c', config, '--admin_address=off']);
    assert.notEqual(res.code, 0);
    assert.match(res.stderr, new RegExp(`proxy config ${config.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:4:\\d+: invalid YAML: nested deeper than 64 levels`), res.stderr);
    assert.doesNotMatch(res.stderr, /call stack/);
  });
});
