/**
 * Admin /config_dump of a real `mesh api` and `mesh sidecar` started with `--address=HOST:PORT`:
 * `mesh.options` shows the address given, the listen address in use, not the library default
 * `127.0.0.1:0` (docs/admin.md: every option with its effective value).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, http, tempDir } from '../helpers.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { startSidecar } from '../fixtures/sidecar-common.js';

interface Dump {
  configs: Array<{ '@type': string; options?: Record<string, unknown>; listeners?: Array<{ name: string; address: string }> }>;
}

async function dumpOf(admin: string): Promise<Dump> {
  const res = await http('GET', `${admin}/config_dump`);
  assert.equal(res.status, 200);
  return res.json<Dump>();
}

describe('admin /config_dump: --address of a front end', () => {
  const dir = tempDir();
  after(() => dir.cleanup());

  it('mesh api --address=127.0.0.1:PORT: options.address is 127.0.0.1:PORT, as the listener', async () => {
    // A port the test must know before the gateway starts (the flag under test names it).
    const port = await freePort();
    const g = await startGatewayProcess(dir.path, [`--address=127.0.0.1:${port}`]);
    try {
      assert.equal(g.port, port);
      const dump = await dumpOf(g.admin);
      assert.equal(dump.configs[0]!.options!.address, `127.0.0.1:${port}`);
      assert.deepEqual(dump.configs[3]!.listeners, [{ name: 'gateway', address: `127.0.0.1:${port}` }]);
    } finally {
      await g.stop();
    }
  });

  it('mesh sidecar --address=127.0.0.1:PORT: options.address is 127.0.0.1:PORT, and its own flags are shown', async () => {
    const port = await freePort();
    const s = await startSidecar(dir.path, [`--address=127.0.0.1:${port}`, '--namespace=go.mesh.test']);
    try {
      assert.equal(s.port, port);
      const dump = await dumpOf(s.admin);
      const options = dump.configs[0]!.options!;
      assert.equal(options.address, `127.0.0.1:${port}`);
      assert.equal(options.namespace, 'go.mesh.test');
      assert.deepEqual(dump.configs.find((c) => c['@type'] === 'mesh.listeners')!.listeners, [{ name: 'sidecar', address: `127.0.0.1:${port}` }]);
    } finally {
      await s.stop();
    }
  });
});
