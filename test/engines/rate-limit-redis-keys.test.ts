/**
 * The buckets of fronts on one Redis (src/engines/ratelimit/redis.ts, bucketKey): gateways with other
 * limits, or another --namespace, keep buckets of their own; the Redis key names the role, the
 * namespace, the policy with its rate and burst, and the client key hashed. With the Redis of
 * MESH_TEST_REDIS_ADDRESS, keyed by route on a path of the test's own.
 */
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import { http } from '../helpers.js';
import { REDIS_ADDRESS, redisAnswers, skipUnless } from '../fixtures/redis.js';
import { startGateway, type Gateway } from '../fixtures/rate-limit-load.js';

describe('fronts sharing one Redis', () => {
  let skip: string | false = 'not checked';
  before(async () => {
    skip = skipUnless(await redisAnswers(REDIS_ADDRESS), `Redis at ${REDIS_ADDRESS} (MESH_TEST_REDIS_ADDRESS)`);
  });

  it('another limit or another namespace: a bucket of its own; the key is namespaced and the client key hashed', async (t) => {
    if (skip) return t.skip(skip);
    const path = `/rl-${randomUUID()}`;
    const common = [`--rate_limit_store=redis://${REDIS_ADDRESS}`, '--rate_limit_key=route', '--log_level=warning', '--rate_limit_store_timeout=500ms'];
    const gws: Gateway[] = [];
    const client = createClient({ url: `redis://${REDIS_ADDRESS}` });
    try {
      const [three, five, other] = await Promise.all([
        startGateway([...common, '--rate_limit=3/h', '--rate_limit_burst=3']),
        startGateway([...common, '--rate_limit=5/h', '--rate_limit_burst=5']),
        startGateway([...common, '--rate_limit=3/h', '--rate_limit_burst=3', '--namespace=go.mesh.other']),
      ]);
      gws.push(three!, five!, other!);
      const limited = async (gw: Gateway, n: number) => {
        const out: boolean[] = [];
        for (let i = 0; i < n; i++) out.push((await http('GET', `${gw.url}${path}`)).status === 429);
        return out;
      };
      assert.deepEqual(await limited(three!, 4), [false, false, false, true]);
      assert.deepEqual(await limited(five!, 6), [false, false, false, false, false, true]);
      assert.deepEqual(await limited(other!, 4), [false, false, false, true]);
      await client.connect();
      const hash = createHash('sha256').update(`r:${path}`).digest('hex').slice(0, 32);
      for (const key of [`mesh:rl:api:go.mesh.api:default:${3 / 3600}:3:${hash}`, `mesh:rl:api:go.mesh.api:default:${5 / 3600}:5:${hash}`, `mesh:rl:api:go.mesh.other:default:${3 / 3600}:3:${hash}`]) {
        // Spent (what refilled since is a small fraction of a token).
        const tokens = await client.hGet(key, 't');
        assert.ok(tokens !== null && Number(tokens) < 1, `${key}: ${tokens}`);
      }
    } finally {
      await Promise.all(gws.map((g) => g.proc.stop('SIGKILL')));
      client.destroy();
    }
  });
});
