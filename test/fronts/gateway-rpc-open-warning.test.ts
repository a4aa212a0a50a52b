/**
 * `mesh api` (and `mesh dev`, whose gateway is the same) says at start, in one log line naming
 * --rpc_allow, when POST /rpc may call every service and the gateway listens beyond loopback; not
 * on loopback, nor with --rpc_allow set.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { PRINTED, startProcess, tempDir } from '../helpers.js';

const WARNING = 'POST /rpc may call every service and the gateway listens beyond loopback: list the services it may call with --rpc_allow (or --enable_rpc=false)';

/** The gateway's output from start to exit (SIGTERM once it listens). */
async function outputOf(flags: string[], registry: string): Promise<{ port: string; lines: string[] }> {
  const api = startProcess(['api', '--admin_address=off', `--registry_address=${registry}`, '--log_format=json', '--log_level=info', '--drain_delay=0s', ...flags]);
  const port = String(await api.waitForPort(PRINTED.api, 30_000));
  assert.equal(await api.stop(), 0);
  return { port, lines: api.output().split('\n') };
}

describe('the gateway warns when /rpc is open to every service on a non-loopback address', () => {
  const tmp = tempDir('mesh-rpc-open-');
  after(() => tmp.cleanup());

  it('0.0.0.0 with the default --rpc_allow: one warning line naming --rpc_allow and the address', async () => {
    const { port, lines } = await outputOf(['--address=0.0.0.0:0'], tmp.path);
    const warnings = lines.filter((l) => l.includes('--rpc_allow')).map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(warnings.length, 1, lines.join('\n'));
    assert.deepEqual({ level: warnings[0]!.level, subsystem: warnings[0]!.subsystem, address: warnings[0]!.address, msg: warnings[0]!.msg }, { level: 'warning', subsystem: 'gateway', address: `0.0.0.0:${port}`, msg: WARNING });
  });

  it('mesh dev on 0.0.0.0 says the same', async () => {
    const dev = startProcess(['dev', '--address=0.0.0.0:0', '--admin_address=off', '--sidecar_address=127.0.0.1:0', '--mtls=off', `--registry_address=${tmp.path}`, '--log_format=json', '--log_level=info', '--drain_delay=0s']);
    const port = String(await dev.waitForPort(/listening on 0\.0\.0\.0:(\d+)/, 30_000));
    assert.equal(await dev.stop(), 0);
    const warnings = dev.output().split('\n').filter((l) => l.includes('--rpc_allow')).map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(warnings.map((w) => [w.level, w.address, w.msg]), [['warning', `0.0.0.0:${port}`, WARNING]]);
  });

  it('no warning on loopback, nor with --rpc_allow, nor with --enable_rpc=false', async () => {
    for (const flags of [['--address=127.0.0.1:0'], ['--address=0.0.0.0:0', '--rpc_allow=go.mesh.srv.*'], ['--address=0.0.0.0:0', '--enable_rpc=false']]) {
      const { lines } = await outputOf(flags, tmp.path);
      assert.deepEqual(lines.filter((l) => l.includes('rpc_allow')), [], flags.join(' '));
    }
  });
});
