/**
 * A sidecar or a gateway that is not asked for gRPC, a Redis rate limit store, certificate
 * signing, a YAML file, protobuf or a WebSocket does not load those libraries (their memory is
 * paid by the processes that use them): the real processes run with a loader hook that logs every
 * package imported or required by name.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI, http, PRINTED, startProcess, tempDir } from '../helpers.js';

const REGISTER = fileURLToPath(new URL('../fixtures/module-log/register.mjs', import.meta.url));
/** Loaded at their first use only. */
const LAZY = ['@grpc/grpc-js', 'redis', '@peculiar/x509', 'yaml', 'protobufjs', 'ws'];

async function packagesOf(command: string[], admin: RegExp): Promise<Set<string>> {
  const dir = tempDir('mesh-lazy-');
  const log = join(dir.path, 'modules.log');
  const proc = startProcess(['--import', REGISTER, CLI, ...command, `--registry_address=${dir.path}`, '--log_level=warning'], { MESH_TEST_MODULE_LOG: log, MESH_HOME: dir.path }, '');
  try {
    const port = await proc.waitForPort(admin);
    assert.equal((await http('GET', `http://127.0.0.1:${port}/ready`)).status, 200);
    return new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean));
  } finally {
    await proc.stop();
    dir.cleanup();
  }
}

describe('libraries loaded at their first use', () => {
  for (const [name, command, admin] of [
    ['mesh sidecar', ['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'], PRINTED.sidecarAdmin],
    ['mesh api', ['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'], PRINTED.apiAdmin],
  ] as const) {
    it(`${name} serving plain HTTP does not load ${LAZY.join(', ')}`, async () => {
      const loaded = await packagesOf([...command], admin);
      // The hook sees packages imported by name: undici always is.
      assert.ok(loaded.has('undici'), `the hook logged: ${[...loaded].join(' ')}`);
      assert.deepEqual(LAZY.filter((p) => loaded.has(p)), []);
    });
  }
});
