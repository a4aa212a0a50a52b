/**
 * Shared rate limits (--rate_limit_store, src/base/http/rate-limit-store.ts), with real processes on
 * loopback: the workers of `mesh api --concurrency=2` share one budget (through the primary); bad
 * --rate_limit_store values exit 2; `mesh check` finds a Redis store that does not answer. Redis: test/engines/rate-limit-redis.test.ts, test/engines/rate-limit-redis-outage.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, http, runCli, tempDir } from '../helpers.js';
import { REDIS_ADDRESS, redisAnswers, skipUnless } from '../fixtures/redis.js';
import { startGateway, stat } from '../fixtures/rate-limit-load.js';

describe('one budget per gateway, whatever --concurrency is', () => {
  it('mesh api --concurrency=2 --rate_limit=10/m --rate_limit_burst=10: 60 quick requests, 10 allowed (the workers draw from the primary)', async () => {
    const gw = await startGateway(['--rate_limit=10/m', '--rate_limit_burst=10', '--log_level=warning'], 2);
    try {
      const statuses: number[] = [];
      // Fresh connections: the primary hands them to both workers in turn.
      for (let i = 0; i < 60; i++) statuses.push((await http('GET', `${gw.url}/`)).status);
      const allowed = statuses.filter((s) => s !== 429).length;
      // 10 a minute: one more token may come in while the 60 run.
      assert.ok(allowed >= 10 && allowed <= 11, `allowed ${allowed} of 60 (one budget for both workers): ${statuses.join(',')}`);
      assert.equal(await stat(gw.admin, 'rate_limit.address.allowed'), allowed);
      assert.equal(await stat(gw.admin, 'rate_limit.address.limited'), 60 - allowed);
      assert.equal(await stat(gw.admin, 'http.gateway.ratelimit.over_limit'), 60 - allowed);
      const status = (await http('GET', `${gw.admin}/rate_limits`)).json() as Record<string, unknown>;
      assert.equal(status.store, 'primary');
      assert.equal(status.state, 'up');
      assert.equal(status.failure_mode, 'open');
      console.log(`--concurrency=2: ${allowed} of 60 allowed; ${await stat(gw.admin, 'rate_limit.store.round_trips')} round trips to the primary`);
    } finally {
      await gw.proc.stop('SIGKILL');
    }
  });
});

describe('bad --rate_limit_store values', () => {
  it('exit 2 with a message naming the flag (the password never shown)', async () => {
    for (const [value, message] of [
      ['memcached://127.0.0.1:11211', 'invalid value "memcached://127.0.0.1:11211" for flag --rate_limit_store: use local, or redis://[:password@]host:port[/db] (rediss:// for TLS)'],
      ['redis://:secret@127.0.0.1:99999', 'invalid value "redis://REDACTED@127.0.0.1:99999" for flag --rate_limit_store: invalid address "redis://REDACTED@127.0.0.1:99999" (use redis://[:password@]host:port[/db])'],
      ['redis://127.0.0.1:6379/x', 'invalid value "redis://127.0.0.1:6379/x" for flag --rate_limit_store: invalid database "x" in "redis://127.0.0.1:6379/x": a number, e.g. redis://host:6379/0'],
      ['redis://127.0.0.1:6379?db=1', 'invalid value "redis://127.0.0.1:6379?db=REDACTED" for flag --rate_limit_store: invalid address "redis://127.0.0.1:6379?db=REDACTED": no query or fragment (use redis://[:password@]host:port[/db])'],
    ] as const) {
      const cli = await runCli(['api', `--rate_limit_store=${value}`]);
      assert.equal(cli.code, 2, value);
      assert.equal(cli.stderr.trim(), `mesh: ${message}`, value);
    }
    const tls = await runCli(['api', '--rate_limit_store=redis://127.0.0.1:6379', '--rate_limit_store_tls_ca_file=/etc/ssl/certs/ca-certificates.crt']);
    assert.equal(tls.code, 2);
    assert.match(tls.stderr, /--rate_limit_store: the --rate_limit_store_tls_\* files need rediss:\/\/ \(TLS\)/);
    const mode = await runCli(['api', '--rate_limit_failure_mode=maybe']);
    assert.equal(mode.code, 2);
    assert.match(mode.stderr, /invalid value "maybe" for flag --rate_limit_failure_mode: use one of open, closed/);
  });
});


describe('mesh check and the rate limit store', () => {
  it('a Redis store that does not answer is an error (exit 1); one that answers is no finding', async () => {
    const home = tempDir('mesh-check-rl-');
    try {
      const port = await freePort();
      const down = await runCli(['check', '--registry=memory', '--output=json', `--rate_limit_store=redis://127.0.0.1:${port}`], { MESH_HOME: home.path });
      assert.equal(down.code, 1, down.stdout + down.stderr);
      const findings = JSON.parse(down.stdout) as Array<{ level: string; check: string; message: string }>;
      assert.deepEqual(
        findings.filter((f) => f.check === 'rate_limit_store'),
        [{ level: 'error', check: 'rate_limit_store', message: `redis://127.0.0.1:${port} unreachable: no answer within 3000ms (connect ECONNREFUSED 127.0.0.1:${port}) (requests then follow --rate_limit_failure_mode)` }],
      );
      if (skipUnless(await redisAnswers(REDIS_ADDRESS), `Redis at ${REDIS_ADDRESS} (MESH_TEST_REDIS_ADDRESS)`)) return;
      const up = await runCli(['check', '--registry=memory', '--output=json', `--rate_limit_store=redis://${REDIS_ADDRESS}`], { MESH_HOME: home.path });
      assert.deepEqual((JSON.parse(up.stdout) as Array<{ check: string }>).filter((f) => f.check === 'rate_limit_store'), []);
    } finally {
      home.cleanup();
    }
  });
});
