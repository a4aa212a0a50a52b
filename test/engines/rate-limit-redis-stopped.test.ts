/**
 * A Redis rate limit store that is connected but does not answer (a redis-server of the test's own,
 * stopped with SIGSTOP: the connection stays open, the commands queue): `mesh api` still stops on
 * SIGTERM, and `mesh check` still ends with its finding, instead of waiting for the queued commands.
 */
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { http, runCli, tempDir, waitFor } from '../helpers.js';
import { OwnRedis, REDIS_SERVER, skipUnless } from '../fixtures/redis.js';
import { startGateway, stat } from '../fixtures/rate-limit-load.js';

describe('a Redis store that stops answering', () => {
  let skip: string | false = 'not checked';
  before(() => {
    skip = skipUnless(REDIS_SERVER !== undefined, 'redis-server (MESH_TEST_REDIS_SERVER, or on PATH)');
  });

  it('mesh api: SIGTERM stops the gateway with commands to Redis still queued; mesh check reports the store and ends', async (t) => {
    if (skip) return t.skip(skip);
    const redis = await OwnRedis.onLoopback(REDIS_SERVER!);
    await redis.start();
    const pid = redis.proc!.child.pid!;
    const home = tempDir('mesh-check-rl-stopped-');
    const gw = await startGateway([`--rate_limit_store=redis://${redis.address}`, '--rate_limit=20/s', '--rate_limit_key=route', '--rate_limit_store_timeout=200ms', '--log_level=warning']);
    try {
      await waitFor(async () => ((await http('GET', `${gw.admin}/rate_limits`)).json() as Record<string, unknown>).state === 'up', 20_000);
      process.kill(pid, 'SIGSTOP');
      // A request whose grant stays queued on the open connection: answered by the failure mode (open).
      assert.notEqual((await http('GET', `${gw.url}/stopped`)).status, 503);
      assert.equal(await stat(gw.admin, 'rate_limit.route.store_errors'), 1);
      const check = await runCli(['check', '--registry=memory', '--output=json', `--rate_limit_store=redis://${redis.address}`], { MESH_HOME: home.path }, 15_000);
      assert.equal(check.code, 1, `mesh check ended by itself: ${check.stdout}${check.stderr}`);
      assert.deepEqual(
        (JSON.parse(check.stdout) as Array<{ level: string; check: string; message: string }>).filter((f) => f.check === 'rate_limit_store'),
        [{ level: 'error', check: 'rate_limit_store', message: `redis://${redis.address} unreachable: no answer within 3000ms (requests then follow --rate_limit_failure_mode)` }],
      );
      const exited = once(gw.proc.child, 'exit');
      gw.proc.child.kill('SIGTERM');
      // stop() would SIGKILL after 10 s: the exit code says whether the gateway stopped by itself.
      const [code, signal] = (await Promise.race([exited, new Promise((r) => setTimeout(() => r([null, 'still running after 8 s']), 8000).unref())])) as [number | null, string | null];
      assert.deepEqual([code, signal], [0, null], gw.proc.output());
    } finally {
      await gw.proc.stop('SIGKILL');
      process.kill(pid, 'SIGCONT');
      await redis.kill();
      home.cleanup();
    }
  });
});
