/**
 * docs/security.md's worked example of rules, as written: its rule named "10 calls a minute per
 * caller" lets ten calls of one caller through at once and answers the eleventh 429, against a
 * real `mesh api --auth=key` with the example's rules.yaml and keys.txt.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { ROOT, http, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

describe('docs/security.md: the rule of 10 calls a minute', () => {
  const dir = tempDir('mesh-rule-rate-');
  let registry: Registry;
  let plain: PlainApp;
  let gw: GatewayProcess;

  before(async () => {
    const doc = readFileSync(join(ROOT, 'docs/security.md'), 'utf8');
    const example = doc.slice(doc.indexOf('A worked example.'));
    const rules = /```yaml\n([\s\S]*?)```/.exec(example)![1]!;
    assert.match(rules, /name: admin endpoints need a scope, 10 calls a minute per caller\n/);
    const keys = /`keys\.txt`:\n\n```\n([\s\S]*?)```/.exec(example)![1]!;
    writeFileSync(join(dir.path, 'rules.yaml'), rules);
    writeFileSync(join(dir.path, 'keys.txt'), keys);
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('greeter');
    await registerPlain(registry, 'go.mesh.api.greeter', plain.port);
    gw = await startGatewayProcess(dir.path, ['--auth=key', `--auth_keys=${join(dir.path, 'keys.txt')}`, `--auth_rules=${join(dir.path, 'rules.yaml')}`]);
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('ten calls of one caller pass, the eleventh gets 429', async () => {
    const call = () => http('GET', `${gw.url}/greeter/admin/reset`, { headers: { authorization: 'Bearer alice-key-0123456789abcdef' } });
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await call()).status);
    assert.ok(statuses[0]! >= 200 && statuses[0]! < 300, String(statuses[0]));
    assert.deepEqual(statuses, [...Array<number>(10).fill(statuses[0]!), 429]);
  });
});
