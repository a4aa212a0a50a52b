/**
 * A sidecar or a gateway that is not asked for gRPC, a Redis rate limit store, certificate
 * signing, a YAML file, protobuf or a WebSocket does not load those libraries (their memory is
 * paid by the processes that use them): the real processes run with a loader hook that logs every
 * package imported or required by name. A library loaded at its first use serves two first uses
 * at once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { CLI, http, PRINTED, startProcess, tempDir } from '../helpers.js';

const REGISTER = fileURLToPath(new URL('../fixtures/module-log/register.mjs', import.meta.url));
/** Loaded at their first use only. */
const LAZY = ['@grpc/grpc-js', 'redis', '@peculiar/x509', 'yaml', 'protobufjs', 'ws'];

/** A real process under the hook, ready (its admin answered /ready); `packages()` reads the log so far. */
async function logged(command: readonly string[], admin: RegExp, main: RegExp) {
  const dir = tempDir('mesh-lazy-');
  const log = join(dir.path, 'modules.log');
  const proc = startProcess(['--import', REGISTER, CLI, ...command, `--registry_address=${dir.path}`, '--log_level=warning'], { MESH_TEST_MODULE_LOG: log, MESH_HOME: dir.path }, '');
  try {
    const port = await proc.waitForPort(admin);
    assert.equal((await http('GET', `http://127.0.0.1:${port}/ready`)).status, 200);
    return {
      base: `http://127.0.0.1:${await proc.waitForPort(main)}`,
      packages: () => new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean)),
      stop: async () => {
        await proc.stop();
        dir.cleanup();
      },
    };
  } catch (err) {
    await proc.stop();
    dir.cleanup();
    throw err;
  }
}

const SIDECAR = ['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'];

describe('libraries loaded at their first use', () => {
  for (const [name, command, admin, main] of [
    ['mesh sidecar', SIDECAR, PRINTED.sidecarAdmin, PRINTED.sidecar],
    ['mesh api', ['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'], PRINTED.apiAdmin, PRINTED.api],
  ] as const) {
    it(`${name} serving plain HTTP does not load ${LAZY.join(', ')}`, async () => {
      const p = await logged(command, admin, main);
      try {
        const loaded = p.packages();
        // The hook sees packages loaded by name: undici always is.
        assert.ok(loaded.has('undici'), `the hook logged: ${[...loaded].join(' ')}`);
        assert.deepEqual(LAZY.filter((pkg) => loaded.has(pkg)), []);
      } finally {
        await p.stop();
      }
    });
  }

  it('a sidecar loads ws at its first WebSocket subscription: two at once both subscribe and receive', async () => {
    const p = await logged(SIDECAR, PRINTED.sidecarAdmin, PRINTED.sidecar);
    const sockets: WebSocket[] = [];
    try {
      assert.equal(p.packages().has('ws'), false);
      const received = Array.from({ length: 2 }, () => {
        const ws = new WebSocket(`${p.base.replace(/^http/, 'ws')}/broker?topic=lazy`);
        sockets.push(ws);
        const frame = new Promise<{ Body: string }>((resolve, reject) => {
          ws.once('message', (data) => resolve(JSON.parse(data.toString()) as { Body: string }));
          ws.once('error', reject);
        });
        return { opened: new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject))), frame };
      });
      await Promise.all(received.map((r) => r.opened));
      assert.equal(p.packages().has('ws'), true);
      const r = await http('POST', `${p.base}/broker?topic=lazy`, { headers: { 'content-type': 'text/plain' }, body: 'first' });
      assert.equal(r.status, 200, r.text);
      for (const { frame } of received) assert.equal(Buffer.from((await frame).Body, 'base64').toString('utf8'), 'first');
    } finally {
      for (const ws of sockets) ws.terminate();
      await p.stop();
    }
  });
});
